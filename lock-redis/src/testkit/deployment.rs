//! [`DeploymentTarget`]: the Redis backend on a Redis Cluster or a Sentinel-managed primary,
//! as a conformance-suite and workload target, on the shared harness deployments (or the
//! ones `DISTLOCK_REDIS_CLUSTER` / `DISTLOCK_REDIS_SENTINEL` name).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{Error, LockName};
use lock_testkit::harness::shared::{self, REDIS_CLUSTER_VARIABLE, REDIS_SENTINEL_VARIABLE};
use lock_testkit::harness::{RedisCluster, RedisOptions, RedisSentinelGroup, RedisServer};
use lock_testkit::suite::{NotApplicable, OwnServers, PausableServers, RestartableServers, SuiteTarget};
use lock_testkit::workload::RoundTripProbe;

use super::single_node::PINGS;
use super::CONNECT_TIMEOUT;
use crate::connection::PoolSettings;
use crate::redis;
use crate::{RedisBackend, RedisKeys, RedisLockKind};

/// Which deployment a [`DeploymentTarget`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// A Redis Cluster: three primaries with a replica each.
    Cluster,
    /// A primary with two replicas, watched by three sentinels.
    Sentinel,
}

impl Deployment {
    fn scheme(self) -> &'static str {
        match self {
            Deployment::Cluster => "redis+cluster",
            Deployment::Sentinel => "redis+sentinel",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            Deployment::Cluster => REDIS_CLUSTER_VARIABLE,
            Deployment::Sentinel => REDIS_SENTINEL_VARIABLE,
        }
    }
}

/// One [`RedisLockKind`] of the Redis backend on a cluster or a Sentinel group.
#[derive(Clone)]
pub struct DeploymentTarget {
    deployment: Deployment,
    kind: RedisLockKind,
    fair: bool,
    url: String,
}

impl std::fmt::Debug for DeploymentTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentTarget")
            .field("deployment", &self.deployment)
            .field("kind", &self.kind)
            .field("fair", &self.fair)
            .field("url", &lock_core::redact_url(&self.url))
            .finish()
    }
}

impl DeploymentTarget {
    /// The `SetNx` kind on the shared cluster.
    ///
    /// # Panics
    /// When the shared cluster cannot be started (the harness error says why).
    pub fn cluster() -> Self {
        let cluster = shared::redis_cluster().expect("the shared Redis Cluster for the suite target");
        Self::at(Deployment::Cluster, RedisLockKind::SetNx, cluster.address())
    }

    /// The `SetNx` kind on the shared Sentinel group.
    ///
    /// # Panics
    /// When the shared group cannot be started.
    pub fn sentinel() -> Self {
        let group = shared::redis_sentinel().expect("the shared Sentinel group for the suite target");
        Self::at(Deployment::Sentinel, RedisLockKind::SetNx, group.address())
    }

    /// `kind` on the deployment at `url` (`redis+cluster://…` or `redis+sentinel://…`).
    pub fn at(deployment: Deployment, kind: RedisLockKind, url: impl Into<String>) -> Self {
        Self { deployment, kind, fair: true, url: url.into() }
    }

    /// The same target with another layout.
    pub fn with_kind(mut self, kind: RedisLockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The deployment's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The keys of `name` (the backend's default prefix).
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new("distlock", name)
    }

    /// A plain connection to the node serving `key` (the slot's primary, Sentinel's primary).
    ///
    /// # Errors
    /// When the deployment cannot be reached.
    pub fn probe_for(&self, key: &str) -> redis::RedisResult<redis::Connection> {
        crate::topology::probe_node_for(&self.url, key, &probe_settings())
    }

    /// How many of `count` fresh lock names land on each primary of the cluster, as
    /// `host:port count (share %)` — the spread the workloads' random names get.
    ///
    /// # Errors
    /// Not a cluster target, or the cluster does not answer.
    pub fn primary_share(&self, count: usize) -> Result<String, String> {
        let keys =
            (0..count).map(|_| self.keys(&lock_testkit::suite::unique_name("share")).lock().to_owned());
        let share =
            crate::topology::cluster_share(&self.url, keys, &probe_settings()).map_err(|e| e.to_string())?;
        let shown: Vec<String> = share
            .iter()
            .map(|(address, names)| {
                format!("{address} {names} ({:.1} %)", 100.0 * *names as f64 / count.max(1) as f64)
            })
            .collect();
        Ok(shown.join(", "))
    }

    /// `redis://host:port/` of the primary the sentinels name now (a Sentinel target on a
    /// deployment without a password: the harness's).
    ///
    /// # Errors
    /// Not a Sentinel target, or no sentinel answers.
    pub fn primary_url(&self) -> Result<String, String> {
        let address =
            crate::topology::sentinel_primary(&self.url, &probe_settings()).map_err(|e| e.to_string())?;
        Ok(format!("redis://{address}/"))
    }

    fn probe_query<T: redis::FromRedisValue>(&self, key: &str, command: &redis::Cmd) -> lock_core::Result<T> {
        let mut connection = self.probe_for(key).map_err(|e| Error::backend("redis probe", e))?;
        command.query(&mut connection).map_err(|e| Error::backend("redis probe", e))
    }

    fn builder(&self, url: &str) -> crate::RedisLockBuilder {
        RedisBackend::builder(url).kind(self.kind).fair(self.fair).connect_timeout(CONNECT_TIMEOUT)
    }
}

impl SuiteTarget for DeploymentTarget {
    type Backend = RedisBackend;

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        lock_testkit::suite::Abilities::ALL.with_shared(true, true).with_elections()
    }

    fn label(&self) -> String {
        let layout = match self.kind {
            RedisLockKind::ReentrantHash => "reentrant-hash",
            _ => "set-nx",
        };
        match self.deployment {
            Deployment::Cluster => format!("redis cluster {layout}"),
            Deployment::Sentinel => format!("redis sentinel {layout}"),
        }
    }

    fn fenced_store(
        &self,
    ) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().map(|backend| Box::new(crate::RedisFencedStore::new(backend)) as _))
    }

    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<RedisBackend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, lock_testkit::suite::NotApplicable> {
        Ok(guard.with_lease(|backend, lease| backend.set_if_held(lease, key, value)))
    }

    fn read_guarded(
        &self,
        name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.get_guarded(name, key)))
    }

    fn backend(&self) -> lock_core::Result<RedisBackend> {
        self.builder(&self.url).build()
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let keys = self.keys(name);
        Ok(self
            .probe_for(keys.lock())
            .map_err(|e| Error::backend("redis probe", e))
            .and_then(|mut connection| super::single_node::server_lease(self.kind, &keys, &mut connection)))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        let keys = self.keys(name);
        Ok(self.probe_query::<i64>(keys.lock(), redis::cmd("DEL").arg(keys.lock())).map(drop))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(self.deployment.variable().to_owned(), self.url.clone())])
    }

    fn backend_at(&self, addresses: &[SocketAddr]) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        let hosts: Vec<String> = addresses.iter().map(SocketAddr::to_string).collect();
        let path = match self.deployment {
            Deployment::Cluster => "/",
            Deployment::Sentinel => "/distlock-primary",
        };
        let url = format!("{}://{}{path}", self.deployment.scheme(), hosts.join(","));
        Ok(self.builder(&url).io_timeout(CONNECT_TIMEOUT).build())
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        _holds: u32,
    ) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        // Every address the deployment names or announces goes through `route`, by the
        // builder's address map (the cluster and the sentinels announce their real ones).
        let addresses = match crate::topology::deployment_addresses(&self.url, &probe_settings()) {
            Ok(addresses) => addresses,
            Err(error) => return Ok(Err(Error::backend("redis probe", error))),
        };
        let mut table = std::collections::HashMap::new();
        for (host, port) in addresses {
            let resolved = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                .ok()
                .and_then(|mut all| all.next());
            if let Some(server) = resolved {
                let routed = route(server);
                table.insert((host, port), (routed.ip().to_string(), routed.port()));
            }
        }
        Ok(self
            .builder(&self.url)
            .map_addresses(move |host, port| {
                table.get(&(host.to_owned(), port)).cloned().unwrap_or((host.to_owned(), port))
            })
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .build())
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<RedisBackend>>, NotApplicable> {
        let _ = clients;
        Err(NotApplicable(
            "a primary that restarts without persistence comes back empty or is failed over to a replica that \
             may lack the latest lock (R03 shows the loss without WAIT); only `appendfsync always` on every \
             node, with WAIT, keeps a lock across it",
        ))
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<RedisBackend>>, NotApplicable> {
        let started: Result<(String, Box<dyn PausableServers>), String> = match self.deployment {
            Deployment::Cluster => RedisCluster::start()
                .map(|cluster| (cluster.url(), Box::new(OwnCluster(cluster)) as Box<dyn PausableServers>)),
            Deployment::Sentinel => RedisSentinelGroup::start()
                .map(|group| (group.url(), Box::new(OwnSentinelGroup(group)) as Box<dyn PausableServers>)),
        }
        .map_err(|error| error.to_string());
        let (url, servers) = match started {
            Ok(started) => started,
            Err(error) => return Ok(Err(Error::backend("harness", error))),
        };
        let backend =
            self.builder(&url).connect_timeout(OWN_SERVER_TIMEOUT).io_timeout(OWN_SERVER_TIMEOUT).build();
        // A call may check out a connection (connect) and then wait for a reply (read).
        let call_bound = 2 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers, call_bound }))
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        // A private server that requires a password, reached the way the deployment is: as a
        // cluster seed (the slot-map request authenticates first), or as a sentinel with a
        // wrong `sentinel_password`. Either way the client's authentication is what fails.
        static SERVER: OnceLock<Result<RedisServer, String>> = OnceLock::new();
        let server = SERVER.get_or_init(|| {
            RedisServer::start_with(RedisOptions::new().password(PASSWORD)).map_err(|e| format!("{e:?}"))
        });
        let port = match server {
            Ok(server) => server.port(),
            Err(error) => return Ok(Err(Error::backend("harness", error.clone()))),
        };
        let url = match self.deployment {
            Deployment::Cluster => format!("redis+cluster://:wrong-password@127.0.0.1:{port}/"),
            Deployment::Sentinel => {
                format!("redis+sentinel://127.0.0.1:{port}/distlock-primary?sentinel_password=wrong-password")
            }
        };
        Ok(self.builder(&url).build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        // build() asks each given node once (connect, then read): the scenario passes two.
        2 * (2 * CONNECT_TIMEOUT) + Duration::from_secs(3)
    }

    fn round_trip(&self, backend: &RedisBackend) -> Option<RoundTripProbe> {
        let backend = backend.clone();
        Some(RoundTripProbe::new(
            format!(
                "round trip = a PING on a pooled connection of the lock's backend, to the primary serving the name `ping` of {}",
                lock_core::redact_url(&self.url)
            ),
            PINGS,
            move || Ok(backend.ping_probe()),
        ))
    }

    fn round_trip_for(&self, backend: &RedisBackend, name: &LockName) -> Option<RoundTripProbe> {
        let (backend, name) = (backend.clone(), name.clone());
        Some(RoundTripProbe::new(
            format!(
                "round trip = a PING on a pooled connection of the lock's backend, to the primary serving the lock's name, of {}",
                lock_core::redact_url(&self.url)
            ),
            PINGS,
            move || Ok(backend.ping_probe_for(&name)),
        ))
    }

    fn clean_up(&self, prefix: &str) -> Result<u64, String> {
        let mut deleted = 0;
        for mut connection in
            crate::topology::probe_primaries(&self.url, &probe_settings()).map_err(|e| e.to_string())?
        {
            deleted += super::single_node::delete_keys_on(&mut connection, "distlock", prefix)?;
        }
        Ok(deleted)
    }
}

/// The password of the private server behind [`SuiteTarget::wrong_password_backend`].
const PASSWORD: &str = "correct-horse-battery-staple";

/// S15: the connect and read timeouts of the client of the deployment the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// A private cluster whose every node S15 stops and resumes.
struct OwnCluster(RedisCluster);

impl PausableServers for OwnCluster {
    fn pause(&self) -> Result<(), String> {
        self.0.nodes().iter().try_for_each(|node| node.process().pause().map_err(|e| e.to_string()))
    }

    fn resume(&self) -> Result<(), String> {
        self.0.nodes().iter().try_for_each(|node| node.process().resume().map_err(|e| e.to_string()))
    }
}

/// A private Sentinel group whose data nodes and sentinels S15 stops and resumes.
struct OwnSentinelGroup(RedisSentinelGroup);

impl OwnSentinelGroup {
    fn processes(&self) -> impl Iterator<Item = &lock_testkit::harness::ServerProcess> {
        let data = self.0.data_nodes().iter().map(|node| node.process());
        data.chain(self.0.sentinels().iter().map(|sentinel| sentinel.process()))
    }
}

impl PausableServers for OwnSentinelGroup {
    fn pause(&self) -> Result<(), String> {
        self.processes().try_for_each(|process| process.pause().map_err(|e| e.to_string()))
    }

    fn resume(&self) -> Result<(), String> {
        self.processes().try_for_each(|process| process.resume().map_err(|e| e.to_string()))
    }
}

/// The settings of probe connections: short timeouts.
fn probe_settings() -> PoolSettings {
    PoolSettings {
        max_size: 1,
        connect_timeout: CONNECT_TIMEOUT,
        read_timeout: CONNECT_TIMEOUT,
        write_timeout: CONNECT_TIMEOUT,
    }
}
