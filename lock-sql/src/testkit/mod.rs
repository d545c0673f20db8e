//! Test support (feature `testkit`, not semver-stable): the SQL backends as conformance-suite
//! and workload targets over lock-testkit's harness servers.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;

#[cfg(feature = "mysql")]
pub use mysql::MySqlTarget;
#[cfg(feature = "postgres")]
pub use postgres::PostgresTarget;

use std::time::Duration;

/// The connect and I/O timeouts of every client a target makes: short, so S13's
/// unreachable-server check is quick, and far above a loopback round trip.
pub const TIMEOUT: Duration = Duration::from_secs(2);
