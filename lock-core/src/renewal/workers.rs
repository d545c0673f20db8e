//! The renewal I/O threads: at most [`MAX_RENEWAL_IO_THREADS`], started when a batch finds none
//! idle, ending after 30 s without work.

use super::MAX_RENEWAL_IO_THREADS;
use crate::thread_pool::ThreadPool;

/// The I/O threads' name (cut to `distlock-renew-` by `/proc`'s 15 bytes).
const NAME: &str = "distlock-renew-io";

// A batch catches its backend's panics itself; the pool's catch is the last line of defence. If
// no thread can start, the batch waits; its leases are still reported lost on time by the timer.
static WORKERS: ThreadPool = ThreadPool::new(NAME, MAX_RENEWAL_IO_THREADS, "a lease-renewal batch panicked");

/// Runs a renewal batch on an I/O thread.
pub(crate) fn submit(batch: impl FnOnce() + Send + 'static) {
    WORKERS.submit(batch);
}
