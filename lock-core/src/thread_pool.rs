//! An elastic pool of named threads: a job runs on an idle thread, else on a new one while fewer
//! than the cap run, else on the first to finish; a thread ends after [`IDLE_EXIT`] without work.
//!
//! Two pools use it: the renewal I/O threads (a batch may block for a server's I/O timeout) and
//! the `on_lost` callback threads (user code may block for as long as it likes). Keeping them
//! apart is the point: neither can hold up the other.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long an idle thread waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

/// A pool meant to live in a `static` (its threads borrow it for as long as they run).
pub(crate) struct ThreadPool {
    /// The threads' name (as `/proc/*/task/*/comm` shows it, cut at 15 bytes).
    name: &'static str,
    max_threads: usize,
    /// What a caught panic is logged as.
    panicked: &'static str,
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

impl ThreadPool {
    pub(crate) const fn new(name: &'static str, max_threads: usize, panicked: &'static str) -> Self {
        ThreadPool {
            name,
            max_threads,
            panicked,
            state: Mutex::new(State { jobs: VecDeque::new(), threads: 0, idle: 0 }),
            work: Condvar::new(),
        }
    }

    /// Queues `job`; a panic in it is caught and logged.
    ///
    /// If no thread can be started, the job waits for a running one (with none, it waits until
    /// a later `submit` starts one); the failure is logged.
    pub(crate) fn submit(&'static self, job: impl FnOnce() + Send + 'static) {
        let mut state = self.state.lock();
        state.jobs.push_back(Box::new(job));
        if state.idle >= state.jobs.len() || state.threads >= self.max_threads {
            // An idle thread takes it, or every thread is busy and the first to finish does.
            self.work.notify_one();
            return;
        }
        state.threads += 1;
        drop(state);
        if let Err(error) = thread::Builder::new().name(self.name.into()).spawn(move || self.serve()) {
            tracing::error!(%error, thread = self.name, "could not start a thread; the job waits");
            self.state.lock().threads -= 1;
        }
    }

    fn serve(&self) {
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
                        state.threads -= 1;
                        return;
                    }
                }
            };
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                tracing::error!("{}", self.panicked);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    static POOL: ThreadPool = ThreadPool::new("distlock-test", 4, "a test job panicked");

    #[test]
    fn a_stuck_job_does_not_hold_up_the_next_and_a_panic_is_caught() {
        let (release, stuck) = mpsc::channel::<()>();
        POOL.submit(move || {
            let _ = stuck.recv();
        });
        let (done, finished) = mpsc::channel();
        POOL.submit(move || done.send(()).unwrap());
        finished.recv_timeout(Duration::from_secs(5)).expect("the second job ran");
        POOL.submit(|| panic!("a panicking job is caught"));
        let (done, finished) = mpsc::channel();
        POOL.submit(move || done.send(()).unwrap());
        finished.recv_timeout(Duration::from_secs(5)).expect("jobs run after a panic");
        drop(release);
    }
}
