//! Test support (feature `testkit`, not semver-stable): the SQL backends as conformance-suite
//! and workload targets over lock-testkit's harness servers.
//!
//! One target type, [`SqlTarget`], serves every kind of both databases; what differs between
//! them is the [`SqlKind`] implementation of each kind enum.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
pub mod pooler;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "mysql")]
pub mod primary_key_lock;
pub mod scenarios;
mod target;

pub use target::{SqlKind, SqlTarget, FENCED_TABLE, GUARDED_TABLE};

/// The PostgreSQL kinds as suite targets: `PostgresTarget::new(PostgresLockKind::Row)`.
#[cfg(feature = "postgres")]
pub type PostgresTarget = SqlTarget<crate::postgres::PostgresLockKind>;

/// The MySQL kinds as suite targets: `MySqlTarget::new(MySqlLockKind::Row)`.
#[cfg(feature = "mysql")]
pub type MySqlTarget = SqlTarget<crate::mysql::MySqlLockKind>;

use std::time::Duration;

use lock_testkit::negative::BrokenRecipe;

/// The full path, in `lock-sql/tests/broken_recipes.rs`, of the test that runs N05: S04 re-runs
/// that test binary, by this name, as the crashing holder.
pub const N05_TEST: &str = "n05_primary_key_lock_without_expiry_fails_s04";

/// The docs' broken SQL recipes, each with the scenario that must catch it: N05 (source 003's
/// primary-key lock without expiry) must fail S04. Its check must run from the test named
/// [`N05_TEST`].
pub fn broken_recipes() -> Vec<BrokenRecipe> {
    // Empty without MySQL (the only recipe needs it).
    #[cfg_attr(not(feature = "mysql"), allow(unused_mut))]
    let mut recipes = Vec::new();
    #[cfg(feature = "mysql")]
    recipes.push(BrokenRecipe::new("N05", "primary-key lock without expiry", "S04", || {
        let target = primary_key_lock::PrimaryKeyLockTarget::new();
        lock_testkit::negative::caught_by_scenario_in(
            &target,
            "S04",
            lock_testkit::suite::breach::HELD_AFTER_CRASH,
            N05_TEST,
        )
    }));
    recipes
}

/// The connect and I/O timeouts of every client a target makes: short, so S13's
/// unreachable-server check is quick, and far above a loopback round trip.
pub const TIMEOUT: Duration = Duration::from_secs(2);
