//! distlock: one blocking distributed-lock API over Redis, SQL and ZooKeeper backends.
//!
//! This facade re-exports [`lock_core`] (the API and the in-memory backend) and, behind Cargo
//! features, each backend crate.
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
