//! The facade on the replicated Redis deployments: `parse_url` takes their URLs, and a lease
//! there carries the backend's doubt signal through `AnyBackend` (a holder is told when its
//! primary stops answering), while a single server's lease has none.

#![cfg(all(feature = "redis", feature = "testkit"))]

use std::time::Duration;

use distlock::redis::testkit::{DeploymentTarget, RedisTarget};
use distlock::{DistributedLock as _, OwnerToken};
use lock_testkit::suite::unique_name;

#[test]
fn leases_on_replicated_deployments_carry_a_doubt_signal_through_the_facade() {
    let ttl = Duration::from_secs(10);
    for (url, replicated) in [
        (DeploymentTarget::cluster().url().to_owned(), true),
        (DeploymentTarget::sentinel().url().to_owned(), true),
        (RedisTarget::set_nx().url().to_owned(), false),
    ] {
        let backend = distlock::parse_url(&url).unwrap();
        let lease =
            backend.try_acquire(&unique_name("facade-doubt"), &OwnerToken::random(), ttl).unwrap().unwrap();
        assert_eq!(backend.doubt_signal(&lease).is_some(), replicated, "{url}");
        assert!(backend.release(lease).unwrap());
    }
}
