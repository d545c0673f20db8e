//! The Redis backend beyond the shared suite, on real harness servers: R04 (the reentrant hash
//! layout), the WAIT option, the fair wait queue, renewal pipelining, and what a dead, paused or
//! restarted server, a wrong password or an ACL user does to a client.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{
    DistributedLock, Error, Extension, Lock, LockClient, LockName, LockOptions, NativeWait, OwnerToken,
};
use lock_redis::redis::{self, Commands as _};
use lock_redis::testkit::scenarios;
use lock_redis::{RedisBackend, RedisKeys, RedisLockKind};
use lock_testkit::eventually;
use lock_testkit::harness::{shared, RedisOptions, RedisServer};
use lock_testkit::run_backend_scenario;
use lock_testkit::suite::unique_name;

const SECOND: Duration = Duration::from_secs(1);

fn shared_url() -> String {
    shared::redis().expect("shared redis-server").address().to_owned()
}

fn backend(url: &str, kind: RedisLockKind) -> RedisBackend {
    RedisBackend::builder(url).kind(kind).connect_timeout(2 * SECOND).build().expect("backend")
}

fn connection(url: &str) -> redis::Connection {
    let connection = redis::Client::open(url).unwrap().get_connection_with_timeout(2 * SECOND).unwrap();
    connection.set_read_timeout(Some(5 * SECOND)).unwrap();
    connection
}

/// R04: HINCRBY-counted holds per owner; unlock decrements and deletes at zero; the last
/// release's pub/sub message wakes a waiter.
#[test]
fn r04_reentrant_hash_counts_holds_wakes_waiters_and_deletes_at_zero() {
    run_backend_scenario(scenarios(), "R04");
}

#[test]
fn set_nx_is_not_reentrant_at_the_trait_level() {
    let locks = backend(&shared_url(), RedisLockKind::SetNx);
    let name = unique_name("setnx-once");
    let owner = OwnerToken::random();
    let lease = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("acquired");
    assert!(locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().is_none());
    assert!(locks.release(lease).unwrap());
}

#[test]
fn wait_for_replicas_confirms_with_a_replica_and_refuses_without() {
    let primary = RedisServer::start().expect("primary");
    let _replica = RedisServer::start_replica_of(&primary).expect("replica");
    // A generous WAIT: it returns at the first acknowledgement, and a replica on a loaded
    // two-core machine (CI runs JVMs and databases beside it) may take a while to send one.
    let replicated = RedisBackend::builder(primary.url())
        .wait_for_replicas(1, 5 * SECOND)
        .connect_timeout(2 * SECOND)
        .build()
        .unwrap();
    let name = unique_name("wait");
    let lease = replicated.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap();
    assert!(lease.is_some(), "one replica acknowledges the acquisition");
    assert!(replicated.release(lease.unwrap()).unwrap());

    // The shared server has no replica: WAIT times out, the lock is given back.
    let url = shared_url();
    let lonely = RedisBackend::builder(url.as_str())
        .wait_for_replicas(1, Duration::from_millis(100))
        .connect_timeout(2 * SECOND)
        .build()
        .unwrap();
    let name = unique_name("wait-none");
    let started = Instant::now();
    let outcome = lonely.try_acquire(&name, &OwnerToken::random(), 10 * SECOND);
    assert!(
        matches!(outcome, Err(Error::NotReplicated { acknowledged: 0, required: 1, .. })),
        "got {:?}",
        outcome.map(|lease| lease.is_some())
    );
    assert!(started.elapsed() < 2 * SECOND, "WAIT took {:?}", started.elapsed());
    let plain = backend(&url, RedisLockKind::SetNx);
    assert!(
        plain.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().is_some(),
        "an unreplicated acquisition is released"
    );
}

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

/// Renewal of many leases: one `extend_many` call extends them all (one pipeline), and leases
/// that are no longer held answer `false`.
#[test]
fn extend_many_renews_thousands_of_leases_in_one_batch() {
    const LEASES: usize = 3_000;
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let prefix = unique_name("many");
    let mut leases: Vec<_> = (0..LEASES)
        .map(|index| {
            let name = LockName::new(format!("{prefix}-{index}")).unwrap();
            locks.try_acquire(&name, &OwnerToken::random(), 2 * SECOND).unwrap().expect("free")
        })
        .collect();
    // One lease is lost underneath its holder.
    let mut raw = connection(&url);
    let _: i64 = raw.del(leases[7].keys().lock()).unwrap();
    let started = Instant::now();
    let results = {
        let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, 30 * SECOND)).collect();
        locks.extend_many(&mut batch)
    };
    let took = started.elapsed();
    assert_eq!(results.len(), LEASES);
    for (index, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), index != 7, "lease {index}");
    }
    let pttl: i64 = raw.pttl(leases[LEASES - 1].keys().lock()).unwrap();
    assert!(pttl > 20_000, "the lease was extended to 30 s, PTTL {pttl}");
    println!("extend_many of {LEASES} leases took {took:?}");
    assert!(took < 5 * SECOND, "extend_many of {LEASES} leases took {took:?}");
    for lease in leases {
        let _ = locks.release(lease);
    }
}

/// The renewal thread keeps thousands of short (3 s) leases alive through the pipelined batches.
#[test]
fn renewal_keeps_thousands_of_short_leases() {
    const LOCKS: usize = 5_000;
    // 3 s leases: short enough to need renewal within the test, long enough that a loaded CI
    // machine taking 5,000 locks one by one does not lose the first before the renewal starts.
    let options = LockOptions::builder().lease(3 * SECOND).build().unwrap();
    let client = LockClient::with_options(backend(&shared_url(), RedisLockKind::SetNx), options);
    let prefix = unique_name("renew");
    let guards: Vec<_> = (0..LOCKS)
        .map(|index| {
            client.lock_named(&format!("{prefix}-{index}")).unwrap().try_lock().unwrap().expect("free")
        })
        .collect();
    // Longer than a lease: every lease has been renewed at least once.
    thread::sleep(4 * SECOND);
    let lost = guards.iter().filter(|guard| !guard.is_held()).count();
    assert_eq!(lost, 0, "{lost} of {LOCKS} renewed leases were lost");
    for guard in guards {
        guard.unlock().unwrap();
    }
}

/// A paused server (SIGSTOP) makes calls time out within the read timeout; after it resumes, the
/// client works again and no late reply is read as the answer to a later command.
#[test]
fn a_paused_server_times_out_and_leaves_no_poisoned_connection() {
    let server = RedisServer::start().expect("private server");
    let locks = RedisBackend::builder(server.url())
        .connect_timeout(SECOND)
        .io_timeout(Duration::from_millis(300))
        .max_connections(1)
        .build()
        .unwrap();
    let mut held =
        locks.try_acquire(&unique_name("pause-a"), &OwnerToken::random(), 30 * SECOND).unwrap().unwrap();

    server.process().pause().unwrap();
    let started = Instant::now();
    let outcome = locks.try_acquire(&unique_name("pause-b"), &OwnerToken::random(), 30 * SECOND);
    let took = started.elapsed();
    server.process().resume().unwrap();
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "got {:?}", outcome.map(|lease| lease.is_some()));
    assert!(took < 2 * SECOND, "a paused server held the caller for {took:?}");

    // The paused acquisition's reply arrives now; a reused connection would read it as the
    // answer to the next command.
    thread::sleep(Duration::from_millis(100));
    for _ in 0..3 {
        assert!(locks.extend(&mut held, 30 * SECOND).unwrap(), "the held lease extends");
        let fresh = locks.try_acquire(&unique_name("pause-c"), &OwnerToken::random(), 30 * SECOND).unwrap();
        assert!(locks.release(fresh.expect("free")).unwrap());
    }
}

/// A killed server is a connection error at once, not a hang; after a restart the client
/// reconnects by itself (stale pooled connections are discarded).
#[test]
fn a_dead_server_is_a_connection_error_and_a_restart_is_survived() {
    let server = RedisServer::start().expect("private server");
    let locks = RedisBackend::builder(server.url()).connect_timeout(2 * SECOND).build().unwrap();
    let name = unique_name("restart");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND).unwrap().unwrap();
    drop(lease);

    server.process().kill9().unwrap();
    let started = Instant::now();
    let outcome = locks.try_acquire(&unique_name("dead"), &OwnerToken::random(), 30 * SECOND);
    assert!(
        matches!(outcome, Err(Error::Connection { .. })),
        "got {:?}",
        outcome.map(|lease| lease.is_some()).map_err(|e| e.to_string())
    );
    assert!(started.elapsed() < 2 * SECOND, "took {:?}", started.elapsed());

    server.process().restart().unwrap();
    // The restart lost every key (no persistence), so the lock is free; the fencing counter
    // restarts too (the documented limit of a server without persistence).
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND);
    assert!(matches!(lease, Ok(Some(_))), "after the restart: {:?}", lease.map(|l| l.is_some()));
}

/// `user:password@` URLs authenticate as an ACL user; wrong credentials are
/// `Error::Authentication`, never a hang or a generic error.
#[test]
fn acl_users_and_wrong_passwords() {
    let server = RedisServer::start_with(RedisOptions::new().password("admin-secret")).expect("server");
    let mut admin = connection(&server.url());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">locker-secret", "~*", "&*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let port = server.port();
    let as_user = backend(&format!("redis://locker:locker-secret@127.0.0.1:{port}/"), RedisLockKind::SetNx);
    let name = unique_name("acl");
    let lease = as_user.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("acquired");
    assert!(as_user.release(lease).unwrap());

    for url in [
        format!("redis://locker:wrong@127.0.0.1:{port}/"),
        format!("redis://:wrong@127.0.0.1:{port}/"),
        format!("redis://127.0.0.1:{port}/"),
    ] {
        let started = Instant::now();
        // `build()` opens a first connection, so wrong credentials are reported there.
        let outcome =
            RedisBackend::builder(&url).kind(RedisLockKind::SetNx).connect_timeout(2 * SECOND).build();
        assert!(
            matches!(outcome, Err(Error::Authentication { .. })),
            "{url}: got {:?}",
            outcome.map(|_| "a backend").map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))
        );
        assert!(started.elapsed() < SECOND, "{url}: reporting took {:?}", started.elapsed());
    }
}

/// How often the server has run EVALSHA successfully, from `INFO commandstats` (calls minus
/// failed calls: a script's first use on a fresh server is refused with NOSCRIPT, then loaded and
/// run again).
fn evalsha_calls(raw: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
    let Some(fields) = info.lines().find_map(|line| line.strip_prefix("cmdstat_evalsha:")) else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        fields
            .split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(0)
    };
    field("calls") - field("failed_calls")
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

/// R04: a reentry never shortens the hash's lease, and giving back an inner hold leaves the TTL
/// alone.
#[test]
fn a_reentry_never_shortens_the_lease() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::ReentrantHash);
    let mut raw = connection(&url);
    let name = unique_name("reentry-ttl");
    let keys = locks.keys(&name);
    let owner = OwnerToken::random();
    let outer = locks.try_acquire(&name, &owner, 60 * SECOND).unwrap().expect("held");
    let inner = locks.try_acquire(&name, &owner, Duration::from_millis(100)).unwrap().expect("reentered");
    let pttl: i64 = raw.pttl(keys.lock()).unwrap();
    assert!(pttl > 50_000, "a 100 ms reentry cut the 60 s lease to PTTL {pttl}");
    // A longer reentry does raise it.
    let _: bool = raw.pexpire(keys.lock(), 5_000).unwrap();
    let longer = locks.try_acquire(&name, &owner, 60 * SECOND).unwrap().expect("reentered");
    let pttl: i64 = raw.pttl(keys.lock()).unwrap();
    assert!(pttl > 50_000, "a 60 s reentry raises a 5 s lease: PTTL {pttl}");
    // Partial releases leave the TTL alone.
    let _: bool = raw.pexpire(keys.lock(), 40_000).unwrap();
    assert!(locks.release(longer).unwrap());
    assert!(locks.release(inner).unwrap());
    let pttl: i64 = raw.pttl(keys.lock()).unwrap();
    assert!((30_000..=40_000).contains(&pttl), "a partial release changed the TTL: PTTL {pttl}");
    assert!(locks.release(outer).unwrap());
    let exists: bool = raw.exists(keys.lock()).unwrap();
    assert!(!exists);
}

/// An ACL user without channel rights (Redis 7's default for new users): PUBLISH is refused, yet
/// release reports the release it did, and a waiter still gets the lock by re-checking.
#[test]
fn an_acl_user_without_channel_rights_releases_and_waiters_still_acquire() {
    let server = RedisServer::start_with(RedisOptions::new().password("admin-secret")).expect("server");
    let mut admin = connection(&server.url());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "nochan", "on", ">nochan-secret", "~*", "resetchannels", "+@all"])
        .query(&mut admin)
        .unwrap();
    let port = server.port();
    let url = format!("redis://nochan:nochan-secret@127.0.0.1:{port}/");
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let locks = backend(&url, kind);
        let name = unique_name("acl-nochan");
        let holder = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("free");
        let waiter = {
            let (locks, name) = (locks.clone(), name.clone());
            thread::spawn(move || {
                locks.acquire_until(
                    &name,
                    &OwnerToken::random(),
                    10 * SECOND,
                    Some(Instant::now() + 5 * SECOND),
                )
            })
        };
        let keys = locks.keys(&name);
        assert!(
            eventually(5 * SECOND, || admin.zcard::<_, i64>(keys.queue()).unwrap() == 1),
            "{kind:?}: the waiter queued"
        );
        let released_at = Instant::now();
        assert!(locks.release(holder).expect("release despite the refused PUBLISH"), "{kind:?}");
        let acquired = waiter.join().unwrap().unwrap().expect("the waiter got the lock");
        let took = released_at.elapsed();
        assert!(took < Duration::from_millis(1500), "{kind:?}: the waiter took {took:?} after the release");
        assert!(locks.release(acquired.lease).unwrap(), "{kind:?}");
    }
}

/// A server that forgot the scripts (restart, `SCRIPT FLUSH`) answers `NOSCRIPT`: every single
/// command loads its script and runs again, and a renewal pipeline loads its script up front.
/// (A private server: flushing the shared one could race other tests' load-and-retry.)
#[test]
fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start().expect("private server");
    let url = server.url();
    let mut raw = connection(&url);
    let mut flush = || {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut raw).unwrap();
    };
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let locks = backend(&url, kind);
        let name = unique_name("noscript");
        flush();
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("free");
        flush();
        assert!(locks.extend(&mut lease, 10 * SECOND).unwrap());
        flush();
        let outcomes = locks.extend_many(&mut [Extension::new(&mut lease, 10 * SECOND)]);
        assert!(matches!(outcomes.as_slice(), [Ok(true)]), "{outcomes:?}");
        flush();
        // A timed wait that gives up leaves the queue with the dequeue script.
        let waited = locks
            .acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + SECOND / 5))
            .unwrap();
        assert!(waited.is_none());
        flush();
        assert!(locks.release(lease).unwrap());
    }
}

/// `distlock bench`'s comparison with the plain recipe times both kinds of pair and leaves no
/// key of its own behind.
#[test]
fn the_plain_pair_comparison_times_both_and_cleans_up() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let pairs = lock_redis::testkit::plain_pair::measure(&locks, &url, 50).expect("a working server");
    assert!(pairs.lock_p50 > Duration::ZERO && pairs.plain_p50 > Duration::ZERO, "{pairs}");
    let mut raw = connection(&url);
    let left: Vec<String> = raw.keys("*plain-pair-*").unwrap();
    let plain_left: Vec<String> = raw.keys("distlock-plain:*").unwrap();
    assert!(left.is_empty() && plain_left.is_empty(), "left behind: {left:?} {plain_left:?}");
}
