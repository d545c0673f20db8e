//! The tokio runtime inside each PostgreSQL connection: `current_thread`, with no thread of its
//! own — a call's own thread drives the socket while it waits, as in the blocking `postgres`
//! crate, and a timer bounds every call.
//!
//! Why not the blocking `postgres` crate itself: it offers no per-request timeout (rust-postgres
//! #869), so a server that stops answering would block a caller — and a renewal — forever. It is
//! a thin wrapper over the same tokio-postgres used here.

use tokio::runtime::{Builder, Runtime};

/// The name of the threads that resolve host names for connections (tokio's blocking pool; at
/// most one per connection being opened, gone when idle).
pub const PG_THREAD_NAME: &str = "distlock-pgdns";

/// The name of the helper threads that run a call made from inside a tokio runtime (one per such
/// call, for its length).
pub const HELPER_THREAD_NAME: &str = "distlock-pgcall";

/// A runtime for one connection.
pub(crate) fn new() -> std::io::Result<Runtime> {
    Builder::new_current_thread().max_blocking_threads(1).thread_name(PG_THREAD_NAME).enable_all().build()
}
