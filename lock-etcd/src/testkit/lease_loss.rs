//! E03 — the client's lease ends under its holds: revoked on the server, expired behind a cut
//! network, or unconfirmable with the server dead. Every hold is told it is lost, and where the
//! lease expires, before a rival can acquire; later acquisitions get a new lease.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{HoldState, LockClient, LockOptions};
use lock_testkit::harness::EtcdServer;
use lock_testkit::FaultProxy;

use crate::EtcdBackend;

/// The client lease's TTL in these tests: etcd's minimum with its default timing.
const TTL: Duration = Duration::from_secs(2);

fn backend_at(endpoint: &str) -> EtcdBackend {
    EtcdBackend::builder(endpoint)
        .session_ttl(TTL)
        .io_timeout(Duration::from_millis(800))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("connect")
}

/// Polls `condition` every 10 ms for up to `timeout`; the instant it held.
fn within(timeout: Duration, mut condition: impl FnMut() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return Some(Instant::now());
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

pub(super) fn a_revoked_lease_loses_every_hold_of_the_client() {
    let server = EtcdServer::start().unwrap();
    let options = LockOptions::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let holder = LockClient::with_options(backend_at(&server.endpoint()), options);
    let guards: Vec<_> =
        (0..3).map(|i| holder.lock_named(&format!("e03-{i}")).unwrap().lock().unwrap()).collect();
    let lease = holder.backend().lease_id();
    let revoked = server.etcdctl().args(["lease", "revoke", &format!("{lease:x}")]).output().unwrap();
    assert!(revoked.status.success(), "{revoked:?}");
    let revoked_at = Instant::now();
    for guard in &guards {
        assert!(guard.lost_signal().wait_timeout(Duration::from_secs(2)), "told within one renewal interval");
        eprintln!("E03 revoke: told lost after {:?}", revoked_at.elapsed());
        assert_eq!(guard.state(), HoldState::Lost);
    }
    for guard in guards {
        assert!(guard.unlock().is_err(), "unlocking a lost hold reports it");
    }
    // Later acquisitions get a new lease.
    let again =
        holder.lock_named("e03-0").unwrap().try_lock().unwrap().expect("free: the keys went with the lease");
    assert_ne!(holder.backend().lease_id(), lease);
    again.unlock().unwrap();
}

/// A hold on a lease the client found revoked stays in doubt once the client has a new lease
/// (another acquisition asked for one), until it is lost: with renewal off, by its clock alone,
/// so no check of its own reports the loss first and only the lease's state stands between
/// the holder and a `Held` it no longer has (a rival may take the lock at once).
pub(super) fn a_hold_on_a_revoked_lease_stays_in_doubt_under_the_client_s_new_lease() {
    const SESSION_TTL: Duration = Duration::from_secs(6);
    let server = EtcdServer::start().unwrap();
    let backend = EtcdBackend::builder(server.endpoint())
        .session_ttl(SESSION_TTL)
        .io_timeout(Duration::from_millis(800))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("connect");
    let options = LockOptions::builder().lease(SESSION_TTL).renewal(false).build().unwrap();
    let holder = LockClient::with_options(backend, options);
    let guard = holder.lock_named("e03-new-lease-a").unwrap().lock().unwrap();
    let lease = holder.backend().lease_id();
    let revoked = server.etcdctl().args(["lease", "revoke", &format!("{lease:x}")]).output().unwrap();
    assert!(revoked.status.success(), "{revoked:?}");
    // The next keep-alive (every third of the TTL) is answered with TTL 0.
    within(SESSION_TTL / 2, || guard.state() != HoldState::Held)
        .expect("in doubt once the keep-alive finds it");
    let other = holder.lock_named("e03-new-lease-b").unwrap().lock().unwrap();
    assert_ne!(holder.backend().lease_id(), lease, "a new lease for the new hold");
    assert!(other.is_held());
    lock_testkit::never_held_until_lost(&guard, "a hold on the revoked lease, under the client's new lease");
    assert!(guard.unlock().is_err(), "unlocking a lost hold reports it");
    other.unlock().unwrap();
}

pub(super) fn a_cut_off_holder_is_told_before_a_rival_gets_the_lock() {
    let server = EtcdServer::start().unwrap();
    let upstream: SocketAddr = server.endpoint().parse().unwrap();
    let proxy = FaultProxy::start(upstream).unwrap();
    let holder = LockClient::new(backend_at(&proxy.address().to_string()));
    let rival = LockClient::new(backend_at(&server.endpoint()));
    let guard = holder.lock_named("e03-cut").unwrap().lock().unwrap();
    thread::sleep(Duration::from_millis(500));
    let cut_at = Instant::now();
    proxy.cut();
    let lost = guard.lost_signal();
    let waiter = thread::spawn(move || {
        let guard = rival.lock_named("e03-cut").unwrap().lock().unwrap();
        let at = Instant::now();
        guard.unlock().unwrap();
        at
    });
    let doubted = within(TTL, || guard.state() == HoldState::InDoubt);
    assert!(lost.wait_timeout(TTL + Duration::from_secs(1)), "told lost within the TTL");
    let lost_at = Instant::now();
    let rival_at = waiter.join().unwrap();
    assert!(doubted.is_some(), "in doubt before lost");
    eprintln!(
        "E03 cut (TTL {TTL:?}): in doubt after {:?}, told lost after {:?}, rival in after {:?}",
        doubted.unwrap() - cut_at,
        lost_at - cut_at,
        rival_at - cut_at
    );
    assert!(
        lost_at < rival_at,
        "told at {:?}, rival in at {:?} after the cut",
        lost_at - cut_at,
        rival_at - cut_at
    );
    assert!(lost_at - cut_at <= TTL, "{:?}", lost_at - cut_at);
    proxy.restore();
    drop(guard);
}

pub(super) fn a_killed_server_puts_holds_in_doubt_then_loses_them_on_time() {
    let server = EtcdServer::start().unwrap();
    let holder = LockClient::new(backend_at(&server.endpoint()));
    let guard = holder.lock_named("e03-kill").unwrap().lock().unwrap();
    thread::sleep(Duration::from_millis(300));
    assert!(guard.is_held());
    let killed_at = Instant::now();
    server.process().kill9().unwrap();
    let doubted =
        within(TTL, || guard.state() == HoldState::InDoubt).expect("in doubt once the stream breaks");
    assert!(doubted - killed_at < Duration::from_secs(1), "{:?}", doubted - killed_at);
    assert!(guard.lost_signal().wait_timeout(TTL + Duration::from_millis(500)));
    let lost_after = killed_at.elapsed();
    eprintln!("E03 kill (TTL {TTL:?}): in doubt after {:?}, lost after {lost_after:?}", doubted - killed_at);
    assert!(lost_after <= TTL + Duration::from_millis(100), "lost {lost_after:?} after the kill");
    // The server back (its data kept): later acquisitions get a new lease and the lock once the
    // old lease has expired there too.
    server.process().restart().unwrap();
    drop(guard);
    let again = holder.lock_named("e03-kill").unwrap().try_lock_for(Duration::from_secs(10)).unwrap();
    assert!(again.is_some(), "the lock comes back after the old lease expires");
}
