//! A holder cut off from ZooKeeper: every connection of its client goes through a
//! [`FaultProxy`](lock_testkit::FaultProxy) that stops forwarding (TCP stays open, nothing arrives either way), as a
//! network partition would. S16 of the suite, and its numbers for 1, 16 and 1,000 holds on one
//! session:
//!
//! - each hold is in doubt, then lost, before the servers expire the session — no rival gets a
//!   lock before its holder is told — and the servers free every lock within the lease + 1 s of
//!   that;
//! - every call of the cut client — a liveness batch, a release, a fresh acquisition, a waiting
//!   acquisition's failure, closing — returns within one connect and one request timeout (plus
//!   slack), however many holds the session has, whether the client has noticed the cut yet or
//!   not.

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{
    DistributedLock, Extension, HoldState, Lock, LockClient, LockGuard, LockName, LockOptions, NativeWait,
    OwnerToken,
};
use lock_testkit::suite::{run_scenario, unique_name, SuiteTarget};
use lock_testkit::FaultProxies;
use lock_zk::testkit::{ZooKeeperTarget, ROUTED_SESSION_TIMEOUT};
use lock_zk::{ZooKeeperBackend, ZooKeeperLease};

/// The lease, as S16's (the routed client's session timeout).
const LEASE: Duration = Duration::from_secs(3);
/// The cut client's connect and request timeouts.
const TIMEOUT: Duration = Duration::from_secs(1);
/// One call of the cut client: one connect and one request timeout, plus slack.
const CALL_BOUND: Duration = Duration::from_millis(2 * 1_000 + 500);
/// One call that cannot connect: one request (or connect) timeout, plus slack.
const REQUEST_BOUND: Duration = Duration::from_millis(1_000 + 500);
/// How late a loss may be reported after the last confirmed check's lease ends (the loss timer
/// fires for up to 1,000 holds on a loaded two-core machine).
const LATE: Duration = Duration::from_millis(250);
/// How long after the holder is told a rival may get the lock.
const FREE_WITHIN: Duration = Duration::from_millis(LEASE.as_millis() as u64 + 1_000);

/// The 1,000-hold runs, one at a time.
static MANY: Mutex<()> = Mutex::new(());

#[test]
fn s16_connection_cut() {
    run_scenario(&ZooKeeperTarget::new(), "S16", concat!(module_path!(), "::s16_connection_cut"));
}

/// A backend of the shared server whose every connection goes through the returned proxies.
fn cut_backend(target: &ZooKeeperTarget) -> (ZooKeeperBackend, FaultProxies) {
    let mut proxies = FaultProxies::default();
    let backend = target
        .backend_routed(&mut |server| proxies.route(server), TIMEOUT, 1)
        .expect("a server kind")
        .expect("a client through the proxy");
    proxies.check().expect("every connection through a proxy");
    assert_eq!(backend.session_timeout(), ROUTED_SESSION_TIMEOUT, "negotiated as asked");
    (backend, proxies)
}

/// How long `call` took, which must be within `bound`.
fn bounded<T>(what: &str, bound: Duration, call: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let outcome = call();
    let took = started.elapsed();
    assert!(took <= bound, "{what} took {took:?}, past {bound:?}");
    (outcome, took)
}

/// Cuts a holder of `holds` locks off its server. Checks, per hold, doubt before loss, loss on
/// time and before any rival gets in, the servers' freeing of every lock within the lease + 1 s
/// of the loss, and the cut client's call bounds. Returns the measurements, for the log.
fn cut_off_holder(holds: usize) -> String {
    let target = ZooKeeperTarget::new();
    let (backend, proxies) = cut_backend(&target);
    let options = LockOptions::builder().lease(LEASE).build().expect("valid options");
    let holder = LockClient::with_options(backend, options.clone());
    let names: Vec<LockName> = (0..holds).map(|_| unique_name("cut")).collect();
    let mut guards: Vec<LockGuard<ZooKeeperBackend>> = names
        .iter()
        .map(|name| Lock::new(&holder, name.clone()).try_lock().expect("a working server").expect("free"))
        .collect();
    let signals: Vec<_> = guards.iter().map(LockGuard::lost_signal).collect();
    // Two more holds, on a thread of their own, released while a liveness check is in flight.
    let (cut_tx, cut_rx) = std::sync::mpsc::channel::<Instant>();
    let releaser = {
        let holder = holder.clone();
        let renew_interval = options.renew_interval();
        thread::spawn(move || {
            let lock = |prefix| {
                Lock::new(&holder, unique_name(prefix)).try_lock().expect("a working server").expect("free")
            };
            let (dropped, unlocked) = (lock("cut-dropped"), lock("cut-unlocked"));
            let cut_at = cut_rx.recv().expect("the cut");
            // A check is in flight now (or just failed): a release waits for it at most.
            thread::sleep((cut_at + renew_interval).saturating_duration_since(Instant::now()));
            let (_, dropping) = bounded("a drop while checks are in flight", REQUEST_BOUND, || drop(dropped));
            let (_, unlocking) =
                bounded("an unlock while checks are in flight", REQUEST_BOUND, || drop(unlocked.unlock()));
            [dropping, unlocking]
        })
    };
    thread::sleep(LEASE / 2);
    assert!(guards.iter().all(LockGuard::is_held), "a hold lapsed before the cut");

    // A rival of its own session tries the first lock every few ms: the first create that wins
    // dates the servers' expiry of the cut session (which deletes all its nodes at once).
    let rival = target.backend().expect("a rival client");
    let first = names[0].clone();
    let first_signal = signals[0].clone();
    for proxy in &proxies {
        proxy.cut();
    }
    let cut_at = Instant::now();
    cut_tx.send(cut_at).expect("the releasing thread");
    let rival_thread = {
        let rival = rival.clone();
        thread::spawn(move || loop {
            if let Some(lease) =
                rival.try_acquire(&first, &OwnerToken::random(), LEASE).expect("the rival's server")
            {
                let (freed_at, holder_told) = (Instant::now(), first_signal.is_lost());
                assert!(rival.release(lease).expect("the rival's server"));
                return (freed_at, holder_told);
            }
            assert!(cut_at.elapsed() < 4 * LEASE, "the servers kept the cut holder's lock");
            thread::sleep(Duration::from_millis(2));
        })
    };

    // Every hold goes held → in doubt → lost (its state, then its signal), and never back.
    let mut doubted = vec![None; holds];
    let mut lost = vec![None; holds];
    let mut signalled = vec![None; holds];
    while Instant::now() < cut_at + LEASE + LATE && signalled.iter().any(Option::is_none) {
        for (index, guard) in guards.iter().enumerate() {
            let state = guard.state();
            let now = cut_at.elapsed();
            match state {
                HoldState::InDoubt if doubted[index].is_none() => doubted[index] = Some(now),
                HoldState::Lost if lost[index].is_none() => {
                    assert!(doubted[index].is_some(), "{}: lost without being in doubt first", guard.name());
                    lost[index] = Some(now);
                }
                HoldState::Held | HoldState::InDoubt if lost[index].is_some() => {
                    panic!("{}: back to {state:?} after it was lost", guard.name())
                }
                _ => {}
            }
            if signalled[index].is_none() && signals[index].is_lost() {
                assert_eq!(guard.state(), HoldState::Lost, "{}: signalled", guard.name());
                signalled[index] = Some(now);
            }
        }
        thread::sleep(Duration::from_millis(2));
    }
    let told = signalled.iter().filter(|signalled| signalled.is_some()).count();
    assert_eq!(told, holds, "{told} of {holds} lost signals fired by the lease + {LATE:?}");
    let span = |times: &[Option<Duration>]| {
        let times: Vec<Duration> = times.iter().flatten().copied().collect();
        (*times.iter().min().unwrap(), *times.iter().max().unwrap())
    };
    let (doubted, lost, signalled) = (span(&doubted), span(&lost), span(&signalled));
    let during_checks = releaser.join().expect("the releasing thread");

    // The servers expire the session no sooner than the holders were told, and within a second
    // of it; then every other lock is free too.
    let (freed_at, holder_told) = rival_thread.join().expect("the rival");
    let freed = freed_at - cut_at;
    assert!(holder_told, "the rival got {} {freed:?} after the cut, before its holder was told", names[0]);
    assert!(
        freed <= signalled.0 + FREE_WITHIN,
        "the lock was freed {freed:?} after the cut, the holder told at {signalled:?}"
    );
    for name in &names[1..] {
        let lease = rival.try_acquire(name, &OwnerToken::random(), LEASE).expect("the rival's server");
        let lease = lease.unwrap_or_else(|| panic!("{name}: still held after the session ended"));
        assert!(rival.release(lease).expect("the rival's server"));
    }

    // Calls of the cut client: each bounded, however many holds.
    let (attempt, try_lock) = bounded("a try_lock of the cut client", CALL_BOUND, || {
        Lock::new(&holder, unique_name("cut-fresh")).try_lock().map(|guard| guard.is_some())
    });
    assert!(attempt.is_err(), "the cut client acquired a lock: {attempt:?}");
    let mut slowest_release = Duration::ZERO;
    for (index, guard) in guards.drain(..).enumerate() {
        let (_, took) = if index % 2 == 0 {
            bounded("a drop", CALL_BOUND, || drop(guard))
        } else {
            bounded("an unlock", CALL_BOUND, || drop(guard.unlock()))
        };
        slowest_release = slowest_release.max(took);
    }
    let (_, close) = bounded("closing the cut client", CALL_BOUND, || drop(holder));
    drop(proxies);
    format!(
        "{holds} holds: releases during the checks {during_checks:?}; after the cut: in doubt {doubted:?}, \
         lost {lost:?}, signalled {signalled:?}, rival in {freed:?}; then try_lock {try_lock:?}, slowest \
         release {slowest_release:?}, close {close:?}"
    )
}

#[test]
fn one_cut_hold_is_lost_before_the_servers_free_it() {
    println!("{}", cut_off_holder(1));
}

#[test]
fn sixteen_cut_holds_are_lost_on_time_and_every_call_is_bounded() {
    println!("{}", cut_off_holder(16));
}

#[test]
fn a_thousand_cut_holds_are_lost_on_time_and_every_call_is_bounded() {
    let _one_at_a_time = MANY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    println!("{}", cut_off_holder(1_000));
}

/// The backend's own calls on a session with 1,000 holds, at three moments of a cut: just after
/// it (the client still believes it is connected: requests go out and nothing answers), once the
/// client has noticed (disconnected: requests wait for a reconnection that does not come), and
/// once the client has given the session up (a call connects again, through the cut proxy).
#[test]
fn backend_calls_on_a_cut_session_are_bounded_with_a_thousand_holds() {
    let _one_at_a_time = MANY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let target = ZooKeeperTarget::new();
    let (backend, proxies) = cut_backend(&target);
    let mut leases: Vec<ZooKeeperLease> = (0..1_000)
        .map(|_| {
            let name = unique_name("cut-raw");
            backend.try_acquire(&name, &OwnerToken::random(), LEASE).expect("a working server").expect("free")
        })
        .collect();
    // The first check sets a watch on every node; later ones are a single `sync`.
    let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
    assert!(backend.extend_many(&mut batch).into_iter().all(|outcome| outcome.expect("a working server")));
    drop(batch);
    // A lock someone else holds, for waiting acquisitions.
    let rival = target.backend().expect("a rival client");
    let contended = unique_name("cut-contended");
    let rival_lease = rival.try_acquire(&contended, &OwnerToken::random(), LEASE).unwrap().expect("free");

    // A waiter that started before the cut.
    let waiter = {
        let (backend, contended) = (backend.clone(), contended.clone());
        thread::spawn(move || {
            let outcome = backend.acquire_until(&contended, &OwnerToken::random(), LEASE, None);
            (Instant::now(), outcome.map(|acquired| acquired.is_some()))
        })
    };
    thread::sleep(Duration::from_millis(300));

    for proxy in &proxies {
        proxy.cut();
    }
    let cut_at = Instant::now();
    let mut log = Vec::new();
    for (moment, after) in [
        ("just cut", Duration::ZERO),
        ("disconnected", Duration::from_secs(2)),
        ("given up", Duration::from_millis(6_500)),
    ] {
        thread::sleep((cut_at + after).saturating_duration_since(Instant::now()));
        // (Not `session_state`, which connects a new session when the old one is over.)
        let state = if backend.session_suspended() { "suspended" } else { "connected" };
        let released = leases.pop().expect("a lease");
        let timings: Vec<(&str, Duration)> = thread::scope(|scope| {
            let checks = scope.spawn(|| {
                let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
                let (outcomes, took) =
                    bounded(&format!("{moment}: a batch of 1,000 checks"), REQUEST_BOUND, || {
                        backend.extend_many(&mut batch)
                    });
                assert!(
                    outcomes.iter().all(|outcome| !matches!(outcome, Ok(true))),
                    "{moment}: a cut session confirmed"
                );
                ("checks", took)
            });
            let release = scope.spawn(|| {
                let (outcome, took) =
                    bounded(&format!("{moment}: a release"), REQUEST_BOUND, || backend.release(released));
                assert!(!matches!(outcome, Ok(true)), "{moment}: released through a cut connection");
                ("release", took)
            });
            let tries: Vec<_> = [Duration::ZERO, Duration::from_millis(300)]
                .into_iter()
                .map(|later| {
                    let backend = &backend;
                    scope.spawn(move || {
                        // Given up, the session needs a new one, which cannot connect: one
                        // connect timeout in all, a wait for the other thread's connect included
                        // (the second starts while the first is connecting).
                        thread::sleep(later);
                        let bound = if moment == "given up" { REQUEST_BOUND } else { CALL_BOUND };
                        let (outcome, took) = bounded(&format!("{moment}: a try_acquire"), bound, || {
                            backend.try_acquire(&unique_name("cut-raw-fresh"), &OwnerToken::random(), LEASE)
                        });
                        assert!(outcome.is_err(), "{moment}: acquired through a cut connection");
                        ("try_acquire", took)
                    })
                })
                .collect();
            let wait = scope.spawn(|| {
                let deadline = Instant::now() + Duration::from_millis(500);
                let (outcome, took) = bounded(
                    &format!("{moment}: a waiting acquisition"),
                    Duration::from_millis(500) + CALL_BOUND,
                    || backend.acquire_until(&contended, &OwnerToken::random(), LEASE, Some(deadline)),
                );
                assert!(!matches!(outcome, Ok(Some(_))), "{moment}: acquired through a cut connection");
                ("wait 500 ms", took)
            });
            [checks, release]
                .into_iter()
                .chain(tries)
                .chain([wait])
                .map(|handle| handle.join().expect("a call"))
                .collect()
        });
        log.push(format!("{moment} ({state}): {timings:?}"));
    }
    let (returned_at, outcome) = waiter.join().expect("the waiter");
    assert!(outcome.is_err(), "the waiter that started before the cut: {outcome:?}");
    log.push(format!("the waiter that started before the cut failed {:?} after it", returned_at - cut_at));
    let (_, close) = bounded("dropping the cut backend", REQUEST_BOUND, || {
        drop(leases);
        drop(backend);
    });
    log.push(format!("close {close:?}"));
    assert!(rival.release(rival_lease).unwrap());
    drop(proxies);
    println!("{}", log.join("\n"));
}
