//! The MySQL backend beyond the shared suite, on the shared harness MariaDB server: Q01 (lock
//! table on the database clock), Q02 (row locks), Q03 (advisory locks).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, LockName, NativeWait, OwnerToken};
use lock_sql::mysql::testkit::MySqlTarget;
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_testkit::suite::{unique_name, SuiteTarget};

const SECOND: Duration = Duration::from_secs(1);

fn backend(kind: MySqlLockKind) -> MySqlBackend {
    MySqlTarget::new(kind).backend().expect("backend on the shared server")
}

fn sized(kind: MySqlLockKind, max_connections: usize) -> MySqlBackend {
    let target = MySqlTarget::new(kind);
    let locks = MySqlBackend::builder(target.url()).kind(kind).max_connections(max_connections);
    locks.connect_timeout(SECOND).build().expect("backend on the shared server")
}

/// Q01: 8 threads race for one expired row: exactly one wins, with the fence one above the
/// expired holder's; the others see plain contention (`Ok(None)`), not an error.
#[test]
fn q01_racing_threads_on_an_expired_row_give_one_winner() {
    let locks = backend(MySqlLockKind::Table);
    let name = unique_name("q01");
    let first = locks.try_acquire(&name, &OwnerToken::random(), Duration::from_millis(200)).unwrap().unwrap();
    let expired_fence = first.fencing_token();
    thread::sleep(Duration::from_millis(400));
    assert_eq!(locks.remaining_lease(&name).unwrap(), None, "the lease ran out on the database clock");
    let start = Arc::new(Barrier::new(8));
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (locks, name, start) = (locks.clone(), name.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND)
            })
        })
        .collect();
    let outcomes: Vec<_> = racers.into_iter().map(|racer| racer.join().unwrap()).collect();
    let winners: Vec<_> = outcomes.iter().filter_map(|outcome| outcome.as_ref().unwrap().as_ref()).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(winners[0].fencing_token().get(), expired_fence.get() + 1);
    assert!(!locks.release(first).unwrap(), "the expired holder's release changes nothing");
}

/// Q01: a release marks the row free instead of deleting it, so the fence never restarts; keys
/// compare bytes exactly (MariaDB's default collations would not); a re-entry by the same owner
/// keeps its fence and needs as many releases.
#[test]
fn q01_release_keeps_the_fence_names_compare_exactly_and_reentry_counts() {
    let locks = backend(MySqlLockKind::Table);
    let name = unique_name("Q01case");
    let owner = OwnerToken::random();
    let lease = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().unwrap();
    let again = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("re-entry by the same owner");
    assert_eq!(again.fencing_token(), lease.fencing_token());
    assert!(locks.release(again).unwrap());
    assert!(locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_none(), "one hold left");
    let fence = lease.fencing_token();
    assert!(locks.release(lease).unwrap());
    let next = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    assert_eq!(next.fencing_token().get(), fence.get() + 1);
    for other in [name.as_str().to_lowercase(), format!("{} ", name.as_str())] {
        let other = LockName::new(other).unwrap();
        let lease = locks.try_acquire(&other, &OwnerToken::random(), 10 * SECOND).unwrap();
        assert!(lease.is_some(), "{other:?} shares a row with {name:?}");
    }
}

/// Q02: NOWAIT refuses at once, a timed wait returns by its deadline (sub-second included), two
/// names lock at once.
#[test]
fn q02_row_locks_nowait_timed_and_independent() {
    let locks = backend(MySqlLockKind::Row);
    let (a, b) = (unique_name("q02a"), unique_name("q02b"));
    let held = locks.try_acquire(&a, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    let started = Instant::now();
    assert!(locks.try_acquire(&a, &OwnerToken::random(), 10 * SECOND).unwrap().is_none());
    assert!(started.elapsed() < SECOND, "NOWAIT waited {:?}", started.elapsed());
    for wait in [SECOND / 2, 3 * SECOND / 2] {
        let started = Instant::now();
        let waited =
            locks.acquire_until(&a, &OwnerToken::random(), 10 * SECOND, Some(started + wait)).unwrap();
        assert!(waited.is_none());
        let took = started.elapsed();
        assert!(took >= wait && took < wait + SECOND, "a {wait:?} wait took {took:?}");
    }
    let other = locks.try_acquire(&b, &OwnerToken::random(), 10 * SECOND).unwrap();
    assert!(other.is_some(), "a row lock on one name blocked another name");
    assert!(locks.release(held).unwrap());
    assert!(locks.release(other.unwrap()).unwrap());
}

/// Q02: held row locks own their connections; with the pool exhausted the next acquisition is a
/// typed error within the pool timeout, never a hang.
#[test]
fn q02_an_exhausted_pool_is_a_typed_error() {
    let locks = sized(MySqlLockKind::Row, 2);
    let leases: Vec<_> = (0..2)
        .map(|index| {
            let name = unique_name(&format!("q02pool{index}"));
            locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap()
        })
        .collect();
    let started = Instant::now();
    let third = locks.try_acquire(&unique_name("q02pool2"), &OwnerToken::random(), 10 * SECOND);
    assert!(matches!(third, Err(Error::Timeout { .. })), "{third:?}");
    assert!(started.elapsed() < 3 * SECOND, "took {:?}", started.elapsed());
    for lease in leases {
        assert!(locks.release(lease).unwrap());
    }
}

/// Q02/Q03: a killed connection releases the lock at once; the holder's next check says lost,
/// and its pool does not hand the dead connection out again.
#[test]
fn q02_q03_a_killed_connection_releases_and_the_holder_learns_it() {
    for kind in [MySqlLockKind::Row, MySqlLockKind::Advisory] {
        let locks = sized(kind, 1);
        let name = unique_name("q03kill");
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
        backend(kind).break_lock(&name).unwrap();
        let other = backend(kind);
        let started = Instant::now();
        let taken = loop {
            if let Some(taken) = other.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap() {
                break taken;
            }
            assert!(started.elapsed() < 2 * SECOND, "{kind:?}: the lock outlived its killed connection");
            thread::sleep(Duration::from_millis(5));
        };
        assert!(!locks.extend(&mut lease, 10 * SECOND).unwrap(), "{kind:?}: the holder was not told");
        assert!(!locks.release(lease).unwrap());
        // The pool of one gives a working connection, not the killed one.
        let next = locks.try_acquire(&unique_name("q03next"), &OwnerToken::random(), 10 * SECOND);
        assert!(matches!(next, Ok(Some(_))), "{kind:?}: {next:?}");
        assert!(other.release(taken).unwrap());
    }
}

/// Q03: a lease dropped without a release (leaked, lost) ends its session instead of going
/// back to the pool: nobody else gets a connection that still holds the `GET_LOCK` lock.
#[test]
fn q03_the_pool_never_hands_out_a_connection_still_holding_a_lock() {
    let locks = sized(MySqlLockKind::Advisory, 1);
    let name = unique_name("q03pool");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    drop(lease);
    let other = backend(MySqlLockKind::Advisory);
    let started = Instant::now();
    let taken = loop {
        if let Some(taken) = other.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap() {
            break taken;
        }
        assert!(started.elapsed() < 2 * SECOND, "the dropped lease's session still held the lock");
        thread::sleep(Duration::from_millis(5));
    };
    // Had the holding connection come back to the pool, this would re-enter the lock on it.
    let mine = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap();
    assert!(mine.is_none(), "a pooled connection re-entered a lock held elsewhere");
    assert!(other.release(taken).unwrap());
}

/// Q03: `GET_LOCK` names are case-sensitive and long names are hashed below MySQL's 64
/// characters; a 255-byte name works.
#[test]
fn q03_advisory_names_long_and_cased() {
    let locks = backend(MySqlLockKind::Advisory);
    let name = unique_name("Q03Case");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    let lower = LockName::new(name.as_str().to_lowercase()).unwrap();
    let other = locks.try_acquire(&lower, &OwnerToken::random(), 10 * SECOND).unwrap();
    assert!(other.is_some(), "{lower:?} shares a lock with {name:?}");
    let long = LockName::new(format!("{}{}", name.as_str(), "x".repeat(200))).unwrap();
    let long_lease = locks.try_acquire(&long, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    assert!(locks.try_acquire(&long, &OwnerToken::random(), 10 * SECOND).unwrap().is_none());
    for lease in [lease, other.unwrap(), long_lease] {
        assert!(locks.release(lease).unwrap());
    }
}
