//! W1, measured: an uncontended lock + unlock pair beside a plain etcd transaction round trip
//! and beside etcd's own server-side Lock service (lock + unlock RPCs, same client library).
//! A lock + unlock is two transactions (enqueue, guarded delete), so about two round trips.
//!
//! Run with `cargo test -p lock-etcd --test round_trips -- --ignored --nocapture`; the default
//! run only checks the ratio loosely, with few iterations.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, LockOptions as EtcdLockOptions, PutOptions, Txn, TxnOp};
use lock_core::{DistributedLock, LockClient, LockName, OwnerToken};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::EtcdServer;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

struct Figures {
    txn: Duration,
    pair: Duration,
    /// The backend's own try_acquire + release, without lock-core's client around it.
    backend_pair: Duration,
    lock_service: Duration,
}

fn measure(iterations: usize) -> Figures {
    let server = EtcdServer::start().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut plain = runtime.block_on(Client::connect([server.endpoint()], None)).unwrap();
    let lease = runtime.block_on(plain.lease_grant(10, None)).unwrap().id();
    let txn = || {
        Txn::new()
            .when([Compare::create_revision("w1-plain", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("w1-plain", "", Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get("w1-plain", None)])
    };
    let mut txn_samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        runtime.block_on(plain.txn(txn())).unwrap();
        txn_samples.push(started.elapsed());
    }
    let mut service_samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let locked = runtime
            .block_on(plain.lock("w1-service", Some(EtcdLockOptions::new().with_lease(lease))))
            .unwrap();
        runtime.block_on(plain.unlock(locked.key().to_vec())).unwrap();
        service_samples.push(started.elapsed());
    }
    let client = LockClient::new(EtcdBackend::from_url(&server.url()).unwrap());
    let lock = client.lock_named("w1-distlock").unwrap();
    let mut pair_samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        lock.lock().unwrap().unlock().unwrap();
        pair_samples.push(started.elapsed());
    }
    let (backend, name, owner) =
        (client.backend(), LockName::new("w1-backend").unwrap(), OwnerToken::random());
    let mut backend_samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let lease = backend.try_acquire(&name, &owner, Duration::from_secs(30)).unwrap().unwrap();
        assert!(backend.release(lease).unwrap());
        backend_samples.push(started.elapsed());
    }
    Figures {
        txn: median(txn_samples),
        pair: median(pair_samples),
        backend_pair: median(backend_samples),
        lock_service: median(service_samples),
    }
}

fn report(figures: &Figures) {
    eprintln!(
        "W1 (median): txn round trip {:?}; distlock lock+unlock {:?} ({:.2} round trips; the backend's \
         try_acquire+release alone {:?}); etcd Lock service lock+unlock {:?} (distlock at {:.2}x its speed)",
        figures.txn,
        figures.pair,
        figures.pair.as_secs_f64() / figures.txn.as_secs_f64(),
        figures.backend_pair,
        figures.lock_service,
        figures.lock_service.as_secs_f64() / figures.pair.as_secs_f64(),
    );
}

#[test]
fn a_lock_unlock_pair_is_about_two_round_trips() {
    let figures = measure(50);
    report(&figures);
    let round_trips = figures.pair.as_secs_f64() / figures.txn.as_secs_f64();
    assert!(round_trips < 6.0, "{round_trips:.2} round trips per lock + unlock");
}

#[test]
#[ignore = "a measurement: run on purpose, with --nocapture"]
fn w1_measured() {
    report(&measure(1_000));
}
