//! A lock is usable again as soon as its server resumes after a stall (issue 16 §4): eight (and
//! thirty-two) threads contend with short deadlines, the server is stopped (SIGSTOP) for five
//! seconds while their requests pile up unread, then resumes and runs them — after every client
//! timed out on them. Neither an acquisition granted to a client that gave up (an orphan) nor the
//! queue entries of waiters that gave up may keep a fresh client out: the allowance is one
//! wait-queue turn (250 ms), whatever the number of abandoned waiters. Measured on both
//! single-node layouts and on Redlock (all five nodes stopped at once).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock, LockClient, LockName, LockOptions};
use lock_redis::{RedisBackend, RedisLockKind, RedlockBackend};
use lock_testkit::harness::RedisServer;
use lock_testkit::suite::unique_name;

/// Every client's connect and I/O timeouts (Redlock: node timeout).
const TIMEOUT: Duration = Duration::from_secs(1);
/// The lease of every acquisition, the orphan's too.
const LEASE: Duration = Duration::from_secs(2);
/// Each waiter's deadline per attempt: waiters that gave up long before the server resumes.
const WAIT: Duration = Duration::from_millis(300);
const STALL: Duration = Duration::from_secs(5);
/// How long the waiters keep trying after the server stopped.
const TRY_DURING_STALL: Duration = Duration::from_millis(1_500);
/// One wait-queue turn (the scripts' `TURN_MS`), the most the lock may stay unusable.
const TURN: Duration = Duration::from_millis(250);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);

fn options() -> LockOptions {
    LockOptions::builder().lease(LEASE).build().expect("valid options")
}

/// Runs the stall against backends from `make`, stopping and resuming the servers with `pause`
/// and `resume`; returns how long after the resume a fresh client first acquired the lock.
fn unusable_after_resume<B>(
    waiters: usize,
    make: impl Fn() -> B,
    pause: impl Fn(),
    resume: impl Fn(),
) -> Duration
where
    B: DistributedLock + Send + Sync + 'static,
    B::Lease: Send + Sync,
{
    let name = unique_name("stall");
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicU32::new(0));
    let waiters: Vec<_> = (0..waiters)
        .map(|_| {
            let client = LockClient::with_options(make(), options());
            let (name, stop, acquired) = (name.clone(), Arc::clone(&stop), Arc::clone(&acquired));
            thread::spawn(move || contend(&client, &name, &stop, &acquired))
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    assert!(acquired.load(Ordering::Relaxed) > 0, "the waiters got the lock before the stall");

    pause();
    let paused_at = Instant::now();
    thread::sleep(TRY_DURING_STALL);
    stop.store(true, Ordering::Relaxed);
    for waiter in waiters {
        waiter.join().expect("a waiter panicked");
    }
    let stopped_for = paused_at.elapsed();
    assert!(stopped_for < STALL, "the waiters took {stopped_for:?} to give up; the stall is too short");
    thread::sleep(STALL - stopped_for);
    resume();
    let resumed_at = Instant::now();

    let fresh = LockClient::with_options(make(), options());
    let lock = Lock::new(&fresh, name);
    loop {
        // Refusals and errors alike: the lock is not usable yet.
        if let Ok(Some(_guard)) = lock.try_lock() {
            return resumed_at.elapsed();
        }
        assert!(resumed_at.elapsed() < 3 * LEASE, "the lock stayed unusable");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Takes the lock with short deadlines until told to stop; errors (the stopped server) are
/// expected.
fn contend<B: DistributedLock>(
    client: &LockClient<B>,
    name: &LockName,
    stop: &AtomicBool,
    acquired: &AtomicU32,
) {
    let lock = Lock::new(client, name.clone());
    while !stop.load(Ordering::Relaxed) {
        if let Ok(Some(guard)) = lock.try_lock_for(WAIT) {
            acquired.fetch_add(1, Ordering::Relaxed);
            thread::sleep(Duration::from_millis(5));
            drop(guard);
        }
    }
}

fn single_node(kind: RedisLockKind, waiters: usize) {
    let server = RedisServer::start().expect("private redis-server");
    let url = server.url();
    let unusable = unusable_after_resume(
        waiters,
        || {
            RedisBackend::builder(url.as_str())
                .kind(kind)
                .connect_timeout(TIMEOUT)
                .io_timeout(TIMEOUT)
                .build()
                .expect("backend")
        },
        || server.process().pause().expect("SIGSTOP"),
        || server.process().resume().expect("SIGCONT"),
    );
    println!("{kind:?}, {waiters} waiters: the lock was usable {unusable:?} after the server resumed");
    assert!(
        unusable <= TURN + SLACK,
        "{kind:?}, {waiters} waiters: the lock stayed unusable {unusable:?} after the server resumed"
    );
}

#[test]
fn set_nx_is_usable_right_after_a_stall() {
    single_node(RedisLockKind::SetNx, 8);
}

/// Four times the abandoned waiters: still one turn at most.
#[test]
fn set_nx_is_usable_right_after_a_stall_however_many_waiters_gave_up() {
    single_node(RedisLockKind::SetNx, 32);
}

#[test]
fn reentrant_hash_is_usable_right_after_a_stall() {
    single_node(RedisLockKind::ReentrantHash, 8);
}

#[test]
fn redlock_is_usable_right_after_a_stall() {
    let nodes = RedisServer::start_many(lock_redis::testkit::NODES).expect("five redis-server nodes");
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let unusable = unusable_after_resume(
        8,
        || {
            RedlockBackend::builder(&urls)
                .io_timeout(TIMEOUT)
                .connect_timeout(TIMEOUT)
                .build()
                .expect("backend")
        },
        || nodes.iter().for_each(|node| node.process().pause().expect("SIGSTOP")),
        || nodes.iter().for_each(|node| node.process().resume().expect("SIGCONT")),
    );
    println!("redlock: the lock was usable {unusable:?} after the nodes resumed");
    assert!(
        unusable <= TURN + SLACK,
        "redlock: the lock stayed unusable {unusable:?} after the nodes resumed"
    );
}
