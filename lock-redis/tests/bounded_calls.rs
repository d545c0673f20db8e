//! Every call is bounded by one connect and one I/O timeout (+ slack) while the server is silent,
//! however many leases the client holds (issue 16 §2): a renewal batch of 1,000 leases, a
//! release, a non-blocking acquisition, and a waiting acquisition's failure — whether the server
//! goes silent before the wait or while it waits. Silent: every connection of the client goes
//! through a [`FaultProxy`](lock_testkit::FaultProxy) that stops forwarding (TCP stays open, nothing arrives either way).
//! Both single-node layouts and Redlock (every node through its own proxy).

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Extension, LockName, OwnerToken};
use lock_redis::testkit::{routed_url, RedisTarget, RedlockTarget};
use lock_redis::{RedisBackend, RedisLockKind, RedlockBackend};
use lock_testkit::suite::{unique_name, SuiteTarget as _};
use lock_testkit::FaultProxies;

/// The connect and I/O timeouts (Redlock: connect and node timeouts).
const TIMEOUT: Duration = Duration::from_secs(1);
/// One connect and one I/O timeout, plus slack for a loaded 2-core machine (S16's bound).
const BOUND: Duration = Duration::from_millis(2 * 1_000 + 500);
/// The longest a waiter goes without asking the server (its re-check).
const RECHECK: Duration = Duration::from_secs(1);
const LEASES: usize = 1_000;
const LEASE: Duration = Duration::from_secs(30);

/// Runs `call`, prints how long it took, and checks it returned within `bound`.
fn timed<T>(what: &str, bound: Duration, call: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let outcome = call();
    let took = started.elapsed();
    println!("{what}: {took:?}");
    assert!(took <= bound, "{what} took {took:?}, past {bound:?}");
    outcome
}

/// `url` routed through a new proxy, which is pushed onto `proxies`.
fn through_proxy(url: &str, proxies: &mut FaultProxies) -> String {
    routed_url(url, &mut |server| proxies.route(server)).expect("routed url")
}

fn names(prefix: &str) -> Vec<LockName> {
    let prefix = unique_name(prefix);
    (0..LEASES).map(|index| LockName::new(format!("{prefix}-{index}")).unwrap()).collect()
}

/// The calls of one backend whose every connection goes through `proxies`, which are cut after
/// it acquired [`LEASES`] leases.
fn calls_are_bounded<B>(backend: &B, proxies: &FaultProxies, label: &str)
where
    B: DistributedLock,
{
    let mut leases: Vec<B::Lease> = names("bounded")
        .iter()
        .map(|name| backend.try_acquire(name, &OwnerToken::random(), LEASE).unwrap().expect("free"))
        .collect();
    proxies.cut();

    let outcomes = timed(&format!("{label}: a renewal batch of {LEASES} leases"), BOUND, || {
        let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
        backend.extend_many(&mut batch)
    });
    assert!(outcomes.iter().all(Result::is_err), "{label}: a silent server confirmed a renewal");
    let lease = leases.pop().expect("a lease");
    let released = timed(&format!("{label}: a release"), BOUND, || backend.release(lease));
    assert!(released.is_err(), "{label}: a silent server confirmed a release");
    let name = unique_name("bounded-fresh");
    let acquired = timed(&format!("{label}: try_acquire"), BOUND, || {
        backend.try_acquire(&name, &OwnerToken::random(), LEASE)
    });
    assert!(acquired.is_err(), "{label}: acquired through a cut connection");
    let native = backend.native_wait().expect("waits natively");
    let waited = timed(&format!("{label}: a waiting acquisition"), BOUND, || {
        native.acquire_until(&name, &OwnerToken::random(), LEASE, None)
    });
    assert!(waited.is_err(), "{label}: acquired through a cut connection");
}

/// A waiter on a held lock whose server goes silent while it waits learns it at its next
/// re-check, and then fails after one connect and one I/O timeout — not after a second call
/// (poking its subscriber, leaving the queue) to the server that just failed to answer.
fn a_wait_that_goes_silent_fails_within_one_call<B>(
    waiter: B,
    holder: &B,
    proxies: &FaultProxies,
    label: &str,
) where
    B: DistributedLock + Clone + Send + 'static,
    B::Lease: Send,
{
    let name = unique_name("bounded-wait");
    let held = holder.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    for delay in [Duration::ZERO, Duration::from_millis(300)] {
        let waiting = {
            let name = name.clone();
            let waiter = waiter.clone();
            thread::spawn(move || {
                let native = waiter.native_wait().expect("waits natively");
                let outcome =
                    native.acquire_until(&name, &OwnerToken::random(), LEASE, None).map(|a| a.is_some());
                (outcome, Instant::now())
            })
        };
        thread::sleep(delay);
        proxies.cut();
        let cut_at = Instant::now();
        let (outcome, ended_at) = waiting.join().expect("the waiter panicked");
        let took = ended_at.saturating_duration_since(cut_at);
        println!("{label}: a wait cut {delay:?} in ended after {took:?}: {outcome:?}");
        assert!(outcome.is_err(), "{label}: acquired a held lock: {outcome:?}");
        assert!(took <= RECHECK + BOUND, "{label}: a wait cut {delay:?} in ended {took:?} after the cut");
        proxies.restore();
    }
    holder.release(held).unwrap();
}

fn single_node(kind: RedisLockKind) -> (RedisBackend, FaultProxies) {
    let mut proxies = FaultProxies::default();
    let url = through_proxy(RedisTarget::new(kind).url(), &mut proxies);
    let backend = RedisBackend::builder(url)
        .kind(kind)
        .connect_timeout(TIMEOUT)
        .io_timeout(TIMEOUT)
        .build()
        .expect("backend");
    (backend, proxies)
}

fn redlock() -> (RedlockBackend, FaultProxies) {
    let mut proxies = FaultProxies::default();
    let urls: Vec<String> =
        RedlockTarget::shared().urls().iter().map(|url| through_proxy(url, &mut proxies)).collect();
    let backend =
        RedlockBackend::builder(urls).connect_timeout(TIMEOUT).io_timeout(TIMEOUT).build().expect("backend");
    (backend, proxies)
}

#[test]
fn set_nx_calls_are_bounded_with_a_thousand_leases() {
    let (backend, proxies) = single_node(RedisLockKind::SetNx);
    calls_are_bounded(&backend, &proxies, "set-nx");
}

#[test]
fn reentrant_hash_calls_are_bounded_with_a_thousand_leases() {
    let (backend, proxies) = single_node(RedisLockKind::ReentrantHash);
    calls_are_bounded(&backend, &proxies, "reentrant-hash");
}

#[test]
fn redlock_calls_are_bounded_with_a_thousand_leases() {
    let (backend, proxies) = redlock();
    calls_are_bounded(&backend, &proxies, "redlock");
}

#[test]
fn single_node_waits_that_go_silent_fail_within_one_call() {
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let (waiter, proxies) = single_node(kind);
        let holder = RedisTarget::new(kind).backend().expect("backend");
        a_wait_that_goes_silent_fails_within_one_call(waiter, &holder, &proxies, &format!("{kind:?}"));
    }
}

#[test]
fn redlock_waits_that_go_silent_fail_within_one_call() {
    let (waiter, proxies) = redlock();
    let holder = RedlockTarget::shared().builder().build().expect("backend");
    a_wait_that_goes_silent_fails_within_one_call(waiter, &holder, &proxies, "redlock");
}
