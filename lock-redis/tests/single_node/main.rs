//! The Redis backend beyond the shared suite, on real harness servers: R04 (the reentrant hash
//! layout), the WAIT option, the fair wait queue, renewal pipelining, and what a dead, paused or
//! restarted server, a wrong password or an ACL user does to a client (the wait queue's tests in
//! `wait_queue.rs`, the server faults' in `server_faults.rs`, guarded writes' in
//! `guarded_writes.rs`, leader election's in `elections.rs`).

mod elections;
mod guarded_writes;
mod server_faults;
mod wait_queue;

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

/// Renewal of many leases: one `extend_many` call extends them all (one pipeline), and leases
/// that are no longer held answer `false`.
#[test]
fn extend_many_renews_thousands_of_leases_in_one_batch() {
    const LEASES: usize = 3_000;
    let url = shared_url();
    let locks = backend(&url, RedisLockKind::SetNx);
    let prefix = unique_name("many");
    // Leases far longer than taking 3,000 of them one by one may last on a loaded machine (a
    // 2 s lease once ran out before the batch); the extension sets a shorter one, so the PTTL
    // afterwards shows it was applied.
    let mut leases: Vec<_> = (0..LEASES)
        .map(|index| {
            let name = LockName::new(format!("{prefix}-{index}")).unwrap();
            locks.try_acquire(&name, &OwnerToken::random(), 600 * SECOND).unwrap().expect("free")
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
    for index in [0, LEASES - 1] {
        let pttl: i64 = raw.pttl(leases[index].keys().lock()).unwrap();
        assert!((1..=30_000).contains(&pttl), "lease {index} was set to 30 s from 600 s: PTTL {pttl}");
    }
    println!("extend_many of {LEASES} leases took {took:?}");
    for lease in leases {
        let _ = locks.release(lease);
    }
}

/// An acquisition whose transaction fails after its `SET` took the lock (a fence key of the
/// wrong type, written by someone else) reports the error and leaves no lock behind: the key
/// would otherwise hold the name for a whole lease with nobody holding it.
#[test]
fn a_transaction_that_fails_after_its_set_leaves_no_lock() {
    let url = shared_url();
    let name = unique_name("wrong-type-fence");
    let keys = RedisKeys::new("distlock", &name);
    let mut raw = connection(&url);
    let _: i64 = raw.hset(keys.fence(), "not", "a counter").unwrap();
    let locks = backend(&url, RedisLockKind::SetNx);
    let outcome = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND);
    assert!(outcome.is_err(), "a WRONGTYPE fence key: {:?}", outcome.map(|lease| lease.is_some()));
    let left: i64 = raw.exists(keys.lock()).unwrap();
    let _: i64 = raw.del(keys.fence()).unwrap();
    assert_eq!(left, 0, "the failed acquisition left its lock key");
    let again = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND).unwrap().expect("free again");
    assert!(locks.release(again).unwrap());
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
