//! A 3-member cluster whose leader is killed under a holder and a waiter: the hold survives (a
//! new leader keeps the lease), nobody else gets the lock meanwhile, and the waiter gets it once
//! released.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{HoldState, LockClient};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::EtcdCluster;

fn backend(cluster: &EtcdCluster) -> EtcdBackend {
    EtcdBackend::builder(cluster.endpoints().join(","))
        .session_ttl(Duration::from_secs(10))
        .io_timeout(Duration::from_secs(2))
        .build()
        .expect("connect")
}

#[test]
fn a_hold_survives_the_leader_s_death_and_excludes_meanwhile() {
    let cluster = EtcdCluster::start(3).unwrap();
    let (holder, rival) = (LockClient::new(backend(&cluster)), LockClient::new(backend(&cluster)));
    let guard = holder.lock_named("leader-killed").unwrap().lock().unwrap();
    let token = guard.fencing_token().unwrap();
    let waiter = {
        let rival = rival.clone();
        thread::spawn(move || {
            let guard = rival.lock_named("leader-killed").unwrap().lock().unwrap();
            let (at, token) = (Instant::now(), guard.fencing_token().unwrap());
            guard.unlock().unwrap();
            (at, token)
        })
    };
    thread::sleep(Duration::from_millis(300));
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
    let killed_at = Instant::now();
    cluster.members()[leader].process().kill9().unwrap();
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
    assert_ne!(new_leader, leader);
    // The holder's lease is kept by the new leader; the hold is confirmed again.
    let deadline = Instant::now() + Duration::from_secs(8);
    while guard.state() != HoldState::Held && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(guard.state(), HoldState::Held, "{:?} after the leader's death", killed_at.elapsed());
    assert!(!waiter.is_finished(), "the waiter must not get the lock while it is held");
    let released_at = Instant::now();
    guard.unlock().unwrap();
    let (acquired_at, rival_token) = waiter.join().unwrap();
    assert!(acquired_at >= released_at);
    assert!(rival_token > token);
    eprintln!(
        "leader killed: new leader after {:?}; hand-over {:?} after release",
        killed_at.elapsed(),
        acquired_at - released_at
    );
}
