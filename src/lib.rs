//! distlock: one blocking distributed-lock API over many backends, each proven by one shared
//! conformance suite.
//!
//! This facade re-exports [`lock_core`] (the API and the in-memory backend) and, behind Cargo
//! features, each backend crate: today `redis` (single-node locks and Redlock).
//!
//! ```
//! use distlock::{LockClient, MemoryBackend};
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let guard = client.lock_named("reports:daily")?.lock()?;
//! assert!(guard.is_held());
//! # Ok::<(), distlock::Error>(())
//! ```
#![warn(missing_docs)]

pub use lock_core::*;

/// The Redis backends (feature `redis`): [`RedisBackend`](lock_redis::RedisBackend) with the
/// single-node `SET NX PX` and the reentrant-hash layouts, fencing tokens, pub/sub wake-ups, a
/// fair wait queue and the `WAIT` option; and [`RedlockBackend`](lock_redis::RedlockBackend)
/// over independent nodes (read its limits before relying on it).
///
/// ```no_run
/// use distlock::redis::RedisBackend;
/// use distlock::LockClient;
///
/// let client = LockClient::new(RedisBackend::new("redis://127.0.0.1:6380/")?);
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), distlock::Error>(())
/// ```
#[cfg(feature = "redis")]
pub use lock_redis as redis;
