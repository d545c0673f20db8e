//! [`parse_url`]: the one way from a server URL to a ready backend, as object_store's `parse_url`
//! is — examples, `distlock exec`, `inspect`, `bench` and `compare` all go through it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::{Error, MemoryBackend, Result};

use crate::any::AnyBackend;

/// A kind of lock, where a URL's scheme has several; the names are the `distlock` command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// `memory`: the in-process backend.
    Memory,
    /// `redis`: one Redis server, `SET NX PX` layout.
    Redis,
    /// `redis-hash`: one Redis server, reentrant-hash layout.
    RedisHash,
    /// `redlock`: Redlock over independent Redis servers.
    Redlock,
    /// `pg-table`: PostgreSQL lock table.
    PgTable,
    /// `pg-row`: PostgreSQL `SELECT … FOR UPDATE` row lock.
    PgRow,
    /// `pg-advisory`: PostgreSQL advisory lock.
    PgAdvisory,
    /// `mysql-table`: MySQL/MariaDB lock table.
    MySqlTable,
    /// `mysql-row`: MySQL/MariaDB `SELECT … FOR UPDATE` row lock.
    MySqlRow,
    /// `mysql-advisory`: MySQL/MariaDB `GET_LOCK` advisory lock.
    MySqlAdvisory,
    /// `zookeeper`: Curator-compatible ephemeral-sequential lock.
    ZooKeeper,
    /// `etcd`: etcd's `concurrency.Mutex` (`etcdctl lock`).
    Etcd,
}

impl BackendKind {
    /// Every kind, in the `distlock kinds` table's order.
    pub const ALL: [BackendKind; 12] = [
        Self::Memory,
        Self::Redis,
        Self::RedisHash,
        Self::Redlock,
        Self::PgTable,
        Self::PgRow,
        Self::PgAdvisory,
        Self::MySqlTable,
        Self::MySqlRow,
        Self::MySqlAdvisory,
        Self::ZooKeeper,
        Self::Etcd,
    ];

    /// The kind's name: `redis-hash`, `pg-row`, …
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::RedisHash => "redis-hash",
            Self::Redlock => "redlock",
            Self::PgTable => "pg-table",
            Self::PgRow => "pg-row",
            Self::PgAdvisory => "pg-advisory",
            Self::MySqlTable => "mysql-table",
            Self::MySqlRow => "mysql-row",
            Self::MySqlAdvisory => "mysql-advisory",
            Self::ZooKeeper => "zookeeper",
            Self::Etcd => "etcd",
        }
    }

    /// The kind a URL names when no kind is given: the first of its scheme's.
    ///
    /// # Errors
    /// As [`parse_url_opts`] for the URL's form, before connecting.
    pub fn of_url(url: &str) -> Result<Self> {
        resolve(url, None)
    }

    /// The scheme family this kind belongs to.
    fn family(self) -> Family {
        match self {
            Self::Memory => Family::Memory,
            Self::Redis | Self::RedisHash => Family::Redis,
            Self::Redlock => Family::Redlock,
            Self::PgTable | Self::PgRow | Self::PgAdvisory => Family::Postgres,
            Self::MySqlTable | Self::MySqlRow | Self::MySqlAdvisory => Family::MySql,
            Self::ZooKeeper => Family::ZooKeeper,
            Self::Etcd => Family::Etcd,
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    /// # Errors
    /// [`Error::InvalidConfig`] listing the names, for an unknown one.
    fn from_str(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|kind| kind.name()).collect();
            Error::invalid_config(format!(
                "unknown backend kind {name:?}; the kinds are {}",
                names.join(", ")
            ))
        })
    }
}

/// The settings every backend shares, for [`parse_url_opts`]; unset ones keep each backend's
/// default (see its builder). A by-value builder:
///
/// ```
/// use std::time::Duration;
/// use distlock::{BackendKind, ConnectOptions};
///
/// let options = ConnectOptions::new().kind(BackendKind::PgRow).connect_timeout(Duration::from_secs(2));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ConnectOptions {
    kind: Option<BackendKind>,
    connect_timeout: Option<Duration>,
    io_timeout: Option<Duration>,
    max_connections: Option<u32>,
    namespace: Option<String>,
}

impl ConnectOptions {
    /// No setting: each backend's defaults, and the first kind of the URL's scheme.
    pub fn new() -> Self {
        Self::default()
    }

    /// The kind of lock, where the URL's scheme has several (`redis-hash`, `pg-row`, …); a kind
    /// of another scheme is [`Error::InvalidConfig`]. Defaults to the first kind of the scheme:
    /// `redis`, `pg-table`, `mysql-table`, `zookeeper`, `etcd`; `redlock` for a list of `redis://`
    /// URLs.
    pub fn kind(mut self, kind: BackendKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// How long connecting may take (each builder's `connect_timeout`). Defaults to the
    /// backend's default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long one exchange with the server may take (each builder's `io_timeout`; Redlock's
    /// node timeout; for etcd, at most half the client's 10 s session TTL). Defaults to the
    /// backend's default.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = Some(timeout);
        self
    }

    /// The connection pool's size (each builder's `max_connections`); ignored by ZooKeeper,
    /// whose backend has one session, and etcd, whose requests share one HTTP/2 connection per
    /// member. Defaults to the backend's default.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = Some(max);
        self
    }

    /// The namespace (each builder's `namespace`: Redis's key prefix, the SQL advisory-lock
    /// namespace, ZooKeeper's root path, etcd's key prefix; for ZooKeeper and etcd it replaces
    /// the URL's path). Defaults to the backend's default (or, for ZooKeeper and etcd, the URL's
    /// path).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
}

/// Which servers a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Memory,
    Redis,
    Redlock,
    Postgres,
    MySql,
    ZooKeeper,
    Etcd,
}

/// The family of `url`'s form:
///
/// - `memory` (or `memory://`): the in-process backend;
/// - `redis://`, `rediss://`: one Redis server; several, comma-separated: Redlock's nodes;
/// - `redis+sentinel://`, `redis+cluster://` (`rediss+…` with TLS): a Sentinel-managed primary,
///   a Redis Cluster;
/// - `postgres://`, `postgresql://`, or a libpq `key=value …` string: PostgreSQL;
/// - `mysql://`: MySQL or MariaDB;
/// - `zk://`, `zookeeper://`: a ZooKeeper ensemble; `zk+tls://` over TLS (feature
///   `zookeeper-tls`);
/// - `etcd://`: an etcd cluster; `etcds://` over TLS.
fn family_of(url: &str) -> Result<Family> {
    if url == "memory" || url == "memory://" {
        return Ok(Family::Memory);
    }
    let shown = || lock_core::redact_url(url);
    let Some((scheme, _)) = url.split_once("://") else {
        // libpq's `host=h dbname=d …`: PostgreSQL's other connection-string form.
        if url.contains('=') {
            return Ok(Family::Postgres);
        }
        return Err(Error::invalid_config(format!(
            "{} is not a URL: write scheme://… (redis://, postgres://, mysql://, zk://, etcd://)",
            shown()
        )));
    };
    let urls = lock_core::split_url_list(url);
    if urls.len() > 1 {
        return if urls.iter().all(|one| one.starts_with("redis://") || one.starts_with("rediss://")) {
            Ok(Family::Redlock)
        } else {
            Err(Error::invalid_config(format!(
                "a list of URLs is Redlock's nodes, all redis:// or rediss://: {}",
                shown()
            )))
        };
    }
    match scheme {
        "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster" | "rediss+cluster" => {
            Ok(Family::Redis)
        }
        "postgres" | "postgresql" => Ok(Family::Postgres),
        "mysql" => Ok(Family::MySql),
        "zk" | "zookeeper" | "zk+tls" | "zookeeper+tls" => Ok(Family::ZooKeeper),
        "etcd" | "etcds" => Ok(Family::Etcd),
        "memory" => Ok(Family::Memory),
        other => Err(Error::invalid_config(format!(
            "no backend for {other}:// URLs (redis, rediss, redis+sentinel, redis+cluster, postgres, postgresql, mysql, zk, zk+tls, zookeeper, etcd, etcds): {}",
            shown()
        ))),
    }
}

/// The kind `url` with `kind` makes.
fn resolve(url: &str, kind: Option<BackendKind>) -> Result<BackendKind> {
    let family = family_of(url)?;
    let Some(kind) = kind else {
        return Ok(match family {
            Family::Memory => BackendKind::Memory,
            Family::Redis => BackendKind::Redis,
            Family::Redlock => BackendKind::Redlock,
            Family::Postgres => BackendKind::PgTable,
            Family::MySql => BackendKind::MySqlTable,
            Family::ZooKeeper => BackendKind::ZooKeeper,
            Family::Etcd => BackendKind::Etcd,
        });
    };
    // One redis:// URL may be a Redlock of one node; a list is Redlock only.
    if kind.family() == family || (kind == BackendKind::Redlock && family == Family::Redis) {
        return Ok(kind);
    }
    Err(Error::invalid_config(format!(
        "the kind {kind} does not go with {}",
        lock_core::redact_url(url).split("://").next().map_or_else(String::new, |s| format!("{s}:// URLs"))
    )))
}

/// Checks that `url` (with `kind`) names a backend of this build, without connecting: the kind it
/// would make.
///
/// # Errors
/// As [`parse_url_opts`] before it connects.
pub fn check_url(url: &str, kind: Option<BackendKind>) -> Result<BackendKind> {
    let kind = resolve(url, kind)?;
    match kind.family() {
        #[cfg(not(feature = "redis"))]
        Family::Redis | Family::Redlock => Err(not_built("redis")),
        #[cfg(not(feature = "postgres"))]
        Family::Postgres => Err(not_built("postgres")),
        #[cfg(not(feature = "mysql"))]
        Family::MySql => Err(not_built("mysql")),
        #[cfg(not(feature = "zookeeper"))]
        Family::ZooKeeper => Err(not_built("zookeeper")),
        #[cfg(not(feature = "etcd"))]
        Family::Etcd => Err(not_built("etcd")),
        _ => Ok(kind),
    }
}

#[allow(dead_code)] // Unused when every backend feature is on.
fn not_built(feature: &'static str) -> Error {
    Error::Unsupported { backend: "distlock", feature: feature_message(feature) }
}

#[allow(dead_code)]
fn feature_message(feature: &'static str) -> &'static str {
    match feature {
        "redis" => "redis:// URLs in this build (enable the `redis` feature)",
        "postgres" => "postgres:// URLs in this build (enable the `postgres` feature)",
        "mysql" => "mysql:// URLs in this build (enable the `mysql` feature)",
        "etcd" => "etcd:// URLs in this build (enable the `etcd` feature)",
        _ => "zk:// URLs in this build (enable the `zookeeper` feature)",
    }
}

/// A ready backend for `url`, with every default: [`parse_url_opts`] with
/// [`ConnectOptions::new`].
///
/// ```no_run
/// use distlock::{parse_url, LockClient};
///
/// let client = LockClient::new(parse_url("zk://10.0.0.1:2181,10.0.0.2:2181/locks")?);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
///
/// # Errors
/// As [`parse_url_opts`].
pub fn parse_url(url: &str) -> Result<AnyBackend> {
    parse_url_opts(url, &ConnectOptions::new())
}

/// A ready backend for `url`: validated and connected, as each builder's `build` (which opens a
/// first connection within the connect timeout). The forms:
///
/// | form | backend | kinds |
/// |---|---|---|
/// | `memory` | in-process (a new store per call) | `memory` |
/// | `redis://[[user]:password@]host[:port][/db]`, `rediss://…` (TLS) | Redis | `redis` (default), `redis-hash`, `redlock` |
/// | `redis://…,redis://…,…` | Redlock over these nodes | `redlock` |
/// | `redis+sentinel://[[user]:password@]s1[:port],s2[:port]…/<master-name>[/db]` | the primary Redis Sentinel names, followed across failovers | `redis` (default), `redis-hash` |
/// | `redis+cluster://[[user]:password@]n1[:port],n2[:port]…/` | a Redis Cluster (keys routed by slot) | `redis` (default), `redis-hash` |
/// | `postgres://` or `postgresql://[user[:password]@]host[:port]/db[?…]`, libpq `host=… dbname=…` | PostgreSQL | `pg-table` (default), `pg-row`, `pg-advisory` |
/// | `mysql://[user[:password]@]host[:port]/db` | MySQL, MariaDB | `mysql-table` (default), `mysql-row`, `mysql-advisory` |
/// | `zk://[user:password@]host:port[,host:port…][/namespace]`, `zookeeper://…`, `zk+tls://…` (TLS, feature `zookeeper-tls`) | ZooKeeper (digest auth with credentials) | `zookeeper` |
/// | `etcd://[user:password@]host[:port][,host[:port]…][/namespace]`, `etcds://…` (TLS: `?cacert=…&cert=…&key=…`) | etcd (etcd's user auth with credentials; port 2379 by default) | `etcd` |
///
/// User names and passwords are percent-decoded (`%40` for `@`, `%3A` for `:`, `%2F` for `/`).
/// The SQL kinds need their tables: call [`AnyBackend::ensure_schema`] once.
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL, a kind of another scheme, or settings out of
/// range; [`Error::Unsupported`] for a backend whose feature this build lacks;
/// [`Error::Connection`], [`Error::Timeout`] or [`Error::Authentication`] when the server
/// cannot be reached or refuses the credentials. No error shows a password.
pub fn parse_url_opts(url: &str, options: &ConnectOptions) -> Result<AnyBackend> {
    let kind = check_url(url, options.kind)?;
    match kind.family() {
        Family::Memory => Ok(AnyBackend::Memory(MemoryBackend::new())),
        #[cfg(feature = "redis")]
        Family::Redis => redis(url, kind, options),
        #[cfg(feature = "redis")]
        Family::Redlock => redlock(url, options),
        #[cfg(feature = "postgres")]
        Family::Postgres => postgres(url, kind, options),
        #[cfg(feature = "mysql")]
        Family::MySql => mysql(url, kind, options),
        #[cfg(feature = "zookeeper")]
        Family::ZooKeeper => zookeeper(url, options),
        #[cfg(feature = "etcd")]
        Family::Etcd => etcd(url, options),
        #[allow(unreachable_patterns)]
        _ => unreachable!("check_url refuses the families this build lacks"),
    }
}

/// Applies the options that are set to a builder, through its setters of the same names.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
))]
macro_rules! apply {
    ($builder:expr, $options:expr, $($setting:ident),*) => {{
        let mut builder = $builder;
        $(if let Some(value) = $options.$setting.clone() {
            builder = builder.$setting(value);
        })*
        builder
    }};
}

#[cfg(feature = "redis")]
fn redis(url: &str, kind: BackendKind, options: &ConnectOptions) -> Result<AnyBackend> {
    use lock_redis::{RedisBackend, RedisLockKind};
    if kind == BackendKind::Redlock {
        return redlock(url, options);
    }
    let layout =
        if kind == BackendKind::RedisHash { RedisLockKind::ReentrantHash } else { RedisLockKind::SetNx };
    let builder = RedisBackend::builder(url).kind(layout);
    apply!(builder, options, connect_timeout, io_timeout, max_connections, namespace)
        .build()
        .map(AnyBackend::Redis)
}

#[cfg(feature = "redis")]
fn redlock(urls: &str, options: &ConnectOptions) -> Result<AnyBackend> {
    let builder = lock_redis::RedlockBackend::builder(lock_core::split_url_list(urls));
    apply!(builder, options, connect_timeout, io_timeout, max_connections, namespace)
        .build()
        .map(AnyBackend::Redlock)
}

#[cfg(feature = "postgres")]
fn postgres(url: &str, kind: BackendKind, options: &ConnectOptions) -> Result<AnyBackend> {
    use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
    let sql_kind = match kind {
        BackendKind::PgRow => PostgresLockKind::Row,
        BackendKind::PgAdvisory => PostgresLockKind::Advisory,
        _ => PostgresLockKind::Table,
    };
    let builder = PostgresBackend::builder(url).kind(sql_kind);
    apply!(builder, options, connect_timeout, io_timeout, max_connections, namespace)
        .build()
        .map(AnyBackend::Postgres)
}

#[cfg(feature = "mysql")]
fn mysql(url: &str, kind: BackendKind, options: &ConnectOptions) -> Result<AnyBackend> {
    use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
    let sql_kind = match kind {
        BackendKind::MySqlRow => MySqlLockKind::Row,
        BackendKind::MySqlAdvisory => MySqlLockKind::Advisory,
        _ => MySqlLockKind::Table,
    };
    let builder = MySqlBackend::builder(url).kind(sql_kind);
    apply!(builder, options, connect_timeout, io_timeout, max_connections, namespace)
        .build()
        .map(AnyBackend::MySql)
}

#[cfg(feature = "zookeeper")]
fn zookeeper(url: &str, options: &ConnectOptions) -> Result<AnyBackend> {
    let builder = lock_zk::ZooKeeperLockBuilder::from_url(url)?;
    apply!(builder, options, connect_timeout, io_timeout, namespace).build().map(AnyBackend::ZooKeeper)
}

/// `etcd://` or `etcds://`: the builder parses the URL (endpoints, credentials, namespace, TLS);
/// `max_connections` does not apply (one HTTP/2 connection per member).
#[cfg(feature = "etcd")]
fn etcd(url: &str, options: &ConnectOptions) -> Result<AnyBackend> {
    let builder = lock_etcd::EtcdLockBuilder::from_url(url)?;
    apply!(builder, options, connect_timeout, io_timeout, namespace).build().map(AnyBackend::Etcd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_their_names() {
        for kind in BackendKind::ALL {
            assert_eq!(kind.name().parse::<BackendKind>().unwrap(), kind);
        }
        assert_eq!("etcd".parse::<BackendKind>().unwrap(), BackendKind::Etcd);
        let unknown = "consul".parse::<BackendKind>().unwrap_err();
        assert!(matches!(unknown, Error::InvalidConfig { .. }) && unknown.to_string().contains("etcd"));
    }

    #[test]
    fn each_form_resolves_to_its_default_kind() {
        let cases = [
            ("memory", BackendKind::Memory),
            ("redis://h:1/", BackendKind::Redis),
            ("rediss://:p%40w@h:1/", BackendKind::Redis),
            ("redis://h:1/,redis://h:2/", BackendKind::Redlock),
            ("postgres://u:p@h/db", BackendKind::PgTable),
            ("postgresql://h/db", BackendKind::PgTable),
            ("host=h dbname=d password=p", BackendKind::PgTable),
            ("mysql://u:p@h/db", BackendKind::MySqlTable),
            ("zk://u:p@h1:1,h2:2/a@b", BackendKind::ZooKeeper),
            ("zookeeper://h:1", BackendKind::ZooKeeper),
            ("etcd://h", BackendKind::Etcd),
            ("etcd://u:p%40w@h1:2379,h2:2379/locks", BackendKind::Etcd),
            ("etcds://h:2379/locks?cacert=ca.pem", BackendKind::Etcd),
        ];
        for (url, kind) in cases {
            assert_eq!(resolve(url, None).unwrap(), kind, "{url}");
        }
    }

    #[test]
    fn a_kind_of_another_scheme_is_invalid_config() {
        for (url, kind) in [
            ("redis://h/", BackendKind::PgRow),
            ("postgres://h/db", BackendKind::Redis),
            ("zk://h:1", BackendKind::MySqlRow),
            ("redis://h:1/,redis://h:2/", BackendKind::RedisHash),
            ("etcd://h:1", BackendKind::ZooKeeper),
            ("zk://h:1", BackendKind::Etcd),
            ("etcd://h:1,etcd://h:2", BackendKind::Etcd),
        ] {
            assert!(matches!(resolve(url, Some(kind)), Err(Error::InvalidConfig { .. })), "{url} {kind}");
        }
        assert_eq!(resolve("redis://h/", Some(BackendKind::Redlock)).unwrap(), BackendKind::Redlock);
        for bad in ["h:2181", "http://h/", "redis://h/,postgres://h/db", ""] {
            assert!(matches!(resolve(bad, None), Err(Error::InvalidConfig { .. })), "{bad}");
        }
        let shown = resolve("ftp://u:hunter2@h/", None).unwrap_err().to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_urls_are_checked_by_the_builder_before_connecting() {
        assert_eq!(check_url("etcds://h/locks", None).unwrap(), BackendKind::Etcd);
        // TLS parameters on a plaintext URL, and a fragment: the builder's refusals, no password.
        for bad in ["etcd://u:hunter2@h/locks?cacert=ca.pem", "etcd://u:hunter2@h/#f"] {
            let error = parse_url(bad).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{bad}: {error}");
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
        // The options reach the builder: an invalid namespace and a zero timeout are refused.
        let namespace = ConnectOptions::new().namespace("a//b");
        assert!(matches!(parse_url_opts("etcd://127.0.0.1:1", &namespace), Err(Error::InvalidConfig { .. })));
        let timeout = ConnectOptions::new().io_timeout(Duration::ZERO);
        assert!(matches!(parse_url_opts("etcd://127.0.0.1:1", &timeout), Err(Error::InvalidConfig { .. })));
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn etcd_urls_need_the_etcd_feature() {
        let error = check_url("etcd://h:2379", None).unwrap_err();
        assert!(
            matches!(error, Error::Unsupported { .. }) && error.to_string().contains("`etcd` feature"),
            "{error}"
        );
    }
}
