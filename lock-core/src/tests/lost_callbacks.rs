//! `on_lost` runs exactly once for every loss, whoever sees the loss first: the renewal timer, a
//! renewal the server refused, or the holder itself, releasing (or dropping) a hold the clock
//! already counted lost before the timer got round to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{name, MS};
use crate::fake::FakeBackend;
use crate::{Error, HoldState, LockClient, LockOptions, MemoryBackend};

/// Waits (bounded) until `count` reaches `expected`; callbacks run on a thread of their own.
fn settles_at(count: &AtomicUsize, expected: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while count.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
        thread::sleep(MS);
    }
    // Any extra call would come right after: give it a moment to show.
    thread::sleep(MS * 50);
    count.load(Ordering::SeqCst)
}

#[test]
fn on_lost_runs_once_for_each_loss_however_the_holder_ends_it() {
    const CYCLES: usize = 100;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let options = LockOptions::builder()
        .lease(MS * 30)
        .renewal(false)
        .on_lost(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let client = LockClient::with_options(MemoryBackend::new(), options);
    let lock = client.lock_named(&name("callback")).unwrap();
    for cycle in 0..CYCLES {
        let guard = lock.lock().unwrap();
        // The holder sees the loss by the clock and ends the hold at once, racing the timer.
        while guard.state() != HoldState::Lost {
            thread::yield_now();
        }
        if cycle % 2 == 0 {
            assert!(guard.unlock().is_err(), "a lost hold's unlock reports the loss");
        } else {
            drop(guard);
        }
    }
    assert_eq!(settles_at(&calls, CYCLES), CYCLES, "on_lost calls for {CYCLES} losses");
    // A hold released in time is no loss.
    let guard = lock.lock().unwrap();
    guard.unlock().unwrap();
    assert_eq!(settles_at(&calls, CYCLES), CYCLES);
}

/// A renewal batch that found one lock gone but still waits for another lease's check: the
/// gone lock's holder, releasing in that window, gets its loss reported (once), though the
/// batch would report it only after the release.
#[test]
fn a_release_right_after_a_renewal_found_the_lock_gone_reports_the_loss() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let backend = FakeBackend::default();
    // Checked one thread each, as the session kinds' holds are.
    backend.switches.independent.store(true, Ordering::SeqCst);
    let options = LockOptions::builder()
        .lease(MS * 3_000)
        .renew_interval(MS * 200)
        .on_lost(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let client = LockClient::with_options(backend.clone(), options);
    let (gone, slow) =
        (crate::LockName::new(name("gone")).unwrap(), crate::LockName::new(name("slow")).unwrap());
    let gone_guard = client.lock_named(gone.as_str()).unwrap().lock().unwrap();
    let _slow_guard = client.lock_named(slow.as_str()).unwrap().lock().unwrap();
    let signal = gone_guard.lost_signal();
    // The next batch finds `gone` gone at once and waits 500 ms for `slow`'s check.
    *backend.switches.slow_extend.lock() = Some((slow, 500));
    assert!(backend.inner.force_release(&gone));
    let before = backend.switches.extends.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.switches.extends.load(Ordering::SeqCst) < before + 2 && Instant::now() < deadline {
        thread::sleep(MS);
    }
    thread::sleep(MS * 100);
    assert!(!signal.is_lost(), "the batch has not reported yet");
    assert!(matches!(gone_guard.unlock(), Err(Error::NotHeld { .. })));
    assert!(signal.is_lost(), "the loss is signalled by the release");
    assert_eq!(settles_at(&calls, 1), 1, "on_lost calls for one loss");
}
