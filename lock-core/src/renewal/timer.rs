//! The timer thread: sleeps until the earliest due time over every client's table, then lets
//! each table expire and dispatch what is due. It never calls a backend.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::RENEWAL_THREAD_PREFIX;

/// Shortest wait before looking at a table again whose `poll` panicked.
const AFTER_PANIC: Duration = Duration::from_millis(10);

/// What the timer needs of a client's table, with the backend type erased.
pub(crate) trait Scheduled: Send + Sync {
    /// Reports lost every hold whose expiry passed, dispatches the leases due for renewal, and
    /// returns when the table next needs the timer. Must not block on I/O.
    fn poll(self: Arc<Self>, now: Instant) -> Option<Instant>;
}

/// The process-wide timer and the tables it serves.
pub(crate) struct Timer {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    tables: Vec<Weak<dyn Scheduled>>,
    /// When the thread will wake by itself; `None` while it polls (so that every new due time
    /// makes it look again) or sleeps with nothing due.
    sleeping_until: Option<Instant>,
    /// Set when something became due earlier than the thread planned.
    rescan: bool,
}

/// The timer, started on first use.
///
/// # Panics
/// When the thread cannot be spawned (the OS is out of threads): no lease could be renewed or
/// expired, so no lock is handed out. A later call tries again.
pub(crate) fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    static THREAD: OnceLock<()> = OnceLock::new();
    let shared = TIMER.get_or_init(|| Timer { state: Mutex::new(State::default()), wake: Condvar::new() });
    THREAD.get_or_init(|| {
        thread::Builder::new()
            .name(RENEWAL_THREAD_PREFIX.into())
            .spawn(move || shared.run())
            .expect("spawn the distlock lease-renewal timer thread");
    });
    shared
}

impl Timer {
    pub(crate) fn register(&self, table: Weak<dyn Scheduled>) {
        let mut state = self.state.lock();
        state.tables.retain(|table| table.strong_count() > 0);
        state.tables.push(table);
    }

    /// Makes sure the timer looks at the tables by `at`.
    pub(crate) fn wake_by(&self, at: Instant) {
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
            let now = Instant::now();
            let next = tables
                .into_iter()
                .filter_map(|table| {
                    catch_unwind(AssertUnwindSafe(|| table.poll(now))).unwrap_or_else(|_| {
                        tracing::error!("a lease table panicked in the renewal timer; looking again shortly");
                        Some(Instant::now() + AFTER_PANIC)
                    })
                })
                .min();
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
