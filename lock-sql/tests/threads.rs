//! The lock-table kinds' wake-up threads come and go with the backend: a backend that waited has
//! its listening thread (PostgreSQL) or doorbell thread (MariaDB), one that rang a waiter its
//! ringer thread, and all of them end once the last clone of the backend is dropped. (Its own
//! test binary: other tests' backends would be counted.)

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, OwnerToken};
use lock_sql::mysql::{MySqlLockKind, DOORBELL_THREAD_NAME, RINGER_THREAD_NAME};
use lock_sql::postgres::{PostgresLockKind, LISTENER_THREAD_NAME};
use lock_sql::testkit::{MySqlTarget, PostgresTarget};
use lock_testkit::suite::unique_name;
use lock_testkit::threads_named;

const BACKENDS: usize = 4;
const TTL: Duration = Duration::from_secs(30);

fn settles(name: &str, expected: usize) -> bool {
    lock_testkit::eventually(Duration::from_secs(5), || threads_named(name) == expected)
}

/// `BACKENDS` clients wait briefly on a lock `holder` holds, then `holder` releases it with
/// waiters queued (a client that is still waiting).
fn wait_on_a_held_lock<B: DistributedLock + Clone + Send + 'static>(holder: &B, backends: &[B]) {
    let name = unique_name("threads");
    let lease = holder.try_acquire(&name, &OwnerToken::random(), TTL).unwrap().unwrap();
    for backend in backends {
        let deadline = Some(Instant::now() + Duration::from_millis(300));
        let native = backend.native_wait().expect("woken");
        assert!(native.acquire_until(&name, &OwnerToken::random(), TTL, deadline).unwrap().is_none());
    }
    // One more waiter, queued while the holder releases: the release rings it.
    let waiter = {
        let (backend, name) = (backends[0].clone(), name.clone());
        thread::spawn(move || {
            let deadline = Some(Instant::now() + Duration::from_secs(10));
            let acquired = backend.native_wait().expect("woken").acquire_until(
                &name,
                &OwnerToken::random(),
                TTL,
                deadline,
            );
            assert!(backend.release(acquired.unwrap().expect("served").lease).unwrap());
        })
    };
    thread::sleep(Duration::from_millis(500));
    assert!(holder.release(lease).unwrap());
    waiter.join().unwrap();
}

#[test]
fn mysql_doorbell_and_ringer_threads_end_with_the_last_clone() {
    let target = MySqlTarget::new(MySqlLockKind::Table);
    let holder = target.backend_with(Duration::from_secs(2), 4).unwrap();
    let backends: Vec<_> =
        (0..BACKENDS).map(|_| target.backend_with(Duration::from_secs(2), 4).unwrap()).collect();
    wait_on_a_held_lock(&holder, &backends);
    assert!(settles(DOORBELL_THREAD_NAME, BACKENDS), "{} doorbells", threads_named(DOORBELL_THREAD_NAME));
    assert_eq!(threads_named(RINGER_THREAD_NAME), 1, "the holder rang");
    let clones: Vec<_> = backends.iter().map(Clone::clone).collect();
    drop(backends);
    thread::sleep(Duration::from_millis(1_500));
    assert_eq!(threads_named(DOORBELL_THREAD_NAME), BACKENDS, "clones keep their doorbells");
    drop(clones);
    drop(holder);
    assert!(settles(DOORBELL_THREAD_NAME, 0), "{} doorbells left", threads_named(DOORBELL_THREAD_NAME));
    assert!(settles(RINGER_THREAD_NAME, 0), "{} ringers left", threads_named(RINGER_THREAD_NAME));
}

#[test]
fn postgres_listener_threads_end_with_the_last_clone() {
    let target = PostgresTarget::new(PostgresLockKind::Table);
    let holder = target.backend_with(Duration::from_secs(2), 4).unwrap();
    let backends: Vec<_> =
        (0..BACKENDS).map(|_| target.backend_with(Duration::from_secs(2), 4).unwrap()).collect();
    wait_on_a_held_lock(&holder, &backends);
    // The other test's backends may still be counted: compare with what this test adds.
    assert!(settles(LISTENER_THREAD_NAME, BACKENDS), "{} listeners", threads_named(LISTENER_THREAD_NAME));
    drop(backends);
    drop(holder);
    assert!(settles(LISTENER_THREAD_NAME, 0), "{} listeners left", threads_named(LISTENER_THREAD_NAME));
}
