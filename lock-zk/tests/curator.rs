//! Z03 — interop with Apache Curator's `InterProcessMutex` (the body ships in the crate's
//! testkit, which `distlock compare` runs too).

use lock_testkit::run_backend_scenario;
use lock_zk::testkit::scenarios;

#[test]
fn z03_curator_and_distlock_exclude_each_other_and_wake_each_other() {
    run_backend_scenario(scenarios(), "Z03");
}
