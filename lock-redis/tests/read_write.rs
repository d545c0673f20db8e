//! The Redis read-write lock's line of waiting writers, on the shared harness server: a writer
//! that waits holds new readers back, and one that gives up lets them in at once.

use std::time::{Duration, Instant};

use lock_core::{Access, Deadline, DistributedLock as _, OwnerToken, ReadWrite as _, Request};
use lock_redis::redis::Commands as _;
use lock_redis::RedisBackend;
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;

const SECOND: Duration = Duration::from_secs(1);

fn shared_url() -> String {
    shared::redis().expect("shared redis-server").address().to_owned()
}

/// A writer whose timed wait expires takes its place in line back: a reader asking right after
/// is admitted, where the mark would refuse it for twice the backoff's cap plus half a second.
#[test]
fn a_writer_that_gives_up_lets_new_readers_in_at_once() {
    let url = shared_url();
    let locks = RedisBackend::builder(url.as_str()).connect_timeout(2 * SECOND).build().expect("backend");
    let name = unique_name("rw-give-up");
    let lease = 30 * SECOND;
    // A long backoff cap: the mark would outlive the whole test.
    let backoff = (Duration::from_millis(50), 10 * SECOND);
    let (reader, writer, newcomer) = (OwnerToken::random(), OwnerToken::random(), OwnerToken::random());
    let held = locks
        .acquire_rw(&Request::new(&name, &reader, lease, Deadline::Now, backoff), Access::Read)
        .unwrap()
        .expect("the first reader gets in");

    let started = Instant::now();
    let deadline = Deadline::At(started + Duration::from_millis(300));
    let gave_up =
        locks.acquire_rw(&Request::new(&name, &writer, lease, deadline, backoff), Access::Write).unwrap();
    assert!(gave_up.is_none(), "the writer waits behind the reader and gives up");

    let [_, _, waiting, _] = locks.keys(&name).read_write();
    let mut raw = locks.node_connection(&name).unwrap();
    let marks: i64 = raw.zcard(&waiting).unwrap();
    assert_eq!(marks, 0, "the writer that gave up left its place in line");
    let admitted = locks
        .acquire_rw(&Request::new(&name, &newcomer, lease, Deadline::Now, backoff), Access::Read)
        .unwrap()
        .expect("a new reader is admitted once the writer gave up");

    assert!(locks.release(admitted.lease).unwrap());
    assert!(locks.release(held.lease).unwrap());
}
