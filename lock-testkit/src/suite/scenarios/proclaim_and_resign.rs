//! LE04 — followers see what the leader proclaims, and a resignation hands over at once: with a
//! 30 s lease (so no expiry and a re-check of one second), an observer of another client sees the
//! campaign's value, then a proclaimed one, each within one re-check at the most. Then, in
//! [`ROUNDS`] rounds, a leader resigns at a random moment while a candidate of another client
//! waits in `campaign()`: the candidate must lead within [`HAND_OFF`] of the resignation in
//! [`WOKEN_ROUNDS`] of them (a server wake-up, not the lease nor a one-second re-check; room for
//! a slow round on a busy machine), and the observer sees the new leader, then nobody.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{leader_recheck, Election, FencingToken, Leader, LeaderObserver, LockClient, LockName};

use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{client, options, unique_name, ACQUIRE_BOUND, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(30);
/// How soon a waiting candidate must lead after a resignation: a few round trips and a
/// server wake-up, far below the lease and the waiters' one-second re-check.
const HAND_OFF: Duration = Duration::from_millis(500);
const ROUNDS: usize = 5;
const WOKEN_ROUNDS: usize = 3;

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
    let second = client(target, options(LEASE, true))?;
    let mut hand_offs = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let election = Election::new(&first, name.clone()).with_value("first");
        let leadership = election
            .campaign_for(ACQUIRE_BOUND)?
            .ok_or_else(|| Failure("the first candidate never won".into()))?;
        if round == 0 {
            sees(&mut observer, within, "the campaign's value", |l| l.is_some_and(|l| l.value == b"first"))?;
            leadership.proclaim("first, proclaimed")?;
            sees(&mut observer, within, "the proclaimed value", |l| {
                l.is_some_and(|l| l.value == b"first, proclaimed" && l.token == leadership.fencing_token())
            })?;
        }
        // A candidate waits in campaign(); the leader resigns at a moment no poll lines up with.
        let (waiter, won, seen) = wait_in_campaign(&second, &name);
        thread::sleep(200 * MS + rand::random_range(0..300) * MS);
        ensure!(won.try_recv().is_err(), "a second leader won while the first led");
        let resigned_at = Instant::now();
        leadership.resign()?;
        let (won_at, token) = won
            .recv_timeout(ACQUIRE_BOUND)
            .map_err(|_| Failure(format!("the waiting candidate never led within {ACQUIRE_BOUND:?}")))?;
        hand_offs.push(won_at.saturating_duration_since(resigned_at));
        let shown = if round == 0 {
            sees(&mut observer, within, "the second leader", |l| l.is_some_and(|l| l.token == token))
        } else {
            Ok(())
        };
        let _ = seen.send(());
        shown?;
        waiter.join().map_err(|_| Failure("the waiting candidate panicked".into()))??;
    }
    sees(&mut observer, within, "nobody leading", |l| l.is_none())?;
    let woken = hand_offs.iter().filter(|&&hand_off| hand_off <= HAND_OFF).count();
    ensure!(
        woken >= WOKEN_ROUNDS,
        "a waiting candidate led within {HAND_OFF:?} of the resignation in {woken} of {ROUNDS} rounds \
         (hand-offs {hand_offs:?}): not woken by the server"
    );
    Ok(Verdict::Pass)
}

/// Woken when the candidate leads: when, and its token.
type Won = mpsc::Receiver<(Instant, Option<FencingToken>)>;

/// A candidate of `client` campaigning for `name` on a thread of its own; it leads until told
/// (or until it gives up waiting to be told), then resigns.
fn wait_in_campaign<B: lock_core::DistributedLock>(
    client: &LockClient<B>,
    name: &LockName,
) -> (thread::JoinHandle<Result<(), Failure>>, Won, mpsc::Sender<()>) {
    let (won_tx, won) = mpsc::channel();
    let (seen, seen_rx) = mpsc::channel::<()>();
    let (client, name) = (client.clone(), name.clone());
    let waiter = thread::spawn(move || -> Result<(), Failure> {
        let leadership = Election::new(&client, name).with_value("second").campaign()?;
        let _ = won_tx.send((Instant::now(), leadership.fencing_token()));
        let _ = seen_rx.recv_timeout(ACQUIRE_BOUND);
        leadership.resign()?;
        Ok(())
    });
    (waiter, won, seen)
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
