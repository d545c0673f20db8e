//! S15 — loss on time (sources 002, 003): the holder's server stops answering (SIGSTOP, on servers
//! of the scenario's own) while a lease is held, beside a second client whose server is healthy.
//! Passes when the stuck holder's `is_held()` is false and its lost signal has fired by the end of
//! its lease + 50 ms, no call blocks past the client's configured timeouts, and the healthy
//! client's lease is renewed on time throughout.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockClient};

use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{acquire, client, options, unique_name, MS};
use crate::suite::{Failure, OwnServers, PausableServers, ScenarioResult, SuiteTarget, Verdict};

/// The lease of both holders (for session-bound holds: the session timeout).
const LEASE: Duration = Duration::from_millis(1500);
/// How late the loss may be reported after the lease ends.
const LATE: Duration = Duration::from_millis(50);
/// How often the scenario looks at both guards.
const LOOK_EVERY: Duration = Duration::from_millis(5);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let OwnServers { backend, servers, call_bound } = applicable!(target.own_servers())?;
    let healthy = client(target, options(LEASE, true))?;
    let stuck = LockClient::with_options(backend, options(LEASE, true));
    let healthy_guard = acquire(&Lock::new(&healthy, unique_name("s15-healthy")))?;
    let stuck_guard = acquire(&Lock::new(&stuck, unique_name("s15-stuck")))?;
    let lost = stuck_guard.lost_signal();
    // Let both leases be renewed once, so the stuck one is in its steady state when it stops.
    thread::sleep(LEASE / 2);
    ensure!(healthy_guard.is_held() && stuck_guard.is_held(), "a lease lapsed before any server stopped");

    let paused = Paused::new(&*servers)?;
    // Every request the stuck server confirmed was sent before it stopped, so its lease ends by
    // then + LEASE at the latest, by this process's clock.
    let ends_by = paused.since + LEASE;
    while !lost.is_lost() && Instant::now() < ends_by + LATE {
        ensure!(
            healthy_guard.is_held(),
            "the healthy client's lease lapsed {:?} after the other client's server stopped",
            paused.since.elapsed()
        );
        thread::sleep(LOOK_EVERY);
    }
    let reported = Instant::now();
    ensure!(
        lost.is_lost() && !stuck_guard.is_held(),
        "the stuck holder was not told its lock was lost by the end of its lease + {LATE:?} \
         (lost signal: {}, believes held: {})",
        lost.is_lost(),
        stuck_guard.is_held()
    );
    ensure!(
        reported <= ends_by + LATE + LOOK_EVERY,
        "the loss was reported {:?} after the lease ended",
        reported.saturating_duration_since(ends_by)
    );

    // The healthy client keeps renewing while the stuck client's calls hang, for another lease.
    let watch_until = Instant::now() + LEASE;
    while Instant::now() < watch_until {
        ensure!(
            healthy_guard.is_held(),
            "the healthy client's lease lapsed {:?} after the other client's server stopped",
            paused.since.elapsed()
        );
        thread::sleep(LOOK_EVERY);
    }

    // No call blocks past the client's timeouts: not the lost holder's unlock against the stopped
    // server, not the healthy holder's.
    for (who, unlock) in [
        ("the stuck holder's", Box::new(move || drop(stuck_guard.unlock())) as Box<dyn FnOnce()>),
        ("the healthy holder's", Box::new(move || drop(healthy_guard.unlock()))),
    ] {
        let started = Instant::now();
        unlock();
        let took = started.elapsed();
        ensure!(took <= call_bound, "{who} unlock took {took:?}, past the client's bound of {call_bound:?}");
    }
    paused.resume()?;
    drop(stuck);
    Ok(Verdict::Pass)
}

/// The servers, stopped until [`resume`](Self::resume) or drop (a failed check must not leave
/// them stopped for the rest of the run).
struct Paused<'a> {
    servers: &'a dyn PausableServers,
    since: Instant,
    resumed: bool,
}

impl<'a> Paused<'a> {
    fn new(servers: &'a dyn PausableServers) -> Result<Self, Failure> {
        servers.pause().map_err(|e| Failure(format!("pausing the servers: {e}")))?;
        Ok(Self { servers, since: Instant::now(), resumed: false })
    }

    fn resume(mut self) -> Result<(), Failure> {
        self.resumed = true;
        self.servers.resume().map_err(|e| Failure(format!("resuming the servers: {e}")))
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = self.servers.resume();
        }
        // Give a resumed server a moment before the next scenario's clients reach it.
        thread::sleep(MS);
    }
}
