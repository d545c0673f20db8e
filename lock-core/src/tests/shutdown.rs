//! Clean shutdown: `close`, dropping the last handle, and `force_unlock` for a leaked guard.

use std::sync::atomic::Ordering;

use super::{name, options};
use crate::fake::FakeBackend;
use crate::{Error, HoldState, LockClient};

#[test]
fn close_releases_every_lock_stops_renewal_and_refuses_new_ones() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(10_000, true));
    let (first, second) =
        (client.lock_named(&name("close-a")).unwrap(), client.lock_named(&name("close-b")).unwrap());
    let first_guard = first.lock().unwrap();
    let second_guard = second.lock().unwrap();
    client.close().unwrap();
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 2, "both locks released on the server");
    assert!(backend.inner.remaining_lease(first.name()).is_none());
    assert_eq!(first_guard.state(), HoldState::Released);
    assert!(matches!(first.try_lock(), Err(Error::Closed)));
    first_guard.unlock().expect("unlocking a guard of a closed client is harmless");
    drop(second_guard);
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 2, "nothing released twice");
    client.close().expect("closing again does nothing");
}

#[test]
fn dropping_the_last_handle_releases_what_the_client_holds() {
    let backend = FakeBackend::default();
    let client = LockClient::with_options(backend.clone(), options(10_000, true));
    let (first, second) =
        (client.lock_named(&name("dropped-a")).unwrap(), client.lock_named(&name("dropped-b")).unwrap());
    let (first_name, second_name) = (first.name().clone(), second.name().clone());
    let (first_guard, second_guard) = (first.lock().unwrap(), second.lock().unwrap());
    drop((client, first, second));
    assert_eq!(first_guard.state(), HoldState::Held, "a guard keeps its client alive");
    drop(first_guard);
    assert!(backend.inner.remaining_lease(&first_name).is_none());
    assert_eq!(second_guard.state(), HoldState::Held);
    assert!(matches!(
        LockClient::with_options(backend.clone(), options(10_000, true))
            .lock_named(second_name.as_str())
            .unwrap()
            .try_lock(),
        Ok(None)
    ));
    drop(second_guard);
    assert!(backend.inner.remaining_lease(&second_name).is_none(), "the last handle released every hold");
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 2);
}

/// Issue 16: `fn take() -> LockGuard<_> { LockClient::new(b).lock_named("x")?.lock()? }`.
#[test]
fn a_guard_returned_from_a_function_keeps_its_hold() {
    fn take(backend: FakeBackend, name: &str) -> crate::Result<crate::LockGuard<FakeBackend>> {
        LockClient::with_options(backend, options(10_000, true)).lock_named(name)?.lock()
    }
    let backend = FakeBackend::default();
    let lock_name = name("returned");
    let guard = take(backend.clone(), &lock_name).unwrap();
    assert_eq!(guard.state(), HoldState::Held);
    assert!(guard.is_held());
    let rival = LockClient::with_options(backend.clone(), options(10_000, true));
    assert!(rival.lock_named(&lock_name).unwrap().try_lock().unwrap().is_none(), "still held");
    guard.unlock().unwrap();
    assert!(rival.lock_named(&lock_name).unwrap().try_lock().unwrap().is_some());
}

/// Issue 16: an acquisition that passed the closed check before `close()` either finishes
/// before `close` returns (and is released by it) or returns `Error::Closed` — never a live
/// guard after `close` returned.
#[test]
fn close_racing_acquisitions_leaves_no_live_guard() {
    for round in 0..50 {
        let backend = FakeBackend::default();
        let client = LockClient::with_options(backend.clone(), options(10_000, true));
        let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|index| {
                let (client, closed) = (client.clone(), std::sync::Arc::clone(&closed));
                std::thread::spawn(move || {
                    let lock = client.lock_named(&name(&format!("race-{round}-{index}"))).unwrap();
                    let lock_name = lock.name().clone();
                    loop {
                        match lock.try_lock() {
                            Ok(Some(guard)) => {
                                if closed.load(Ordering::SeqCst) {
                                    assert_eq!(
                                        guard.state(),
                                        HoldState::Released,
                                        "a live guard after close"
                                    );
                                    return lock_name;
                                }
                                drop(guard);
                            }
                            Ok(None) => {}
                            Err(Error::Closed) => return lock_name,
                            Err(error) => panic!("{error}"),
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_micros(200));
        client.close().unwrap();
        closed.store(true, Ordering::SeqCst);
        for thread in threads {
            let lock_name = thread.join().unwrap();
            assert!(
                backend.inner.remaining_lease(&lock_name).is_none(),
                "round {round}: {lock_name} left held"
            );
        }
    }
}

#[test]
fn force_unlock_frees_a_leaked_guard_and_never_another_owners_lock() {
    let backend = FakeBackend::default();
    let leaker = LockClient::with_options(backend.clone(), options(10_000, true));
    let rival = LockClient::with_options(backend.clone(), options(10_000, true));
    let lock_name = name("leaked");
    let leaked = leaker.lock_named(&lock_name).unwrap();
    std::mem::forget(leaked.lock().unwrap());
    let rival_lock = rival.lock_named(&lock_name).unwrap();
    assert!(rival_lock.try_lock().unwrap().is_none(), "the leaked guard still holds the lock");

    assert!(leaked.force_unlock().unwrap(), "there was a hold to release");
    let rival_guard = rival_lock.try_lock().unwrap().expect("free after force_unlock");
    assert!(!leaked.force_unlock().unwrap(), "nothing left to release");
    assert!(rival_guard.is_held(), "force_unlock never releases another owner's lock");
    assert_eq!(leaked.hold_count(), 0);
}

#[test]
fn a_high_release_rate_does_not_grow_the_renewal_queues() {
    let client = LockClient::with_options(FakeBackend::default(), options(60_000, true));
    let lock = client.lock_named(&name("churn")).unwrap();
    for _ in 0..10_000 {
        lock.lock().unwrap().unlock().unwrap();
    }
    let queued = client.shared.leases.queued();
    assert!(queued < 5_000, "{queued} queue entries left by 10,000 released leases");
}
