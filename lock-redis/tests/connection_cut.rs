//! S16 — the holder's connections cut by a proxy that stops forwarding — on both single-node
//! layouts and on Redlock (every node through its own proxy). The same scenario runs in the
//! workspace's conformance tests; here it runs with this crate alone.

use lock_redis::testkit::{RedisTarget, RedlockTarget};
use lock_testkit::suite::run_scenario;

#[test]
fn s16_connection_cut_set_nx() {
    run_scenario(&RedisTarget::set_nx(), "S16", concat!(module_path!(), "::s16_connection_cut_set_nx"));
}

#[test]
fn s16_connection_cut_reentrant_hash() {
    run_scenario(
        &RedisTarget::reentrant_hash(),
        "S16",
        concat!(module_path!(), "::s16_connection_cut_reentrant_hash"),
    );
}

#[test]
fn s16_connection_cut_redlock() {
    run_scenario(&RedlockTarget::shared(), "S16", concat!(module_path!(), "::s16_connection_cut_redlock"));
}
