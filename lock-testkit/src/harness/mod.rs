//! Real, throwaway servers for tests: Redis, PostgreSQL (and a [`PgBouncer`] in front of it),
//! MariaDB, ZooKeeper and etcd, each kind behind its own Cargo feature (`redis-server`,
//! `postgres-server`, `mariadb-server`, `zookeeper-server`, `etcd-server`). Besides single
//! servers: a [`RedisCluster`] (three primaries with a replica each, slots that tests can move),
//! a [`RedisSentinelGroup`] (a primary, two replicas, three sentinels), a [`ZooKeeperEnsemble`]
//! and an [`EtcdCluster`], whose nodes tests can kill, pause and restart one by one.
//!
//! Each server is started from the installed binaries on free 127.0.0.1 ports (never the
//! standard ones), in its own temp dir, and is ready when it answers a real protocol request:
//! Redis `PING`, a PostgreSQL or MariaDB login with a password (through PgBouncer, to
//! PostgreSQL), ZooKeeper `srvr`/`ruok`, etcd `GET /health`. A group is ready when its members
//! agree: every cluster node says `cluster_state:ok` and sees the same primaries and replicas;
//! every sentinel knows both replicas and the other sentinels; a majority of etcd members name
//! the same leader. A missing binary is an error naming the Debian package to install
//! (`cargo xtask test` installs them all); nothing is skipped.
//!
//! ```no_run
//! # #[cfg(feature = "redis-server")]
//! # fn main() -> Result<(), lock_testkit::harness::HarnessError> {
//! use std::time::Duration;
//!
//! use lock_testkit::harness::{shared, RedisCluster, RedisServer};
//!
//! // Most tests share one server per test binary (or one named by $DISTLOCK_REDIS_URL):
//! let url = shared::redis()?.address();
//!
//! // Fault-injection tests start their own:
//! let redis = RedisServer::start()?;
//! redis.process().pause()?; // SIGSTOP: connections hang
//! redis.process().resume()?;
//! redis.process().kill9()?; // a crash: every key is gone
//! redis.process().restart()?; // same port, answering again
//!
//! // Failovers: kill a cluster primary, wait for its replica to serve the slot.
//! let cluster = RedisCluster::start()?;
//! let primary = cluster.primary_for_slot(0)?;
//! cluster.node(primary).expect("a node of the cluster").process().kill9()?;
//! let promoted = cluster.wait_for_new_primary(0, primary, Duration::from_secs(10))?;
//! # let _ = (url, promoted);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "redis-server"))]
//! # fn main() {}
//! ```
//!
//! # Cleanup
//!
//! Dropping a server SIGKILLs it and everything it started, reaps it and removes its dir.
//! Servers also die with the test binary even when no destructor runs (shared servers live in
//! statics, and a binary can be killed): every child is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG`. Dirs left by such runs are removed by the next run.
//!
//! # Logs
//!
//! A server's stdout and stderr go to `server.log` in its dir. Start errors carry the log's
//! last lines. A server dropped while its thread panics (a failed test) keeps its dir and
//! prints where, with the log's tail; so does every server when [`KEEP_LOGS_VARIABLE`]
//! (`DISTLOCK_KEEP_LOGS`) is set.

// The process, port and sharing machinery serves whichever server kinds are enabled; with some
// kinds' features off, the parts only they use are unused.
#![cfg_attr(
    not(all(
        feature = "redis-server",
        feature = "postgres-server",
        feature = "mariadb-server",
        feature = "zookeeper-server",
        feature = "etcd-server"
    )),
    allow(dead_code, unused_imports)
)]

mod binaries;
mod command;
mod dirs;
mod error;
#[cfg(feature = "etcd-server")]
mod etcd;
#[cfg(feature = "etcd-server")]
mod etcd_cluster;
mod kind;
mod logs;
#[cfg(feature = "mariadb-server")]
mod mariadb;
#[cfg(feature = "postgres-server")]
mod pgbouncer;
mod ports;
#[cfg(feature = "postgres-server")]
mod postgres;
mod process;
#[cfg(feature = "redis-server")]
mod redis;
#[cfg(feature = "redis-server")]
mod redis_cluster;
#[cfg(feature = "redis-server")]
mod redis_sentinel;
#[cfg(feature = "redis-server")]
mod resp;
mod server;
pub mod shared;
mod spawner;
mod tls;
#[cfg(any(feature = "redis-server", feature = "zookeeper-server"))]
mod tls_client;
mod tree;
#[cfg(feature = "zookeeper-server")]
mod zookeeper;

pub use error::HarnessError;
#[cfg(feature = "etcd-server")]
pub use etcd::{EtcdOptions, EtcdServer};
#[cfg(feature = "etcd-server")]
pub use etcd_cluster::EtcdCluster;
pub use kind::ServerKind;
pub use logs::KEEP_LOGS_VARIABLE;
#[cfg(feature = "mariadb-server")]
pub use mariadb::MariaDbServer;
#[cfg(feature = "postgres-server")]
pub use pgbouncer::{PgBouncer, PoolMode};
pub use ports::free_port;
#[cfg(feature = "postgres-server")]
pub use postgres::PostgresServer;
pub use process::ServerProcess;
#[cfg(feature = "redis-server")]
pub use redis::{RedisOptions, RedisServer};
#[cfg(feature = "redis-server")]
pub use redis_cluster::{ClusterPrimary, RedisCluster, SlotMigration};
#[cfg(feature = "redis-server")]
pub use redis_sentinel::{RedisSentinel, RedisSentinelGroup};
pub use server::{TestDeployment, TestServer};
pub use shared::SharedServer;
pub use tls::TestCa;
#[cfg(feature = "zookeeper-server")]
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer};
