//! Test support (feature `testkit`, not semver-stable): the SQL backends as conformance-suite
//! and workload targets over lock-testkit's harness servers.
//!
//! One target type, [`SqlTarget`], serves every kind of both databases; what differs between
//! them is the [`SqlKind`] implementation of each kind enum.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod target;

pub use target::{SqlKind, SqlTarget};

/// The PostgreSQL kinds as suite targets: `PostgresTarget::new(PostgresLockKind::Row)`.
#[cfg(feature = "postgres")]
pub type PostgresTarget = SqlTarget<crate::postgres::PostgresLockKind>;

/// The MySQL kinds as suite targets: `MySqlTarget::new(MySqlLockKind::Row)`.
#[cfg(feature = "mysql")]
pub type MySqlTarget = SqlTarget<crate::mysql::MySqlLockKind>;

use std::time::Duration;

/// The connect and I/O timeouts of every client a target makes: short, so S13's
/// unreachable-server check is quick, and far above a loopback round trip.
pub const TIMEOUT: Duration = Duration::from_secs(2);
