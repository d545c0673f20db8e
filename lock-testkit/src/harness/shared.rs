//! One server of each kind per test binary, started on first use, or an external one.
//!
//! Starting PostgreSQL or a JVM per test would dominate the suite's time, so tests that only
//! need *a* server share these. They live until the test binary exits (statics are never
//! dropped; the spawner's death signal stops them, and the next run removes their dirs).
//! Tests that kill, pause or restart a server, fail a primary over or move a cluster's slots
//! must start a private one instead.
//!
//! An environment variable can name an existing server instead; then nothing is started and
//! the handle has no process controls:
//!
//! | function | variable | value |
//! | --- | --- | --- |
//! | [`redis()`] | `DISTLOCK_REDIS_URL` | `redis://…` |
//! | [`redis_nodes()`] | `DISTLOCK_REDIS_NODES` | comma-separated `redis://…` URLs |
//! | [`redis_cluster()`] | `DISTLOCK_REDIS_CLUSTER` | `redis+cluster://host:port,…/` |
//! | [`redis_sentinel()`] | `DISTLOCK_REDIS_SENTINEL` | `redis+sentinel://host:port,…/master-name` |
//! | [`postgres()`] | `DISTLOCK_POSTGRES_URL` | `postgres://…` |
//! | [`pgbouncer()`] | `DISTLOCK_PGBOUNCER_URL` | `postgres://user:password@host:port/` (no database: append `session`, `transaction` or `statement`) |
//! | [`postgres_tls()`] | `DISTLOCK_POSTGRES_TLS_URL` | `postgres://…?sslmode=verify-full&sslrootcert=…` |
//! | [`mariadb()`] | `DISTLOCK_MYSQL_URL` | `mysql://…` |
//! | [`mariadb_tls()`] | `DISTLOCK_MYSQL_TLS_URL` | `mysql://…?ssl-mode=VERIFY_IDENTITY&ssl-ca=…` |
//! | [`zookeeper()`] | `DISTLOCK_ZOOKEEPER` | `host:port[,host:port…]` |
//! | [`etcd()`] | `DISTLOCK_ETCD_URL` | `etcd://[user:password@]host:port[,host:port…]` |
//! | [`redis_tls()`] | `DISTLOCK_REDIS_TLS_URL` | `rediss://…/?cacert=<PEM file>` (TLS only) |
//! | [`zookeeper_tls()`] | `DISTLOCK_ZOOKEEPER_TLS_URL` | `zk+tls://host:port[,…]/?cacert=<PEM file>` (TLS only) |
//!
//! The TLS servers present a certificate of the test binary's [`TestCa`](super::TestCa), valid
//! for `127.0.0.1` only; their addresses carry everything a client needs (the CA to trust).

use std::ffi::OsString;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

#[cfg(feature = "etcd-server")]
use super::EtcdServer;
#[cfg(feature = "mariadb-server")]
use super::MariaDbServer;
#[cfg(feature = "zookeeper-server")]
use super::ZooKeeperServer;
use super::{HarnessError, ServerProcess, TestDeployment, TestServer};
#[cfg(feature = "postgres-server")]
use super::{PgBouncer, PostgresServer};
#[cfg(feature = "redis-server")]
use super::{RedisCluster, RedisSentinelGroup, RedisServer};

/// Names an external Redis server for [`redis()`].
pub const REDIS_URL_VARIABLE: &str = "DISTLOCK_REDIS_URL";
/// Names external Redis servers, comma-separated, for [`redis_nodes()`].
pub const REDIS_NODES_VARIABLE: &str = "DISTLOCK_REDIS_NODES";
/// Names an external Redis Cluster (`redis+cluster://…` URL) for [`redis_cluster()`].
pub const REDIS_CLUSTER_VARIABLE: &str = "DISTLOCK_REDIS_CLUSTER";
/// Names an external Redis Sentinel deployment (`redis+sentinel://…` URL) for
/// [`redis_sentinel()`].
pub const REDIS_SENTINEL_VARIABLE: &str = "DISTLOCK_REDIS_SENTINEL";
/// Names an external PostgreSQL server for [`postgres()`].
pub const POSTGRES_URL_VARIABLE: &str = "DISTLOCK_POSTGRES_URL";
/// Names an external PgBouncer for [`pgbouncer()`]: a `postgres://` URL without a database, to
/// which callers append a pool mode's alias (`session`, `transaction`, `statement`).
pub const PGBOUNCER_URL_VARIABLE: &str = "DISTLOCK_PGBOUNCER_URL";
/// Names an external TLS-only PostgreSQL server for [`postgres_tls()`].
pub const POSTGRES_TLS_URL_VARIABLE: &str = "DISTLOCK_POSTGRES_TLS_URL";
/// Names an external MySQL or MariaDB server for [`mariadb()`].
pub const MYSQL_URL_VARIABLE: &str = "DISTLOCK_MYSQL_URL";
/// Names an external TLS-only MySQL or MariaDB server for [`mariadb_tls()`].
pub const MYSQL_TLS_URL_VARIABLE: &str = "DISTLOCK_MYSQL_TLS_URL";
/// Names an external ZooKeeper ensemble (connect string) for [`zookeeper()`].
pub const ZOOKEEPER_VARIABLE: &str = "DISTLOCK_ZOOKEEPER";
/// Names an external etcd server or cluster (`etcd://…` URL) for [`etcd()`].
pub const ETCD_URL_VARIABLE: &str = "DISTLOCK_ETCD_URL";
/// Names an external TLS-only Redis server (`rediss://…` URL) for [`redis_tls()`].
pub const REDIS_TLS_URL_VARIABLE: &str = "DISTLOCK_REDIS_TLS_URL";
/// Names an external TLS-only ZooKeeper ensemble (`zk+tls://…` URL) for [`zookeeper_tls()`].
pub const ZOOKEEPER_TLS_URL_VARIABLE: &str = "DISTLOCK_ZOOKEEPER_TLS_URL";

/// A server (or a group of servers, such as a [`RedisCluster`]) that any test may use:
/// started by the harness, or external.
#[derive(Debug)]
pub struct SharedServer<S> {
    address: String,
    origin: Origin<S>,
}

#[derive(Debug)]
enum Origin<S> {
    Started(S),
    External { variable: &'static str },
}

impl<S: TestDeployment> SharedServer<S> {
    fn started(server: S) -> Self {
        SharedServer { address: server.address(), origin: Origin::Started(server) }
    }

    fn external(address: String, variable: &'static str) -> Self {
        SharedServer { address, origin: Origin::External { variable } }
    }

    /// What clients connect to: a URL, or a ZooKeeper connect string.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether an environment variable named this server rather than the harness starting it.
    pub fn is_external(&self) -> bool {
        matches!(self.origin, Origin::External { .. })
    }

    /// The server (or group) the harness started.
    ///
    /// # Errors
    ///
    /// [`HarnessError::External`] for an external server.
    pub fn server(&self) -> Result<&S, HarnessError> {
        match &self.origin {
            Origin::Started(server) => Ok(server),
            Origin::External { variable } => Err(HarnessError::External { kind: S::KIND, variable }),
        }
    }
}

impl<S: TestServer> SharedServer<S> {
    /// The server's process. Prefer a private server for fault injection: other tests use
    /// this one concurrently.
    ///
    /// # Errors
    ///
    /// [`HarnessError::External`] for an external server.
    pub fn process(&self) -> Result<&ServerProcess, HarnessError> {
        self.server().map(TestServer::process)
    }
}

/// A shared server's slot: the outcome of the one start attempt, failure included, so a
/// broken install fails every test quickly instead of each retrying the start.
type Slot<S> = OnceLock<Result<SharedServer<S>, Arc<HarnessError>>>;

/// The shared Redis server, or the one `DISTLOCK_REDIS_URL` names.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
#[cfg(feature = "redis-server")]
pub fn redis() -> Result<&'static SharedServer<RedisServer>, HarnessError> {
    static SLOT: Slot<RedisServer> = OnceLock::new();
    shared(&SLOT, REDIS_URL_VARIABLE, RedisServer::start)
}

/// The shared Redis Cluster, or the one `DISTLOCK_REDIS_CLUSTER` names. Do not fail it over
/// or move its slots: other tests use it concurrently.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
#[cfg(feature = "redis-server")]
pub fn redis_cluster() -> Result<&'static SharedServer<RedisCluster>, HarnessError> {
    static SLOT: Slot<RedisCluster> = OnceLock::new();
    shared(&SLOT, REDIS_CLUSTER_VARIABLE, RedisCluster::start)
}

/// The shared Redis Sentinel group, or the deployment `DISTLOCK_REDIS_SENTINEL` names. Do not
/// fail it over: other tests use it concurrently.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
#[cfg(feature = "redis-server")]
pub fn redis_sentinel() -> Result<&'static SharedServer<RedisSentinelGroup>, HarnessError> {
    static SLOT: Slot<RedisSentinelGroup> = OnceLock::new();
    shared(&SLOT, REDIS_SENTINEL_VARIABLE, RedisSentinelGroup::start)
}

#[cfg(feature = "postgres-server")]
/// The shared PostgreSQL server, or the one `DISTLOCK_POSTGRES_URL` names.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn postgres() -> Result<&'static SharedServer<PostgresServer>, HarnessError> {
    static SLOT: Slot<PostgresServer> = OnceLock::new();
    shared(&SLOT, POSTGRES_URL_VARIABLE, PostgresServer::start)
}

#[cfg(feature = "postgres-server")]
/// The shared PgBouncer, in front of [`postgres()`]'s server, or the one
/// `DISTLOCK_PGBOUNCER_URL` names. Its address is the base URL without a database,
/// `postgres://distlock:distlock@127.0.0.1:PORT/`: append a [`PoolMode`](super::PoolMode)'s
/// alias (`session`, `transaction`, `statement`).
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call), including the
/// shared PostgreSQL's.
pub fn pgbouncer() -> Result<&'static SharedServer<PgBouncer>, HarnessError> {
    static SLOT: Slot<PgBouncer> = OnceLock::new();
    shared(&SLOT, PGBOUNCER_URL_VARIABLE, PgBouncer::start)
}

#[cfg(feature = "postgres-server")]
/// The shared TLS-only PostgreSQL server ([`PostgresServer::start_tls`]), or the one
/// `DISTLOCK_POSTGRES_TLS_URL` names. Its address carries the TLS parameters.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn postgres_tls() -> Result<&'static SharedServer<PostgresServer>, HarnessError> {
    static SLOT: Slot<PostgresServer> = OnceLock::new();
    shared(&SLOT, POSTGRES_TLS_URL_VARIABLE, PostgresServer::start_tls)
}

#[cfg(feature = "mariadb-server")]
/// The shared MariaDB server, or the MySQL-protocol server `DISTLOCK_MYSQL_URL` names.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn mariadb() -> Result<&'static SharedServer<MariaDbServer>, HarnessError> {
    static SLOT: Slot<MariaDbServer> = OnceLock::new();
    shared(&SLOT, MYSQL_URL_VARIABLE, MariaDbServer::start)
}

#[cfg(feature = "mariadb-server")]
/// The shared TLS-only MariaDB server ([`MariaDbServer::start_tls`]), or the MySQL-protocol
/// server `DISTLOCK_MYSQL_TLS_URL` names. Its address carries the TLS parameters.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn mariadb_tls() -> Result<&'static SharedServer<MariaDbServer>, HarnessError> {
    static SLOT: Slot<MariaDbServer> = OnceLock::new();
    shared(&SLOT, MYSQL_TLS_URL_VARIABLE, MariaDbServer::start_tls)
}

#[cfg(feature = "zookeeper-server")]
/// The shared standalone ZooKeeper server, or the ensemble `DISTLOCK_ZOOKEEPER` names.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn zookeeper() -> Result<&'static SharedServer<ZooKeeperServer>, HarnessError> {
    static SLOT: Slot<ZooKeeperServer> = OnceLock::new();
    shared(&SLOT, ZOOKEEPER_VARIABLE, ZooKeeperServer::start)
}

#[cfg(feature = "etcd-server")]
/// The shared single-node etcd server (without auth), or the server or cluster
/// `DISTLOCK_ETCD_URL` names.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn etcd() -> Result<&'static SharedServer<EtcdServer>, HarnessError> {
    static SLOT: Slot<EtcdServer> = OnceLock::new();
    shared(&SLOT, ETCD_URL_VARIABLE, EtcdServer::start)
}

/// The shared TLS-only Redis server ([`RedisServer::start_tls`]), or the one
/// `DISTLOCK_REDIS_TLS_URL` names. Its address is `rediss://127.0.0.1:PORT/?cacert=<file>`.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
#[cfg(feature = "redis-server")]
pub fn redis_tls() -> Result<&'static SharedServer<RedisServer>, HarnessError> {
    static SLOT: Slot<RedisServer> = OnceLock::new();
    shared(&SLOT, REDIS_TLS_URL_VARIABLE, RedisServer::start_tls)
}

#[cfg(feature = "zookeeper-server")]
/// The shared standalone TLS-only ZooKeeper server ([`ZooKeeperServer::start_tls`]), or the
/// ensemble `DISTLOCK_ZOOKEEPER_TLS_URL` names. Its address is
/// `zk+tls://127.0.0.1:PORT/?cacert=<file>`.
///
/// # Errors
///
/// [`HarnessError::Shared`] with the start failure (the same for every call).
pub fn zookeeper_tls() -> Result<&'static SharedServer<ZooKeeperServer>, HarnessError> {
    static SLOT: Slot<ZooKeeperServer> = OnceLock::new();
    shared(&SLOT, ZOOKEEPER_TLS_URL_VARIABLE, ZooKeeperServer::start_tls)
}

/// The server in `slot`: the external one `variable` names, or else one `start` starts.
fn shared<S: TestDeployment>(
    slot: &'static Slot<S>,
    variable: &'static str,
    start: fn() -> Result<S, HarnessError>,
) -> Result<&'static SharedServer<S>, HarnessError> {
    slot.get_or_init(|| obtain(variable, std::env::var_os(variable), start).map_err(Arc::new))
        .as_ref()
        .map_err(|source| HarnessError::Shared { kind: S::KIND, source: Arc::clone(source) })
}

/// The external server `value` (of `variable`) names, or else one `start` starts.
fn obtain<S: TestDeployment>(
    variable: &'static str,
    value: Option<OsString>,
    start: fn() -> Result<S, HarnessError>,
) -> Result<SharedServer<S>, HarnessError> {
    match external_address(variable, value)? {
        Some(address) => Ok(SharedServer::external(address, variable)),
        None => start().map(SharedServer::started),
    }
}

/// The address in an environment variable's value; unset and empty both mean none.
fn external_address(variable: &'static str, value: Option<OsString>) -> Result<Option<String>, HarnessError> {
    match value {
        None => Ok(None),
        Some(value) if value.is_empty() => Ok(None),
        Some(value) => value
            .into_string()
            .map(Some)
            .map_err(|_| HarnessError::InvalidEnvironment { variable, reason: "not valid UTF-8".into() }),
    }
}

/// `count` independent shared Redis servers, as Redlock needs, or the first `count` of those
/// `DISTLOCK_REDIS_NODES` names. They are not [`redis()`]'s server. Later calls return the same
/// servers, starting more if `count` grew.
///
/// # Errors
///
/// [`HarnessError::InvalidEnvironment`] if `DISTLOCK_REDIS_NODES` names fewer than `count`
/// servers; start failures as for [`RedisServer::start`] (not remembered: a later call tries
/// again).
#[cfg(feature = "redis-server")]
pub fn redis_nodes(count: usize) -> Result<Vec<&'static SharedServer<RedisServer>>, HarnessError> {
    /// `None` until the first call has read the environment.
    static NODES: Mutex<Option<Nodes>> = Mutex::new(None);

    let mut nodes = NODES.lock();
    let nodes = match &mut *nodes {
        Some(nodes) => nodes,
        empty => empty.insert(Nodes::from_environment()?),
    };
    nodes.take(count)
}

/// The Redlock nodes handed out so far.
#[cfg(feature = "redis-server")]
struct Nodes {
    list: Vec<&'static SharedServer<RedisServer>>,
    /// Whether the list came from the environment, and so cannot grow.
    external: bool,
}

#[cfg(feature = "redis-server")]
impl Nodes {
    fn from_environment() -> Result<Self, HarnessError> {
        let value = std::env::var_os(REDIS_NODES_VARIABLE);
        let Some(urls) = external_address(REDIS_NODES_VARIABLE, value)? else {
            return Ok(Nodes { list: Vec::new(), external: false });
        };
        let list = urls
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(|url| leak(SharedServer::external(url.to_owned(), REDIS_NODES_VARIABLE)))
            .collect();
        Ok(Nodes { list, external: true })
    }

    fn take(&mut self, count: usize) -> Result<Vec<&'static SharedServer<RedisServer>>, HarnessError> {
        if self.external && self.list.len() < count {
            return Err(HarnessError::InvalidEnvironment {
                variable: REDIS_NODES_VARIABLE,
                reason: format!("names {} servers but {count} are needed", self.list.len()),
            });
        }
        while self.list.len() < count {
            self.list.push(leak(SharedServer::started(RedisServer::start()?)));
        }
        Ok(self.list[..count].to_vec())
    }
}

/// Gives a shared server the `'static` lifetime the other shared servers get from their
/// statics; like them it is never dropped, and the spawner's death signal stops it.
#[cfg(feature = "redis-server")]
fn leak(server: SharedServer<RedisServer>) -> &'static SharedServer<RedisServer> {
    Box::leak(Box::new(server))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "postgres-server")]
    use crate::harness::ServerKind;

    #[cfg(feature = "postgres-server")]
    #[test]
    fn an_environment_variable_names_an_external_server_without_process_controls() {
        let shared =
            obtain(POSTGRES_URL_VARIABLE, Some("postgres://elsewhere/db".into()), PostgresServer::start)
                .unwrap();
        assert!(shared.is_external());
        assert_eq!(shared.address(), "postgres://elsewhere/db");
        let error = shared.process().unwrap_err();
        assert!(matches!(
            error,
            HarnessError::External { kind: ServerKind::Postgres, variable: POSTGRES_URL_VARIABLE }
        ));
        assert!(error.to_string().contains("$DISTLOCK_POSTGRES_URL"), "{error}");
    }

    #[test]
    fn empty_variables_count_as_unset() {
        assert_eq!(external_address(REDIS_URL_VARIABLE, None).unwrap(), None);
        assert_eq!(external_address(REDIS_URL_VARIABLE, Some("".into())).unwrap(), None);
    }

    #[cfg(feature = "redis-server")]
    #[test]
    fn external_redis_nodes_cannot_grow() {
        let mut nodes = Nodes {
            list: vec![leak(SharedServer::external("redis://a/".into(), REDIS_NODES_VARIABLE))],
            external: true,
        };
        assert_eq!(nodes.take(1).unwrap()[0].address(), "redis://a/");
        let error = nodes.take(2).unwrap_err();
        assert!(error.to_string().contains("names 1 servers but 2 are needed"), "{error}");
    }
}
