//! Guarded writes on the lock's own server (`set_if_held`): the server checks the owner, so a
//! lease whose lock was taken away writes nothing, on both kinds.

use lock_core::{Access, Deadline, DistributedLock, Error, OwnerToken, ReadWrite, Request};
use lock_redis::redis::Commands as _;
use lock_redis::RedisLockKind;
use lock_testkit::suite::unique_name;

use super::{backend, connection, shared_url, SECOND};

#[test]
fn a_lease_writes_while_it_holds_and_not_once_the_lock_is_gone() {
    let url = shared_url();
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let redis = backend(&url, kind);
        let name = unique_name("set-if-held");
        let lease = redis.try_acquire(&name, &OwnerToken::random(), 30 * SECOND).unwrap().expect("free");
        redis.set_if_held(&lease, "balance", b"100").unwrap();
        assert_eq!(redis.get_guarded(&name, "balance").unwrap().as_deref(), Some(b"100".as_slice()));

        // Taken away behind the holder's back (an expiry, an operator's DEL): the server refuses.
        let _: () = connection(&url).del(redis.keys(&name).lock()).unwrap();
        let refused = redis.set_if_held(&lease, "balance", b"stale");
        assert!(matches!(refused, Err(Error::NotHeld { .. })), "{kind:?}: {refused:?}");
        assert_eq!(redis.get_guarded(&name, "balance").unwrap().as_deref(), Some(b"100".as_slice()));

        // A rival's lease is not this one's.
        let rival =
            redis.try_acquire(&name, &OwnerToken::random(), 30 * SECOND).unwrap().expect("free again");
        assert!(matches!(redis.set_if_held(&lease, "balance", b"stale"), Err(Error::NotHeld { .. })));
        redis.set_if_held(&rival, "balance", b"200").unwrap();
        assert_eq!(redis.get_guarded(&name, "balance").unwrap().as_deref(), Some(b"200".as_slice()));
        redis.release(rival).unwrap();
    }
}

#[test]
fn a_write_lock_writes_and_a_read_lock_is_refused() {
    let redis = backend(&shared_url(), RedisLockKind::SetNx);
    let name = unique_name("set-if-held-rw");
    let backoff = (SECOND / 100, SECOND / 10);
    let ask = |owner| Request::new(&name, owner, 30 * SECOND, Deadline::Now, backoff);
    let writer = OwnerToken::random();
    let write = redis.acquire_rw(&ask(&writer), Access::Write).unwrap().expect("free").lease;
    redis.set_if_held(&write, "config", b"v2").unwrap();
    redis.release(write).unwrap();
    let reader = OwnerToken::random();
    let read = redis.acquire_rw(&ask(&reader), Access::Read).unwrap().expect("free").lease;
    assert!(matches!(redis.set_if_held(&read, "config", b"v3"), Err(Error::InvalidConfig { .. })));
    redis.release(read).unwrap();
}
