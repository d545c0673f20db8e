//! Guarded writes on the lock's own ensemble (`set_data_if_held`): one transaction checks the
//! lock node and writes, so a lease whose node is gone writes nothing.

use std::time::Duration;

use lock_core::{DistributedLock, Error, OwnerToken};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_zk::testkit::ZooKeeperTarget;

#[test]
fn a_lease_writes_while_its_node_exists_and_not_once_it_is_gone() {
    let target = ZooKeeperTarget::new();
    let zk = target.backend().unwrap();
    let name = unique_name("set-data-if-held");
    let path = format!("/distlock-guarded-test/{}/config", name.as_str());
    let lease = zk.try_acquire(&name, &OwnerToken::random(), Duration::from_secs(30)).unwrap().expect("free");

    zk.set_data_if_held(&lease, &path, b"v1").unwrap(); // creates the node and its parents
    zk.set_data_if_held(&lease, &path, b"v2").unwrap(); // sets it
    assert_eq!(zk.get_guarded(&path).unwrap().as_deref(), Some(b"v2".as_slice()));

    zk.break_lock(&name).unwrap(); // the lock node deleted behind the holder's back
    let refused = zk.set_data_if_held(&lease, &path, b"stale");
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{refused:?}");
    assert_eq!(zk.get_guarded(&path).unwrap().as_deref(), Some(b"v2".as_slice()));
    assert_eq!(zk.get_guarded("/distlock-guarded-test/never-written").unwrap(), None);
}
