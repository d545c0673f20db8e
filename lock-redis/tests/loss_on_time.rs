//! Loss is never late, on real servers: a Redis server that stops answering (SIGSTOP) delays
//! only its own client's renewals; every lease of that client is reported lost by the end of its
//! lease (+ 50 ms) by a timer that does no I/O; its renewal batch ends within one read timeout;
//! and an unlock never waits behind a stuck batch for longer than its own backend's timeouts.
//! (The shared suite's S15 checks the same for every backend kind; these tests add the batch of
//! 32 leases and the unlock during a stuck batch.)

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Extension, Lock, LockClient, LockGuard, LockOptions, OwnerToken};
use lock_redis::RedisBackend;
use lock_testkit::harness::{shared, RedisServer};
use lock_testkit::suite::unique_name;

/// The stopped server's client: connect and read timeouts.
const TIMEOUT: Duration = Duration::from_millis(300);
const LEASE: Duration = Duration::from_secs(1);
/// How late a loss may be reported after the lease ends.
const LATE: Duration = Duration::from_millis(50);
/// The leases the stopped server's client holds.
const LEASES: usize = 32;

fn options() -> LockOptions {
    LockOptions::builder().lease(LEASE).build().expect("valid options")
}

fn stoppable_backend(server: &RedisServer) -> RedisBackend {
    RedisBackend::builder(server.url())
        .connect_timeout(TIMEOUT)
        .io_timeout(TIMEOUT)
        .build()
        .expect("backend of the private server")
}

fn healthy_client() -> LockClient<RedisBackend> {
    let url = shared::redis().expect("shared redis-server").address().to_owned();
    LockClient::with_options(RedisBackend::new(url).expect("backend of the shared server"), options())
}

#[test]
fn a_stopped_server_delays_only_its_own_clients_leases_and_loss_is_on_time() {
    let server = RedisServer::start().expect("private redis-server");
    let healthy = healthy_client();
    let stuck = LockClient::with_options(stoppable_backend(&server), options());
    let healthy_guard = Lock::new(&healthy, unique_name("healthy")).try_lock().unwrap().expect("free");
    let stuck_guards: Vec<LockGuard<RedisBackend>> = (0..LEASES)
        .map(|_| Lock::new(&stuck, unique_name("stuck")).try_lock().unwrap().expect("free"))
        .collect();
    // Raw leases of the same client's backend, for timing one batch against the stopped server.
    let raw = stoppable_backend(&server);
    let mut raw_leases: Vec<_> = (0..LEASES)
        .map(|_| raw.try_acquire(&unique_name("raw"), &OwnerToken::random(), LEASE).unwrap().expect("free"))
        .collect();
    thread::sleep(LEASE / 2); // Past one renewal round.

    server.process().pause().expect("SIGSTOP");
    let paused_at = Instant::now();
    // Every renewal the server confirmed was sent before it stopped.
    let ends_by = paused_at + LEASE;

    let batch_started = Instant::now();
    let mut batch: Vec<_> = raw_leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
    let results = raw.extend_many(&mut batch);
    let batch_took = batch_started.elapsed();
    assert_eq!(results.len(), LEASES);
    assert!(results.iter().all(Result::is_err), "a stopped server confirmed a renewal");
    assert!(
        batch_took <= TIMEOUT * 5 / 2,
        "a batch of {LEASES} renewals took {batch_took:?} against the stopped server (read timeout {TIMEOUT:?})"
    );

    let mut lost_at = vec![None; LEASES];
    while lost_at.iter().any(Option::is_none) && Instant::now() < ends_by + 4 * LATE {
        let now = Instant::now();
        for (guard, lost) in stuck_guards.iter().zip(&mut lost_at) {
            if lost.is_none() && guard.lost_signal().is_lost() {
                *lost = Some(now);
            }
        }
        assert!(
            healthy_guard.is_held(),
            "the healthy lease lapsed {:?} after the pause",
            paused_at.elapsed()
        );
        thread::sleep(Duration::from_millis(2));
    }
    let latest = lost_at.iter().map(|at| at.expect("every stuck lease is reported lost")).max().unwrap();
    let late = latest.saturating_duration_since(ends_by);
    println!("{LEASES} leases on the stopped server: the last was reported lost {late:?} after its lease ended at the latest; one batch took {batch_took:?}");
    assert!(late <= LATE, "a lease was reported lost {late:?} after its lease ended");
    assert!(stuck_guards.iter().all(|guard| !guard.is_held()));

    // The healthy client keeps renewing for two more leases while the stuck client's I/O hangs.
    let until = Instant::now() + 2 * LEASE;
    while Instant::now() < until {
        assert!(
            healthy_guard.is_held(),
            "the healthy lease lapsed {:?} after the pause",
            paused_at.elapsed()
        );
        thread::sleep(Duration::from_millis(5));
    }
    healthy_guard.unlock().expect("the healthy lock is still held");
    server.process().resume().expect("SIGCONT");
}

#[test]
fn unlock_does_not_wait_behind_a_stuck_renewal_batch() {
    let server = RedisServer::start().expect("private redis-server");
    let stuck = LockClient::with_options(stoppable_backend(&server), options());
    let guards: Vec<LockGuard<RedisBackend>> = (0..LEASES)
        .map(|_| Lock::new(&stuck, unique_name("unlock")).try_lock().unwrap().expect("free"))
        .collect();
    // A healthy client's unlock must not wait for the stuck one's batch either.
    let healthy = healthy_client();
    let healthy_guard = Lock::new(&healthy, unique_name("healthy")).try_lock().unwrap().expect("free");

    server.process().pause().expect("SIGSTOP");
    // Past the next renewal (a third of the lease): a batch of every lease is now stuck.
    thread::sleep(LEASE / 3 + Duration::from_millis(50));

    let started = Instant::now();
    healthy_guard.unlock().expect("healthy unlock");
    let healthy_took = started.elapsed();
    assert!(
        healthy_took < TIMEOUT,
        "the healthy unlock took {healthy_took:?} while another client's batch was stuck"
    );

    // The stuck client's own unlock: at most its own timeouts (connect + read), with slack.
    let bound = 2 * (TIMEOUT + TIMEOUT) + Duration::from_millis(200);
    for guard in guards.into_iter().take(3) {
        let started = Instant::now();
        let _ = guard.unlock();
        let took = started.elapsed();
        println!("an unlock during a stuck batch took {took:?}");
        assert!(took <= bound, "an unlock during a stuck batch took {took:?} (bound {bound:?})");
    }
    server.process().resume().expect("SIGCONT");
}
