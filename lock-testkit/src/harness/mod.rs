//! Real, throwaway servers for tests: Redis, PostgreSQL, MariaDB and ZooKeeper, each kind behind
//! its own Cargo feature (`redis-server`, `postgres-server`, `mariadb-server`, `zookeeper-server`).
//!
//! Each server is started from the installed binaries on free 127.0.0.1 ports (never the
//! standard ones), in its own temp dir, and is ready when it answers a real protocol request:
//! Redis `PING`, a PostgreSQL or MariaDB login with a password, ZooKeeper `srvr`/`ruok`. A
//! missing binary is an error naming the Debian package to install (`cargo xtask test` installs
//! them all); nothing is skipped.
//!
//! ```no_run
//! # #[cfg(feature = "redis-server")]
//! # fn main() -> Result<(), lock_testkit::harness::HarnessError> {
//! use lock_testkit::harness::{shared, RedisServer};
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
//! # let _ = url;
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
        feature = "zookeeper-server"
    )),
    allow(dead_code, unused_imports)
)]

mod binaries;
mod command;
mod dirs;
mod error;
mod kind;
mod logs;
#[cfg(feature = "mariadb-server")]
mod mariadb;
mod ports;
#[cfg(feature = "postgres-server")]
mod postgres;
mod process;
#[cfg(feature = "redis-server")]
mod redis;
mod server;
pub mod shared;
mod spawner;
mod tree;
#[cfg(feature = "zookeeper-server")]
mod zookeeper;

pub use error::HarnessError;
pub use kind::ServerKind;
pub use logs::KEEP_LOGS_VARIABLE;
#[cfg(feature = "mariadb-server")]
pub use mariadb::MariaDbServer;
pub use ports::free_port;
#[cfg(feature = "postgres-server")]
pub use postgres::PostgresServer;
pub use process::ServerProcess;
#[cfg(feature = "redis-server")]
pub use redis::{RedisOptions, RedisServer};
pub use server::TestServer;
pub use shared::SharedServer;
#[cfg(feature = "zookeeper-server")]
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer};
