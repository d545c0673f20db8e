//! Z03–Z05 and LE05 — interop with Apache Curator's `InterProcessMutex`,
//! `InterProcessReadWriteLock`, `InterProcessSemaphoreV2` and `LeaderLatch` (the bodies ship in
//! the crate's testkit, which `distlock compare` runs too).

use lock_testkit::run_backend_scenario;
use lock_zk::testkit::scenarios;

#[test]
fn z03_curator_and_distlock_exclude_each_other_and_wake_each_other() {
    run_backend_scenario(scenarios(), "Z03");
}

#[test]
fn z04_curator_and_distlock_read_write_locks_exclude_each_other_and_share_reads() {
    run_backend_scenario(scenarios(), "Z04");
}

#[test]
fn z05_curator_and_distlock_semaphores_never_exceed_their_permits_together() {
    run_backend_scenario(scenarios(), "Z05");
}

#[test]
fn le05_curator_leader_latch_and_distlock_candidates_elect_one_leader_and_see_each_other() {
    run_backend_scenario(scenarios(), "LE05");
}
