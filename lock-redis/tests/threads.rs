//! Threads of the Redis backend come and go with the backend: every backend that waited has one
//! subscriber thread and every backend two connector threads, and all of them end once the last
//! clone of the backend is dropped. (Its own test binary: other tests' backends would be counted.)

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, NativeWait, OwnerToken};
use lock_redis::{RedisBackend, CONNECTOR_THREAD_NAME, SUBSCRIBER_THREAD_NAME};
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;
use lock_testkit::threads_named;

fn settles(name: &str, expected: usize) -> bool {
    lock_testkit::eventually(Duration::from_secs(5), || threads_named(name) == expected)
}

#[test]
fn backend_threads_end_with_the_last_clone() {
    const BACKENDS: usize = 12;
    let url = shared::redis().expect("shared redis-server").address().to_owned();
    assert_eq!(threads_named(SUBSCRIBER_THREAD_NAME), 0);

    let holder = RedisBackend::new(url.as_str()).unwrap();
    let name = unique_name("threads");
    let lease = holder.try_acquire(&name, &OwnerToken::random(), Duration::from_secs(30)).unwrap().unwrap();
    let backends: Vec<_> = (0..BACKENDS).map(|_| RedisBackend::new(url.as_str()).unwrap()).collect();
    for backend in &backends {
        // A short wait on a held lock starts the backend's subscriber.
        let deadline = Some(Instant::now() + Duration::from_millis(50));
        assert!(backend
            .acquire_until(&name, &OwnerToken::random(), Duration::from_secs(1), deadline)
            .unwrap()
            .is_none());
    }
    let clones: Vec<_> = backends.iter().map(Clone::clone).collect();
    assert!(
        settles(SUBSCRIBER_THREAD_NAME, BACKENDS),
        "{} subscribers",
        threads_named(SUBSCRIBER_THREAD_NAME)
    );
    assert_eq!(threads_named(CONNECTOR_THREAD_NAME), 2 * (BACKENDS + 1));

    drop(backends);
    thread::sleep(Duration::from_millis(600));
    assert_eq!(threads_named(SUBSCRIBER_THREAD_NAME), BACKENDS, "clones keep their subscribers");
    drop(clones);
    assert!(settles(SUBSCRIBER_THREAD_NAME, 0), "{} subscribers left", threads_named(SUBSCRIBER_THREAD_NAME));
    assert!(
        settles(CONNECTOR_THREAD_NAME, 2),
        "{} connector threads left",
        threads_named(CONNECTOR_THREAD_NAME)
    );
    assert!(holder.release(lease).unwrap());
}
