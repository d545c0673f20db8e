//! distlock: one blocking distributed-lock API over many backends, each proven by one shared
//! conformance suite.
//!
//! This facade re-exports [`lock_core`] (the API and the in-memory backend) and, behind Cargo
//! features, each backend crate: `redis` (single-node locks and Redlock), `postgres` and `mysql`
//! (lock table, row locks, advisory locks), `zookeeper` (Curator-compatible ephemeral-sequential
//! locks), `etcd` (etcd's own `concurrency` layouts, shared with `etcdctl lock` and `etcdctl
//! elect`). The feature `testkit` is test support — each enabled backend's conformance-suite
//! targets and broken recipes, for this crate's own tests and `distlock compare` — and is **not
//! semver-stable**.
//!
//! The guides — each backend's topologies and kinds, TLS, behaviour under faults, observability,
//! benchmarks, the `distlock` command and the scenario catalogue — are the modules of
//! [`guide`], starting with [`guide::urls`] (every URL form) and [`guide::primitives`]
//! (read-write locks, semaphores, multi-locks).
//!
//! ```
//! use distlock::{LockClient, MemoryBackend};
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let guard = client.lock_named("reports:daily")?.lock()?;
//! assert!(guard.is_held());
//! # Ok::<(), distlock::Error>(())
//! ```
//!
//! A program that takes its lock server from configuration gets a ready backend of any kind from
//! a URL with [`parse_url`] (or [`parse_url_opts`], with a kind and the settings every backend
//! shares): `redis://`, `rediss://`, `postgres://`, `postgresql://` (or libpq `key=value`),
//! `mysql://`, `zk://`, `etcd://`, `etcds://`; a comma-separated list of `redis://` URLs is
//! Redlock.
//!
//! ```no_run
//! use distlock::{parse_url_opts, BackendKind, ConnectOptions, LockClient};
//!
//! let options = ConnectOptions::new().kind(BackendKind::PgRow);
//! let backend = parse_url_opts("postgres://app:secret@127.0.0.1/app", &options)?;
//! backend.ensure_schema()?;
//! let client = LockClient::new(backend);
//! let guard = client.lock_named("reports:daily")?.lock()?;
//! guard.unlock()?;
//! # Ok::<(), distlock::Error>(())
//! ```
#![warn(missing_docs)]

mod any;
mod connect;

pub use any::{AnyBackend, AnyLease};
pub use connect::{check_url, parse_url, parse_url_opts, BackendKind, ConnectOptions};
pub use lock_core::*;

/// The Redis backends (feature `redis`): [`RedisBackend`](lock_redis::RedisBackend) with the
/// single-node `SET NX PX` and the reentrant-hash layouts, fencing tokens, pub/sub wake-ups, a
/// fair wait queue and the `WAIT` option; and [`RedlockBackend`](lock_redis::RedlockBackend)
/// over independent nodes (read its limits before relying on it).
///
/// ```no_run
/// use distlock::redis::RedisBackend;
/// use distlock::LockClient;
///
/// let client = LockClient::new(RedisBackend::new("redis://127.0.0.1:6380/")?);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "redis")]
pub use lock_redis as redis;

/// The PostgreSQL backend (feature `postgres`): [`PostgresBackend`](lock_sql::postgres::PostgresBackend)
/// with three kinds — a lock table on the database clock (leases, `NOTIFY` wake-ups), `SELECT …
/// FOR UPDATE` row locks and advisory locks (session holds on an owned connection) — all with
/// fencing tokens.
///
/// ```no_run
/// use distlock::postgres::{PostgresBackend, PostgresLockKind};
/// use distlock::LockClient;
///
/// let backend = PostgresBackend::builder("postgres://app:secret@127.0.0.1/app")
///     .kind(PostgresLockKind::Table)
///     .build()?;
/// backend.ensure_schema()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "postgres")]
pub use lock_sql::postgres;

/// The MySQL/MariaDB backend (feature `mysql`): [`MySqlBackend`](lock_sql::mysql::MySqlBackend)
/// with three kinds — a lock table on the database clock (leases; waiters queue in a table and
/// are rung by a release, MySQL having no notifications: see
/// [`SqlLockBuilder::fair`](lock_sql::SqlLockBuilder::fair)), `SELECT … FOR UPDATE` row locks and `GET_LOCK` advisory locks (session holds
/// on an owned connection, waiters queue in the server) — all with fencing tokens. Tested on
/// MariaDB 10.11.
///
/// ```no_run
/// use distlock::mysql::{MySqlBackend, MySqlLockKind};
/// use distlock::LockClient;
///
/// let backend = MySqlBackend::builder("mysql://app:secret@127.0.0.1:3306/app")
///     .kind(MySqlLockKind::Row)
///     .build()?;
/// backend.ensure_schema()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "mysql")]
pub use lock_sql::mysql;

/// The ZooKeeper backend (feature `zookeeper`): [`ZooKeeperBackend`](lock_zk::ZooKeeperBackend),
/// the ephemeral-sequential lock of Apache Curator's `InterProcessMutex` (same node layout, so
/// Rust and Java services can share a lock), each waiter watching only its predecessor, holds
/// bound to the session (in doubt while disconnected, lost on expiry) and the node's creation
/// zxid as the fencing token.
///
/// ```no_run
/// use distlock::zookeeper::ZooKeeperBackend;
/// use distlock::LockClient;
///
/// let backend = ZooKeeperBackend::builder("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181")
///     .namespace("/locks")
///     .build()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "zookeeper")]
pub use lock_zk as zookeeper;

/// The etcd backend (feature `etcd`): [`EtcdBackend`](lock_etcd::EtcdBackend), etcd's own
/// `concurrency.Mutex` key for key (so `etcdctl lock` and Go services share a lock), one lease
/// and keep-alive stream per client, each waiter watching only its predecessor, and the key's
/// create revision as the fencing token; read-write locks (Go's `recipe.RWMutex`), semaphores,
/// elections (`concurrency.Election`, so `etcdctl elect` shares them), guarded writes and a
/// fenced store ([`EtcdFencedStore`](lock_etcd::EtcdFencedStore)).
///
/// ```no_run
/// use distlock::etcd::EtcdBackend;
/// use distlock::LockClient;
///
/// let backend = EtcdBackend::builder("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379")
///     .namespace("locks")
///     .build()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "etcd")]
pub use lock_etcd as etcd;

/// The guides in the repository's `docs/`, one concern each, rendered here so that docs.rs shows
/// them beside the API of the release they describe (the files ship in this crate's package).
/// The README's *Read on* links each one both as a file and as its page here.
pub mod guide {
    // Each guide is its Markdown file, preceded by link definitions that send the guides' links
    // to one another to these modules: a guide links `[the TLS guide][tls.md]` and ends with
    // `[tls.md]: tls.md`, which works as a file in the repository; here the definition below
    // comes first, and CommonMark's first definition of a label wins.
    macro_rules! guide {
        ($name:ident, $file:literal) => {
            #[doc = "[urls.md]: crate::guide::urls"]
            #[doc = "[redis.md]: crate::guide::redis"]
            #[doc = "[sql.md]: crate::guide::sql"]
            #[doc = "[zookeeper.md]: crate::guide::zookeeper"]
            #[doc = "[etcd.md]: crate::guide::etcd"]
            #[doc = "[primitives.md]: crate::guide::primitives"]
            #[doc = "[faults.md]: crate::guide::faults"]
            #[doc = "[tls.md]: crate::guide::tls"]
            #[doc = "[observability.md]: crate::guide::observability"]
            #[doc = "[benchmarks.md]: crate::guide::benchmarks"]
            #[doc = "[cli.md]: crate::guide::cli"]
            #[doc = "[scenarios.md]: crate::guide::scenarios"]
            #[doc = "[guarded-writes.md]: crate::guide::guarded_writes"]
            #[doc = "[elections.md]: crate::guide::elections"]
            #[doc = ""]
            #[doc = include_str!(concat!("../docs/", $file))]
            pub mod $name {}
        };
    }
    guide!(urls, "urls.md");
    guide!(redis, "redis.md");
    guide!(sql, "sql.md");
    guide!(zookeeper, "zookeeper.md");
    guide!(etcd, "etcd.md");
    guide!(primitives, "primitives.md");
    guide!(faults, "faults.md");
    guide!(tls, "tls.md");
    guide!(observability, "observability.md");
    guide!(benchmarks, "benchmarks.md");
    guide!(cli, "cli.md");
    guide!(scenarios, "scenarios.md");
    guide!(guarded_writes, "guarded-writes.md");
    guide!(elections, "elections.md");
}
