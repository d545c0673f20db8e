//! [`LeaseTable`]: one client's held leases, by when each is next due for renewal and when its
//! confirmed expiry passes.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::timer::{timer, Scheduled};
use super::workers;
use crate::backend::{DistributedLock, Extension};
use crate::error::{Error, Result};
use crate::held::{lost_reason, HeldLease, GONE};
use crate::observe::Observer;

/// Released entries tolerated in the queues before they are pruned.
const PRUNE_AFTER: usize = 1024;

/// The name of the threads that check the leases of a batch one each
/// ([`DistributedLock::extends_independently`]).
const CHECK_THREAD_NAME: &str = "distlock-check";

/// Their stack: a backend call's, not a program's.
const CHECK_THREAD_STACK: usize = 256 * 1024;

/// Shortest wait before retrying a renewal that failed, and the shortest renew interval.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// The held leases of one client.
pub(crate) struct LeaseTable<B: DistributedLock> {
    backend: Arc<B>,
    observer: Arc<Observer>,
    queues: Mutex<Queues<B>>,
    /// Set while a renewal batch of this table is on an I/O thread: no second one is dispatched,
    /// so a stuck server ties up one I/O thread, not all of them.
    in_flight: AtomicBool,
}

struct Queues<B: DistributedLock> {
    /// When each renewing lease is next due. A lease is absent while its batch is in flight, so
    /// it is never in two batches at once.
    renewals: BinaryHeap<Reverse<Due<B>>>,
    /// When each hold's confirmed expiry passes, at which point the timer reports it lost unless
    /// a renewal moved the expiry on (the entry then moves with it).
    expiries: BinaryHeap<Reverse<Due<B>>>,
    /// Entries of released leases still queued (they are dropped when they come due, or all at
    /// once when they outnumber the live ones, so a high release rate cannot grow the queues).
    released: usize,
}

/// One scheduled visit to a lease.
struct Due<B: DistributedLock> {
    at: Instant,
    held: Arc<HeldLease<B>>,
    /// The renew interval (unused in the expiry queue).
    interval: Duration,
}

impl<B: DistributedLock> PartialEq for Due<B> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl<B: DistributedLock> Eq for Due<B> {}
impl<B: DistributedLock> PartialOrd for Due<B> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<B: DistributedLock> Ord for Due<B> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.cmp(&other.at)
    }
}

impl<B: DistributedLock> LeaseTable<B> {
    /// A table for `backend`, served by the timer for as long as it lives.
    ///
    /// # Panics
    /// When the timer thread cannot be spawned (the OS is out of threads).
    pub(crate) fn new(backend: Arc<B>, observer: Arc<Observer>) -> Arc<Self> {
        let table = Arc::new(Self {
            backend,
            observer,
            queues: Mutex::new(Queues {
                renewals: BinaryHeap::new(),
                expiries: BinaryHeap::new(),
                released: 0,
            }),
            in_flight: AtomicBool::new(false),
        });
        let weak: Weak<dyn Scheduled> = Arc::downgrade(&table) as Weak<dyn Scheduled>;
        timer().register(weak);
        table
    }

    /// Starts serving a freshly acquired hold whose acquiring request was sent at `sent_at`,
    /// renewed every `renewal` (none: never renewed).
    ///
    /// The interval is capped at half of what the holder may count on (the lease less the
    /// backend's margin), so a renewal is always sent well before the hold runs out.
    pub(crate) fn track(&self, held: Arc<HeldLease<B>>, sent_at: Instant, renewal: Option<Duration>) {
        let mut queues = self.queues.lock();
        // Every hold is lost at its confirmed expiry unless a renewal moves it on.
        let mut earliest = held.valid_until();
        queues.expiries.push(Reverse(Due {
            at: earliest,
            held: Arc::clone(&held),
            interval: Duration::ZERO,
        }));
        if let Some(interval) = renewal {
            let interval = interval.min(held.valid_for / 2).max(MIN_RETRY);
            let at = sent_at + interval;
            queues.renewals.push(Reverse(Due { at, held, interval }));
            earliest = earliest.min(at);
        }
        drop(queues);
        timer().wake_by(earliest);
    }

    /// Notes that a tracked lease was released; prunes the queues when released entries dominate.
    ///
    /// A few released entries are left to fall out when they come due: pruning after every
    /// release would make the next acquisition wake the idle timer, a context switch on every
    /// acquire/release pair.
    pub(crate) fn note_released(&self) {
        let mut queues = self.queues.lock();
        queues.released += 1;
        // A lease has up to two entries (renewal and expiry): prune once released leases
        // outnumber live ones.
        let queued = queues.renewals.len() + queues.expiries.len();
        if queues.released >= PRUNE_AFTER && queues.released * 4 > queued {
            queues.renewals.retain(|Reverse(due)| !due.held.is_released());
            queues.expiries.retain(|Reverse(due)| !due.held.is_released());
            queues.released = 0;
        }
    }

    /// Entries in both queues, released ones included.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        let queues = self.queues.lock();
        queues.renewals.len() + queues.expiries.len()
    }

    /// Extends every lease in `batch` in one backend call, then reschedules or reports each.
    /// Runs on an I/O thread.
    fn renew(&self, batch: Vec<(Arc<HeldLease<B>>, Duration)>) {
        // Whatever happens below (a panic included), the next batch of this client may go.
        let _in_flight = InFlight(&self.in_flight);
        let mut observed = self.observer.renewal_batch(batch.len());
        let sent_at = Instant::now();
        let outcomes = self.extend_batch(&batch);
        if outcomes.iter().any(|outcome| matches!(outcome, Renewal::Answered(_))) {
            observed.answered();
        }
        let now = Instant::now();
        let mut rescheduled = Vec::new();
        let mut lost = Vec::new();
        for ((held, interval), outcome) in batch.into_iter().zip(outcomes) {
            let outcome = match outcome {
                // Released while the batch was being assembled: nothing more to do.
                Renewal::Released => continue,
                // A guarded write or a release has the lease: again soon, as long as it lasts
                // (the expiry timer reports the loss if it runs out first).
                Renewal::Busy => {
                    let at = (now + (interval / 4).max(MIN_RETRY)).min(held.valid_until());
                    rescheduled.push(Due { at, held: Arc::clone(&held), interval });
                    continue;
                }
                Renewal::Answered(outcome) => outcome,
            };
            match outcome {
                Ok(true) => {
                    observed.confirmed();
                    held.confirm(sent_at);
                    rescheduled.push(Due { at: sent_at + interval, held: Arc::clone(&held), interval });
                }
                Ok(false) => {
                    observed.lost();
                    lost.push((Arc::clone(&held), GONE));
                }
                Err(error) => {
                    observed.failed();
                    held.renewal_failed();
                    // Keep trying while the last confirmed lease (or session timeout) lasts; the
                    // timer reports the loss when it ends.
                    let valid_until = held.valid_until();
                    if now >= valid_until {
                        lost.push((Arc::clone(&held), lost_reason(held.hold_kind)));
                    } else {
                        let error = held.describe(&error);
                        tracing::warn!(lock = %held.shown_name(), %error, "lease renewal failed; retrying");
                        let at = (now + (interval / 2).max(MIN_RETRY)).min(valid_until);
                        rescheduled.push(Due { at, held: Arc::clone(&held), interval });
                    }
                }
            }
            held.observe_doubt(&self.backend);
        }
        // The batch's outcomes are counted before any loss is signalled: a holder woken by its
        // loss sees how the renewal went in the metrics.
        drop(observed);
        for (held, why) in lost {
            held.mark_lost(why);
        }
        self.queues.lock().renewals.extend(rescheduled.into_iter().map(Reverse));
    }

    /// One outcome per batch item.
    ///
    /// A lease whose mutex is busy — a guarded write (`LockGuard::with_lease`) or a release in
    /// progress — is left out of the batch call: holding the others while waiting for it could
    /// deadlock with a writer that takes another lease of the batch inside its write. It is then
    /// extended on its own, waiting for its mutex a bounded time with no other lease held (a
    /// holder writing in a loop must not starve its renewal), and retried soon if still busy.
    fn extend_batch(&self, batch: &[(Arc<HeldLease<B>>, Duration)]) -> Vec<Renewal> {
        if self.backend.extends_independently() && batch.len() > 1 {
            return self.extend_each_concurrently(batch);
        }
        let mut guards: Vec<_> = batch.iter().map(|(held, _)| held.lease.try_lock()).collect();
        let mut extensions: Vec<_> = guards
            .iter_mut()
            .zip(batch)
            .filter_map(|(guard, (held, _))| {
                guard.as_mut()?.as_mut().map(|lease| Extension::new(lease, held.ttl))
            })
            .collect();
        let expected = extensions.len();
        let backend = self.backend.backend_name();
        // A panicking backend must not take an I/O thread with it, and a result that cannot be
        // matched to its lease must not confirm the wrong one.
        let results = if expected == 0 {
            Vec::new()
        } else {
            match catch_unwind(AssertUnwindSafe(|| self.backend.extend_many(&mut extensions))) {
                Ok(results) if results.len() == expected => results,
                Ok(results) => {
                    tracing::error!(backend, expected, got = results.len(), "extend_many broke its contract");
                    Vec::new()
                }
                Err(_) => {
                    tracing::error!(backend, "extend_many panicked");
                    Vec::new()
                }
            }
        };
        drop(extensions);
        let mut results = results.into_iter();
        let mut outcomes: Vec<_> = guards
            .iter()
            .map(|guard| match guard {
                None => Renewal::Busy,
                Some(lease) if lease.is_none() => Renewal::Released,
                Some(_) => Renewal::Answered(
                    results.next().unwrap_or_else(|| Err(Error::backend(backend, "no renewal result"))),
                ),
            })
            .collect();
        // Recorded before the leases are unlocked: a release waiting for this batch sees it.
        for ((held, _), outcome) in batch.iter().zip(&outcomes) {
            if let Renewal::Answered(outcome) = outcome {
                held.note_answer(outcome);
            }
        }
        drop(guards);
        for ((held, interval), outcome) in batch.iter().zip(&mut outcomes) {
            if matches!(outcome, Renewal::Busy) {
                *outcome = self.extend_alone(held, *interval);
            }
        }
        outcomes
    }

    /// Extends `held` on its own, waiting for its mutex a bounded time (a quarter of `interval`,
    /// and never past the lease's validity); [`Renewal::Busy`] if it stays taken.
    fn extend_alone(&self, held: &HeldLease<B>, interval: Duration) -> Renewal {
        let backend = &*self.backend;
        let wait = (interval / 4).min(held.valid_until().saturating_duration_since(Instant::now()));
        let Some(mut slot) = held.lease.try_lock_for(wait) else { return Renewal::Busy };
        let Some(lease) = slot.as_mut() else { return Renewal::Released };
        let outcome =
            catch_unwind(AssertUnwindSafe(|| backend.extend(lease, held.ttl))).unwrap_or_else(|_| {
                tracing::error!(backend = backend.backend_name(), "extend panicked");
                Err(Error::backend(backend.backend_name(), "extend panicked"))
            });
        held.note_answer(&outcome);
        Renewal::Answered(outcome)
    }

    /// [`extend_batch`](Self::extend_batch) for a backend whose leases are extended on
    /// connections of their own: one thread per lease, each locking only its lease, so a batch
    /// takes one call's time however many leases it has, and a release waits for its own
    /// lease's check only.
    fn extend_each_concurrently(&self, batch: &[(Arc<HeldLease<B>>, Duration)]) -> Vec<Renewal> {
        let backend = &*self.backend;
        let extend_one =
            |(held, interval): &(Arc<HeldLease<B>>, Duration)| self.extend_alone(held, *interval);
        thread::scope(|scope| {
            let (first, rest) = batch.split_first().expect("a batch of more than one lease");
            let spawned: Vec<_> = rest
                .iter()
                .map(|item| {
                    thread::Builder::new()
                        .name(CHECK_THREAD_NAME.into())
                        .stack_size(CHECK_THREAD_STACK)
                        .spawn_scoped(scope, move || extend_one(item))
                        .map_err(|_| item)
                })
                .collect();
            let mut outcomes = vec![extend_one(first)];
            for handle in spawned {
                outcomes.push(match handle {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Renewal::Answered(Err(Error::backend(
                            backend.backend_name(),
                            "a lease check panicked",
                        )))
                    }),
                    // No thread to be had: check it here, after the others started.
                    Err(item) => extend_one(item),
                });
            }
            outcomes
        })
    }
}

/// What renewing one lease of a batch came to.
enum Renewal {
    /// Released before the batch was sent: nothing more to do.
    Released,
    /// Its mutex was taken (a guarded write, a release): retried soon.
    Busy,
    /// The server's answer: still held, gone, or an error.
    Answered(Result<bool>),
}

/// Ends a client's batch: clears its in-flight flag and has the timer look at the table again
/// (it skipped the table's renewals while the batch was out), on every exit from the batch.
struct InFlight<'a>(&'a AtomicBool);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.store(false, AtomicOrdering::Release);
        timer().wake_by(Instant::now());
    }
}

impl<B: DistributedLock> Scheduled for LeaseTable<B> {
    fn poll(self: Arc<Self>, now: Instant) -> Option<Instant> {
        let mut lost = Vec::new();
        let mut batch = Vec::new();
        let next = {
            let mut queues = self.queues.lock();
            while queues.expiries.peek().is_some_and(|Reverse(due)| due.at <= now) {
                let Some(Reverse(due)) = queues.expiries.pop() else { break };
                if due.held.is_released() || due.held.is_lost() {
                    continue;
                }
                let valid_until = due.held.valid_until();
                if now >= valid_until {
                    lost.push(due.held);
                } else {
                    queues.expiries.push(Reverse(Due { at: valid_until, ..due }));
                }
            }
            let in_flight = self.in_flight.load(AtomicOrdering::Acquire);
            // Whatever is due now goes, and with it every lease due within half its interval:
            // renewed a little early, the leases fall into step, so a client renews in about two
            // batches (round trips) per interval however many leases it holds, where each lease
            // on its own schedule would cost one round trip a lease.
            if !in_flight && queues.renewals.peek().is_some_and(|Reverse(due)| due.at <= now) {
                while queues.renewals.peek().is_some_and(|Reverse(due)| due.at <= now + due.interval / 2) {
                    let Some(Reverse(due)) = queues.renewals.pop() else { break };
                    // Released and lost leases are never touched again.
                    if !due.held.is_released() && !due.held.is_lost() {
                        batch.push((due.held, due.interval));
                    }
                }
            }
            let next_expiry = queues.expiries.peek().map(|Reverse(due)| due.at);
            // While a batch is out, this table's renewals wait for it (it wakes the timer).
            let next_renewal =
                (!in_flight && batch.is_empty()).then(|| queues.renewals.peek().map(|Reverse(due)| due.at));
            next_expiry.into_iter().chain(next_renewal.flatten()).min()
        };
        for held in lost {
            held.mark_lost(lost_reason(held.hold_kind));
        }
        if !batch.is_empty() {
            self.in_flight.store(true, AtomicOrdering::Release);
            let table = Arc::clone(&self);
            workers::submit(move || table.renew(batch));
        }
        next
    }
}
