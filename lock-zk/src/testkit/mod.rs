//! Test support (feature `testkit`, not semver-stable): the ZooKeeper backend as a
//! conformance-suite and workload target, on the shared harness server (or the ensemble
//! `DISTLOCK_ZOOKEEPER` names).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_core::{Error, LockName};
use lock_testkit::harness::shared::{self, ZOOKEEPER_VARIABLE};
use lock_testkit::harness::ZooKeeperServer;
use lock_testkit::suite::{NotApplicable, OwnServers, RestartableServers, SuiteTarget};
use lock_testkit::workload::RoundTripProbe;
use zookeeper_client as zk;

use crate::{ZooKeeperBackend, ZooKeeperLockBuilder};

mod curator;
mod curator_election;
mod curator_shared;
mod request_floor;
mod scenarios;

pub use request_floor::RequestFloor;

/// The ZooKeeper scenarios of `docs/scenarios.md`: Z01 (no herd, FIFO), Z02 (session expiry, ensemble
/// member loss), Z03–Z05 (interop with Apache Curator's mutex, read-write lock and semaphore),
/// LE05 (interop with Curator's `LeaderLatch`).
pub fn scenarios() -> Vec<lock_testkit::BackendScenario> {
    use lock_testkit::BackendScenario;
    vec![
        BackendScenario::new("Z01", "one release wakes one waiter, FIFO", scenarios::z01),
        BackendScenario::new("Z02", "session expiry; leader and follower loss", || {
            scenarios::z02_expiry();
            scenarios::z02_closed_session();
            scenarios::z02_leader_loss();
        }),
        BackendScenario::new("Z03", "interop with Curator's InterProcessMutex", || {
            curator::z03_contention();
            curator::z03_wake_ups();
        }),
        BackendScenario::new("Z04", "interop with Curator's InterProcessReadWriteLock", || {
            curator_shared::z04_exclusion();
            curator_shared::z04_contention();
        }),
        BackendScenario::new(
            "Z05",
            "interop with Curator's InterProcessSemaphoreV2",
            curator_shared::z05_semaphore,
        ),
        BackendScenario::new("LE05", "interop with Curator's LeaderLatch", || {
            curator_election::le05_visibility();
            curator_election::le05_contention();
        }),
    ]
}

/// The connect and request timeouts of every client the target makes: short, so S13's
/// unreachable-server check is quick, and far above a loopback round trip.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The session timeout of the target's clients: what a crashed holder (S04) keeps its lock for.
/// Short for quick tests, yet many pings long on a loaded two-core machine.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// The digest identity of the target's clients; S13 presents a wrong password for it.
const USER: &str = "distlock";
const PASSWORD: &str = "distlock-suite";

/// S15: the timeouts of the client of the server the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// S16: the session timeout of the client whose connections the scenario cuts — the scenario's
/// lease (3 s), which for a session hold is how long its liveness checks may fail: the servers
/// then end the cut session by themselves that long after they last heard from it.
pub const ROUTED_SESSION_TIMEOUT: Duration = Duration::from_secs(3);

/// How many create + delete pairs measure the write round trip (after as many to warm up).
const WRITE_PAIRS: usize = 2_000;

/// The ZooKeeper backend on an ensemble, with digest authentication.
#[derive(Clone)]
pub struct ZooKeeperTarget {
    connect_string: String,
    root: String,
    /// The digest identity: the suite's own, or the one a user's URL names.
    user: String,
    password: String,
    /// A `zk+tls://` URL's TLS settings, and the URL (which a child process is given).
    tls: Option<(lock_core::TlsOptions, String)>,
}

impl ZooKeeperTarget {
    /// The shared harness server (or the ensemble `DISTLOCK_ZOOKEEPER` names).
    ///
    /// # Panics
    /// When the shared server cannot be started (the harness error says why).
    pub fn new() -> Self {
        let server = shared::zookeeper().expect("the shared ZooKeeper server for the ZooKeeper suite target");
        Self::at(server.address())
    }

    /// The ensemble at `connect_string`; locks live under `/distlock-suite`.
    pub fn at(connect_string: impl Into<String>) -> Self {
        Self {
            connect_string: connect_string.into(),
            root: "/distlock-suite".into(),
            user: USER.into(),
            password: PASSWORD.into(),
            tls: None,
        }
    }

    /// The ensemble a user's `zk://[user:password@]host:port[,host:port…][/namespace]` URL names,
    /// parsed as [`ZooKeeperLockBuilder::from_url`] parses it: its namespace and credentials
    /// replace the suite's. A bare connect string (`host:port,…`) is taken as [`at`](Self::at)
    /// takes it.
    ///
    /// # Errors
    /// As [`ZooKeeperLockBuilder::from_url`].
    pub fn from_url(url: &str) -> lock_core::Result<Self> {
        if !url.contains("://") {
            return Ok(Self::at(url));
        }
        let parsed = ZooKeeperLockBuilder::from_url(url)?;
        let mut target = Self::at(parsed.settings.connect_string);
        target.tls = parsed.settings.tls.map(|tls| (tls, url.to_owned()));
        if parsed.root != ZooKeeperLockBuilder::new("").root {
            target.root = parsed.root;
        }
        if let (Some(user), Some(digest)) = (parsed.digest_user, parsed.settings.digest) {
            target.password = digest[user.len() + 1..].to_owned();
            target.user = user;
        }
        Ok(target)
    }

    /// The ensemble's connect string.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// A builder with the target's settings: its root, digest identity and short timeouts.
    pub fn builder(&self) -> ZooKeeperLockBuilder {
        self.secured(builder(&self.connect_string, TIMEOUT))
            .namespace(&self.root)
            .digest(&self.user, &self.password)
    }

    /// `builder` with the target's TLS settings, if it has any.
    fn secured(&self, builder: ZooKeeperLockBuilder) -> ZooKeeperLockBuilder {
        match &self.tls {
            Some((tls, _)) => builder.tls(tls.clone()),
            None => builder,
        }
    }
}

impl std::fmt::Debug for ZooKeeperTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("ZooKeeperTarget")
            .field("connect_string", &self.connect_string)
            .field("root", &self.root)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Default for ZooKeeperTarget {
    fn default() -> Self {
        Self::new()
    }
}

fn builder(connect_string: &str, timeout: Duration) -> ZooKeeperLockBuilder {
    ZooKeeperBackend::builder(connect_string)
        .session_timeout(SESSION_TIMEOUT)
        .connect_timeout(timeout)
        .io_timeout(timeout)
}

/// GW01's node for the data key `key` (lock names are valid node names once escaped).
fn guarded_path(key: &str) -> String {
    format!("/distlock-guarded/{}", crate::path::component(key))
}

impl SuiteTarget for ZooKeeperTarget {
    type Backend = ZooKeeperBackend;

    fn label(&self) -> String {
        "zookeeper".into()
    }

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        lock_testkit::suite::Abilities::ALL.with_shared(true, true).with_elections()
    }

    fn fenced_store(
        &self,
    ) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().map(|backend| Box::new(crate::ZooKeeperFencedStore::new(backend)) as _))
    }

    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<ZooKeeperBackend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, lock_testkit::suite::NotApplicable> {
        let path = guarded_path(key);
        Ok(guard.with_lease(|backend, lease| backend.set_data_if_held(lease, &path, value)))
    }

    fn read_guarded(
        &self,
        _name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.get_guarded(&guarded_path(key))))
    }

    fn backend(&self) -> lock_core::Result<ZooKeeperBackend> {
        self.builder().build()
    }

    fn remaining_lease(
        &self,
        _name: &LockName,
    ) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        Err(NotApplicable("a session hold has no server-side lease: its node ends with its session"))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.break_lock(name)))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        // A TLS target's child needs the whole URL (its CA), which the variable also takes.
        let address = self.tls.as_ref().map_or(&self.connect_string, |(_, url)| url);
        Ok(vec![(ZOOKEEPER_VARIABLE.to_owned(), address.clone())])
    }

    fn free_after_crash_within(&self, _lease: Duration) -> Duration {
        // The servers end the dead holder's session within its timeout, checked every tick.
        SESSION_TIMEOUT + Duration::from_secs(2)
    }

    fn backend_at(
        &self,
        addresses: &[SocketAddr],
    ) -> Result<lock_core::Result<ZooKeeperBackend>, NotApplicable> {
        let connect_string = addresses.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
        Ok(self.secured(builder(&connect_string, TIMEOUT)).build())
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<ZooKeeperBackend>, NotApplicable> {
        // The right identity creates the root first, as its owner.
        if let Err(error) = self.backend() {
            return Ok(Err(error));
        }
        Ok(self
            .secured(builder(&self.connect_string, TIMEOUT))
            .namespace(&self.root)
            .digest(&self.user, "wrong-password")
            .build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        TIMEOUT + Duration::from_secs(3)
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<ZooKeeperBackend>>, NotApplicable> {
        let server = match ZooKeeperServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(Error::backend("harness", error.to_string()))),
        };
        let backend = builder(&server.connect_string(), OWN_SERVER_TIMEOUT).namespace(&self.root).build();
        let call_bound = 2 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers: Box::new(vec![server]), call_bound }))
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<ZooKeeperBackend>>, NotApplicable> {
        // A standalone server persists its sessions and their ephemeral nodes: restarted, it
        // keeps the holds of every client that reconnects within its session timeout.
        let server = match ZooKeeperServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(Error::backend("harness", error.to_string()))),
        };
        let clients: lock_core::Result<Vec<_>> = (0..clients)
            .map(|_| builder(&server.connect_string(), TIMEOUT).namespace(&self.root).build())
            .collect();
        Ok(clients.map(|clients| RestartableServers { clients, servers: Box::new(vec![server]) }))
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        _holds: u32,
    ) -> Result<lock_core::Result<ZooKeeperBackend>, NotApplicable> {
        // Every hold of a client is a node of its one session: `holds` needs no room. The default
        // call bound (one connect and one request timeout) holds: see `ZooKeeperBackend`.
        let connect_string = match routed_connect_string(&self.connect_string, route) {
            Ok(connect_string) => connect_string,
            Err(error) => return Ok(Err(error)),
        };
        Ok(self
            .secured(builder(&connect_string, timeout))
            .session_timeout(ROUTED_SESSION_TIMEOUT)
            .namespace(&self.root)
            .digest(&self.user, &self.password)
            .build())
    }

    fn many_holds_not_applicable(&self) -> lock_core::Result<Option<&'static str>> {
        // Every hold of a client is a node of its one session.
        Ok(None)
    }

    fn round_trip(&self, backend: &ZooKeeperBackend) -> Option<RoundTripProbe> {
        let backend = backend.clone();
        Some(RoundTripProbe::new(
            format!(
                "round trip = half an ephemeral-node create + delete pair on the lock's session, to {} \
                 (a lock pair's write limit is 1/(2 × this))",
                self.connect_string
            ),
            WRITE_PAIRS,
            move || {
                let backend = backend.clone();
                Ok(Box::new(move || backend.write_round_trip().map_err(|e| e.to_string())))
            },
        ))
    }
}

/// `connect_string` (`host:port[,host:port…][/chroot]`) with every server replaced by the
/// address `route` gives for it.
fn routed_connect_string(
    connect_string: &str,
    route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
) -> lock_core::Result<String> {
    let (servers, chroot) =
        connect_string.find('/').map_or((connect_string, ""), |at| connect_string.split_at(at));
    let routed = servers
        .split(',')
        .map(|server| {
            let bad = |why: String| Error::invalid_config(format!("server {server:?}: {why}"));
            let address = std::net::ToSocketAddrs::to_socket_addrs(server.trim())
                .map_err(|error| bad(error.to_string()))?
                .next()
                .ok_or_else(|| bad("resolves to no address".into()))?;
            Ok(route(address).to_string())
        })
        .collect::<lock_core::Result<Vec<_>>>()?;
    Ok(format!("{}{chroot}", routed.join(",")))
}

impl ZooKeeperBackend {
    /// Times one create + delete pair of an ephemeral node under the root on this backend's
    /// session, and gives half of it: the write round trip a lock pair is measured against, with
    /// no lock logic.
    ///
    /// # Errors
    /// As any request.
    pub fn write_round_trip(&self) -> lock_core::Result<Duration> {
        let session = &self.inner.session;
        let client = session.client()?;
        let node = format!("{}/round-trip-{}", self.namespace(), uuid::Uuid::new_v4());
        let options = zk::CreateMode::Ephemeral.with_acls(self.inner.acls);
        let started = Instant::now();
        session
            .call(TIMEOUT, async {
                client.create(&node, b"", &options).await?;
                client.delete(&node, None).await
            })
            .map_err(|failure| failure.into_error("measure the write round trip"))?;
        Ok(started.elapsed() / 2)
    }
}
