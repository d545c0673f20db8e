//! The Redis scenarios of `docs/scenarios.md` that `distlock compare` runs beside the suite: R02
//! (Redlock and a restarted node), R03 (failover before replication, and `WAIT`), R04 (the
//! reentrant hash). Each on servers of its own or the shared harness server. (R01, whose bounds
//! are a few node timeouts, runs in this crate's tests only: a loaded comparison would miss them.)

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, Lock, LockClient, LockName, LockOptions, OwnerToken};
use lock_testkit::eventually;
use lock_testkit::harness::{shared, RedisServer};
use lock_testkit::suite::{unique_name, Verdict};
use lock_testkit::BackendScenario;
use redis::Commands as _;

use super::redlock::{r02, NODES};
use crate::{RedisBackend, RedisKeys, RedisLockKind, RedlockBackend};

const SECOND: Duration = Duration::from_secs(1);

/// R02, R03 and R04.
pub fn scenarios() -> Vec<BackendScenario> {
    vec![
        BackendScenario::new("R02", "Redlock: a restarted node, two holders, fencing", r02_with_fencing),
        BackendScenario::new("R03", "failover before replication; WAIT", || {
            r03_without_wait();
            r03_with_wait();
            r03_with_wait_and_a_paused_replica();
        }),
        BackendScenario::new("R04", "reentrant hash: hold counts, pub/sub wake-up", || {
            r04_counts_holds_and_wakes_waiters();
            r04_the_last_release_deletes_the_hash();
        }),
    ]
}

/// R02: A holds nodes 1-3; node 3 restarts without persistence; B takes nodes 3-5. Two holders
/// at once — and the fencing tokens let the resource reject A's stale write.
fn r02_with_fencing() {
    let nodes = RedisServer::start_many(NODES).expect("five redis-server nodes");
    let report =
        r02(&nodes, |urls| RedlockBackend::builder(urls).io_timeout(Duration::from_millis(400)).build())
            .expect("R02 runs to the end");
    println!("R02 with Redlock: {report:?}");
    assert!(report.two_holders, "two holders demonstrated");
    assert!(report.token_b > report.token_a, "B's token exceeds A's: {report:?}");
    assert_eq!(report.verdict(), Ok(Verdict::Pass));
}

fn shared_url() -> String {
    shared::redis().expect("shared redis-server").address().to_owned()
}

fn backend(url: &str, kind: RedisLockKind) -> RedisBackend {
    RedisBackend::builder(url).kind(kind).connect_timeout(2 * SECOND).build().expect("backend")
}

/// The replication stream the primary must hold in its own memory before the lock is written:
/// more than fits in the paused replica's socket buffers.
const MIN_BACKLOG: u64 = 1 << 20;

fn connection(url: &str) -> redis::Connection {
    let connection = redis::Client::open(url).unwrap().get_connection_with_timeout(2 * SECOND).unwrap();
    connection.set_read_timeout(Some(5 * SECOND)).unwrap();
    connection
}

fn client(url: &str, wait: Option<Duration>) -> LockClient<RedisBackend> {
    let mut builder = RedisBackend::builder(url).connect_timeout(2 * SECOND);
    if let Some(timeout) = wait {
        builder = builder.wait_for_replicas(1, timeout);
    }
    let options = LockOptions::builder().lease(30 * SECOND).renewal(false).build().unwrap();
    LockClient::with_options(builder.build().unwrap(), options)
}

fn lock_key(name: &LockName) -> String {
    RedisKeys::new("distlock", name).lock().to_owned()
}

/// Makes sure the next write stays in the primary's memory until the paused replica reads on.
///
/// A paused (SIGSTOP) replica does not stop the kernel from receiving the primary's stream into
/// its socket buffer: it would apply the lock on resuming, even with the primary dead. A backlog
/// larger than those buffers keeps the lock's write in the primary's own output buffer, which
/// `kill -9` loses — the replication lag of source 001's story.
///
/// The filler keys are `<key_prefix>:<index>` (in a cluster, give them the lock's hash tag, so
/// they live on the same primary).
pub(super) fn fill_replication_backlog(primary: &mut redis::Connection, key_prefix: &str) {
    let filler = vec![b'x'; 1 << 20];
    for index in 0..256 {
        let _: () = primary.set(format!("{key_prefix}:{index}"), &filler).unwrap();
        let replicas: String =
            redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("replica").query(primary).unwrap();
        let backlog: u64 = replicas
            .split_whitespace()
            .find_map(|field| field.strip_prefix("omem="))
            .and_then(|bytes| bytes.parse().ok())
            .unwrap_or(0);
        if backlog >= MIN_BACKLOG {
            return;
        }
    }
    panic!("the primary never held a replication backlog of {MIN_BACKLOG} bytes");
}

/// Kills the primary and promotes the replica (`REPLICAOF NO ONE`), as a failover would.
fn fail_over(primary: &RedisServer, replica: &RedisServer) {
    primary.process().kill9().unwrap();
    replica.process().resume().unwrap();
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut connection(&replica.url())).unwrap();
}

/// R03 without WAIT: the lock was acquired on the primary but never reached the replica; after
/// the failover a second client acquires the same lock. Two holders.
fn r03_without_wait() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let name = unique_name("r03");

    replica.process().pause().unwrap();
    fill_replication_backlog(&mut connection(&primary.url()), "r03-filler");
    let a = client(&primary.url(), None);
    let guard_a = Lock::new(&a, name.clone()).try_lock().unwrap().expect("A acquires on the primary");
    let on_primary: bool = connection(&primary.url()).exists(lock_key(&name)).unwrap();
    assert!(on_primary, "the lock is on the primary");

    fail_over(&primary, &replica);
    let on_replica: bool = connection(&replica.url()).exists(lock_key(&name)).unwrap();
    assert!(!on_replica, "the promoted replica never got the lock");

    let b = client(&replica.url(), None);
    let guard_b = Lock::new(&b, name).try_lock().unwrap();
    let guard_b = guard_b.expect("B acquires the same lock on the new primary: the lock was lost");
    assert!(guard_a.is_held() && guard_b.is_held(), "two holders at once");
    println!(
        "R03 without WAIT: two holders after the failover (A token {:?}, B token {:?})",
        guard_a.fencing_token(),
        guard_b.fencing_token()
    );
    drop(guard_b);
    std::mem::forget(guard_a); // Its primary is gone: nothing to release.
}

/// R03 with WAIT: every acquisition returns only after the replica has the lock; the lock then
/// survives the failover that lost it above.
fn r03_with_wait() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    // A generous WAIT: it returns at the first acknowledgement (which a loaded machine may delay).
    let locks = client(&primary.url(), Some(5 * SECOND));
    let mut on_replica = connection(&replica.url());
    for _ in 0..20 {
        let name = unique_name("r03-wait");
        let guard = Lock::new(&locks, name.clone()).try_lock().unwrap().expect("acquired");
        let replicated: Option<String> = on_replica.get(lock_key(&name)).unwrap();
        assert!(replicated.is_some(), "the replica has the lock the moment acquire returns");
        guard.unlock().unwrap();
    }

    let name = unique_name("r03-wait-failover");
    let guard_a = Lock::new(&locks, name.clone()).try_lock().unwrap().expect("A acquires");
    fail_over(&primary, &replica);
    let b = client(&replica.url(), None);
    assert!(Lock::new(&b, name).try_lock().unwrap().is_none(), "the lock survived the failover");
    std::mem::forget(guard_a);
}

/// R03 with WAIT and a replica that cannot acknowledge (paused): acquiring fails with
/// `NotReplicated` after the WAIT timeout, and the lock is not left on the primary.
fn r03_with_wait_and_a_paused_replica() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let wait = Duration::from_millis(300);
    let locks = client(&primary.url(), Some(wait));
    replica.process().pause().unwrap();

    let name = unique_name("r03-wait-paused");
    let started = Instant::now();
    let outcome = Lock::new(&locks, name.clone()).try_lock();
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::NotReplicated { acknowledged: 0, required: 1, .. })),
        "got {:?}",
        outcome.map(|guard| guard.is_some())
    );
    assert!(took >= wait && took < wait + 2 * SECOND, "failing took {took:?}");
    let left: bool = connection(&primary.url()).exists(lock_key(&name)).unwrap();
    assert!(!left, "an unreplicated acquisition is given back");
    replica.process().resume().unwrap();
}

fn r04_counts_holds_and_wakes_waiters() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::ReentrantHash);
    let name = unique_name("r04");
    let keys = locks.keys(&name);
    let mut raw = connection(&url);
    let owner = OwnerToken::random();
    let token = owner.to_hex();

    let first = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("first hold");
    let second = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("reentry by the same token");
    let count: Option<i64> = raw.hget(keys.lock(), &token).unwrap();
    assert_eq!(count, Some(2), "two holds by one owner are counted in the hash");
    assert_eq!(first.fencing_token(), second.fencing_token(), "a reentry is not a new acquisition");
    let first_token = first.fencing_token();
    let other = OwnerToken::random();
    assert!(locks.try_acquire(&name, &other, 10 * SECOND).unwrap().is_none(), "another owner is shut out");

    // Listen on the lock's channel, and block a waiter (another client) in lock().
    let mut listener = connection(&url);
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe(keys.channel()).unwrap();
    pubsub.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let waiter_client = LockClient::new(backend(&url, RedisLockKind::ReentrantHash));
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let lock = Lock::new(&waiter_client, name.clone());
        thread::spawn(move || {
            let guard = lock.lock().expect("the waiter acquires");
            acquired_tx.send((Instant::now(), guard.fencing_token())).unwrap();
            guard.unlock().unwrap();
        })
    };
    assert!(eventually(5 * SECOND, || raw.zcard::<_, i64>(keys.queue()).unwrap() == 1), "the waiter queued");

    assert!(locks.release(second).unwrap(), "the first release gives back one hold");
    let count: Option<i64> = raw.hget(keys.lock(), &token).unwrap();
    assert_eq!(count, Some(1), "one hold left");
    assert!(pubsub.get_message().is_err(), "no release is announced while a hold remains");
    assert!(acquired.recv_timeout(Duration::from_millis(300)).is_err(), "the waiter stays blocked");

    let released_at = Instant::now();
    assert!(locks.release(first).unwrap(), "the last release");
    // The waiter may already hold a new hash under its own token.
    let count: Option<i64> = raw.hget(keys.lock(), &token).unwrap();
    assert_eq!(count, None, "no hold of the first owner is left");
    let message = pubsub.get_message().expect("the last release is announced");
    let payload: String = message.get_payload().unwrap();
    assert!(!payload.is_empty(), "the announcement names the waiter whose turn it is");
    let (woken_at, fence) = acquired.recv_timeout(5 * SECOND).expect("the waiter acquired");
    let handoff = woken_at.saturating_duration_since(released_at);
    // Far below the 1 s fallback re-check: the message woke it.
    assert!(handoff < Duration::from_millis(500), "hand-off took {handoff:?}");
    assert!(fence > Some(first_token), "the waiter's acquisition takes a new fencing token");
    waiter.join().unwrap();
}

/// R04, without a waiter: the hash is deleted when the last hold goes, and a stale lease
/// releases nothing.
fn r04_the_last_release_deletes_the_hash() {
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::ReentrantHash);
    let name = unique_name("r04-delete");
    let keys = locks.keys(&name);
    let mut raw = connection(&url);
    let owner = OwnerToken::random();
    let holds: Vec<_> =
        (0..3).map(|_| locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("hold")).collect();
    let count: Option<i64> = raw.hget(keys.lock(), owner.to_hex()).unwrap();
    assert_eq!(count, Some(3));
    let pttl: i64 = raw.pttl(keys.lock()).unwrap();
    assert!(pttl > 0 && pttl <= 10_000, "the hash carries the lease: PTTL {pttl}");
    for (left, hold) in (0..3).rev().zip(holds) {
        assert!(locks.release(hold).unwrap());
        let count: Option<i64> = raw.hget(keys.lock(), owner.to_hex()).unwrap();
        assert_eq!(count, (left > 0).then_some(left), "after a release");
    }
    let exists: bool = raw.exists(keys.lock()).unwrap();
    assert!(!exists, "the hash is deleted at zero holds");
    // A fourth release (a stale lease of the same owner) finds nothing to give back.
    let stale = locks.try_acquire(&name, &owner, 10 * SECOND).unwrap().expect("free again");
    let _: i64 = raw.del(keys.lock()).unwrap();
    assert!(!locks.release(stale).unwrap(), "a lease whose hash is gone releases nothing");
}
