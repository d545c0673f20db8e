//! Where a lock's keys live: one server, the primary Sentinel names, or the primary of the
//! keys' slot in a Redis Cluster ([`Nodes`]); how a connection there is opened ([`Connector`]);
//! and what to do when the deployment answers that the keys are elsewhere or that it is
//! changing ([`Nodes::after_failure`]).
//!
//! Every key of one lock shares a hash tag, so one lock is always one node's business: a
//! request goes to the node the slot map names, in one round trip, and only a redirect costs a
//! second.

mod address;
mod cluster;
mod heartbeat;
mod redirects;
mod sentinel;

pub(crate) use address::{AddressMap, Target};
pub(crate) use cluster::{slot_of, ClusterNodes};
pub(crate) use heartbeat::Heartbeat;
pub(crate) use sentinel::SentinelResolver;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_core::{Error, OwnerToken, Result};
use redis::{Client, ConnectionInfo, RedisResult, ServerErrorKind};

use crate::connection::{ConnectionManager, ConnectionPool, PoolSettings, PooledConnection};
use crate::error::{self, redis_cause};
use crate::keys::RedisKeys;
use crate::waiter::WaitHub;

/// How connections to one destination are opened.
#[derive(Clone)]
pub(crate) enum Connector {
    /// The one server of a URL (a single node, a Redlock node, one cluster primary).
    Direct(Box<Client>),
    /// Whichever node the sentinels name primary at the time of connecting.
    Sentinel(Arc<SentinelResolver>),
}

impl Connector {
    /// The same destination spoken to in RESP3 (a sharded subscriber's connection: its pub/sub
    /// traffic comes as push values, `waiter/sharded.rs`). Only a direct connector changes.
    pub(crate) fn resp3(&self) -> Connector {
        match self {
            Connector::Direct(client) => {
                let info = client.get_connection_info().clone();
                let settings = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
                let client = Client::open(info.set_redis_settings(settings))
                    .expect("a ConnectionInfo always opens a Client");
                Connector::Direct(Box::new(client))
            }
            other => other.clone(),
        }
    }

    /// Opens one connection with the pool's timeouts.
    ///
    /// # Errors
    /// The failure of the connection attempt (or of the primary lookup).
    pub(crate) fn open(&self, settings: &PoolSettings) -> RedisResult<redis::Connection> {
        match self {
            Connector::Direct(client) => ConnectionManager::open(client, settings),
            Connector::Sentinel(resolver) => resolver.open(settings),
        }
    }
}

/// One destination of requests and its connection pool.
pub(crate) struct Node {
    /// `host:port` (or the sentinels and master), without credentials.
    pub(crate) address: String,
    pub(crate) pool: ConnectionPool,
    /// The doubt signals of the leases granted here (replicated deployments only).
    pub(crate) watched: heartbeat::Watched,
    /// The waiters of locks served here and their subscriber thread, made on the first wait.
    hub: OnceLock<WaitHub>,
    /// How a cluster node is reached (the address map applied), for refreshes and probes.
    pub(crate) info: Option<ConnectionInfo>,
}

impl Node {
    /// A node whose connections `connector` opens.
    pub(crate) fn new(address: String, connector: Connector, settings: PoolSettings) -> Self {
        Self {
            address,
            pool: ConnectionPool::new(connector, settings),
            watched: heartbeat::Watched::default(),
            hub: OnceLock::new(),
            info: None,
        }
    }

    /// The hub of the waiters for locks on this node, connecting like the pool; its control
    /// channel is under `prefix`. `sharded`: lock channels are shard channels (a cluster node).
    fn hub(&self, prefix: &str, sharded: bool) -> &WaitHub {
        self.hub.get_or_init(|| {
            let control = format!("{prefix}:subscriber:{}", OwnerToken::random());
            let (connector, settings) = (self.pool.connector(), self.pool.settings());
            if sharded {
                WaitHub::sharded(connector.resp3(), settings, control)
            } else {
                WaitHub::new(connector.clone(), settings, control)
            }
        })
    }

    /// A node reached directly at `info`.
    pub(crate) fn direct(info: ConnectionInfo, settings: PoolSettings) -> Self {
        let address = info.addr().to_string();
        let client = Client::open(info.clone()).expect("a ConnectionInfo always opens a Client");
        let mut node = Self::new(address, Connector::Direct(Box::new(client)), settings);
        node.info = Some(info);
        node
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Nobody can wait on this node any more: its subscriber thread has no one to wake.
        if let Some(hub) = self.hub.get() {
            hub.close();
        }
    }
}

/// The node(s) a backend sends requests to.
pub(crate) enum Nodes {
    /// One server, or the current primary of a Sentinel-managed group.
    One { node: Arc<Node>, sentinel: bool },
    /// A Redis Cluster.
    Cluster(Arc<ClusterNodes>),
}

/// Where one request goes: a node, and whether it must be preceded by `ASKING` (the keys' slot
/// is being migrated there).
pub(crate) struct Hop {
    pub(crate) node: Arc<Node>,
    asking: bool,
}

impl Hop {
    /// A connection to the hop's node, ready for the request (after `ASKING` where needed).
    ///
    /// # Errors
    /// As [`ConnectionPool::get`]; the node's refusal of `ASKING`.
    pub(crate) fn connection(&self) -> Result<PooledConnection> {
        let mut connection = self.node.pool.get()?;
        if self.asking {
            connection
                .run(|c| redis::cmd("ASKING").query::<()>(c))
                .map_err(|e| error::map("follow a slot migration", e))?;
        }
        Ok(connection)
    }
}

/// What a failed request calls for.
pub(crate) enum Next {
    /// Send it again, now (the map was corrected) or after a pause (the cluster is changing).
    Retry { pause: Option<Duration>, ask: Option<Arc<Node>> },
    /// Report the error.
    Fail,
}

impl Nodes {
    /// The node serving `keys`.
    ///
    /// # Errors
    /// A cluster whose slot map cannot be read, or has no primary for the slot.
    pub(crate) fn hop(&self, keys: &RedisKeys) -> Result<Hop> {
        let node = match self {
            Nodes::One { node, .. } => Arc::clone(node),
            Nodes::Cluster(cluster) => cluster
                .node_for(slot_of(keys.lock()))
                .map_err(|e| error::map("find the slot's primary", e))?,
        };
        Ok(Hop { node, asking: false })
    }

    /// A hop to `node` (where an `ASK` redirect points), announced with `ASKING`.
    pub(crate) fn asking(node: Arc<Node>) -> Hop {
        Hop { node, asking: true }
    }

    /// The hub through which a waiter on `hop` is woken: the node's own, with shard channels in
    /// a cluster.
    pub(crate) fn hub<'h>(&self, hop: &'h Hop, prefix: &str) -> &'h WaitHub {
        hop.node.hub(prefix, self.cluster().is_some())
    }

    /// Every node requests currently go to (the cluster's primaries).
    pub(crate) fn all(&self) -> Vec<Arc<Node>> {
        match self {
            Nodes::One { node, .. } => vec![Arc::clone(node)],
            Nodes::Cluster(cluster) => cluster.primaries(),
        }
    }

    /// `node` did not answer: its leases are in doubt (`heartbeat.rs`), and the next request
    /// asks where the primary is now — a fresh slot map (cluster), fresh connections that ask
    /// the sentinels (Sentinel).
    pub(crate) fn node_failed(&self, node: &Node) {
        node.watched.raise_all();
        match self {
            Nodes::Cluster(cluster) => cluster.mark_stale(),
            // The idle connections go to the same (failed) primary.
            Nodes::One { sentinel: true, node } => node.pool.discard_idle(),
            Nodes::One { .. } => {}
        }
    }

    /// Whether a failover can move the primary (Sentinel, Cluster): leases there carry doubt
    /// signals (`heartbeat.rs`).
    pub(crate) fn replicated(&self) -> bool {
        !matches!(self, Nodes::One { sentinel: false, .. })
    }

    /// The cluster, for a cluster backend.
    pub(crate) fn cluster(&self) -> Option<&Arc<ClusterNodes>> {
        match self {
            Nodes::Cluster(cluster) => Some(cluster),
            Nodes::One { .. } => None,
        }
    }

    /// Reads a failed request's error for what the deployment said, updates the slot map or
    /// the pool accordingly, and says whether the request may be sent again. Only replies that
    /// mean the request was not run are retried:
    /// - `MOVED`: the slot has a new primary; retry there at once.
    /// - `ASK`: the slot is being migrated and the keys are not here; retry on the importing
    ///   node, with `ASKING`.
    /// - `TRYAGAIN` (a multi-key request while its keys are split by a migration),
    ///   `CLUSTERDOWN` (a failover under way): retry after `pause`.
    /// - `READONLY` (a replica, e.g. the old primary demoted by a failover): drop the idle
    ///   connections to it and retry after `pause` on a fresh one, which finds the new primary.
    ///
    /// A connection failure is not retried (the request may have run) unless the connection was
    /// refused (nothing sent) on a replicated deployment; either way the map (cluster) or the
    /// idle connections (Sentinel) are renewed, so the next try finds the new primary, and the
    /// node's leases are put in doubt (`heartbeat.rs`).
    pub(crate) fn after_failure(&self, hop: &Hop, failure: &Error, pause: Duration) -> Next {
        let Some(cause) = redis_cause(failure) else { return Next::Fail };
        let retry = Next::Retry { pause: Some(pause), ask: None };
        match cause.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Moved) => {
                if let (Some(cluster), Some((address, slot))) = (self.cluster(), cause.redirect_node()) {
                    cluster.moved(slot, address);
                    return Next::Retry { pause: None, ask: None };
                }
                Next::Fail
            }
            redis::ErrorKind::Server(ServerErrorKind::Ask) => match (self.cluster(), cause.redirect_node()) {
                (Some(cluster), Some((address, _))) => match cluster.node_at(address) {
                    Some(node) => Next::Retry { pause: None, ask: Some(node) },
                    None => retry,
                },
                _ => Next::Fail,
            },
            // On one server (no deployment that changes under the request) these are answers.
            redis::ErrorKind::Server(
                ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown | ServerErrorKind::ReadOnly,
            ) if !self.replicated() => Next::Fail,
            redis::ErrorKind::Server(ServerErrorKind::TryAgain) => retry,
            redis::ErrorKind::Server(ServerErrorKind::ClusterDown) => {
                if let Some(cluster) = self.cluster() {
                    cluster.mark_stale();
                }
                retry
            }
            redis::ErrorKind::Server(ServerErrorKind::ReadOnly) => {
                // A demoted primary: whatever it held may not be on the new one.
                hop.node.watched.raise_all();
                hop.node.pool.discard_idle();
                if let Some(cluster) = self.cluster() {
                    cluster.mark_stale();
                }
                retry
            }
            _ if failure.is_retryable() => {
                self.node_failed(&hop.node);
                // A refused connection sent nothing: on a replicated deployment the primary may
                // be moving, and the next try asks where it went.
                if self.replicated() && cause.is_connection_refusal() {
                    retry
                } else {
                    Next::Fail
                }
            }
            _ => Next::Fail,
        }
    }
}

/// A plain connection to the node serving `key` in the deployment `url` names (one server,
/// Sentinel's primary, the slot's primary): for test probes that go around the backend.
///
/// # Errors
/// A URL that does not parse; the deployment's failure to answer.
#[cfg(feature = "testkit")]
pub(crate) fn probe_node_for(
    url: &str,
    key: &str,
    settings: &PoolSettings,
) -> RedisResult<redis::Connection> {
    let invalid =
        |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why));
    match Target::parse(url, None).map_err(invalid)? {
        Target::Single(client) => ConnectionManager::open(&client, settings),
        Target::Sentinel { sentinels, master, nodes } => {
            SentinelResolver::new(sentinels, master, nodes).open(settings)
        }
        Target::Cluster { seeds, nodes } => {
            let cluster = Arc::new(ClusterNodes::new(seeds, nodes, *settings));
            let node = cluster.node_for(slot_of(key))?;
            cluster.open_node(&node, settings)
        }
    }
}

/// Plain connections to every primary of the deployment `url` names (one for a single server
/// or a Sentinel group): for test clean-ups that go around the backend.
///
/// # Errors
/// A URL that does not parse; the deployment's failure to answer.
#[cfg(feature = "testkit")]
pub(crate) fn probe_primaries(url: &str, settings: &PoolSettings) -> RedisResult<Vec<redis::Connection>> {
    let invalid =
        |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why));
    match Target::parse(url, None).map_err(invalid)? {
        Target::Cluster { seeds, nodes } => {
            let cluster = ClusterNodes::new(seeds, nodes, *settings);
            cluster.refresh()?;
            cluster.primaries().iter().map(|node| cluster.open_node(node, settings)).collect()
        }
        _ => Ok(vec![probe_node_for(url, "", settings)?]),
    }
}

/// How `names` spread over the primaries of the cluster `url` names: `(primary, count)` pairs,
/// by the slot map the cluster gives now (benchmarks report the share each primary served).
///
/// # Errors
/// A URL that is not a cluster's; the cluster's failure to answer.
#[cfg(feature = "testkit")]
pub(crate) fn cluster_share(
    url: &str,
    keys: impl Iterator<Item = String>,
    settings: &PoolSettings,
) -> RedisResult<Vec<(String, usize)>> {
    let invalid =
        |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why));
    let Target::Cluster { seeds, nodes } = Target::parse(url, None).map_err(invalid)? else {
        return Err(invalid("not a redis+cluster:// URL".into()));
    };
    let cluster = Arc::new(ClusterNodes::new(seeds, nodes, *settings));
    cluster.refresh()?;
    let mut share: Vec<(String, usize)> =
        cluster.primaries().iter().map(|node| (node.address.clone(), 0)).collect();
    for key in keys {
        let node = cluster.node_for(slot_of(&key))?;
        if let Some(entry) = share.iter_mut().find(|(address, _)| *address == node.address) {
            entry.1 += 1;
        }
    }
    Ok(share)
}

/// The address (`host:port`) the sentinels of `url` name as the primary's now.
///
/// # Errors
/// A URL that is not a Sentinel group's; no sentinel answered.
#[cfg(feature = "testkit")]
pub(crate) fn sentinel_primary(url: &str, settings: &PoolSettings) -> RedisResult<String> {
    let invalid =
        |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why));
    let Target::Sentinel { sentinels, master, nodes } = Target::parse(url, None).map_err(invalid)? else {
        return Err(invalid("not a redis+sentinel:// URL".into()));
    };
    let (host, port) = SentinelResolver::new(sentinels, master, nodes).primary_address(settings)?;
    Ok(format!("{host}:{port}"))
}

/// Every server address the deployment `url` names or announces now: the URL's hosts, and the
/// cluster's primaries or the sentinels' primary and replicas (test routing through proxies).
///
/// # Errors
/// A URL that does not parse; the deployment's failure to answer.
#[cfg(feature = "testkit")]
pub(crate) fn deployment_addresses(url: &str, settings: &PoolSettings) -> RedisResult<Vec<(String, u16)>> {
    let invalid =
        |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why));
    let host_port = |info: &ConnectionInfo| match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    };
    let mut addresses = Vec::new();
    match Target::parse(url, None).map_err(invalid)? {
        Target::Single(client) => addresses.extend(host_port(client.get_connection_info())),
        Target::Cluster { seeds, nodes } => {
            addresses.extend(seeds.iter().filter_map(host_port));
            let cluster = ClusterNodes::new(seeds, nodes, *settings);
            cluster.refresh()?;
            for node in cluster.primaries() {
                if let Some((host, port)) = node.address.rsplit_once(':') {
                    addresses
                        .push((host.to_owned(), port.parse().map_err(|_| invalid(node.address.clone()))?));
                }
            }
        }
        Target::Sentinel { sentinels, master, .. } => {
            addresses.extend(sentinels.iter().filter_map(|client| host_port(client.get_connection_info())));
            let mut connection = ConnectionManager::open(&sentinels[0], settings)?;
            let (host, port): (String, u16) =
                redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(&master).query(&mut connection)?;
            addresses.push((host, port));
            let replicas: Vec<std::collections::HashMap<String, String>> =
                redis::cmd("SENTINEL").arg("REPLICAS").arg(&master).query(&mut connection)?;
            for replica in replicas {
                if let (Some(ip), Some(port)) = (replica.get("ip"), replica.get("port")) {
                    addresses.push((ip.clone(), port.parse().map_err(|_| invalid(port.clone()))?));
                }
            }
        }
    }
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}
