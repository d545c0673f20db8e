//! The mutex against a real etcd: exclusion between clients and between threads of one client,
//! names that extend each other, fencing tokens, waiters woken one at a time, clean-up of
//! abandoned attempts.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockName, LockOptions};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::EtcdServer;

fn backend(server: &EtcdServer) -> EtcdBackend {
    EtcdBackend::from_url(&server.url()).expect("connect")
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[test]
fn lock_unlock_and_try_lock_across_two_clients() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let guard = a.lock_named("orders").unwrap().lock().unwrap();
    let holder = a.backend().holder(&name("orders")).unwrap().expect("held");
    assert_eq!(holder.0, format!("orders/{:x}", a.backend().lease_id()), "etcd's Mutex layout");
    assert!(b.lock_named("orders").unwrap().try_lock().unwrap().is_none());
    let started = Instant::now();
    let waited = b.lock_named("orders").unwrap().try_lock_for(Duration::from_millis(300)).unwrap();
    assert!(waited.is_none() && started.elapsed() >= Duration::from_millis(300));
    // Neither the failed try_lock nor the wait that gave up left a key behind.
    let contenders = a.backend().contenders(&name("orders")).unwrap();
    assert_eq!(contenders.len(), 1, "{contenders:?}");
    guard.unlock().unwrap();
    let second = b.lock_named("orders").unwrap().try_lock().unwrap().expect("free after unlock");
    assert!(a.lock_named("orders").unwrap().try_lock().unwrap().is_none());
    second.unlock().unwrap();
    assert!(a.backend().contenders(&name("orders")).unwrap().is_empty());
}

#[test]
fn a_blocked_lock_is_handed_over_on_release() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let guard = a.lock_named("handover").unwrap().lock().unwrap();
    let waiter = {
        let b = b.clone();
        thread::spawn(move || {
            let guard = b.lock_named("handover").unwrap().lock().unwrap();
            (Instant::now(), guard.fencing_token())
        })
    };
    thread::sleep(Duration::from_millis(300));
    let released_at = Instant::now();
    let first_token = guard.fencing_token();
    guard.unlock().unwrap();
    let (acquired_at, second_token) = waiter.join().unwrap();
    let handover = acquired_at.duration_since(released_at);
    assert!(handover < Duration::from_millis(500), "woken by the watch, not a recheck: {handover:?}");
    assert!(second_token > first_token);
    assert_eq!(b.backend().wake_ups(), 1);
}

#[test]
fn two_threads_of_one_client_exclude_each_other_on_one_name() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(backend(&server));
    let guard = client.lock_named("shared").unwrap().lock().unwrap();
    let other = {
        let client = client.clone();
        thread::spawn(move || {
            let lock = client.lock_named("shared").unwrap();
            let tried = lock.try_lock().unwrap().is_none();
            let started = Instant::now();
            let timed_out = lock.try_lock_for(Duration::from_millis(300)).unwrap().is_none();
            let waited = started.elapsed();
            let guard = lock.lock().unwrap();
            (tried, timed_out, waited, Instant::now(), guard.fencing_token())
        })
    };
    thread::sleep(Duration::from_millis(800));
    let released_at = Instant::now();
    let first_token = guard.fencing_token();
    guard.unlock().unwrap();
    let (tried, timed_out, waited, acquired_at, second_token) = other.join().unwrap();
    assert!(tried, "a second thread's try_lock must fail while the first holds");
    assert!(timed_out && waited >= Duration::from_millis(300), "{waited:?}");
    assert!(acquired_at >= released_at);
    assert!(second_token > first_token, "a new key per hold: {first_token:?} then {second_token:?}");
}

#[test]
fn many_threads_of_one_client_and_another_client_never_overlap() {
    let server = EtcdServer::start().unwrap();
    let clients = [LockClient::new(backend(&server)), LockClient::new(backend(&server))];
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|index| {
            let client = clients[index % 2].clone();
            let (inside, entries, start) = (Arc::clone(&inside), Arc::clone(&entries), Arc::clone(&start));
            thread::spawn(move || {
                let lock = client.lock_named("counter").unwrap();
                start.wait();
                for _ in 0..8 {
                    let guard = lock.lock().unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    entries.fetch_add(1, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 48);
}

#[test]
fn names_that_extend_each_other_do_not_interfere() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let parent = a.lock_named("a").unwrap().lock().unwrap();
    let child = b.lock_named("a/b").unwrap().try_lock().unwrap().expect("`a/b` is not `a`");
    let grandchild = a.lock_named("a/b/c").unwrap().try_lock().unwrap().expect("nor `a/b/c`");
    let (child_key, _) = b.backend().holder(&name("a/b")).unwrap().unwrap();
    assert!(child_key.starts_with("a%2Fb/"), "{child_key}");
    // Releasing the parent hands nothing to the children's waiters, and the other way round.
    let waiter = b.lock_named("a").unwrap();
    assert!(waiter.try_lock().unwrap().is_none());
    drop(child);
    drop(grandchild);
    assert!(waiter.try_lock().unwrap().is_none(), "`a` is still held");
    parent.unlock().unwrap();
    assert!(waiter.try_lock().unwrap().is_some());
}

#[test]
fn fencing_tokens_are_create_revisions_and_increase() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let mut last = 0;
    for round in 0..6 {
        let client = if round % 2 == 0 { &a } else { &b };
        let guard = client.lock_named("fenced").unwrap().lock().unwrap();
        let token = guard.fencing_token().expect("etcd issues fencing tokens").get();
        let (_, revision) = client.backend().holder(&name("fenced")).unwrap().unwrap();
        assert_eq!(token, revision, "the token is the key's create revision");
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        guard.unlock().unwrap();
    }
}

#[test]
fn a_lease_shorter_than_the_ttl_is_renewed_by_keep_alives() {
    let server = EtcdServer::start().unwrap();
    let options = LockOptions::builder()
        .lease(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let client = LockClient::with_options(backend(&server), options);
    let guard = client.lock_named("renewed").unwrap().lock().unwrap();
    let before = client.backend().keep_alive_requests();
    thread::sleep(Duration::from_secs(4));
    assert!(guard.is_held(), "{:?}", guard.state());
    let sent = client.backend().keep_alive_requests() - before;
    // About two renewal batches a second (one keep-alive each) and one every third of the TTL.
    assert!((4..=20).contains(&sent), "{sent} keep-alives in 4 s");
    guard.unlock().unwrap();
}

/// A sub-second session TTL is asked for as a whole second (etcd's unit, raised to its minimum):
/// the keep-alives' reply timeout counts from that, so holds outlive several granted TTLs.
#[test]
fn a_sub_second_session_ttl_keeps_its_holds_through_several_ttls() {
    let server = EtcdServer::start().unwrap();
    let locks = EtcdBackend::builder(server.endpoint())
        .session_ttl(Duration::from_millis(1))
        .build()
        .expect("connect");
    let granted = locks.session_ttl();
    let client = LockClient::new(locks);
    let guard = client.lock_named("sub-second-ttl").unwrap().lock().unwrap();
    let lease = client.backend().lease_id();
    thread::sleep(granted * 3);
    assert!(guard.is_held(), "{:?} after {:?} (granted TTL {granted:?})", guard.state(), granted * 3);
    assert_eq!(client.backend().lease_id(), lease, "the lease was replaced: it was lost");
    guard.unlock().unwrap();
}

#[test]
fn waits_without_end_and_huge_timeouts_are_fine() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let guard = a.lock_named("forever").unwrap().lock().unwrap();
    let waiter = thread::spawn(move || {
        b.lock_named("forever").unwrap().try_lock_for(Duration::MAX).map(|g| g.is_some())
    });
    thread::sleep(Duration::from_millis(200));
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn hostile_and_long_names_are_distinct_locks() {
    let server = EtcdServer::start().unwrap();
    let (a, b) = (LockClient::new(backend(&server)), LockClient::new(backend(&server)));
    let long = "/%".repeat(LockName::MAX_LEN / 2);
    let names = ["../../etc", "a/", "/", "%", "%2F", "x'; DROP", "锁 🔒", long.as_str(), "a b"];
    let guards: Vec<_> = names.iter().map(|name| a.lock_named(name).unwrap().lock().unwrap()).collect();
    for name in names {
        assert!(b.lock_named(name).unwrap().try_lock().unwrap().is_none(), "{name:?} is held");
    }
    assert!(b.lock_named("a").unwrap().try_lock().unwrap().is_some(), "`a` is none of them");
    for guard in guards {
        guard.unlock().unwrap();
    }
}
