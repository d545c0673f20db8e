//! S16 — the holder's connection is cut (sources 002, 003): every connection of a client holding
//! [`HOLDS`] locks goes through a [`FaultProxy`](crate::FaultProxy) that stops forwarding (TCP stays open, nothing
//! arrives either way), while rivals with connections of their own try to take the locks.
//!
//! Passes when, for every lock, the holder is told it lost it (its [`LostSignal`] fires) before
//! a rival acquires it, and the lock is free on the server within the lease + 1 s of that —
//! which for a session hold (row and advisory locks, ZooKeeper) means the server ends the cut
//! session by itself — and every call of the cut client (unlocks, a fresh `try_lock`) returns
//! within one connect and one I/O timeout, however many locks it holds.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{HoldState, Lock, LockClient, LockName, LostSignal};

use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};
use crate::FaultProxies;

/// The lease (for session holds: how long liveness checks may fail before the hold is lost).
const LEASE: Duration = Duration::from_secs(3);
/// The cut client's connect and I/O timeouts.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Locks the cut client holds.
const HOLDS: u32 = 16;
/// How long after its loss a rival may take to get a lock: the lease + 1 s the scenario allows
/// the server, plus the rival's own polling and scheduling.
const FREE_WITHIN: Duration = Duration::from_millis(LEASE.as_millis() as u64 + 1_000);
/// How often rivals try.
const RIVAL_TRY: Duration = Duration::from_millis(20);
/// How often the scenario looks at the cut client's guards.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// What one rival saw.
struct RivalOutcome {
    name: LockName,
    acquired_at: Option<Instant>,
    /// Whether the holder's signal had fired when the rival's acquisition returned.
    holder_told: bool,
    error: Option<String>,
}

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let mut proxies = FaultProxies::default();
    let routed = target.backend_routed(&mut |server| proxies.route(server), TIMEOUT, HOLDS);
    let backend = applicable!(routed)?;
    proxies.check().map_err(|error| Failure(error.to_string()))?;
    let call_bound = target.routed_call_bound(TIMEOUT);
    let holder = LockClient::with_options(backend, options(LEASE, true));
    let rival = client(target, options(LEASE, true))?;

    let names: Vec<LockName> = (0..HOLDS).map(|_| unique_name("s16")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(acquire(&Lock::new(&holder, name.clone()))?);
    }
    let signals: Vec<LostSignal> = guards.iter().map(|guard| guard.lost_signal()).collect();
    // Let every hold be renewed (or checked) at least once before the cut.
    thread::sleep(LEASE / 2);
    ensure!(guards.iter().all(|guard| guard.is_held()), "a hold lapsed before the cut");

    proxies.cut();
    let cut_at = Instant::now();
    // When each holder learns of its loss, by this process's clock.
    let (lost_tx, lost_rx) = mpsc::channel();
    for (index, signal) in signals.iter().enumerate() {
        let (signal, lost_tx) = (signal.clone(), lost_tx.clone());
        thread::spawn(move || {
            if signal.wait_timeout(LEASE + FREE_WITHIN + 10 * SECOND) {
                let _ = lost_tx.send((index, Instant::now()));
            }
        });
    }
    let give_up = cut_at + LEASE + FREE_WITHIN + 10 * SECOND;
    let rivals: Vec<_> = names
        .iter()
        .zip(&signals)
        .map(|(name, signal)| {
            let (lock, signal, name) = (Lock::new(&rival, name.clone()), signal.clone(), name.clone());
            thread::spawn(move || rival_tries(&lock, &signal, name, give_up))
        })
        .collect();

    // The holder's view while the rivals try: no hold may turn back to held, and a lost one
    // stays lost.
    let mut states = vec![HoldState::Held; guards.len()];
    while rivals.iter().any(|rival| !rival.is_finished()) {
        for (guard, seen) in guards.iter().zip(states.iter_mut()) {
            let now = guard.state();
            ensure!(
                !(*seen == HoldState::Lost && now != HoldState::Lost),
                "{}: the holder went from lost back to {now:?}",
                guard.name()
            );
            *seen = now;
        }
        thread::sleep(LOOK_EVERY);
    }
    let outcomes: Vec<RivalOutcome> = rivals
        .into_iter()
        .map(|rival| rival.join().map_err(|_| Failure("a rival panicked".into())))
        .collect::<Result<_, _>>()?;
    let mut lost_at = vec![None; signals.len()];
    while let Ok((index, at)) = lost_rx.try_recv() {
        lost_at[index] = Some(at);
    }

    for (outcome, lost_at) in outcomes.iter().zip(&lost_at) {
        let name = &outcome.name;
        if let Some(error) = &outcome.error {
            return Err(Failure(format!("{name}: the rival failed: {error}")));
        }
        let Some(acquired_at) = outcome.acquired_at else {
            return Err(Failure(format!(
                "{name}: no rival got the lock within {:?} of the cut: the server kept the cut holder's lock",
                give_up - cut_at
            )));
        };
        ensure!(
            outcome.holder_told,
            "{name}: a rival acquired {:?} after the cut, before the holder was told it lost the lock",
            acquired_at - cut_at
        );
        let Some(lost_at) = lost_at else {
            return Err(Failure(format!("{name}: the holder's lost signal never fired")));
        };
        let free_after = acquired_at.saturating_duration_since(*lost_at);
        ensure!(
            free_after <= FREE_WITHIN,
            "{name}: a rival got the lock {free_after:?} after the holder was told it lost it \
             ({:?} after the cut); the server must free it within the lease + 1 s",
            lost_at.saturating_duration_since(cut_at)
        );
    }

    // Every call of the cut client is bounded, however many locks it holds.
    let started = Instant::now();
    let attempt = Lock::new(&holder, unique_name("s16-fresh")).try_lock();
    let took = started.elapsed();
    ensure!(took <= call_bound, "a try_lock of the cut client took {took:?}, past {call_bound:?}");
    ensure!(attempt.is_err(), "the cut client acquired a lock through a cut connection");
    for guard in guards {
        let name = guard.name().clone();
        let started = Instant::now();
        drop(guard);
        let took = started.elapsed();
        ensure!(
            took <= call_bound,
            "{name}: dropping the cut holder's guard took {took:?}, past {call_bound:?}"
        );
    }
    let started = Instant::now();
    drop(holder);
    let took = started.elapsed();
    ensure!(took <= call_bound, "closing the cut client took {took:?}, past {call_bound:?}");
    drop(proxies);
    Ok(Verdict::Pass)
}

/// Tries to take `lock` until `give_up`; notes whether the holder's `signal` had fired by then.
fn rival_tries<B: lock_core::DistributedLock>(
    lock: &Lock<B>,
    signal: &LostSignal,
    name: LockName,
    give_up: Instant,
) -> RivalOutcome {
    let mut outcome = RivalOutcome { name, acquired_at: None, holder_told: false, error: None };
    while Instant::now() < give_up {
        match lock.try_lock_for(RIVAL_TRY) {
            Ok(Some(guard)) => {
                outcome.acquired_at = Some(Instant::now());
                outcome.holder_told = signal.is_lost();
                drop(guard);
                return outcome;
            }
            Ok(None) => {}
            Err(error) => {
                outcome.error = Some(error.to_string());
                return outcome;
            }
        }
    }
    outcome
}
