//! The etcd scenarios E01–E04 (`docs/scenarios.md`), as `distlock compare` runs them.

use lock_etcd::testkit::scenarios;
use lock_testkit::run_backend_scenario;

#[test]
fn e01_interop_with_etcdctl_lock() {
    run_backend_scenario(scenarios(), "E01");
}

#[test]
fn e02_leader_killed_under_contention_from_two_processes() {
    run_backend_scenario(scenarios(), "E02");
}

#[test]
fn e03_a_lost_lease_is_reported_before_a_rival_acquires() {
    run_backend_scenario(scenarios(), "E03");
}

#[test]
fn e04_two_thousand_holds_share_one_keep_alive_stream() {
    run_backend_scenario(scenarios(), "E04");
}
