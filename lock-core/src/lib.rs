//! The core of distlock: one blocking distributed-lock API over many backends.
//!
//! - [`DistributedLock`] is what a backend does atomically: acquire once with a lease, extend,
//!   release — each bound to the caller's [`OwnerToken`]. Optional abilities are sub-traits:
//!   [`NativeWait`] (server wake-ups) and [`Fencing`] (strictly increasing [`FencingToken`]s).
//! - [`LockClient`] and [`Lock`] add everything else once, for every backend: blocking, timed and
//!   non-blocking acquisition ([`Lock::lock`], [`Lock::try_lock`], [`Lock::try_lock_for`],
//!   [`Lock::try_lock_until`]), per-thread reentrancy, lease renewal in batches by a small
//!   bounded set of background threads, and a [`LockGuard`] that releases on drop and reports its
//!   [`HoldState`] — loss through a [`LostSignal`] at the lease's end, never later.
//! - [`MultiLock`] takes several locks of one client together, all or nothing, in one global
//!   order (no deadlock between multi-locks).
//! - [`ReadWriteLock`] (many readers or one writer) and [`Semaphore`] (N permits, each a lease)
//!   work on backends with the [`ReadWrite`] and [`Permits`] abilities, with the same guards.
//! - [`MemoryBackend`] is the in-process reference backend.
//!
//! Guides, rendered in the `distlock` facade's docs: [read-write locks, semaphores and
//! multi-locks][primitives-guide] on each kind, [behaviour under faults][faults-guide] (loss, in
//! doubt, what frees a cut holder's lock) and [observability][observability-guide] (spans,
//! metrics, name redaction).
//!
//! [primitives-guide]: https://docs.rs/distlock/latest/distlock/guide/primitives/index.html
//! [faults-guide]: https://docs.rs/distlock/latest/distlock/guide/faults/index.html
//! [observability-guide]: https://docs.rs/distlock/latest/distlock/guide/observability/index.html
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{LockClient, LockOptions, MemoryBackend};
//!
//! let options = LockOptions::builder().lease(Duration::from_secs(10)).build()?;
//! let client = LockClient::with_options(MemoryBackend::new(), options);
//! let lock = client.lock_named("inventory:sku-1")?;
//!
//! let guard = lock.lock()?;
//! let token = guard.fencing_token().expect("the memory backend issues fencing tokens");
//! // ... write to the protected resource, passing `token` along ...
//! # let _ = token;
//! {
//!     let again = lock.lock()?; // reentrant: same thread, same client
//!     assert_eq!(lock.hold_count(), 2);
//!     drop(again);
//! }
//! guard.unlock()?;
//! assert!(lock.try_lock()?.is_some());
//! # Ok::<(), lock_core::Error>(())
//! ```
#![warn(missing_docs)]

mod abilities;
mod acquire;
mod backend;
mod backoff;
#[cfg(feature = "tokio")]
pub mod blocking;
mod callbacks;
mod client;
mod doubt;
mod election;
mod error;
mod fenced;
mod guard;
mod held;
mod lock;
mod lost;
mod memory;
mod multi;
mod name;
mod observe;
mod options;
mod owner;
mod profile;
mod reentrancy;
mod renewal;
mod rw_lock;
mod semaphore;
mod state;
mod thread_pool;
mod tls;
mod tls_url;
mod url;
mod write_holds;

pub use abilities::{poll_until, Access, Deadline, Permits, Primitive, ReadWrite, Request};
pub use backend::{Acquired, DistributedLock, Extension, Fencing, FencingToken, HoldKind, NativeWait};
pub use callbacks::{CALLBACK_THREAD_NAME, MAX_CALLBACK_THREADS};
pub use client::LockClient;
pub use doubt::{DoubtMark, DoubtSignal};
pub use election::{
    leader_recheck, Election, Elections, Leader, LeaderObserver, LeaderWatch, Leadership, SleepingWatch,
};
pub use error::{display_chain, BoxError, Error, Result};
pub use fenced::{admit, FencedStore, MemoryFencedStore};
pub use guard::LockGuard;
pub use lock::Lock;
pub use lost::LostSignal;
pub use memory::{MemoryBackend, MemoryLease};
pub use multi::{MultiGuard, MultiLock};
pub use name::LockName;
pub use observe::metrics;
pub use options::{
    check_lease, LockOptions, LockOptionsBuilder, OnLost, DRIFT_ALLOWANCE, MAX_BACKOFF, MAX_LEASE,
};
pub use owner::OwnerToken;
pub use profile::BackendProfile;
pub use renewal::{MAX_RENEWAL_IO_THREADS, MAX_RENEWAL_THREADS, RENEWAL_THREAD_PREFIX};
pub use rw_lock::ReadWriteLock;
pub use semaphore::{check_permits, Semaphore};
pub use state::HoldState;
#[cfg(feature = "rustls")]
pub use tls::install_ring_provider;
pub use tls::{TlsMode, TlsOptions, Verification};
pub use tls_url::{TlsParameters, TlsVocabulary};
pub use url::{redact_url, split_url_list, take_query_parameters, UrlParts};
pub use write_holds::WriteHolds;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
