//! Test support (feature `testkit`, not semver-stable): the Redis backends as conformance-suite
//! and workload targets, the docs' broken Redis recipes, and scenario R02.
//!
//! - [`RedisTarget`]: [`RedisBackend`](crate::RedisBackend), either layout, on the shared
//!   harness server (or `DISTLOCK_REDIS_URL`).
//! - [`RedlockTarget`]: [`RedlockBackend`](crate::RedlockBackend) over five shared harness nodes
//!   (or `DISTLOCK_REDIS_NODES`), and [`redlock::r02`], scenario R02 as a function any Redlock
//!   variant can be run through.
//! - [`server_time`]: what one acquire, renewal and release cost the server (`INFO
//!   commandstats`), beside the plain `SET NX PX` + compare-and-delete recipe.
//! - [`plain_recipe`]: the plain recipe itself, and W2 run with it (`distlock bench`'s same-run
//!   reference for the lock's W2).
//! - [`negative`]: the broken recipes N01–N04, N06 and N07; [`broken_recipes`] lists them in the
//!   backend-neutral frame of [`lock_testkit::negative`].

mod deployment;
mod deployment_scenarios;
pub mod negative;
pub mod plain_pair;
pub mod plain_recipe;
pub mod redlock;
mod scenarios;
pub mod server_time;
mod single_node;

pub use deployment::{Deployment, DeploymentTarget};
pub use deployment_scenarios::deployment_scenarios;
pub use redlock::{RedlockTarget, NODES};
pub use scenarios::scenarios;
pub(crate) use single_node::time_ping;
pub use single_node::{delete_keys_of_names, routed_url, RedisTarget, CONNECT_TIMEOUT};

use lock_testkit::harness::{HarnessError, RedisServer};
use lock_testkit::negative::{caught_by_scenario, caught_if_breached, BrokenRecipe, Caught};
use lock_testkit::suite::breach;
use lock_testkit::suite::Failure;

use negative::{NegativeTarget, Recipe, UnfencedRedlock};

/// The docs' broken Redis recipes N01–N04, N06 and N07, each with the scenario that must catch it.
pub fn broken_recipes() -> Vec<BrokenRecipe> {
    let suite_recipes = Recipe::ALL.into_iter().map(|recipe| {
        BrokenRecipe::new(recipe.id(), recipe.title(), recipe.must_fail(), move || {
            caught_by_scenario(&NegativeTarget::new(recipe), recipe.must_fail(), recipe.breaks())
        })
    });
    let n06 = BrokenRecipe::new("N06", "redlock without fencing", "R02", unfenced_redlock_fails_r02);
    suite_recipes.chain([n06]).collect()
}

/// N06: R02 on five private nodes, with Redlock stripped of its fencing tokens.
fn unfenced_redlock_fails_r02() -> Result<Caught, Failure> {
    let nodes = RedisServer::start_many(redlock::NODES)
        .map_err(|e: HarnessError| Failure(format!("starting {} private nodes: {e}", redlock::NODES)))?;
    let report = redlock::r02(&nodes, UnfencedRedlock::connect)?;
    if !report.two_holders {
        return Err(Failure("N06 must work as a lock: both holders should have acquired".into()));
    }
    match report.verdict() {
        Err(failure) => caught_if_breached(failure, "R02", breach::STALE_WRITE_ACCEPTED),
        Ok(verdict) => {
            Err(Failure(format!("R02 passed without fencing ({verdict:?}): the suite has no teeth")))
        }
    }
}
