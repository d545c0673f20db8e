//! R03 of `docs/scenarios.md` (its body ships in the crate's testkit, which `distlock compare` runs
//! too): a failover before the lock replicated loses it; with `WAIT` it does not.

use lock_redis::testkit::scenarios;
use lock_testkit::run_backend_scenario;

#[test]
fn r03_failover_before_replication_and_wait() {
    run_backend_scenario(scenarios(), "R03");
}
