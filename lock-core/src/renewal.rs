//! Lease renewal: ONE background thread per process serves every held lease of every client.
//!
//! Each [`LockClient`](crate::LockClient) owns a [`LeaseTable`]: its held leases ordered by when
//! they are next due. The thread (`distlock-renewal`) sleeps until the earliest due time over all
//! tables, then asks each table to run what is due. A table extends its due leases in one
//! [`extend_many`](crate::DistributedLock::extend_many) call, so a backend can pipeline thousands
//! of renewals per round trip. Without renewal, a lease is still scheduled once, at its expiry, to
//! report it lost.
//!
//! One thread for everything has a cost: the tables are served one after another, so a backend
//! call that blocks (a paused server) delays every other lease by up to that backend's I/O
//! timeout. Keep I/O timeouts well below the leases they protect (the backends' defaults are).
//! A panic in a backend or an `on_lost` callback is caught and logged; it never stops the thread.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{DistributedLock, Extension, HoldKind};
use crate::error::{Error, Result};
use crate::held::HeldLease;

/// The name of the renewal thread, as `ps -L` and `/proc/*/task/*/comm` show it.
pub const RENEWAL_THREAD_NAME: &str = "distlock-renewal";

/// Released entries tolerated in a lease queue before it is pruned.
const PRUNE_AFTER: usize = 1024;

/// Shortest wait before retrying a renewal that failed.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// What the renewal thread needs of a client's table, with the backend type erased.
pub(crate) trait RenewalTable: Send + Sync {
    /// Renews (or expires) every lease due now; returns when the next one is due.
    fn run_due(&self) -> Option<Instant>;
}

/// The held leases of one client, ordered by due time.
pub(crate) struct LeaseTable<B: DistributedLock> {
    backend: Arc<B>,
    queue: Mutex<Queue<B>>,
}

struct Queue<B: DistributedLock> {
    heap: BinaryHeap<Reverse<Due<B>>>,
    /// Entries of released leases still in `heap` (they are dropped when they come due, or all at
    /// once when they outnumber the live ones, so a high release rate cannot grow the heap).
    released: usize,
}

/// What happens to a lease when it comes due.
#[derive(Clone, Copy)]
enum Task {
    /// Extend it, every `interval`.
    Renew { interval: Duration },
    /// Report it lost: its lease ran out without renewal.
    Expire,
}

/// One scheduled visit to a lease. Each lease has at most one in the queue at any time (the
/// renewal batch locks every lease it extends, so a duplicate would deadlock it).
struct Due<B: DistributedLock> {
    at: Instant,
    task: Task,
    held: Arc<HeldLease<B>>,
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
    /// A table for `backend`, registered with the renewal thread for as long as it lives.
    ///
    /// # Panics
    /// When the renewal thread cannot be spawned (the OS is out of threads): no lease could be
    /// renewed, so no lock is handed out.
    pub(crate) fn new(backend: Arc<B>) -> Arc<Self> {
        let table =
            Arc::new(Self { backend, queue: Mutex::new(Queue { heap: BinaryHeap::new(), released: 0 }) });
        let weak: Weak<dyn RenewalTable> = Arc::downgrade(&table) as Weak<dyn RenewalTable>;
        renewer().register(weak);
        table
    }

    /// Starts serving a freshly acquired lease whose acquiring request was sent at `sent_at`.
    pub(crate) fn track(&self, held: Arc<HeldLease<B>>, sent_at: Instant, renewal: Option<Duration>) {
        let due = match renewal {
            Some(interval) => Due { at: sent_at + interval, task: Task::Renew { interval }, held },
            None if held.hold_kind == HoldKind::Lease => {
                Due { at: held.valid_until(), task: Task::Expire, held }
            }
            // A session-bound hold without renewal has nothing to renew and no expiry to report.
            None => return,
        };
        let at = due.at;
        self.queue.lock().heap.push(Reverse(due));
        renewer().wake_by(at);
    }

    /// Notes that a tracked lease was released; prunes the queue when released entries dominate.
    ///
    /// A few released entries are left to fall out when they come due: pruning the queue empty
    /// after every release would make the next acquisition wake the idle renewal thread, a
    /// context switch on every acquire/release pair.
    pub(crate) fn note_released(&self) {
        let mut queue = self.queue.lock();
        queue.released += 1;
        if queue.released >= PRUNE_AFTER && queue.released * 2 > queue.heap.len() {
            queue.heap.retain(|Reverse(due)| !due.held.is_released());
            queue.released = 0;
        }
    }

    fn take_due(&self, now: Instant) -> Vec<Due<B>> {
        let mut queue = self.queue.lock();
        let mut due = Vec::new();
        while queue.heap.peek().is_some_and(|Reverse(next)| next.at <= now) {
            if let Some(Reverse(next)) = queue.heap.pop() {
                due.push(next);
            }
        }
        due
    }

    /// Puts a lease back in the queue. Called from the renewal thread itself, which reads the
    /// next due time off the queue when it finishes, so no wake-up is needed.
    fn reschedule(&self, due: Due<B>) {
        self.queue.lock().heap.push(Reverse(due));
    }

    /// Extends every lease in `batch` in one backend call and reschedules or reports each.
    fn renew(&self, batch: Vec<(Arc<HeldLease<B>>, Duration)>) {
        let sent_at = Instant::now();
        // One outcome per batch item; `None` for leases released before the batch was sent.
        let outcomes: Vec<Option<Result<bool>>> = {
            let mut guards: Vec<_> = batch.iter().map(|(held, _)| held.lease.lock()).collect();
            let live: Vec<bool> = guards.iter().map(|guard| guard.is_some()).collect();
            let mut extensions: Vec<_> = guards
                .iter_mut()
                .zip(&batch)
                .filter_map(|(guard, (held, _))| guard.as_mut().map(|lease| Extension::new(lease, held.ttl)))
                .collect();
            let expected = extensions.len();
            let backend = self.backend.backend_name();
            // A panicking backend must not take the renewal thread (and every lease) with it, and
            // a result that cannot be matched to its lease must not confirm the wrong one.
            let results = match catch_unwind(AssertUnwindSafe(|| self.backend.extend_many(&mut extensions))) {
                Ok(results) if results.len() == expected => results,
                Ok(results) => {
                    tracing::error!(backend, expected, got = results.len(), "extend_many broke its contract");
                    Vec::new()
                }
                Err(_) => {
                    tracing::error!(backend, "extend_many panicked");
                    Vec::new()
                }
            };
            let mut results = results.into_iter();
            live.into_iter()
                .map(|live| {
                    live.then(|| {
                        results.next().unwrap_or_else(|| Err(Error::backend(backend, "no renewal result")))
                    })
                })
                .collect()
        };
        let now = Instant::now();
        for ((held, interval), outcome) in batch.into_iter().zip(outcomes) {
            match outcome {
                // Released while the batch was being assembled: nothing more to do.
                None => {}
                Some(Ok(true)) => {
                    held.confirm(sent_at);
                    self.reschedule(Due { at: sent_at + interval, task: Task::Renew { interval }, held });
                }
                Some(Ok(false)) => held.mark_lost("the server says the lock is no longer held"),
                Some(Err(error)) => {
                    // Keep trying while the last confirmed lease (or session timeout) lasts.
                    let valid_until = held.valid_until();
                    if now >= valid_until {
                        held.mark_lost("renewal kept failing until the lease ran out");
                    } else {
                        tracing::warn!(lock = %held.name, %error, "lease renewal failed; retrying");
                        let at = (now + (interval / 2).max(MIN_RETRY)).min(valid_until);
                        self.reschedule(Due { at, task: Task::Renew { interval }, held });
                    }
                }
            }
        }
    }
}

impl<B: DistributedLock> RenewalTable for LeaseTable<B> {
    fn run_due(&self) -> Option<Instant> {
        let mut batch = Vec::new();
        for due in self.take_due(Instant::now()) {
            if due.held.is_released() {
                continue; // Released leases are never touched again.
            }
            match due.task {
                Task::Renew { interval } => batch.push((due.held, interval)),
                Task::Expire => due.held.mark_lost("the lease ran out and renewal is off"),
            }
        }
        if !batch.is_empty() {
            self.renew(batch);
        }
        self.queue.lock().heap.peek().map(|Reverse(next)| next.at)
    }
}

/// The process-wide renewal thread and the tables it serves.
struct Renewer {
    state: Mutex<RenewerState>,
    wake: Condvar,
}

#[derive(Default)]
struct RenewerState {
    tables: Vec<Weak<dyn RenewalTable>>,
    /// When the thread will wake by itself; `None` while it is running the tables (so that every
    /// new due time makes it look again) or idle with nothing due.
    sleeping_until: Option<Instant>,
    /// Set when something became due earlier than the thread planned.
    rescan: bool,
}

fn renewer() -> &'static Renewer {
    static RENEWER: OnceLock<Renewer> = OnceLock::new();
    static THREAD: OnceLock<()> = OnceLock::new();
    let shared =
        RENEWER.get_or_init(|| Renewer { state: Mutex::new(RenewerState::default()), wake: Condvar::new() });
    THREAD.get_or_init(|| {
        // If the thread cannot be spawned no lease can be renewed: fail loudly, at once (a panic
        // here leaves THREAD unset, so the next client tries again).
        thread::Builder::new()
            .name(RENEWAL_THREAD_NAME.into())
            .spawn(move || shared.run())
            .expect("spawn the distlock lease-renewal thread");
    });
    shared
}

impl Renewer {
    fn register(&self, table: Weak<dyn RenewalTable>) {
        let mut state = self.state.lock();
        state.tables.retain(|table| table.strong_count() > 0);
        state.tables.push(table);
    }

    fn wake_by(&self, at: Instant) {
        let mut state = self.state.lock();
        if state.sleeping_until.is_none_or(|planned| at < planned) {
            state.rescan = true;
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        loop {
            let tables: Vec<_> = {
                let mut state = self.state.lock();
                state.sleeping_until = None;
                state.rescan = false;
                state.tables.retain(|table| table.strong_count() > 0);
                state.tables.iter().filter_map(Weak::upgrade).collect()
            };
            let next = tables
                .iter()
                .filter_map(|table| {
                    catch_unwind(AssertUnwindSafe(|| table.run_due())).unwrap_or_else(|_| {
                        tracing::error!("a lease table panicked during renewal; retrying it shortly");
                        Some(Instant::now() + MIN_RETRY)
                    })
                })
                .min();
            drop(tables);
            let mut state = self.state.lock();
            if state.rescan {
                continue;
            }
            state.sleeping_until = next;
            match next {
                Some(at) => {
                    self.wake.wait_until(&mut state, at);
                }
                None => self.wake.wait(&mut state),
            }
        }
    }
}
