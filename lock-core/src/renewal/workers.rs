//! The renewal I/O threads: a pool of at most [`MAX_RENEWAL_IO_THREADS`], started when a batch
//! finds none idle, ending after [`IDLE_EXIT`] without work.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::MAX_RENEWAL_IO_THREADS;

/// How long an idle I/O thread waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// The I/O threads' name (cut to `distlock-renew-` by `/proc`'s 15 bytes).
const NAME: &str = "distlock-renew-io";

/// One renewal batch.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    workers: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool { state: Mutex::new(State::default()), work: Condvar::new() })
}

/// Runs `job` on an I/O thread: an idle one, a new one while there are fewer than the cap, or
/// else the first to finish its batch.
pub(crate) fn submit(job: Job) {
    let pool = pool();
    let mut state = pool.state.lock();
    state.jobs.push_back(job);
    if state.idle > 0 {
        pool.work.notify_one();
        return;
    }
    if state.workers < MAX_RENEWAL_IO_THREADS {
        state.workers += 1;
        drop(state);
        if let Err(error) = thread::Builder::new().name(NAME.into()).spawn(|| self::pool().run()) {
            // The job waits for a running worker; with none, its leases are still reported
            // lost on time by the timer.
            tracing::error!(%error, "could not start a lease-renewal I/O thread");
            pool.state.lock().workers -= 1;
        }
    }
}

impl Pool {
    fn run(&self) {
        loop {
            let job = {
                let mut state = self.state.lock();
                loop {
                    if let Some(job) = state.jobs.pop_front() {
                        break job;
                    }
                    state.idle += 1;
                    let timed_out = self.work.wait_for(&mut state, IDLE_EXIT).timed_out();
                    state.idle -= 1;
                    if timed_out && state.jobs.is_empty() {
                        state.workers -= 1;
                        return;
                    }
                }
            };
            // A batch catches its backend's panics itself; this is the last line of defence.
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                tracing::error!("a lease-renewal batch panicked");
            }
        }
    }
}
