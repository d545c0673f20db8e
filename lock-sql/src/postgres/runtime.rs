//! The one private tokio runtime every PostgreSQL client of the process shares: one worker
//! thread (`distlock-pg`) drives the sockets; callers block on their own futures with
//! [`block_on`], each bounded by a timeout, so the blocking API keeps the no-hang rule.
//!
//! Why not the blocking `postgres` crate: it offers no per-request timeout (rust-postgres
//! #869), so a server that stops answering would block a caller — and a renewal — forever. It is
//! a thin wrapper over the same tokio-postgres used here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::{Builder, Runtime};

use super::error::PgFailure;

/// The name of the runtime's worker thread.
pub const PG_THREAD_NAME: &str = "distlock-pg";

/// Host name lookups run on tokio's blocking pool; two threads are plenty, and they exit when idle.
const MAX_BLOCKING_THREADS: usize = 2;

/// The shared runtime, started on first use.
pub(crate) fn shared() -> Result<Arc<Runtime>, PgFailure> {
    static RUNTIME: Mutex<Option<Arc<Runtime>>> = Mutex::new(None);
    let mut slot = RUNTIME.lock();
    if let Some(runtime) = &*slot {
        return Ok(Arc::clone(runtime));
    }
    let runtime = Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .thread_keep_alive(Duration::from_secs(10))
        .thread_name(PG_THREAD_NAME)
        .enable_io()
        .enable_time()
        .build()
        .map_err(PgFailure::Runtime)?;
    let runtime = Arc::new(runtime);
    *slot = Some(Arc::clone(&runtime));
    Ok(runtime)
}

/// Runs `future` on the calling thread, giving up after `timeout`.
///
/// # Panics
/// If called from inside an async context (the backend is blocking; never call it from async
/// code — use `spawn_blocking` there).
pub(crate) fn block_on<T>(
    runtime: &Runtime,
    timeout: Duration,
    future: impl Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    runtime.block_on(async { tokio::time::timeout(timeout, future).await })
}
