//! Redlock beyond the shared suite, on real harness nodes: R01 (the quorum over five nodes, with
//! nodes killed and paused), R02 (a node restarting without persistence gives two holders;
//! fencing rejects the stale write) and its negative control N06 (Redlock without fencing must
//! fail R02), plus script reloading, pipelined renewal and a node rejoining.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, Extension, Lock, LockClient, LockName, LockOptions, OwnerToken};
use lock_redis::redis::{self, Commands as _};
use lock_redis::testkit::redlock::{holders, probe, KEY_PREFIX, NODES};
use lock_redis::{RedlockBackend, RedlockLease};
use lock_testkit::eventually;
use lock_testkit::harness::{shared, RedisServer};
use lock_testkit::suite::unique_name;

const LEASE: Duration = Duration::from_secs(10);

/// The node timeout of tests that do not measure timing: generous, so a loaded (2-core) CI
/// machine does not make a healthy node miss its deadline and fail a `granted_nodes` check.
const RELAXED_NODE_TIMEOUT: Duration = Duration::from_millis(400);

/// Five private nodes, for tests that kill, pause or restart them.
fn private_nodes() -> (Vec<RedisServer>, Vec<String>) {
    let nodes = RedisServer::start_many(NODES).expect("five redis-server nodes");
    let urls = nodes.iter().map(RedisServer::url).collect();
    (nodes, urls)
}

/// The five nodes this test binary shares, for tests that leave them running.
fn shared_urls() -> Vec<String> {
    let nodes = shared::redis_nodes(NODES).expect("five shared redis-server nodes");
    nodes.iter().map(|node| node.address().to_owned()).collect()
}

/// A backend with the default node timeout (50 ms), for tests that measure timing against it.
fn backend(urls: &[String]) -> RedlockBackend {
    RedlockBackend::new(urls).expect("backend")
}

/// A backend with [`RELAXED_NODE_TIMEOUT`], for tests that do not measure timing.
fn relaxed_backend(urls: &[String]) -> RedlockBackend {
    RedlockBackend::builder(urls).io_timeout(RELAXED_NODE_TIMEOUT).build().expect("backend")
}

fn keys(name: &LockName) -> lock_redis::RedisKeys {
    lock_redis::RedisKeys::new(KEY_PREFIX, name)
}

/// The lock key's value on each node.
fn held(urls: &[String], name: &LockName) -> Vec<Option<String>> {
    holders(urls, &keys(name)).expect("probe the nodes")
}

fn acquire(locks: &RedlockBackend, name: &LockName) -> RedlockLease {
    locks.try_acquire(name, &OwnerToken::random(), LEASE).expect("no error").expect("acquired")
}

/// R01, first half: with two of five nodes down — one killed, one paused (SIGSTOP) — a quorum
/// of three still grants, and the lease carries the validity Redlock computes.
#[test]
fn r01_two_nodes_down_still_acquire_with_validity_lease_minus_elapsed_minus_drift() {
    let (nodes, urls) = private_nodes();
    let locks = backend(&urls);
    // Connections to every node first, so the paused node really receives the request.
    locks.release(acquire(&locks, &unique_name("r01-warm-up"))).unwrap();
    nodes[3].process().kill9().unwrap();
    nodes[4].process().pause().unwrap();

    let name = unique_name("r01-two-down");
    let started = Instant::now();
    let outcome = locks.try_acquire(&name, &OwnerToken::random(), LEASE);
    let wall = started.elapsed();
    let mut lease = outcome.expect("no error").expect("three of five nodes grant");
    assert_eq!(lease.granted_nodes(), [0, 1, 2]);

    let drift = RedlockBackend::clock_drift(LEASE);
    assert_eq!(drift, Duration::from_millis(102), "1 % of 10 s plus 2 ms");
    assert!(lease.elapsed() <= wall, "elapsed {:?} is within the call's {wall:?}", lease.elapsed());
    assert_eq!(lease.validity(), LEASE - lease.elapsed() - drift, "validity = TTL − elapsed − drift");
    assert!(lease.validity() >= LEASE - wall - drift);
    // The paused node cost one node timeout, not more.
    assert!(wall >= locks.io_timeout(), "the paused node was waited for ({wall:?})");
    assert!(wall < 6 * locks.io_timeout(), "acquiring with a paused node took {wall:?}");
    println!("acquired with 2 of 5 nodes down in {wall:?}: validity {:?}", lease.validity());

    // The core counts the same validity: its default clock-drift margin is Redlock's drift.
    assert_eq!(locks.lease_margin(LEASE), Duration::ZERO);
    assert_eq!(LockOptions::default().drift_margin(LEASE), drift);

    // Extend and release need a quorum too, and have one.
    assert!(locks.extend(&mut lease, LEASE).unwrap());
    assert!(locks.release(lease).unwrap());
    nodes[4].process().resume().unwrap();
}

/// R01, second half: with three of five nodes down no quorum can form. The acquisition fails
/// fast with a connection error — far within the lease — and leaves no hold on any node.
#[test]
fn r01_three_nodes_down_fail_fast_and_release_partial_holds() {
    let (nodes, urls) = private_nodes();
    let locks = backend(&urls);
    locks.release(acquire(&locks, &unique_name("r01-warm-up"))).unwrap();
    // A few node timeouts (the round, the undo), far below the lease and the 1 s connect timeout.
    let bound = 6 * locks.io_timeout();

    // Killed: the pooled connections to them turn out dead, new ones are refused. The live
    // nodes' grants are given back. Once the nodes are known to be down, a quorum cannot even be
    // asked, and nothing is sent at all.
    for node in &nodes[2..] {
        node.process().kill9().unwrap();
    }
    for attempt in ["first", "second"] {
        let name = unique_name("r01-three-killed");
        let started = Instant::now();
        let outcome = locks.try_acquire(&name, &OwnerToken::random(), LEASE);
        let took = started.elapsed();
        let error = outcome.map(|lease| lease.is_some()).expect_err("no quorum");
        assert!(matches!(error, Error::Connection { .. }), "{error:?}");
        assert!(took < bound, "failing with three nodes killed took {took:?}");
        println!("three nodes killed, {attempt} attempt: failed in {took:?}: {}", chain(&error));
        assert_eq!(held(&urls[..2], &name), [None, None], "no hold on the live nodes");
    }

    // Paused: every node receives the request, the two live ones grant, the three paused ones
    // never answer in time. The grants are given back, and the paused nodes run the release
    // written behind the acquisition when they resume.
    for node in &nodes[2..] {
        node.process().restart().unwrap();
    }
    let locks = backend(&urls);
    locks.release(acquire(&locks, &unique_name("r01-warm-up"))).unwrap();
    for node in &nodes[2..] {
        node.process().pause().unwrap();
    }
    let name = unique_name("r01-three-paused");
    let started = Instant::now();
    let outcome = locks.try_acquire(&name, &OwnerToken::random(), LEASE);
    let took = started.elapsed();
    let error = outcome.map(|lease| lease.is_some()).expect_err("no quorum");
    assert!(matches!(error, Error::Connection { .. }), "{error:?}");
    assert!(took < bound, "failing with three nodes paused took {took:?}");
    println!("three nodes paused: failed in {took:?}: {}", chain(&error));
    assert_eq!(held(&urls[..2], &name), [None, None], "the live nodes' grants were given back");
    for node in &nodes[2..] {
        node.process().resume().unwrap();
    }
    // The resumed nodes run the acquisition, then the release behind it; poll until they have.
    let mut last = Vec::new();
    let cleared = eventually(Duration::from_secs(5), || {
        last = held(&urls, &name);
        last == vec![None; NODES]
    });
    assert!(cleared, "the late nodes ran acquire, then release: {last:?}");
}

#[test]
fn r02_a_restarted_node_gives_two_holders_and_fencing_rejects_the_stale_write() {
    lock_testkit::run_backend_scenario(lock_redis::testkit::scenarios(), "R02");
}

#[test]
fn scripts_are_reloaded_on_nodes_that_forgot_them() {
    let urls = shared_urls();
    let locks = relaxed_backend(&urls);
    let name = unique_name("noscript");
    locks.release(acquire(&locks, &name)).unwrap();
    for url in &urls[..3] {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut probe(url).unwrap()).unwrap();
    }
    let mut lease = acquire(&locks, &name);
    assert_eq!(lease.granted_nodes(), [0, 1, 2, 3, 4]);
    for url in &urls[..3] {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut probe(url).unwrap()).unwrap();
    }
    assert!(locks.extend(&mut lease, LEASE).unwrap());
    for url in &urls {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut probe(url).unwrap()).unwrap();
    }
    assert!(locks.release(lease).unwrap());
    assert_eq!(held(&urls, &name), vec![None; NODES]);
}

/// Renewal of many leases is one pipeline per node; a lease that lost its majority answers
/// `false`, one that lost a minority of its nodes is still extended.
#[test]
fn extend_many_pipelines_per_node_and_counts_a_quorum_per_lease() {
    const LEASES: usize = 500;
    let urls = shared_urls();
    let locks = relaxed_backend(&urls);
    let prefix = unique_name("many");
    // Leases far longer than taking all of them may last on a loaded machine.
    let mut leases: Vec<_> = (0..LEASES)
        .map(|index| {
            let name = LockName::new(format!("{prefix}-{index}")).unwrap();
            locks.try_acquire(&name, &OwnerToken::random(), 3 * LEASE).unwrap().expect("free")
        })
        .collect();
    // Lease 7 loses three nodes (its majority), lease 9 two (a minority).
    for (lease, lost) in [(7, 3), (9, 2)] {
        for url in &urls[..lost] {
            let _: i64 = probe(url).unwrap().del(leases[lease].keys().lock()).unwrap();
        }
    }
    let started = Instant::now();
    let results = {
        let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, 30 * LEASE)).collect();
        locks.extend_many(&mut batch)
    };
    let took = started.elapsed();
    println!("extend_many of {LEASES} leases on {NODES} nodes took {took:?}");
    assert_eq!(results.len(), LEASES);
    for (index, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), index != 7, "lease {index}");
    }
    let pttl: i64 = probe(&urls[4]).unwrap().pttl(leases[LEASES - 1].keys().lock()).unwrap();
    assert!(pttl > 200_000, "extended to 300 s: PTTL {pttl}");
    assert_eq!(leases[LEASES - 1].lease(), 30 * LEASE);
    for lease in leases {
        let _ = locks.release(lease);
    }
}

/// A node that was down rejoins by itself once it is back, and the next extension raises its
/// (restarted, empty) fencing counter to the holder's token.
#[test]
fn a_node_that_comes_back_rejoins_and_gets_its_fencing_counter_raised() {
    let (nodes, urls) = private_nodes();
    let locks = relaxed_backend(&urls);
    nodes[4].process().kill9().unwrap();
    let name = unique_name("rejoin");
    let mut lease = acquire(&locks, &name);
    assert_eq!(lease.granted_nodes(), [0, 1, 2, 3]);
    nodes[4].process().restart().unwrap();

    // The pool reconnects in the background; an extension reaches the node within seconds.
    let fence_key = lease.keys().fence().to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut counter: Option<u64> = None;
    while Instant::now() < deadline && counter.is_none() {
        assert!(locks.extend(&mut lease, LEASE).unwrap());
        counter = probe(&urls[4]).unwrap().get(&fence_key).unwrap();
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(counter, Some(lease.fencing_token().get()), "the back node's counter was raised");
    assert!(locks.release(lease).unwrap());

    // A fresh acquisition is granted by all five again.
    let name = unique_name("rejoin-again");
    let lease = acquire(&locks, &name);
    assert_eq!(lease.granted_nodes(), [0, 1, 2, 3, 4]);
    assert!(locks.release(lease).unwrap());
}

/// Through the generic lock: a second client is shut out while the first holds, and takes over
/// with a higher fencing token once the lease ran out.
#[test]
fn the_guard_counts_redlock_validity_and_excludes_other_clients() {
    let urls = shared_urls();
    let lease = Duration::from_secs(1);
    let options = LockOptions::builder().lease(lease).renewal(false).build().unwrap();
    let one = LockClient::with_options(relaxed_backend(&urls), options.clone());
    let two = LockClient::with_options(relaxed_backend(&urls), options);
    let name = unique_name("guard");
    let guard = Lock::new(&one, name.clone()).lock().unwrap();
    assert!(guard.fencing_token().is_some());
    assert!(Lock::new(&two, name.clone()).try_lock().unwrap().is_none());
    assert!(guard.is_held());
    thread::sleep(lease);
    assert!(!guard.is_held(), "the lease ran out without renewal");
    let second = Lock::new(&two, name).try_lock_for(Duration::from_secs(3)).unwrap().expect("expired");
    assert!(second.fencing_token() > guard.fencing_token());
}

/// Every acquisition attempt stores a value of its own (owner token plus attempt bits): a late
/// undo of one attempt, a compare-and-delete by its value, cannot delete the grant of the same
/// owner's next attempt.
#[test]
fn every_attempt_stores_its_own_value_and_a_stale_undo_leaves_the_next_grant() {
    let urls = shared_urls();
    let locks = relaxed_backend(&urls);
    let name = unique_name("attempt-value");
    let owner = OwnerToken::random();
    let first = locks.try_acquire(&name, &owner, LEASE).unwrap().expect("free");
    let first_value = first.owner_token().to_owned();
    assert!(first_value.starts_with(&format!("{}:", owner.to_hex())), "{first_value}");
    assert!(locks.release(first).unwrap());
    let second = locks.try_acquire(&name, &owner, LEASE).unwrap().expect("free again");
    assert_ne!(second.owner_token(), first_value, "the same owner's next attempt stores a new value");
    assert_eq!(held(&urls, &name), vec![Some(second.owner_token().to_owned()); NODES]);
    // The first attempt's undo arriving late: the release script with the first value.
    let stale_undo = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    for url in &urls {
        let deleted: i64 =
            stale_undo.key(second.keys().lock()).arg(&first_value).invoke(&mut probe(url).unwrap()).unwrap();
        assert_eq!(deleted, 0);
    }
    assert_eq!(held(&urls, &name), vec![Some(second.owner_token().to_owned()); NODES]);
    assert!(locks.release(second).unwrap(), "the second attempt's grant is intact on every node");
}

fn chain(error: &Error) -> String {
    error.to_string()
}

/// A grant raises every lagging node's fencing counter at once, not at the first renewal: with
/// counters [5, 0, 0, 0, 0] the holder gets token 6, and a holder that paused before renewing
/// must not be outranked by a later quorum of the four lagging nodes issuing a lower token.
#[test]
fn a_grant_raises_lagging_fencing_counters_at_once() {
    let urls = shared_urls();
    let locks = relaxed_backend(&urls);
    let name = unique_name("raise");
    let fence_key = keys(&name).fence().to_owned();
    let _: () = probe(&urls[0]).unwrap().set(&fence_key, 5).unwrap();
    let lease = acquire(&locks, &name);
    assert_eq!(lease.fencing_token().get(), 6, "the token is the highest counter heard, plus one");
    let counters: Vec<u64> = urls
        .iter()
        .map(|url| probe(url).unwrap().get::<_, Option<u64>>(&fence_key).unwrap().unwrap_or(0))
        .collect();
    assert!(
        counters.iter().all(|&counter| counter >= 6),
        "counters after the grant, before any renewal: {counters:?}"
    );
    locks.release(lease).unwrap();
}
