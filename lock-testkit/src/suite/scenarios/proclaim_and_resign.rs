//! LE04 — followers see what the leader proclaims, and a resignation hands over at once: with a
//! 30 s lease (so no expiry and a re-check of one second), an observer of another client sees the
//! campaign's value, then a proclaimed one, each within one re-check at the most; a candidate
//! waiting in `campaign()` leads within [`HAND_OFF`] of the leader's resignation (a server
//! wake-up, not the lease); the observer then sees the new leader, and nobody once it resigns.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{leader_recheck, Election, Leader, LeaderObserver};

use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(30);
/// How soon a waiting candidate must lead after a resignation: one wake-up, far below the
/// lease and the waiters' one-second re-check.
const HAND_OFF: Duration = Duration::from_millis(500);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "elections");
    let name = unique_name("le04");
    let follower = client(target, options(LEASE, true))?;
    let watched = Election::new(&follower, name.clone());
    let mut observer = watched.observe()?;
    ensure!(observer.current().is_none(), "a leader before any campaign: {:?}", observer.current());
    // Seen within one re-check, plus room for a loaded machine.
    let within = leader_recheck(LEASE) + SECOND / 2;

    let first = client(target, options(LEASE, true))?;
    let leadership = Election::new(&first, name.clone()).with_value("first").campaign_for(ACQUIRE_BOUND)?;
    let leadership = leadership.ok_or_else(|| Failure("the first candidate never won".into()))?;
    sees(&mut observer, within, "the campaign's value", |l| l.is_some_and(|l| l.value == b"first"))?;
    leadership.proclaim("first, proclaimed")?;
    sees(&mut observer, within, "the proclaimed value", |l| {
        l.is_some_and(|l| l.value == b"first, proclaimed" && l.token == leadership.fencing_token())
    })?;

    // A candidate waits in campaign(); the leader resigns.
    let (won_tx, won_rx) = mpsc::channel();
    let (seen_tx, seen_rx) = mpsc::channel::<()>();
    let second = client(target, options(LEASE, true))?;
    let waiter = {
        let name = name.clone();
        thread::spawn(move || -> Result<(), Failure> {
            let election = Election::new(&second, name).with_value("second");
            let leadership = election.campaign()?;
            let _ = won_tx.send((Instant::now(), leadership.fencing_token()));
            // Leads until the scenario has seen it (or given up), then resigns.
            let _ = seen_rx.recv_timeout(ACQUIRE_BOUND);
            leadership.resign()?;
            Ok(())
        })
    };
    // Give the waiter time to be waiting (a second is far beyond any client's first attempt).
    thread::sleep(SECOND);
    ensure!(won_rx.try_recv().is_err(), "a second leader won while the first led");
    let resigned_at = Instant::now();
    leadership.resign()?;
    let (won_at, token) = won_rx
        .recv_timeout(ACQUIRE_BOUND)
        .map_err(|_| Failure(format!("the waiting candidate never led within {ACQUIRE_BOUND:?}")))?;
    let hand_off = won_at.saturating_duration_since(resigned_at);
    ensure!(
        hand_off <= HAND_OFF,
        "the waiting candidate led {hand_off:?} after the resignation, past {HAND_OFF:?}"
    );
    let seen = sees(&mut observer, within, "the second leader", |l| l.is_some_and(|l| l.token == token));
    let _ = seen_tx.send(());
    seen?;
    waiter.join().map_err(|_| Failure("the waiting candidate panicked".into()))??;
    sees(&mut observer, within, "nobody leading", |l| l.is_none())?;
    Ok(Verdict::Pass)
}

/// Waits until `observer` reports a leader for which `wanted` holds, at most `within`.
fn sees<B: lock_core::DistributedLock>(
    observer: &mut LeaderObserver<'_, B>,
    within: Duration,
    what: &str,
    wanted: impl Fn(Option<&Leader>) -> bool,
) -> Result<(), Failure> {
    let deadline = Instant::now() + within;
    while !wanted(observer.current()) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || observer.changed(left)?.is_none() {
            return Err(Failure(format!(
                "followers did not see {what} within {within:?}; they see {:?}",
                observer.current()
            )));
        }
    }
    Ok(())
}
