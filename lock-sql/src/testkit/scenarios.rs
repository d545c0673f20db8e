//! Q01–Q03 of `docs/scenarios.md` for both databases, generic over their kind enums ([`SqlKind`]):
//! run by `lock-sql`'s own tests and by `distlock compare`, on the shared harness servers.

use std::fmt::Debug;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, FencingToken, LockName, OwnerToken};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_testkit::BackendScenario;

use super::{SqlKind, SqlTarget};

const SECOND: Duration = Duration::from_secs(1);

/// Q01, the lock table: the database clock takes over expired rows, one winner among racers;
/// release keeps the fence; names compare byte for byte; re-entry counts.
pub fn q01<K: SqlKind>(table: K) -> BackendScenario
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    BackendScenario::new("Q01", "lock table on the database clock", move || {
        q01_racing_threads_on_an_expired_row_give_one_winner(table);
        q01_release_keeps_the_fence_names_compare_exactly_and_reentry_counts(table);
    })
}

/// Q02, `SELECT … FOR UPDATE`: NOWAIT, timed waits, independent names, first locks of a new
/// name, an exhausted pool, a killed connection.
pub fn q02<K: SqlKind>(row: K) -> BackendScenario
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    BackendScenario::new("Q02", "row lock held by an open transaction", move || {
        q02_row_locks_nowait_timed_and_independent(row);
        racing_first_locks_of_a_new_name_give_one_winner(row);
        q02_an_exhausted_pool_is_a_typed_error(row);
        a_killed_connection_releases_and_the_holder_learns_it(row);
    })
}

/// Q03, advisory locks: released when the connection dies; the pool never hands out a
/// connection still holding one; long and differently cased names.
pub fn q03<K: SqlKind>(advisory: K) -> BackendScenario
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    BackendScenario::new("Q03", "advisory lock bound to the session", move || {
        a_killed_connection_releases_and_the_holder_learns_it(advisory);
        q03_the_pool_never_hands_out_a_connection_still_holding_a_lock(advisory);
        q02_an_exhausted_pool_is_a_typed_error(advisory);
        q03_advisory_names_long_and_cased(advisory);
    })
}

fn backend<K: SqlKind>(kind: K) -> K::Backend {
    SqlTarget::new(kind).backend().expect("backend on the shared server")
}

fn pool_of<K: SqlKind>(kind: K, max_connections: u32) -> K::Backend {
    SqlTarget::new(kind).backend_with(SECOND, max_connections).expect("backend on the shared server")
}

fn try_acquire<B: DistributedLock>(locks: &B, name: &LockName, ttl: Duration) -> Option<B::Lease> {
    locks.try_acquire(name, &OwnerToken::random(), ttl).expect("a working server")
}

fn fence<B: DistributedLock>(locks: &B, lease: &B::Lease) -> FencingToken {
    locks.fencing().expect("SQL locks are fenced").fencing_token(lease)
}

/// Waits until `name` can be taken (the holder's session ended), for up to 2 s.
fn take_when_free<B: DistributedLock>(locks: &B, name: &LockName, what: &str) -> B::Lease {
    let started = Instant::now();
    loop {
        if let Some(lease) = try_acquire(locks, name, 10 * SECOND) {
            return lease;
        }
        assert!(started.elapsed() < 2 * SECOND, "{what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Q01: 8 threads race for one expired row: exactly one wins, with the fence one above the
/// expired holder's; the others see plain contention (`Ok(None)`), not an error.
fn q01_racing_threads_on_an_expired_row_give_one_winner<K: SqlKind>(kind: K)
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    let locks = backend(kind);
    let name = unique_name("q01");
    let first = try_acquire(&locks, &name, Duration::from_millis(200)).expect("free");
    let expired_fence = fence(&locks, &first);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(K::remaining_lease(&locks, &name).unwrap(), None, "the lease ran out on the database clock");
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
    assert_eq!(fence(&locks, winners[0]).get(), expired_fence.get() + 1);
    assert!(!locks.release(first).unwrap(), "the expired holder's release changes nothing");
}

/// Q01: a release marks the row free instead of deleting it, so the fence never restarts; keys
/// compare bytes exactly (MariaDB's default collations would not); a re-entry by the same owner
/// keeps its fence and needs as many releases.
fn q01_release_keeps_the_fence_names_compare_exactly_and_reentry_counts<K: SqlKind>(kind: K) {
    let locks = backend(kind);
    let name = unique_name("Q01case");
    let owner = OwnerToken::random();
    let lease = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("free");
    let again = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("re-entry by the same owner");
    assert_eq!(fence(&locks, &again), fence(&locks, &lease));
    assert!(locks.release(again).unwrap());
    assert!(try_acquire(&locks, &name, 10 * SECOND).is_none(), "one hold is left");
    let first_fence = fence(&locks, &lease);
    assert!(locks.release(lease).unwrap());
    let next = try_acquire(&locks, &name, 10 * SECOND).expect("released");
    assert_eq!(fence(&locks, &next).get(), first_fence.get() + 1);
    for other in [name.as_str().to_lowercase(), format!("{} ", name.as_str())] {
        let other = LockName::new(other).unwrap();
        assert!(try_acquire(&locks, &other, 10 * SECOND).is_some(), "{other:?} shares a row with {name:?}");
    }
}

/// Q02: NOWAIT refuses at once, a timed wait returns by its deadline (sub-second and longer),
/// two names lock at once.
fn q02_row_locks_nowait_timed_and_independent<K: SqlKind>(kind: K) {
    let locks = backend(kind);
    let (a, b) = (unique_name("q02a"), unique_name("q02b"));
    let held = try_acquire(&locks, &a, 10 * SECOND).expect("free");
    let started = Instant::now();
    assert!(try_acquire(&locks, &a, 10 * SECOND).is_none());
    assert!(started.elapsed() < SECOND, "NOWAIT waited {:?}", started.elapsed());
    let wait = locks.native_wait().expect("row locks wait in the database");
    for patience in [SECOND / 2, 3 * SECOND / 2] {
        let started = Instant::now();
        let waited =
            wait.acquire_until(&a, &OwnerToken::random(), 10 * SECOND, Some(started + patience)).unwrap();
        assert!(waited.is_none());
        let took = started.elapsed();
        assert!(took >= patience && took < patience + SECOND, "a {patience:?} wait took {took:?}");
    }
    let other = try_acquire(&locks, &b, 10 * SECOND);
    assert!(other.is_some(), "a row lock on one name blocked another name");
    assert!(locks.release(held).unwrap());
    assert!(locks.release(other.unwrap()).unwrap());
}

/// Q02: threads racing for a name nobody locked before — its row does not exist yet, each
/// inserts it — end with exactly one holder, round after round.
fn racing_first_locks_of_a_new_name_give_one_winner<K: SqlKind>(kind: K)
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    const RACERS: usize = 8;
    let clients: Vec<_> = (0..RACERS).map(|_| backend(kind)).collect();
    for _ in 0..25 {
        let name = unique_name("q02first");
        let start = Barrier::new(RACERS);
        let outcomes: Vec<_> = thread::scope(|s| {
            let racers: Vec<_> = clients
                .iter()
                .map(|locks| {
                    let (name, start) = (&name, &start);
                    s.spawn(move || {
                        start.wait();
                        locks
                            .try_acquire(name, &OwnerToken::random(), 10 * SECOND)
                            .map(|lease| (locks, lease))
                    })
                })
                .collect();
            racers.into_iter().map(|racer| racer.join().unwrap().unwrap()).collect()
        });
        let winners: Vec<_> =
            outcomes.into_iter().filter_map(|(locks, lease)| lease.map(|lease| (locks, lease))).collect();
        assert_eq!(winners.len(), 1, "{kind:?}: {} holders of {name:?} at once", winners.len());
        for (locks, lease) in winners {
            assert!(locks.release(lease).unwrap());
        }
    }
}

/// Q02 (and Q03): held row or advisory locks own their connections; with the pool exhausted a
/// `try_` acquisition is [`Error::PoolExhausted`] at once, a timed wait waits for a connection
/// until its deadline (and gets one that comes back in time), and a pool with room still opens
/// a connection.
fn q02_an_exhausted_pool_is_a_typed_error<K: SqlKind>(kind: K)
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    let locks = pool_of(kind, 2);
    let first = try_acquire(&locks, &unique_name("q02pool"), 10 * SECOND).expect("free");
    // Room for one more: a connection is opened.
    let second = try_acquire(&locks, &unique_name("q02pool"), 10 * SECOND).expect("free");
    let started = Instant::now();
    let third = locks.try_acquire(&unique_name("q02pool"), &OwnerToken::random(), 10 * SECOND);
    assert!(matches!(third, Err(Error::PoolExhausted { size: 2, .. })), "{third:?}");
    assert!(started.elapsed() < Duration::from_millis(100), "took {:?}", started.elapsed());

    let native = locks.native_wait().expect("row and advisory locks wait in the server");
    let started = Instant::now();
    let waited = native.acquire_until(
        &unique_name("q02pool"),
        &OwnerToken::random(),
        10 * SECOND,
        Some(started + SECOND / 2),
    );
    let took = started.elapsed();
    assert!(matches!(waited, Err(Error::PoolExhausted { .. })), "{waited:?}");
    assert!(took >= SECOND / 2 && took < SECOND, "the timed wait took {took:?}");

    // A connection that comes back before the deadline serves the waiting acquisition.
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            native.acquire_until(
                &unique_name("q02pool"),
                &OwnerToken::random(),
                10 * SECOND,
                Some(Instant::now() + 5 * SECOND),
            )
        });
        thread::sleep(Duration::from_millis(300));
        assert!(locks.release(second).unwrap());
        let acquired = waiter.join().unwrap().unwrap().expect("a free name");
        assert!(locks.release(acquired.lease).unwrap());
    });
    assert!(locks.release(first).unwrap());
}

/// Q02/Q03: a killed connection releases the lock at once; the holder's next check says lost,
/// and its pool does not hand the dead connection out again.
fn a_killed_connection_releases_and_the_holder_learns_it<K: SqlKind>(kind: K)
where
    <K::Backend as DistributedLock>::Lease: Debug,
{
    let locks = pool_of(kind, 1);
    let name = unique_name("q03kill");
    let mut lease = try_acquire(&locks, &name, 10 * SECOND).expect("free");
    K::break_lock(&backend(kind), &name).unwrap();
    let other = backend(kind);
    let taken = take_when_free(&other, &name, "the lock outlived its killed connection");
    assert!(!locks.extend(&mut lease, 10 * SECOND).unwrap(), "{kind:?}: the holder was not told");
    assert!(!locks.release(lease).unwrap());
    let next = locks.try_acquire(&unique_name("q03next"), &OwnerToken::random(), 10 * SECOND);
    assert!(matches!(next, Ok(Some(_))), "{kind:?}: the pool of one gave {next:?}");
    assert!(other.release(taken).unwrap());
}

/// Q03: a lease dropped without a release (leaked, lost) ends its session instead of going
/// back to the pool: nobody else gets a connection that still holds the advisory lock
/// (advisory locks are re-entrant per session).
fn q03_the_pool_never_hands_out_a_connection_still_holding_a_lock<K: SqlKind>(kind: K) {
    let locks = pool_of(kind, 1);
    let name = unique_name("q03pool");
    drop(try_acquire(&locks, &name, 10 * SECOND).expect("free"));
    let other = backend(kind);
    let taken = take_when_free(&other, &name, "the dropped lease's session still held the lock");
    assert!(try_acquire(&locks, &name, 10 * SECOND).is_none(), "a pooled connection re-entered a held lock");
    assert!(other.release(taken).unwrap());
}

/// Q03: advisory keys tell names apart by case, and a 255-byte name works (MySQL's
/// `GET_LOCK` names are hashed below 64 characters, PostgreSQL's keys are always hashes).
fn q03_advisory_names_long_and_cased<K: SqlKind>(kind: K) {
    let locks = backend(kind);
    let name = unique_name("Q03Case");
    let lease = try_acquire(&locks, &name, 10 * SECOND).expect("free");
    let lower = LockName::new(name.as_str().to_lowercase()).unwrap();
    let other = try_acquire(&locks, &lower, 10 * SECOND).expect("another name");
    let long = LockName::new(format!("{}{}", name.as_str(), "x".repeat(255 - name.as_str().len()))).unwrap();
    let long_lease = try_acquire(&locks, &long, 10 * SECOND).expect("free");
    assert!(try_acquire(&locks, &long, 10 * SECOND).is_none());
    for lease in [lease, other, long_lease] {
        assert!(locks.release(lease).unwrap());
    }
}
