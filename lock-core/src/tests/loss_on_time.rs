//! Loss is never late: a client whose server stopped answering delays only its own renewals,
//! its leases are reported lost at their end by the timer, unlocks never wait behind another
//! client's renewal I/O, session holds turn in doubt and then lost on time, and renewals are
//! scheduled within what the holder may count on.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::{name, options, MS};
use crate::fake::FakeBackend;
use crate::{HoldState, LockClient, LockGuard, LockOptions};

/// How late a loss may be reported after the lease ends.
const LATE: Duration = Duration::from_millis(50);

fn hold(client: &LockClient<FakeBackend>, prefix: &str) -> LockGuard<FakeBackend> {
    client.lock_named(&name(prefix)).unwrap().try_lock().unwrap().expect("free")
}

#[test]
fn a_stuck_client_delays_only_its_own_leases_and_each_is_lost_at_its_end() {
    let (healthy_backend, stuck_backend) = (FakeBackend::default(), FakeBackend::default());
    let healthy = LockClient::with_options(healthy_backend, options(300, true));
    let stuck = LockClient::with_options(stuck_backend.clone(), options(300, true));
    let healthy_guard = hold(&healthy, "healthy");
    let stuck_guards: Vec<_> = (0..32).map(|_| hold(&stuck, "stuck")).collect();
    thread::sleep(MS * 150); // Past one renewal round of both.

    // Every request the stuck client's server confirms from now on was sent before this.
    stuck_backend.switches.stall_extend_ms.store(3_000, Ordering::SeqCst);
    let stalled_at = Instant::now();
    let ends_by = stalled_at + MS * 300;
    let mut lost_at = vec![None; stuck_guards.len()];
    while Instant::now() < stalled_at + MS * 1_500 {
        let now = Instant::now();
        for (guard, lost) in stuck_guards.iter().zip(&mut lost_at) {
            if lost.is_none() && guard.lost_signal().is_lost() {
                *lost = Some(now);
            }
        }
        assert!(
            healthy_guard.is_held(),
            "the healthy lease lapsed {:?} into the stall",
            stalled_at.elapsed()
        );
        thread::sleep(MS);
    }
    for (guard, lost) in stuck_guards.iter().zip(&lost_at) {
        let lost = lost.expect("every stuck lease is reported lost");
        let late = lost.saturating_duration_since(ends_by);
        assert!(late <= LATE, "a stuck lease was reported lost {late:?} after it ended");
        assert_eq!(guard.state(), HoldState::Lost);
    }
    healthy_guard.unlock().unwrap();
}

#[test]
fn unlock_waits_for_no_other_clients_renewal_and_at_most_its_own_batch() {
    let (healthy_backend, stuck_backend) = (FakeBackend::default(), FakeBackend::default());
    let healthy = LockClient::with_options(healthy_backend, options(3_000, true));
    let stuck = LockClient::with_options(stuck_backend.clone(), options(3_000, true));
    let healthy_guard = hold(&healthy, "healthy");
    let stuck_guard = hold(&stuck, "stuck");
    let stall = MS * 1_500;
    stuck_backend.switches.stall_extend_ms.store(1_500, Ordering::SeqCst);
    thread::sleep(MS * 1_100); // The stuck client's renewal (every second) is now hanging.

    let started = Instant::now();
    healthy_guard.unlock().unwrap();
    let took = started.elapsed();
    assert!(took < MS * 50, "an unlock waited {took:?} behind another client's stuck renewal");

    let started = Instant::now();
    let _ = stuck_guard.unlock();
    let took = started.elapsed();
    assert!(took < stall, "an unlock waited {took:?}, past its own client's batch ({stall:?})");
}

#[test]
fn a_session_hold_turns_in_doubt_then_held_then_lost_on_time() {
    let backend = FakeBackend::default();
    backend.switches.session.store(true, Ordering::SeqCst);
    let client = LockClient::with_options(backend.clone(), options(600, true));
    let guard = hold(&client, "session");
    assert_eq!(guard.state(), HoldState::Held);

    backend.switches.fail_extend.store(true, Ordering::SeqCst);
    let failing_since = Instant::now();
    while guard.state() == HoldState::Held && failing_since.elapsed() < MS * 400 {
        thread::sleep(MS);
    }
    assert_eq!(guard.state(), HoldState::InDoubt, "a failed liveness check puts the hold in doubt");
    assert!(!guard.is_held(), "a hold in doubt is not held");

    backend.switches.fail_extend.store(false, Ordering::SeqCst);
    let recovering = Instant::now();
    while guard.state() == HoldState::InDoubt && recovering.elapsed() < MS * 400 {
        thread::sleep(MS);
    }
    assert_eq!(guard.state(), HoldState::Held, "a successful check ends the doubt");

    backend.switches.fail_extend.store(true, Ordering::SeqCst);
    let failing_since = Instant::now();
    assert!(guard.lost_signal().wait_timeout(MS * 2_000), "a session that cannot be confirmed is lost");
    // The last success came before `failing_since`: the session timeout ends by then + 600 ms.
    let late = Instant::now().saturating_duration_since(failing_since + MS * 600);
    assert!(late <= LATE, "the session hold was reported lost {late:?} after the session timeout");
    assert_eq!(guard.state(), HoldState::Lost);
}

#[test]
fn a_suspended_session_is_in_doubt_at_once_and_held_when_back() {
    let backend = FakeBackend::default();
    backend.switches.session.store(true, Ordering::SeqCst);
    // A long session timeout: no liveness check is due while the session is suspended.
    let client = LockClient::with_options(backend.clone(), options(60_000, true));
    let guard = hold(&client, "suspended");
    backend.switches.suspended.store(true, Ordering::SeqCst);
    assert_eq!(guard.state(), HoldState::InDoubt, "a broken session puts its holds in doubt at once");
    assert!(!guard.is_held());
    backend.switches.suspended.store(false, Ordering::SeqCst);
    assert_eq!(guard.state(), HoldState::Held, "the session is back");

    // Leases are never in doubt: the server keeps them whatever the connection does.
    backend.switches.session.store(false, Ordering::SeqCst);
    let lease_guard = hold(&client, "lease");
    backend.switches.suspended.store(true, Ordering::SeqCst);
    assert_eq!(lease_guard.state(), HoldState::Held);
}

#[test]
fn a_lease_is_in_doubt_while_its_backend_raises_the_signal() {
    let backend = FakeBackend::default();
    let signal = crate::DoubtSignal::new();
    *backend.switches.doubt.lock() = Some(signal.clone());
    let client = LockClient::with_options(backend.clone(), options(60_000, true));
    let guard = hold(&client, "doubted lease");
    assert_eq!(guard.state(), HoldState::Held);
    signal.raise();
    assert_eq!(guard.state(), HoldState::InDoubt, "the backend's doubt shows at once");
    assert!(!guard.is_held());
    signal.clear_since(signal.mark());
    assert_eq!(guard.state(), HoldState::Held, "confirmed again");
}

#[test]
fn renewal_comes_before_what_the_holder_may_count_on_runs_out() {
    let backend = FakeBackend::default();
    // 300 ms leases of which the holder may count on 100 ms: the default interval (a third of the
    // lease, 100 ms) would renew only when the hold is already over.
    backend.switches.margin_ms.store(200, Ordering::SeqCst);
    let options = LockOptions::builder().lease(MS * 300).build().unwrap();
    let client = LockClient::with_options(backend, options);
    let guard = hold(&client, "margin");
    let started = Instant::now();
    while started.elapsed() < MS * 1_000 {
        assert!(guard.is_held(), "the hold lapsed after {:?}", started.elapsed());
        thread::sleep(MS);
    }
}

/// Issue 16 §3: a callback that never returns delays neither its own client's signal nor any
/// other client's, nor any renewal — even with more stuck callbacks than callback threads.
#[test]
fn a_callback_that_blocks_forever_delays_no_signal() {
    let (stuck_backend, other_backend) = (FakeBackend::default(), FakeBackend::default());
    let (_never, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = parking_lot::Mutex::new(blocked);
    let blocking = LockOptions::builder()
        .lease(MS * 300)
        .on_lost(move |_| {
            let _ = blocked.lock().recv();
        })
        .build()
        .unwrap();
    let stuck = LockClient::with_options(stuck_backend.clone(), blocking.clone());
    let other = LockClient::with_options(other_backend.clone(), blocking);
    let stuck_count = crate::callbacks::MAX_CALLBACK_THREADS + 4;
    let stuck_guards: Vec<_> = (0..stuck_count).map(|_| hold(&stuck, "blocking-callback")).collect();
    let other_guard = hold(&other, "other-client");
    thread::sleep(MS * 150);
    stuck_backend.switches.fail_extend.store(true, Ordering::SeqCst);
    let failed_at = Instant::now();
    // Its leases are lost first, and their callbacks block forever.
    for guard in &stuck_guards {
        assert!(guard.lost_signal().wait_timeout(MS * 2_000));
        assert!(failed_at.elapsed() <= MS * 300 + LATE, "lost {:?} after the failure", failed_at.elapsed());
    }
    // Renewals go on beside the stuck callbacks: the other client's 300 ms lease is still held
    // several leases later, renewed all along.
    let extends = other_backend.switches.extends.load(Ordering::SeqCst);
    thread::sleep(MS * 1_000);
    assert!(other_guard.is_held(), "the other client's lease lapsed beside stuck callbacks");
    let renewed = other_backend.switches.extends.load(Ordering::SeqCst) - extends;
    assert!(renewed >= 3, "the other client's lease was renewed {renewed} times in 1 s");
    other_backend.switches.fail_extend.store(true, Ordering::SeqCst);
    let other_failed_at = Instant::now();
    assert!(other_guard.lost_signal().wait_timeout(MS * 2_000));
    let took = other_failed_at.elapsed();
    assert!(took <= MS * 300 + LATE, "the other client's signal came {took:?} after its failure");
}

/// Issue 16 §2: with leases checked one per connection, a batch of 1,000 against a silent
/// server takes one call's time, and a release waits for its own lease's check only.
#[test]
fn independent_checks_take_one_call_however_many_holds() {
    let backend = FakeBackend::default();
    backend.switches.session.store(true, Ordering::SeqCst);
    backend.switches.independent.store(true, Ordering::SeqCst);
    let client = LockClient::with_options(backend.clone(), options(3_000, true));
    let guards: Vec<_> = (0..1_000).map(|_| hold(&client, "independent")).collect();
    // Each check now hangs 400 ms, then fails (a read timeout).
    backend.switches.stall_extend_ms.store(400, Ordering::SeqCst);
    let before = backend.switches.extends.load(Ordering::SeqCst);
    let stalled_at = Instant::now();
    // The first renewal round starts at most one interval (1 s) after acquisition.
    while backend.switches.extends.load(Ordering::SeqCst) < before + 1_000 {
        assert!(stalled_at.elapsed() < MS * 2_500, "the batch did not start all its checks together");
        thread::sleep(MS);
    }
    let started_all = stalled_at.elapsed();
    // Every check of the batch is in flight at once: a release waits at most for its own.
    let released_at = Instant::now();
    drop(guards);
    let took = released_at.elapsed();
    assert!(
        took <= MS * 400 + MS * 300,
        "releasing 1,000 holds took {took:?} (batch started after {started_all:?})"
    );
    backend.switches.stall_extend_ms.store(0, Ordering::SeqCst);
}

/// Issue 16 §2: a release that waited for a renewal the server did not answer returns then,
/// without asking the server a second time.
#[test]
fn a_release_behind_an_unanswered_renewal_does_not_ask_again() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(3_000, true));
    let guard = hold(&client, "behind-a-renewal");
    backend.switches.stall_extend_ms.store(600, Ordering::SeqCst);
    let extends = backend.switches.extends.load(Ordering::SeqCst);
    // Wait for the renewal (interval 1 s) to be in flight.
    let deadline = Instant::now() + MS * 2_000;
    while backend.switches.extends.load(Ordering::SeqCst) == extends {
        assert!(Instant::now() < deadline, "no renewal was sent");
        thread::sleep(MS);
    }
    let releases = backend.switches.releases.load(Ordering::SeqCst);
    let started = Instant::now();
    let unlocked = guard.unlock();
    let took = started.elapsed();
    assert!(took <= MS * 600 + MS * 100, "unlock took {took:?}");
    assert!(matches!(unlocked, Err(crate::Error::Timeout { .. })), "{unlocked:?}");
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), releases, "the server was asked again");
}
