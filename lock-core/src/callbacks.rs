//! The threads that run users' `on_lost` callbacks, away from the renewal threads.
//!
//! A callback is user code: it may block, for seconds or forever. Run on the renewal timer, it
//! would hold up every other client's loss reports and renewals. So each callback runs on a
//! callback thread: an idle one, else a new one while fewer than [`MAX_CALLBACK_THREADS`] run. A
//! stuck callback ties up its own thread only; once every thread is stuck, further callbacks wait
//! in the queue (their signals have fired regardless).

use crate::thread_pool::ThreadPool;

/// The most callback threads a process runs at once.
pub const MAX_CALLBACK_THREADS: usize = 16;

/// The callback threads' name (as `/proc/*/task/*/comm` shows it, cut at 15 bytes).
pub const CALLBACK_THREAD_NAME: &str = "distlock-onlost";

static CALLBACKS: ThreadPool =
    ThreadPool::new(CALLBACK_THREAD_NAME, MAX_CALLBACK_THREADS, "an on_lost callback panicked");

/// Runs `callback` on a callback thread; a panic in it is caught and logged.
pub(crate) fn run(callback: impl FnOnce() + Send + 'static) {
    CALLBACKS.submit(callback);
}
