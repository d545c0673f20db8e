//! The ZooKeeper scenarios of `SCENARIOS.md` (Z01, Z02) and the backend's bad-input checks, on
//! real harness servers: the shared standalone server, private ones to pause, and a 3-node
//! ensemble whose members are killed.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, HoldState, LockClient, LockName, LockOptions, OwnerToken};
use lock_testkit::eventually;
use lock_testkit::harness::{free_port, ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_zk::testkit::ZooKeeperTarget;
use lock_zk::ZooKeeperBackend;

const WAITERS: usize = 8;

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

/// The first `Some` that `probe` gives within ten seconds.
fn eventually_some<T>(mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "nothing within ten seconds");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Z01: eight waiters queue behind a holder; each release wakes exactly one of them (each counts
/// its own watch wake-ups), and they acquire in arrival order.
#[test]
fn z01_one_release_wakes_one_waiter_in_arrival_order() {
    let target = ZooKeeperTarget::new();
    let name = unique_name("z01");
    let observer = target.backend().unwrap();
    let holder = client(target.backend().unwrap());
    let first = holder.lock_named(name.as_str()).unwrap().lock().unwrap();

    let (acquired_tx, acquired) = mpsc::channel();
    let mut waiters = Vec::new();
    for index in 0..WAITERS {
        let backend = target.backend().unwrap();
        let counter = backend.clone();
        let (release_tx, release) = mpsc::channel::<()>();
        let acquired_tx = acquired_tx.clone();
        let waited = name.clone();
        let thread = thread::spawn(move || {
            let client = client(backend);
            let guard = client.lock_named(waited.as_str()).unwrap().lock().unwrap();
            acquired_tx.send(index).unwrap();
            release.recv().unwrap();
            guard.unlock().unwrap();
        });
        // Arrival order is the order of the nodes: wait until this waiter's node exists.
        assert!(
            eventually(Duration::from_secs(10), || observer.contenders(&name).unwrap().len() == index + 2),
            "waiter {index} never queued"
        );
        waiters.push((counter, release_tx, thread));
    }
    let wake_ups = |waiters: &[(ZooKeeperBackend, mpsc::Sender<()>, thread::JoinHandle<()>)]| {
        waiters.iter().map(|(backend, ..)| backend.wake_ups()).sum::<u64>()
    };
    assert_eq!(wake_ups(&waiters), 0, "a waiter was woken before any release");

    first.unlock().unwrap();
    for turn in 0..WAITERS {
        let index =
            acquired.recv_timeout(Duration::from_secs(10)).expect("no waiter acquired after a release");
        assert_eq!(index, turn, "waiters acquired out of arrival order");
        // Give a herd time to show: any other waiter woken by this release would count now.
        thread::sleep(Duration::from_millis(300));
        assert_eq!(wake_ups(&waiters), turn as u64 + 1, "release {turn} woke more (or less) than one waiter");
        waiters[turn].1.send(()).unwrap();
    }
    for (_, _, thread) in waiters {
        thread.join().unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || observer.contenders(&name).unwrap().is_empty()));
}

/// Z02, expiry: the server stops past the session timeout; the holder is told it lost the lock by
/// then, the node is gone once the server runs again, and the client acquires on a new session.
#[test]
fn z02_session_expiry_loses_the_lock_and_leaves_no_node() {
    let server = ZooKeeperServer::start().unwrap();
    let session_timeout = Duration::from_secs(2);
    let backend = ZooKeeperBackend::builder(server.connect_string())
        .session_timeout(session_timeout)
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(backend.session_timeout(), session_timeout);
    let holder = client(backend.clone());
    let name = unique_name("z02-expiry");
    let lock = holder.lock_named(name.as_str()).unwrap();
    let guard = lock.lock().unwrap();
    let lost = guard.lost_signal();

    server.process().pause().unwrap();
    let paused = Instant::now();
    assert!(lost.wait_timeout(session_timeout + Duration::from_secs(1)), "the holder was not told");
    // The hold is lost when the session timeout has passed since its last confirmed check.
    assert!(
        paused.elapsed() <= session_timeout + Duration::from_millis(250),
        "told after {:?}",
        paused.elapsed()
    );
    assert_eq!(guard.state(), HoldState::Lost);
    // Past the client's own expiry (7/5 of the timeout), then the server runs again.
    thread::sleep(session_timeout);
    server.process().resume().unwrap();
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));

    let observer = ZooKeeperBackend::builder(server.connect_string()).build().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || observer
            .contenders(&name)
            .is_ok_and(|nodes| nodes.is_empty())),
        "the expired session's node was left behind"
    );
    // A new session for the next acquisition.
    let again = lock.try_lock().unwrap().expect("the lock is free again");
    assert!(again.is_held());
}

/// Z02, ensemble: killing the leader while a lock is held is a short blip — the holder may be in
/// doubt but is never lost, no one else acquires, and it is held again afterwards; then the same
/// for a follower.
#[test]
fn z02_leader_loss_never_yields_two_holders() {
    let ensemble = ZooKeeperEnsemble::start(3).unwrap();
    let target = ZooKeeperTarget::at(ensemble.connect_string());
    // A session timeout well above an election and a reconnection on a loaded machine.
    let holder = client(target.builder().session_timeout(Duration::from_secs(10)).build().unwrap());
    let name = unique_name("z02-leader");
    let guard = holder.lock_named(name.as_str()).unwrap().lock().unwrap();

    // A rival tries all along, on a thread of its own (a try may wait out a request timeout).
    let stop = Arc::new(AtomicBool::new(false));
    let rival = {
        let (stop, backend, name) = (stop.clone(), target.backend().unwrap(), name.clone());
        thread::spawn(move || {
            let rival = client(backend).lock_named(name.as_str()).unwrap();
            let mut acquired = 0;
            while !stop.load(Ordering::SeqCst) {
                // An error (no quorum yet) is fine; a second holder is not.
                if let Ok(Some(guard)) = rival.try_lock() {
                    acquired += 1;
                    drop(guard);
                }
                thread::sleep(Duration::from_millis(20));
            }
            acquired
        })
    };

    // The leader, then (with the ensemble whole again) a follower: two of three members remain
    // each time, so the quorum holds.
    for role in [ZooKeeperMode::Leader, ZooKeeperMode::Follower] {
        let node = eventually_some(|| ensemble.nodes().iter().position(|node| node.mode() == Some(role)));
        ensemble.nodes()[node].process().kill9().unwrap();
        let killed = Instant::now();
        let mut states = Vec::new();
        while killed.elapsed() < Duration::from_secs(5) {
            let state = guard.state();
            assert_ne!(state, HoldState::Lost, "{role:?} loss lost the lock after {:?}", killed.elapsed());
            if !states.contains(&state) {
                states.push(state);
            }
            thread::sleep(Duration::from_millis(2));
        }
        // Only a holder whose own server died was in doubt, and only until it reconnected.
        assert!(
            eventually(Duration::from_secs(10), || guard.state() == HoldState::Held),
            "never held again after the {role:?}'s loss: {states:?}"
        );
        println!("states after the {role:?}'s loss: {states:?}");
        if role == ZooKeeperMode::Leader {
            // Followers drop their clients until a new leader is elected: Curator's SUSPENDED.
            assert!(states.contains(&HoldState::InDoubt), "the leader change went unnoticed: {states:?}");
        }
        ensemble.nodes()[node].process().restart().unwrap();
        assert!(
            eventually(Duration::from_secs(30), || ensemble.nodes().iter().all(|node| node.mode().is_some())),
            "the ensemble did not become whole again"
        );
    }
    stop.store(true, Ordering::SeqCst);
    assert_eq!(rival.join().unwrap(), 0, "a rival acquired the held lock");
    guard.unlock().unwrap();
}

/// Names that are paths, traversals or ZooKeeper's own word, and 255 bytes, each lock one node of
/// their own: no traversal, no collision.
#[test]
fn awkward_names_are_distinct_locks() {
    let target = ZooKeeperTarget::new();
    let client = client(target.backend().unwrap());
    let prefix = unique_name("names");
    let names = [
        format!("{prefix}/a/b"),
        format!("{prefix}%2Fa%2Fb"),
        "..".to_owned(),
        ".".to_owned(),
        "zookeeper".to_owned(),
        "x".repeat(LockName::MAX_LEN),
        format!("{prefix}\u{e000}\u{fff0}🔒锁"),
    ];
    let guards: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = client.lock_named(name).unwrap();
            lock.try_lock().unwrap().unwrap_or_else(|| panic!("{name:?} was held by another name"))
        })
        .collect();
    for guard in guards {
        guard.unlock().unwrap();
    }
}

/// A closed port, a server that never answers, and bad settings: typed errors within the
/// configured timeouts, never a hang or a panic.
#[test]
fn unreachable_servers_and_bad_settings_are_typed_errors() {
    let timeout = Duration::from_secs(1);
    let closed = format!("127.0.0.1:{}", free_port().unwrap());
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = silent.local_addr().unwrap().to_string();
    for (what, connect_string) in [("closed port", closed), ("silent server", silent)] {
        let started = Instant::now();
        let built = ZooKeeperBackend::builder(connect_string).connect_timeout(timeout).build();
        assert!(
            matches!(built, Err(Error::Connection { .. } | Error::Timeout { .. })),
            "{what}: {:?}",
            built.map(drop)
        );
        assert!(
            started.elapsed() < timeout + Duration::from_millis(500),
            "{what} took {:?}",
            started.elapsed()
        );
    }
    for root in ["relative", "/", "/zookeeper", "/a/../b"] {
        let built = ZooKeeperBackend::builder("127.0.0.1:1").root(root).build();
        assert!(matches!(built, Err(Error::InvalidConfig { .. })), "root {root:?}");
    }
    let backend = ZooKeeperTarget::new().backend().unwrap();
    let name = unique_name("bad-lease");
    let zero = backend.try_acquire(&name, &OwnerToken::random(), Duration::ZERO);
    assert!(matches!(zero, Err(Error::InvalidConfig { .. })));
}

/// A hold is believed for at most the session timeout after its last check, whatever the lease.
#[test]
fn the_session_timeout_caps_the_lease_a_holder_counts_on() {
    let backend = ZooKeeperTarget::new().backend().unwrap();
    let session = backend.session_timeout();
    assert_eq!(backend.lease_margin(Duration::from_secs(30)), Duration::from_secs(30) - session);
    assert_eq!(backend.lease_margin(session / 2), Duration::ZERO);
}

/// The fencing token is the node's creation zxid: it grows across holders and across a new
/// client, and the lock node sits where Curator's `InterProcessMutex` puts it.
#[test]
fn tokens_are_creation_zxids_in_curator_layout() {
    let target = ZooKeeperTarget::new();
    let backend = target.backend().unwrap();
    let name = unique_name("fence");
    let owner = OwnerToken::random();
    let first = backend.try_acquire(&name, &owner, Duration::from_secs(10)).unwrap().unwrap();
    let node = first.node().to_owned();
    let prefix = format!("{}/{}/_c_", backend.root(), name.as_str());
    assert!(node.starts_with(&prefix), "{node}");
    let sequence = node.rsplit_once("-lock-").map(|(_, sequence)| sequence).unwrap();
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()), "{node}");
    let first_token = first.fencing_token();
    assert!(backend.release(first).unwrap());

    let other = target.backend().unwrap();
    let second = other.try_acquire(&name, &owner, Duration::from_secs(10)).unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
    assert!(other.release(second).unwrap());
}
