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
    let lock = client.lock_named(&name("dropped")).unwrap();
    let lock_name = lock.name().clone();
    let guard = lock.lock().unwrap();
    drop(client);
    assert!(backend.inner.remaining_lease(&lock_name).is_some(), "a Lock is a handle: still open");
    drop(lock);
    assert!(backend.inner.remaining_lease(&lock_name).is_none(), "the last handle released the lock");
    assert_eq!(guard.state(), HoldState::Released);
    drop(guard);
    assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 1);
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
