//! Renewal costs per client, not per lease: however many leases a client holds, and however
//! their acquisitions are spread over time, the renewal timer sends about two batches (one
//! backend round trip each) per renew interval, and never renews a lease later than its interval.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use super::{name, options, MS};
use crate::fake::FakeBackend;
use crate::LockClient;

/// 10,000 leases, acquired over a whole renew interval, each on a schedule of its own.
#[test]
fn ten_thousand_leases_renew_in_about_two_batches_per_interval() {
    const LEASES: usize = 10_000;
    let backend = FakeBackend::default();
    // Lease 900 ms: renewed every 300 ms.
    let client = LockClient::with_options(backend.clone(), options(900, true));
    let interval = client.options().renew_interval();
    let locks: Vec<_> =
        (0..LEASES).map(|i| client.lock_named(&name(&format!("batch-{i}"))).unwrap()).collect();
    let mut guards = Vec::with_capacity(LEASES);
    // Spread over one interval, in 20 steps: 20 due times a client without coalescing renews
    // one batch each (more when a batch is in flight as others fall due).
    for chunk in locks.chunks(LEASES / 20) {
        guards.extend(chunk.iter().map(|lock| lock.try_lock().unwrap().expect("free")));
        thread::sleep(interval / 20);
    }
    // Two intervals for the schedules to fall into step, then count over five.
    thread::sleep(interval * 2);
    let (batches, extends) = (&backend.switches.batches, &backend.switches.extends);
    let (batches_before, extends_before, started) =
        (batches.load(Ordering::SeqCst), extends.load(Ordering::SeqCst), Instant::now());
    let mut held_throughout = true;
    while started.elapsed() < interval * 5 {
        held_throughout &= guards.iter().step_by(97).all(|guard| guard.is_held());
        thread::sleep(MS * 20);
    }
    let windows = started.elapsed().as_secs_f64() / interval.as_secs_f64();
    let batches = batches.load(Ordering::SeqCst) - batches_before;
    let extends = extends.load(Ordering::SeqCst) - extends_before;
    println!("{LEASES} leases: {batches} renewal batches, {extends} renewals in {windows:.1} intervals");
    assert!(held_throughout, "a lease lapsed");
    assert!(guards.iter().all(|guard| guard.is_held()), "a lease lapsed");
    // About two per interval; one more per boundary of the window.
    assert!(
        batches as f64 <= 2.0 * windows + 2.0,
        "{batches} renewal batches in {windows:.1} intervals for {LEASES} leases"
    );
    // Early renewal costs at most one renewal per lease per half interval.
    assert!(
        extends as f64 <= LEASES as f64 * (2.0 * windows + 2.0),
        "{extends} renewals in {windows:.1} intervals for {LEASES} leases"
    );
    drop(guards);
}
