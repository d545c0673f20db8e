//! The fair wait queue: no jumping, a dead or orphaned head lapses, a waiter that gives up
//! leaves; non-fair waiters are woken by the release; contended workers get fair shares.

use super::*;

/// A try_lock never jumps the queue; a waiter that dies at the head holds a free lock up for at
/// most its entry's lifetime (3 s), after which others get it.
#[test]
fn the_wait_queue_is_not_jumped_and_a_dead_head_lapses() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let mut raw = connection(&url);

    // A waiter queues behind a holder; a try right after the release does not overtake it.
    let name = unique_name("queue");
    let keys = locks.keys(&name);
    let holder = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    let waiting = {
        let (locks, name) = (locks.clone(), name.clone());
        thread::spawn(move || {
            locks.acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + 10 * SECOND))
        })
    };
    assert!(eventually(5 * SECOND, || raw.zcard::<_, i64>(keys.queue()).unwrap() == 1), "the waiter queued");
    assert!(locks.release(holder).unwrap());
    assert!(
        locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_none(),
        "a try_acquire overtook a queued waiter"
    );
    let acquired = waiting.join().unwrap().unwrap().expect("the waiter got the lock");
    assert!(locks.release(acquired.lease).unwrap());
    let queued: i64 = raw.zcard(keys.queue()).unwrap();
    assert_eq!(queued, 0, "the winner left the queue");

    // A dead waiter: queued once, never refreshed.
    let name = unique_name("queue-dead");
    let keys = RedisKeys::new("distlock", &name);
    let dead = OwnerToken::random().to_hex();
    let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let now_ms = now_s * 1000 + now_us / 1000;
    let _: () = raw.zadd(keys.queue(), &dead, now_ms * 1000).unwrap();
    let _: () = raw.zadd(keys.queue_timeouts(), &dead, now_ms + 3000).unwrap();
    assert!(
        locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_none(),
        "the head's turn"
    );
    // The head had its turn (250 ms) and did not take the lock: a plain try gets it, long before
    // the dead entry's 3 s lifetime ends.
    thread::sleep(Duration::from_millis(400));
    let acquired = locks
        .try_acquire(&name, &OwnerToken::random(), 10 * SECOND)
        .unwrap()
        .expect("a dead head reserves a free lock for one turn only");
    assert!(locks.release(acquired).unwrap());

    // A waiter behind a dead head is woken when the head's turn ends.
    let name = unique_name("queue-dead-wait");
    let keys = RedisKeys::new("distlock", &name);
    let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let now_ms = now_s * 1000 + now_us / 1000;
    let _: () = raw.zadd(keys.queue(), &dead, now_ms * 1000).unwrap();
    let _: () = raw.zadd(keys.queue_timeouts(), &dead, now_ms + 3000).unwrap();
    let started = Instant::now();
    let acquired = locks
        .acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + 10 * SECOND))
        .unwrap()
        .expect("acquired once the dead head's turn ended");
    let waited = started.elapsed();
    assert!(waited < Duration::from_millis(1000), "waited {waited:?} behind a dead head");
    assert!(locks.release(acquired.lease).unwrap());
}

/// A holder whose lease runs out under a queued waiter: a newcomer's uncontended transaction may
/// take the free lock, but hands it back to the queue at once, so the waiter gets its turn
/// first; and a release with a waiter queued leaves the lock reserved for it (a free lock to
/// every probe), not open to a plain `SET NX`.
#[test]
fn an_expired_holder_passes_the_lock_to_the_queue_not_to_a_newcomer() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let mut raw = connection(&url);
    let name = unique_name("expired-under-queue");
    let keys = locks.keys(&name);
    // A holder whose lease ends in 200 ms, and a waiter queued behind it that stays queued (its
    // entry lapses in 3 s) but, written by hand, never retries on its own.
    let _: () =
        redis::cmd("SET").arg(keys.lock()).arg("dead-holder").arg("PX").arg(200).query(&mut raw).unwrap();
    let waiter = OwnerToken::random().to_hex();
    let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let now_ms = now_s * 1000 + now_us / 1000;
    let _: () = raw.zadd(keys.queue(), &waiter, now_ms * 1000).unwrap();
    let _: () = raw.zadd(keys.queue_timeouts(), &waiter, now_ms + 3000).unwrap();
    thread::sleep(Duration::from_millis(300));
    assert!(
        locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_none(),
        "a newcomer took a free lock from a queued waiter"
    );
    let reserved: Option<String> = raw.get(keys.lock()).unwrap();
    assert_eq!(reserved, Some(format!("turn:{waiter}")), "the lock is the waiter's turn");
    let probe = lock_redis::testkit::RedisTarget::at(RedisLockKind::SetNx, url.clone());
    let lease = lock_testkit::suite::SuiteTarget::remaining_lease(&probe, &name).unwrap().unwrap();
    assert_eq!(lease, None, "a reserved lock has no holder");
    // The waiter's turn (250 ms) ends unused: the next newcomer gets the lock.
    thread::sleep(Duration::from_millis(400));
    let acquired =
        locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("after the turn");

    // A release with a waiter queued reserves the lock for it: SET NX cannot take it.
    let waiting = {
        let (locks, name) = (locks.clone(), name.clone());
        thread::spawn(move || {
            locks.acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + 5 * SECOND))
        })
    };
    assert!(eventually(5 * SECOND, || raw.zcard::<_, i64>(keys.queue()).unwrap() == 1), "the waiter queued");
    assert!(locks.release(acquired).unwrap());
    let barged: Option<String> = redis::cmd("SET")
        .arg(keys.lock())
        .arg("barger")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(&mut raw)
        .unwrap();
    assert!(barged.is_none(), "a plain SET NX took a lock reserved for the queue head");
    let next = waiting.join().unwrap().unwrap().expect("the waiter got the lock");
    assert!(locks.release(next.lease).unwrap());
}

/// A waiter that gives up leaves the queue, and the next one is told it is its turn.
#[test]
fn a_waiter_that_gives_up_leaves_the_queue() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let mut raw = connection(&url);
    let name = unique_name("give-up");
    let keys = locks.keys(&name);
    let holder = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    let started = Instant::now();
    let gave_up = locks
        .acquire_until(
            &name,
            &OwnerToken::random(),
            10 * SECOND,
            Some(Instant::now() + Duration::from_millis(200)),
        )
        .unwrap();
    assert!(gave_up.is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
    let queued: i64 = raw.zcard(keys.queue()).unwrap();
    assert_eq!(queued, 0, "a waiter that gave up left its place");
    assert!(locks.release(holder).unwrap());
    assert!(locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_some());
}

/// Non-fair waiters (`fair(false)`), on both layouts: nobody queues while they wait, and a
/// release wakes them by its message (long before the one-second re-check).
#[test]
fn non_fair_waiters_do_not_queue_and_are_woken_by_the_release() {
    let url = shared_url();
    let mut raw = connection(&url);
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let non_fair = || {
            RedisBackend::builder(url.as_str())
                .kind(kind)
                .fair(false)
                .connect_timeout(2 * SECOND)
                .build()
                .unwrap()
        };
        let (holder, waiter) = (non_fair(), non_fair());
        assert!(!waiter.is_fair());
        let name = unique_name("non-fair");
        let keys = holder.keys(&name);
        let lease = holder.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                let deadline = Instant::now() + 5 * SECOND;
                let acquired =
                    waiter.acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(deadline));
                (acquired.unwrap().expect("granted after the release"), Instant::now())
            });
            thread::sleep(Duration::from_millis(300));
            let queued: i64 = raw.zcard(keys.queue()).unwrap();
            assert_eq!(queued, 0, "{kind:?}: a non-fair waiter queued");
            let released_at = Instant::now();
            assert!(holder.release(lease).unwrap());
            let (acquired, acquired_at) = waiting.join().unwrap();
            let woken = acquired_at - released_at;
            assert!(woken < Duration::from_millis(250), "{kind:?}: acquired {woken:?} after the release");
            assert!(waiter.release(acquired.lease).unwrap());
        });
    }
}

/// Under 8-way contention every worker gets a fair share: the releaser cannot re-lock ahead of
/// the queue.
#[test]
fn contended_workers_get_fair_shares() {
    const WORKERS: usize = 8;
    let url = shared_url();
    let name = unique_name("fair");
    let clients: Vec<_> =
        (0..WORKERS).map(|_| LockClient::new(backend(&url, RedisLockKind::SetNx))).collect();
    let counts: Vec<AtomicU64> = (0..WORKERS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for (client, count) in clients.iter().zip(&counts) {
            let (lock, stop) = (Lock::new(client, name.clone()), &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.lock().expect("lock");
                    count.fetch_add(1, Ordering::Relaxed);
                    guard.unlock().expect("unlock");
                }
            });
        }
        thread::sleep(2 * SECOND);
        stop.store(true, Ordering::Relaxed);
    });
    let counts: Vec<u64> = counts.iter().map(|count| count.load(Ordering::Relaxed)).collect();
    let (min, max) = (counts.iter().min().copied().unwrap(), counts.iter().max().copied().unwrap());
    println!("acquisitions per worker: {counts:?}");
    assert!(max > 0);
    assert!(min * 2 >= max, "unfair: per-worker acquisitions {counts:?}");
}

/// A queue member without a lapse time (an orphan: in the queue, not in the timeouts set) never
/// lapses by itself; it must not wedge a free lock, nor make a waiter poll the server.
#[test]
fn an_orphan_queue_head_does_not_wedge_the_lock() {
    let server = RedisServer::start().expect("private server");
    let url = server.url();
    let mut raw = connection(&url);
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let locks = backend(&url, kind);
        let name = unique_name("orphan");
        let keys = locks.keys(&name);
        // Arrival 1 µs after the epoch: ahead of every real waiter.
        let _: () = raw.zadd(keys.queue(), OwnerToken::random().to_hex(), 1).unwrap();

        let before = evalsha_calls(&mut raw);
        let started = Instant::now();
        let acquired = locks
            .acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + 5 * SECOND))
            .unwrap()
            .expect("the free lock is acquired despite the orphan");
        let took = started.elapsed();
        let calls = evalsha_calls(&mut raw) - before;
        assert!(took < Duration::from_millis(500), "{kind:?}: acquiring took {took:?}");
        assert!(calls <= 3, "{kind:?}: {calls} EVALSHA calls for one free lock");
        let queued: i64 = raw.zcard(keys.queue()).unwrap();
        assert_eq!(queued, 0, "{kind:?}: the orphan was dropped");
        assert!(locks.release(acquired.lease).unwrap());

        // A non-waiting try does not find the lock wedged either.
        let _: () = raw.zadd(keys.queue(), OwnerToken::random().to_hex(), 1).unwrap();
        let lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap();
        assert!(lease.is_some(), "{kind:?}: a try_acquire behind an orphan");
        assert!(locks.release(lease.unwrap()).unwrap());
    }
}

/// A waiter behind an orphan head while the lock is held: its retry hint is the lease, never a
/// 1 ms busy poll.
#[test]
fn a_waiter_behind_an_orphan_does_not_busy_poll() {
    let server = RedisServer::start().expect("private server");
    let url = server.url();
    let mut raw = connection(&url);
    let locks = backend(&url, RedisLockKind::SetNx);
    let name = unique_name("orphan-held");
    let keys = locks.keys(&name);
    let holder = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().unwrap();
    let _: () = raw.zadd(keys.queue(), OwnerToken::random().to_hex(), 1).unwrap();
    let before = evalsha_calls(&mut raw);
    let waiter = {
        let (locks, name) = (locks.clone(), name.clone());
        thread::spawn(move || {
            locks.acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + 10 * SECOND))
        })
    };
    thread::sleep(Duration::from_millis(600));
    let released_at = Instant::now();
    assert!(locks.release(holder).unwrap());
    let acquired = waiter.join().unwrap().unwrap().expect("the waiter got the lock");
    let handoff = released_at.elapsed();
    let calls = evalsha_calls(&mut raw) - before;
    assert!(handoff < Duration::from_millis(500), "hand-off took {handoff:?}");
    // Two or three attempts, the release and the winner's: far from one per millisecond.
    assert!(calls <= 10, "{calls} EVALSHA calls while waiting 0.6 s");
    assert!(locks.release(acquired.lease).unwrap());
}
