//! Semaphores against the shared etcd server: their keys (`%semaphore/N/<unix nanos>`, value
//! the count, on the client's lease), no over-admission under 8 threads of each of 2 clients,
//! a mismatched count refused with a typed error, a dropped client's permit handed on at once
//! (its lease is revoked), waiters woken by a release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::{Deadline, Error, LockClient, LockName, OwnerToken, Permits, Request};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::{shared, EtcdServer};

fn server() -> &'static EtcdServer {
    shared::etcd().unwrap().server().expect("the harness's etcd server (etcdctl reads its keys)")
}

fn backend() -> EtcdBackend {
    EtcdBackend::from_url(&server().url()).expect("connect")
}

/// A name no other test or run uses.
fn unique(name: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{nanos}")
}

/// Every key under `prefix` with its value (`etcdctl get --prefix`: key and value lines).
fn keys_under(prefix: &str) -> Vec<(String, String)> {
    let output = server().etcdctl().args(["get", "--prefix", prefix]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines.chunks(2).map(|pair| (pair[0].to_owned(), pair.get(1).unwrap_or(&"").to_string())).collect()
}

#[test]
fn each_permit_is_a_key_holding_the_count() {
    let client = LockClient::new(backend());
    let name = unique("sem-layout");
    let prefix = format!("%semaphore/{name}/");
    let semaphore = client.semaphore(&name, 2).unwrap();
    let first = semaphore.try_acquire().unwrap().expect("free");
    let second = thread::scope(|scope| {
        scope.spawn(|| semaphore.try_acquire().unwrap().map(|guard| guard.fencing_token())).join().unwrap()
    });
    assert!(second.is_some(), "two permits");
    // The second thread's guard is gone with its thread: one key left.
    let stored = keys_under(&prefix);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let nanos = stored[0].0.strip_prefix(&prefix).unwrap();
    assert!(!nanos.is_empty() && nanos.bytes().all(|b| b.is_ascii_digit()), "{stored:?}");
    assert_eq!(stored[0].1, "2");
    assert!(second.unwrap() > first.fencing_token(), "tokens are create revisions");
    first.unlock().unwrap();
    assert!(keys_under(&prefix).is_empty());
}

#[test]
fn never_more_than_n_holders_under_8_threads_of_2_clients() {
    const PERMITS: u32 = 3;
    let name = unique("sem-bound");
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let clients = [LockClient::new(backend()), LockClient::new(backend())];
    thread::scope(|scope| {
        for client in &clients {
            for _ in 0..8 {
                let (holders, most, name) = (Arc::clone(&holders), Arc::clone(&most), name.clone());
                scope.spawn(move || {
                    let semaphore = client.semaphore(&name, PERMITS).unwrap();
                    for _ in 0..4 {
                        let guard =
                            semaphore.try_acquire_for(Duration::from_secs(30)).unwrap().expect("a permit");
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(15));
                        holders.fetch_sub(1, Ordering::SeqCst);
                        guard.unlock().unwrap();
                    }
                });
            }
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS as usize, "{most} holders at once");
    assert_eq!(most, PERMITS as usize, "16 threads never filled the {PERMITS} permits");
    assert!(keys_under(&format!("%semaphore/{name}/")).is_empty(), "no key left behind");
}

#[test]
fn a_mismatched_count_is_refused_and_leaves_no_key() {
    let (a, b) = (LockClient::new(backend()), LockClient::new(backend()));
    let name = unique("sem-mismatch");
    let prefix = format!("%semaphore/{name}/");
    let held = a.semaphore(&name, 2).unwrap().try_acquire().unwrap().expect("free");
    let theirs = b.semaphore(&name, 3).unwrap();
    for outcome in [
        theirs.try_acquire().map(|guard| guard.is_some()),
        theirs.try_acquire_for(Duration::from_secs(1)).map(|guard| guard.is_some()),
    ] {
        match outcome {
            Err(Error::PermitsMismatch { asked: 3, held_with: 2, .. }) => {}
            other => panic!("expected PermitsMismatch, got {other:?}"),
        }
    }
    assert_eq!(keys_under(&prefix).len(), 1, "the refused requests' keys are deleted");
    held.unlock().unwrap();
    let recounted = theirs.try_acquire().unwrap().expect("no permit held: a new count may be set");
    assert_eq!(keys_under(&prefix)[0].1, "3");
    recounted.unlock().unwrap();
}

#[test]
fn a_key_that_is_not_a_count_is_an_error_not_a_permit() {
    let client = LockClient::new(backend());
    let name = unique("sem-foreign");
    let foreign = format!("%semaphore/{name}/1700000000000000000");
    assert!(server().etcdctl().args(["put", &foreign, "hello"]).output().unwrap().status.success());
    let outcome = client.semaphore(&name, 5).unwrap().try_acquire();
    assert!(matches!(outcome, Err(Error::Backend { .. })), "{outcome:?}");
    assert_eq!(keys_under(&format!("%semaphore/{name}/")).len(), 1, "only the foreign key");
}

#[test]
fn a_dropped_client_s_permit_is_handed_on_at_once() {
    let name = unique("sem-dropped");
    let lock_name = LockName::new(&name).unwrap();
    let holder = backend();
    let owner = OwnerToken::random();
    let request = Request::new(
        &lock_name,
        &owner,
        Duration::from_secs(30),
        Deadline::Now,
        (Duration::ZERO, Duration::ZERO),
    );
    let permit = holder.acquire_permit(&request, 1).unwrap().expect("free");
    let waiting = LockClient::new(backend());
    let (acquired_tx, acquired_rx) = mpsc::channel();
    let waiter = {
        let name = name.clone();
        thread::spawn(move || {
            let semaphore = waiting.semaphore(&name, 1).unwrap();
            let guard = semaphore.acquire().unwrap();
            acquired_tx.send(Instant::now()).unwrap();
            guard.unlock().unwrap();
        })
    };
    assert!(acquired_rx.recv_timeout(Duration::from_millis(300)).is_err(), "the permit is held");
    // The holder's client goes without releasing: its lease is revoked, its key with it.
    let dropped_at = Instant::now();
    drop(holder);
    let acquired_at = acquired_rx.recv_timeout(Duration::from_secs(15)).expect("the permit came back");
    let handed_on = acquired_at.duration_since(dropped_at);
    assert!(handed_on < Duration::from_secs(2), "revoked, not expired: {handed_on:?}");
    waiter.join().unwrap();
    drop(permit.lease);
}
