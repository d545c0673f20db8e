//! Z01 and Z02 of `docs/scenarios.md` on real harness servers: the shared standalone server, private
//! ones to pause, and a 3-node ensemble whose members are killed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, HoldState, LockClient, LockOptions};
use lock_testkit::eventually;
use lock_testkit::harness::{ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer};
use lock_testkit::suite::{unique_name, SuiteTarget};

use super::ZooKeeperTarget;
use crate::ZooKeeperBackend;

const WAITERS: usize = 8;

pub(super) fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
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
pub(super) fn z01() {
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
pub(super) fn z02_expiry() {
    let server = ZooKeeperServer::start().unwrap();
    let session_timeout = Duration::from_secs(2);
    let backend = ZooKeeperBackend::builder(server.connect_string())
        .session_timeout(session_timeout)
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(1))
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

/// Z02, a session closed under the client (another connection takes the session over and closes
/// it, as Curator's `KillSession` does): its nodes go at once, so a rival may take the lock. The
/// hold is in doubt, and stays so when the client's next call connects a new session, until it
/// is lost — here, with renewal off, by its clock: only the session's state tells the holder.
pub(super) fn z02_closed_session() {
    let server = ZooKeeperServer::start().unwrap();
    let upstream: std::net::SocketAddr = server.connect_string().parse().expect("host:port");
    // The holder's connection goes through a proxy, cut while the session is taken over (the
    // holder would otherwise take it back at once).
    let proxy = lock_testkit::FaultProxy::start(upstream).unwrap();
    let session_timeout = Duration::from_secs(8);
    let backend = ZooKeeperBackend::builder(proxy.address().to_string())
        .session_timeout(session_timeout)
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let options = LockOptions::builder().lease(session_timeout).renewal(false).build().unwrap();
    let holder = LockClient::with_options(backend.clone(), options);
    let guard = holder.lock_named(unique_name("z02-closed-a").as_str()).unwrap().lock().unwrap();
    let session = backend.inner.session.current().expect("a session").session().clone();
    proxy.cut();
    let closer = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    closer.block_on(async {
        let taken_over = zookeeper_client::Client::connector()
            .with_session(session)
            .connect(&server.connect_string())
            .await;
        // Dropped on a live runtime: the client closes the session.
        drop(taken_over.expect("the session taken over"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    proxy.restore();
    // The holder learns that its session ended when it reconnects.
    assert!(
        eventually(session_timeout / 2, || backend
            .inner
            .session
            .current()
            .is_some_and(|client| crate::session::is_terminal(client.state()))),
        "the holder's client did not find its session ended"
    );
    assert_ne!(guard.state(), HoldState::Held, "a hold of an ended session reads Held");
    let other = holder.lock_named(unique_name("z02-closed-b").as_str()).unwrap().lock().unwrap();
    assert!(other.is_held(), "the next acquisition has a new session");
    assert!(!guard.lost_signal().is_lost(), "lost by the clock already: the check below would see nothing");
    lock_testkit::never_held_until_lost(
        &guard,
        "a hold of the closed session, under the client's new session",
    );
    other.unlock().unwrap();
}

/// Z02, ensemble: killing the leader while a lock is held is a short blip — the holder may be in
/// doubt but is never lost, no one else acquires, and it is held again afterwards; then the same
/// for a follower.
pub(super) fn z02_leader_loss() {
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
