//! Lease renewal and loss on time, for every client of the process.
//!
//! # Design
//! - **One timer thread** (`distlock-renew`) owns every schedule and never calls a backend. Each
//!   [`LockClient`](crate::LockClient) has a [`LeaseTable`] with two queues: when each held
//!   lease is next due for renewal, and when its confirmed expiry passes. At an expiry the timer
//!   itself reports the lease lost (flag, `on_lost` callback, [`LostSignal`](crate::LostSignal)),
//!   whatever any backend is doing — so loss is signalled at the lease's end, never later.
//! - **A small pool of renewal I/O threads** (`distlock-renew-io`, at most
//!   [`MAX_RENEWAL_IO_THREADS`], started on demand, gone after 30 s idle) runs the backend calls.
//!   The timer hands a client's due leases to a worker as **one batch** — one
//!   [`extend_many`](crate::DistributedLock::extend_many) call — and dispatches no second batch of
//!   that client while one is in flight. So a server that stopped answering holds up renewals of
//!   its own client's leases only; other clients' batches run on other workers.
//! - **Batches per client, not per lease.** When a lease falls due, every lease of the client due
//!   within half its own interval goes in the same batch (renewed a little early, never late), so
//!   the leases fall into step: a client sends about two batches per renew interval whether it
//!   holds one lease or 10,000.
//! - A release waits for an in-flight batch of its own client that holds its lease (the backend
//!   bounds that call by its timeouts), never for another client's I/O.
//!
//! The process runs at most `1 + MAX_RENEWAL_IO_THREADS` renewal threads, all named with the
//! prefix [`RENEWAL_THREAD_PREFIX`]. More clients stuck on stopped servers than there are I/O
//! threads delay the renewals of the rest (their leases are still reported lost on time).
//!
//! A panic in a backend or an `on_lost` callback is caught and logged; it stops no thread.
//! Callbacks run on a renewal thread: keep them short.

mod table;
mod timer;
mod workers;

pub(crate) use table::LeaseTable;

/// The name every renewal thread's name starts with (the timer is `distlock-renew`, the I/O
/// threads `distlock-renew-io`), as `ps -L` and `/proc/*/task/*/comm` show them (which cut names
/// at 15 bytes).
pub const RENEWAL_THREAD_PREFIX: &str = "distlock-renew";

/// The most renewal I/O threads a process runs at once (besides the one timer thread).
pub const MAX_RENEWAL_IO_THREADS: usize = 8;

/// The most renewal threads a process runs: the timer and [`MAX_RENEWAL_IO_THREADS`].
pub const MAX_RENEWAL_THREADS: usize = 1 + MAX_RENEWAL_IO_THREADS;
