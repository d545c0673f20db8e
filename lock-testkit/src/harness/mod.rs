//! Real, throwaway servers for tests: Redis, PostgreSQL, MariaDB and ZooKeeper.
//!
//! Each server is started from the installed binaries on free 127.0.0.1 ports (never the
//! standard ones), in its own temp dir, and is ready when it answers a real protocol request:
//! Redis `PING`, a PostgreSQL or MariaDB login with a password, ZooKeeper `srvr`/`ruok`. A
//! missing binary is an error naming the Debian package to install (`cargo xtask test` installs
//! them all); nothing is skipped.
//!
//! ```no_run
//! use lock_testkit::harness::{shared, HarnessError, RedisServer};
//!
//! # fn main() -> Result<(), HarnessError> {
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

mod binaries;
mod command;
mod dirs;
mod error;
mod kind;
mod logs;
mod mariadb;
mod ports;
mod postgres;
mod process;
mod redis;
mod server;
pub mod shared;
mod spawner;
mod tree;
mod zookeeper;

pub use error::HarnessError;
pub use kind::ServerKind;
pub use logs::KEEP_LOGS_VARIABLE;
pub use mariadb::MariaDbServer;
pub use ports::free_port;
pub use postgres::PostgresServer;
pub use process::ServerProcess;
pub use redis::{RedisOptions, RedisServer};
pub use server::TestServer;
pub use shared::SharedServer;
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer};
