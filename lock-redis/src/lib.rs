//! The Redis backend of distlock: [`RedisBackend`] implements
//! [`DistributedLock`](lock_core::DistributedLock) with [`Fencing`](lock_core::Fencing) and
//! [`NativeWait`](lock_core::NativeWait), so a [`LockClient`](lock_core::LockClient) over it
//! gets blocking, timed and non-blocking locks, per-thread reentrancy, lease renewal and
//! fencing tokens.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{LockClient, LockOptions};
//! use lock_redis::RedisBackend;
//!
//! # fn main() -> Result<(), lock_core::Error> {
//! let backend = RedisBackend::builder("redis://127.0.0.1:6380/").build()?;
//! let options = LockOptions::builder().lease(Duration::from_secs(10)).build()?;
//! let client = LockClient::with_options(backend, options);
//!
//! let guard = client.lock_named("inventory:sku-1")?.lock()?;
//! let token = guard.fencing_token().expect("the Redis backend issues fencing tokens");
//! // ... write to the protected resource, passing `token` along ...
//! # let _ = token;
//! guard.unlock()?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! - **Two layouts** ([`RedisLockKind`]): `SetNx`, a string key holding the owner token
//!   (`SET NX PX`), and `ReentrantHash`, Redisson's hash of owner token to hold count. Each is a
//!   handful of Lua scripts (acquire, extend, release) run with `EVALSHA`; the lock name travels
//!   as `KEYS`/`ARGV`, never inside script text.
//! - **One atomic step** acquires, sets the lease and takes the next fencing token from a
//!   per-name counter that never expires, so tokens strictly increase across holders, expiries
//!   and client restarts. Extend and release compare the owner token first, in the same script.
//! - **Keys** ([`RedisKeys`]): `<prefix>:{<escaped name>}:lock|fence|queue|queue-timeouts`, one
//!   Redis Cluster hash tag per lock.
//! - **Waiting**: a release publishes on the lock's channel; one subscriber connection per
//!   backend wakes the waiting threads. Waiters queue in Redis in arrival order (a sorted set),
//!   so a holder that releases and re-locks at once cannot starve them; a waiter that dies leaves
//!   the queue within 3 s. A lost message delays a waiter by at most a second.
//! - **Renewal** of many leases is one pipeline per batch.
//! - **Connections**: an r2d2 pool with connect, read and write timeouts; a connection that hit
//!   an I/O error or a timeout is discarded, never reused with a late reply in flight.
//! - **Replication**: [`RedisLockBuilder::wait_for_replicas`] adds `WAIT` after acquiring.
//!
//! # Limits
//! A single Redis server (or primary) is a single point of truth: with asynchronous replication
//! a failover can lose a lock (seed 001), which `WAIT` narrows but does not close. Fencing
//! tokens are what keep a resource safe from a holder that lost its lock without knowing.
#![warn(missing_docs)]

mod backend;
mod builder;
mod connection;
mod error;
mod keys;
mod lua;
mod reentrant_hash;
mod set_nx;
mod waiter;

pub use backend::{RedisBackend, RedisLease, RedisLockKind};
pub use builder::{RedisLockBuilder, MAX_TIMEOUT};
pub use connection::CONNECTOR_THREAD_NAME;
pub use keys::RedisKeys;
/// The Redis driver this backend is built on, for callers that need to reach the same server.
pub use redis;
pub use waiter::SUBSCRIBER_THREAD_NAME;
