//! Unit tests of the generic lock over the fake and memory backends: reentrancy, renewal, loss,
//! release errors, waiting; loss on time, `on_lost` callbacks, renewal batching and shutdown in
//! their own files.

mod elections;
mod loss_on_time;
mod lost_callbacks;
mod renewal_batches;
mod shutdown;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::fake::FakeBackend;
use crate::{Error, LockClient, LockOptions, MemoryBackend};

pub(super) const MS: Duration = Duration::from_millis(1);

pub(super) fn options(lease_ms: u64, renewal: bool) -> LockOptions {
    LockOptions::builder().lease(MS * lease_ms as u32).renewal(renewal).build().unwrap()
}

pub(super) fn name(prefix: &str) -> String {
    format!("{prefix}-{}", crate::OwnerToken::random())
}

#[test]
fn reentrancy_counts_and_touches_the_backend_only_at_the_ends() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(10_000, true));
    let lock = client.lock_named(&name("reentrant")).unwrap();
    let outer = lock.lock().unwrap();
    let inner = lock.try_lock().unwrap().expect("reentry succeeds");
    assert_eq!(lock.hold_count(), 2);
    assert!(lock.is_held_by_current_thread());
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(backend.switches.acquires.load(Ordering::SeqCst), 1, "reentry must not acquire");

    // Another thread (another owner as far as the lock is concerned) is kept out.
    thread::scope(|s| {
        s.spawn(|| {
            assert!(!lock.is_held_by_current_thread());
            assert!(lock.try_lock().unwrap().is_none());
        });
    });

    inner.unlock().unwrap();
    assert_eq!(lock.hold_count(), 1);
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 0, "inner unlock must not release");
    drop(outer);
    assert_eq!(lock.hold_count(), 0);
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 1);
    thread::scope(|s| {
        s.spawn(|| assert!(lock.try_lock().unwrap().is_some()));
    });
}

#[test]
fn non_reentrant_lock_refuses_the_same_thread() {
    let client = LockClient::with_options(
        MemoryBackend::new(),
        LockOptions::builder().reentrant(false).build().unwrap(),
    );
    let lock = client.lock_named(&name("plain")).unwrap();
    let _guard = lock.lock().unwrap();
    assert!(lock.try_lock().unwrap().is_none());
    assert!(matches!(lock.lock(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(lock.try_lock_for(MS), Err(Error::WouldDeadlock { .. })));
}

#[test]
fn renewal_keeps_a_short_lease_alive() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(1_000, true));
    let rival = LockClient::with_options(backend.clone(), options(1_000, true));
    let lock = client.lock_named(&name("renewed")).unwrap();
    let guard = lock.lock().unwrap();
    thread::sleep(MS * 2_500);
    assert!(guard.is_held());
    assert!(crate::Lock::new(&rival, lock.name().clone()).try_lock().unwrap().is_none());
    assert!(backend.switches.extends.load(Ordering::SeqCst) >= 3);
    guard.unlock().unwrap();
}

#[test]
fn renewal_failure_marks_the_lock_lost_and_fires_the_signal() {
    let lost_names = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&lost_names);
    let backend = FakeBackend::default();
    let opts = LockOptions::builder()
        .lease(MS * 200)
        .on_lost(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let client = LockClient::with_options(backend.clone(), opts);
    let lock = client.lock_named(&name("lost")).unwrap();
    let guard = lock.lock().unwrap();
    backend.switches.fail_extend.store(true, Ordering::SeqCst);
    let signal = guard.lost_signal();
    assert!(signal.wait_timeout(MS * 2_000), "lost within the lease plus one retry");
    assert!(!guard.is_held());
    assert!(!lock.is_held_by_current_thread());
    // The callback runs after the signal, on a callback thread.
    let deadline = std::time::Instant::now() + MS * 2_000;
    while lost_names.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        thread::sleep(MS);
    }
    assert_eq!(lost_names.load(Ordering::SeqCst), 1);
    // Re-entering a lost lock is refused; releasing it reports that it is no longer held.
    assert!(matches!(lock.try_lock(), Err(Error::NotHeld { .. })));
    backend.switches.fail_extend.store(false, Ordering::SeqCst);
    let unlocked = guard.unlock();
    assert!(matches!(unlocked, Err(Error::NotHeld { .. })), "{unlocked:?}");
}

#[test]
fn server_saying_not_held_marks_the_lock_lost_within_one_interval() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(1_500, true));
    let lock = client.lock_named(&name("deleted")).unwrap();
    let guard = lock.lock().unwrap();
    assert!(backend.inner.force_release(lock.name()));
    assert!(guard.lost_signal().wait_timeout(MS * 1_500), "one renew interval is 500 ms");
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
}

#[test]
fn release_error_surfaces_from_unlock() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(10_000, true));
    let lock = client.lock_named(&name("release-error")).unwrap();
    let guard = lock.lock().unwrap();
    backend.switches.fail_release.store(true, Ordering::SeqCst);
    assert!(matches!(guard.unlock(), Err(Error::Connection { .. })));
    // The hold is gone locally even though the server could not be told.
    assert_eq!(lock.hold_count(), 0);
}

#[test]
fn released_lease_is_no_longer_renewed() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(90, true));
    let lock = client.lock_named(&name("released")).unwrap();
    lock.lock().unwrap().unlock().unwrap();
    let extends = backend.switches.extends.load(Ordering::SeqCst);
    thread::sleep(MS * 200);
    assert_eq!(backend.switches.extends.load(Ordering::SeqCst), extends);
}

#[test]
fn without_renewal_the_lease_runs_out_and_is_reported_lost() {
    let backend = MemoryBackend::new();
    let client = LockClient::with_options(backend.clone(), options(100, false));
    let lock = client.lock_named(&name("expiring")).unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.lost_signal().wait_timeout(MS * 1_000));
    assert!(!guard.is_held());
    // The holder is told first, by the clock-drift margin (1 % + 2 ms), then the server frees it.
    let margin = client.options().drift_margin(MS * 100);
    assert!(backend.remaining_lease(lock.name()).is_none_or(|left| left <= margin));
    thread::sleep(margin);
    assert_eq!(backend.remaining_lease(lock.name()), None);
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
}

/// The clock-drift margin is the user's to set: `clock_drift(0.1)` on a 500 ms lease tells the
/// holder 52 ms before the lease ends (the default would tell it 7 ms before).
#[test]
fn a_larger_clock_drift_reports_the_loss_earlier() {
    let backend = MemoryBackend::new();
    let options = LockOptions::builder().lease(MS * 500).renewal(false).clock_drift(0.1).build().unwrap();
    let client = LockClient::with_options(backend.clone(), options);
    let lock = client.lock_named(&name("drift")).unwrap();
    let started = Instant::now();
    let guard = lock.lock().unwrap();
    assert!(guard.lost_signal().wait_timeout(MS * 1_000));
    let told = started.elapsed();
    assert!(told <= MS * 448 + MS * 30, "told {told:?} after acquiring: the 10 % margin was not applied");
    // The server still holds it for the rest of the margin.
    assert!(backend.remaining_lease(lock.name()).is_some(), "the lease ran out before the holder was told");
}

#[test]
fn timed_wait_gives_up_after_the_timeout_with_backoff() {
    let backend = FakeBackend::default();
    let holder = LockClient::with_options(backend.clone(), options(10_000, true));
    let waiter = LockClient::with_options(backend.clone(), options(10_000, true));
    let lock_name = name("timed");
    let _held = holder.lock_named(&lock_name).unwrap().lock().unwrap();
    let lock = waiter.lock_named(&lock_name).unwrap();
    let before = backend.switches.acquires.load(Ordering::SeqCst);
    let started = Instant::now();
    assert!(lock.try_lock_for(MS * 200).unwrap().is_none());
    let waited = started.elapsed();
    assert!(waited >= MS * 200, "gave up early: {waited:?}");
    let attempts = backend.switches.acquires.load(Ordering::SeqCst) - before;
    // Backoff doubles to 100 ms: a handful of attempts, never a spin.
    assert!((2..=20).contains(&attempts), "{attempts} attempts in 200 ms");
}

#[test]
fn a_waiter_gets_the_lock_when_the_holder_releases() {
    handoff(FakeBackend::default()); // backoff
    handoff(MemoryBackend::new()); // native wake-ups
}

fn handoff<B: crate::DistributedLock + Clone>(backend: B) {
    let holder = LockClient::new(backend.clone());
    let waiter = LockClient::new(backend);
    let lock_name = name("handoff");
    let guard = holder.lock_named(&lock_name).unwrap().lock().unwrap();
    let first = guard.fencing_token();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock_named(&lock_name).unwrap().lock().unwrap().fencing_token());
        thread::sleep(MS * 50);
        drop(guard);
        assert!(waiting.join().unwrap() > first);
    });
}

#[test]
fn a_panicking_lost_callback_does_not_stop_renewal() {
    let backend = FakeBackend::default();
    let panicking = LockOptions::builder()
        .lease(MS * 300)
        .renewal(false)
        .on_lost(|_| panic!("callback panics on purpose"))
        .build()
        .unwrap();
    let doomed = LockClient::with_options(backend.clone(), panicking);
    let guard = doomed.lock_named(&name("panicking-callback")).unwrap().lock().unwrap();
    assert!(guard.lost_signal().wait_timeout(MS * 2_000));
    // The renewal thread survived: another client's short lease is still renewed.
    let client = LockClient::with_options(backend.clone(), options(1_000, true));
    let lock = client.lock_named(&name("after-panic")).unwrap();
    let held = lock.lock().unwrap();
    thread::sleep(MS * 2_000);
    assert!(held.is_held() && !held.lost_signal().is_lost());
    assert!(backend.inner.remaining_lease(lock.name()).is_some());
}

#[test]
fn a_session_hold_whose_liveness_check_keeps_failing_is_reported_lost() {
    let backend = FakeBackend::default();
    backend.switches.session.store(true, Ordering::SeqCst);
    let client = LockClient::with_options(backend.clone(), options(1_000, true));
    let guard = client.lock_named(&name("session")).unwrap().lock().unwrap();
    backend.switches.fail_extend.store(true, Ordering::SeqCst);
    assert!(guard.is_held(), "sessions do not expire by the clock");
    assert!(guard.lost_signal().wait_timeout(MS * 3_000), "lost once errors outlast the session timeout");
    assert!(!guard.is_held());
}

#[test]
fn a_batch_with_a_missing_result_confirms_no_lease() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(1_000, true));
    let guard = client.lock_named(&name("short-batch")).unwrap().lock().unwrap();
    backend.switches.short_batches.store(true, Ordering::SeqCst);
    // Every batch now looks failed: the lease is reported lost when it runs out, never confirmed.
    assert!(guard.lost_signal().wait_timeout(MS * 3_000));
}

#[test]
fn a_panicking_extend_many_is_a_failed_renewal() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(1_000, true));
    let guard = client.lock_named(&name("panicking-extend")).unwrap().lock().unwrap();
    backend.switches.panic_on_extend.store(true, Ordering::SeqCst);
    assert!(guard.lost_signal().wait_timeout(MS * 3_000));
    backend.switches.panic_on_extend.store(false, Ordering::SeqCst);
    // ...and the thread lives on.
    let other = client.lock_named(&name("after-extend-panic")).unwrap().lock().unwrap();
    thread::sleep(MS * 1_500);
    assert!(other.is_held());
}

#[test]
fn reentering_an_expired_lease_is_refused() {
    let backend = MemoryBackend::new();
    let client = LockClient::with_options(backend.clone(), options(200, false));
    let lock = client.lock_named(&name("expired-reentry")).unwrap();
    let guard = lock.lock().unwrap();
    thread::sleep(MS * 300);
    // Someone else takes the lock; this thread must not get a second guard for the old lease.
    let rival = LockClient::new(backend);
    let _taken =
        crate::Lock::new(&rival, lock.name().clone()).try_lock().unwrap().expect("free after expiry");
    assert!(matches!(lock.try_lock(), Err(Error::NotHeld { .. })));
    assert_eq!(lock.hold_count(), 1, "the refused reentry does not count");
    drop(guard);
}

#[test]
fn unrepresentable_timeouts_mean_no_timeout() {
    // `Instant + Duration::MAX` overflows; these must not panic.
    let client = LockClient::new(MemoryBackend::new());
    let lock = client.lock_named(&name("max-timeout")).unwrap();
    let guard = lock.try_lock_for(Duration::MAX).unwrap().expect("a free lock is acquired");
    drop(guard);
    let signal = crate::LostSignal::new();
    let waiter = {
        let signal = signal.clone();
        thread::spawn(move || signal.wait_timeout(Duration::MAX))
    };
    thread::sleep(MS * 20);
    assert!(!waiter.is_finished(), "an unbounded wait returned early");
    signal.fire();
    assert!(waiter.join().unwrap());
}

/// A guarded write holds its lease's mutex for as long as it runs: the client's other leases
/// keep renewing meanwhile (a busy lease is left out of the batch and retried), a write that
/// takes another guard's lease inside it cannot deadlock with a renewal batch, and a write that
/// outlasts its own lease loses the hold, which could not be renewed meanwhile.
#[test]
fn a_long_guarded_write_stalls_no_other_renewal_and_nests_without_deadlock() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(300, true));
    let first = client.lock_named(&name("write-first")).unwrap();
    let second = client.lock_named(&name("write-second")).unwrap();
    let (one, two) = (first.lock().unwrap(), second.lock().unwrap());
    // Several renewal rounds (every 100 ms) pass inside the nested writes.
    let written = one.with_lease(|_, _| {
        two.with_lease(|_, _| {
            thread::sleep(MS * 150);
            Ok(())
        })?;
        thread::sleep(MS * 600);
        Ok("written")
    });
    assert_eq!(written.unwrap(), "written");
    assert!(two.is_held(), "the other lease was not renewed during the long write");
    assert_eq!(one.state(), crate::HoldState::Lost, "a write outlasting its lease kept the hold");
    drop(one);
    let released = first.lock().unwrap();
    assert!(matches!(released.with_lease(|_, _| Ok(())), Ok(())));
    released.unlock().unwrap();
    two.unlock().unwrap();
}

/// A holder writing in a loop (one short guarded write after another) keeps its lock: renewal
/// waits a bounded time for the lease between two writes instead of giving up at once.
#[test]
fn back_to_back_guarded_writes_do_not_starve_renewal() {
    let client = LockClient::with_options(FakeBackend::default(), options(300, true));
    let lock = client.lock_named(&name("write-loop")).unwrap();
    let guard = lock.lock().unwrap();
    let until = Instant::now() + MS * 1_500;
    while Instant::now() < until {
        guard
            .with_lease(|_, _| {
                thread::sleep(MS * 3);
                Ok(())
            })
            .unwrap();
    }
    assert!(guard.is_held(), "renewal was starved by back-to-back guarded writes");
    guard.unlock().unwrap();
}
