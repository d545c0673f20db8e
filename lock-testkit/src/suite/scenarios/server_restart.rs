//! S17 — the server restarts (sources 002, 003): a server of the scenario's own is killed at once
//! (no client is told, as in an immediate shutdown or a crash) and started again on the same port
//! and data, answering again within about a second, while [`NAMES`] locks are each contended by
//! two clients — at any moment about four holders and four waiters — [`RESTARTS`] times.
//!
//! Passes when no two holders of a name ever believe they hold it at the same moment (a waiter
//! acquires only once the holder's `is_held()` is false: told lost, for holds the restart ended;
//! still held, for durable leases — then nobody else gets in) and every name is acquired again
//! after each restart.
//!
//! Each holder also writes to a [`FencedResource`] with its token. A write of a holder that
//! believes its hold and is refused as stale means the server handed out a token again (or a
//! lower one) after the restart — a fence counter whose last values were not durable — and fails
//! the scenario: a fenced store that accepts `token >= highest` would take a stale write.
//!
//! The danger it looks for: a server that forgets its locks in a restart (session locks die with
//! their sessions; a Redis without persistence loses its keys) while their holders still believe
//! them until their next confirmation — up to a lease — so a waiter that gets in first overlaps.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock, LockClient, LockGuard, LockName, LockOptions};
use parking_lot::Mutex;

use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::unique_name;
use crate::suite::{Failure, FencedResource, RestartableServers, ScenarioResult, SuiteTarget, Verdict};

/// The lease (for session holds: how long liveness checks may fail before the hold is lost).
/// Short, to keep the scenario quick: a session kind grants nothing for about a lease after each
/// restart.
const LEASE: Duration = Duration::from_secs(2);
/// How often holds are renewed (or checked): late in the lease, as a user may set it, so that a
/// holder may go on believing a hold the restart ended for longer than the server takes to come
/// back — the window this scenario looks into.
const RENEW_EVERY: Duration = Duration::from_millis(1500);
/// How long each holder keeps a lock: past the server's return, so that holders are still
/// holding when the waiters get through again.
const HOLD: Duration = Duration::from_secs(2);
/// Locks, each contended by two clients.
const NAMES: usize = 4;
/// Restarts: enough to show the overlap on every kind that has it.
const RESTARTS: usize = 2;
/// How often a holder looks at its guard (and publishes what it believes).
const LOOK_EVERY: Duration = Duration::from_millis(2);
/// How often a holder writes to the fenced resource.
const WRITE_EVERY: Duration = Duration::from_millis(50);
/// How long a client waits before trying again after an error (the server is restarting).
const RETRY_AFTER: Duration = Duration::from_millis(10);
/// How soon after a restart every name must be acquired again: a lease (the session kinds grant
/// nothing while the server's sessions are younger than a lease), plus reconnecting and slack
/// for a loaded machine.
const BACK_WITHIN: Duration = Duration::from_millis(LEASE.as_millis() as u64 + 15_000);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let RestartableServers { clients, servers } = applicable!(target.restartable_servers(2 * NAMES))?;
    let options = LockOptions::builder()
        .lease(LEASE)
        .renew_interval(RENEW_EVERY)
        .build()
        .map_err(|error| Failure(format!("the scenario's options: {error}")))?;
    let clients: Vec<LockClient<T::Backend>> =
        clients.into_iter().map(|backend| LockClient::with_options(backend, options.clone())).collect();
    let names: Vec<Contended> = (0..NAMES).map(|_| Contended::new(unique_name("s17"))).collect();
    let stop = AtomicBool::new(false);
    let mut report = Vec::new();
    let outcome = thread::scope(|s| -> Result<(), Failure> {
        let workers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(index, client)| {
                let (contended, side, stop) = (&names[index % NAMES], index / NAMES, &stop);
                s.spawn(move || contend(&Lock::new(client, contended.name.clone()), contended, side, stop))
            })
            .collect();
        let restarted = restart_under_load(&*servers, &names, &mut report);
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            worker.join().map_err(|_| Failure("a client thread panicked".into()))??;
        }
        restarted
    });
    println!("S17: {}", report.join("; "));
    outcome?;
    for contended in &names {
        let overlap = contended.first_overlap.lock().clone();
        let count = contended.overlaps.load(Ordering::SeqCst);
        ensure!(
            count == 0,
            "{}: {count} overlaps across {RESTARTS} restarts; the first: {}",
            contended.name,
            overlap.unwrap_or_default()
        );
    }
    let stale: usize = names.iter().map(|contended| contended.stale.load(Ordering::SeqCst)).sum();
    let first_stale = names.iter().find_map(|contended| contended.first_stale.lock().clone());
    ensure!(
        stale == 0,
        "{stale} fenced writes of believing holders refused across {RESTARTS} restarts (a token handed \
         out again after a restart); the first: {}",
        first_stale.unwrap_or_default()
    );
    Ok(Verdict::Pass)
}

/// Waits until every name is held, restarts the servers, and waits until every name was
/// acquired again after the restart; [`RESTARTS`] times. Notes the times in `report`.
fn restart_under_load(
    servers: &dyn crate::suite::PausableServers,
    names: &[Contended],
    report: &mut Vec<String>,
) -> Result<(), Failure> {
    for round in 1..=RESTARTS {
        let busy_by = Instant::now() + BACK_WITHIN;
        while !names.iter().all(Contended::is_held_now) {
            ensure!(
                Instant::now() < busy_by,
                "restart {round}: the names were not all held within {BACK_WITHIN:?}"
            );
            thread::sleep(LOOK_EVERY);
        }
        let killed = Instant::now();
        servers.restart().map_err(|error| Failure(format!("restart {round}: {error}")))?;
        let answering = killed.elapsed();
        let mut firsts = Vec::new();
        for contended in names {
            loop {
                let granted = *contended.last_grant.lock();
                if let Some(granted) = granted.filter(|granted| *granted > killed) {
                    firsts.push(granted - killed);
                    break;
                }
                ensure!(
                    killed.elapsed() < BACK_WITHIN,
                    "restart {round}: {} was not acquired again within {BACK_WITHIN:?}",
                    contended.name
                );
                thread::sleep(LOOK_EVERY);
            }
        }
        let first = firsts.iter().min().copied().unwrap_or_default();
        let last = firsts.iter().max().copied().unwrap_or_default();
        report.push(format!(
            "restart {round}: answering again {} ms after the kill, first grant after {} ms, every name after {} ms",
            answering.as_millis(),
            first.as_millis(),
            last.as_millis()
        ));
    }
    let sum = |count: fn(&Contended) -> &AtomicUsize| -> usize {
        names.iter().map(|contended| count(contended).load(Ordering::SeqCst)).sum()
    };
    let (overlaps, told, stale) = (sum(|c| &c.overlaps), sum(|c| &c.lost), sum(|c| &c.stale));
    let first_stale = names.iter().find_map(|contended| contended.first_stale.lock().clone());
    report.push(format!(
        "{overlaps} overlaps, {told} holds told lost, {stale} fenced writes of believing holders refused{}",
        first_stale.map_or_else(String::new, |first| format!(" (the first: {first})"))
    ));
    Ok(())
}

/// One client's loop on one name (`side` 0 or 1 of its two contenders): acquire, hold for
/// [`HOLD`] while publishing what it believes, release; errors (the server is restarting) are
/// retried until [`BACK_WITHIN`] has passed without success.
fn contend<B: DistributedLock>(
    lock: &Lock<B>,
    contended: &Contended,
    side: usize,
    stop: &AtomicBool,
) -> Result<(), Failure> {
    let mut failing_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        match lock.try_lock_for(LEASE) {
            Ok(Some(guard)) => {
                failing_since = None;
                hold(guard, contended, side, stop);
            }
            Ok(None) => {}
            Err(error) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                ensure!(
                    since.elapsed() < BACK_WITHIN,
                    "{}: acquisitions failed for {:?}: {error}",
                    contended.name,
                    since.elapsed()
                );
                thread::sleep(RETRY_AFTER);
            }
        }
    }
    Ok(())
}

/// Holds `guard` for [`HOLD`], looking at it every [`LOOK_EVERY`], then releases it.
fn hold<B: DistributedLock>(guard: LockGuard<B>, contended: &Contended, side: usize, stop: &AtomicBool) {
    let granted = Instant::now();
    *contended.last_grant.lock() = Some(granted);
    let token = guard.fencing_token();
    let mut next_write = granted;
    while granted.elapsed() < HOLD && !stop.load(Ordering::SeqCst) {
        let at = Instant::now();
        let held = guard.is_held();
        contended.observe(side, at, held);
        if let Some(token) = token.filter(|_| held && at >= next_write) {
            next_write = at + WRITE_EVERY;
            if let Err(stale) = contended.resource.write(token, format!("side {side}")) {
                if guard.is_held() {
                    contended.stale.fetch_add(1, Ordering::SeqCst);
                    contended.first_stale.lock().get_or_insert_with(|| stale.to_string());
                }
            }
        }
        thread::sleep(LOOK_EVERY);
    }
    // No longer believed from here: the release follows.
    contended.observe(side, Instant::now(), false);
    if guard.lost_signal().is_lost() {
        contended.lost.fetch_add(1, Ordering::SeqCst);
    }
    // A hold the restart ended cannot be released: the error says so, and that is expected.
    let _ = guard.unlock();
}

/// One contended name: what each of its two clients believes, and what went wrong.
struct Contended {
    name: LockName,
    resource: FencedResource,
    /// Per side, the latest stretch of its current hold during which `is_held()` was seen true.
    beliefs: Mutex<[Option<Belief>; 2]>,
    last_grant: Mutex<Option<Instant>>,
    overlaps: AtomicUsize,
    first_overlap: Mutex<Option<String>>,
    /// Fenced writes refused while their holder believed its hold.
    stale: AtomicUsize,
    first_stale: Mutex<Option<String>>,
    lost: AtomicUsize,
}

/// From when to when a holder saw `is_held()` true without a gap; `open` while it still does.
#[derive(Debug, Clone, Copy)]
struct Belief {
    from: Instant,
    to: Instant,
    open: bool,
    /// Already counted in an overlap (each pair of stretches counts once).
    counted: bool,
}

impl Contended {
    fn new(name: LockName) -> Self {
        Self {
            name,
            resource: FencedResource::new(),
            beliefs: Mutex::new([None, None]),
            last_grant: Mutex::new(None),
            overlaps: AtomicUsize::new(0),
            first_overlap: Mutex::new(None),
            stale: AtomicUsize::new(0),
            first_stale: Mutex::new(None),
            lost: AtomicUsize::new(0),
        }
    }

    /// Notes that `side`'s guard was `held` at `at` (or after: a guard believed at some moment
    /// was believed since the start of the stretch), and counts an overlap when both sides'
    /// stretches share a moment.
    fn observe(&self, side: usize, at: Instant, held: bool) {
        let mut beliefs = self.beliefs.lock();
        let mine = &mut beliefs[side];
        match (mine.as_mut(), held) {
            (Some(belief), true) if belief.open => belief.to = at,
            (_, true) => *mine = Some(Belief { from: at, to: at, open: true, counted: false }),
            (Some(belief), false) => belief.open = false,
            (None, false) => {}
        }
        let (Some(mine), Some(theirs)) = (beliefs[side], beliefs[1 - side]) else { return };
        if mine.counted || theirs.counted || mine.from.max(theirs.from) > mine.to.min(theirs.to) {
            return;
        }
        self.overlaps.fetch_add(1, Ordering::SeqCst);
        for belief in beliefs.iter_mut().flatten() {
            belief.counted = true;
        }
        let (earlier, later) = if mine.from <= theirs.from { (mine, theirs) } else { (theirs, mine) };
        self.first_overlap.lock().get_or_insert_with(|| {
            format!(
                "a client acquired while the other still believed its hold (both seen held for {:?})",
                earlier.to.saturating_duration_since(later.from)
            )
        });
    }

    /// Whether one side holds the name now (seen held within the last few looks).
    fn is_held_now(&self) -> bool {
        self.beliefs
            .lock()
            .iter()
            .flatten()
            .any(|belief| belief.open && belief.to.elapsed() < 10 * LOOK_EVERY)
    }
}
