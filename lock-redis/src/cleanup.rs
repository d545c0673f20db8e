//! Deferred clean-up: giving back a grant that is in doubt without making the caller wait.
//!
//! When an acquisition's reply timed out, the server may still have run the script and granted
//! the lock to an owner token nobody will use; when `WAIT` failed, a grant exists that is not
//! known to be replicated. Releasing it with its owner token is right, but on the caller's
//! thread it would cost another round of timeouts against a server that just failed (a timed
//! acquisition returns by its deadline plus at most one I/O timeout). So it runs here, on a
//! short-lived thread, on a fresh connection.
//!
//! Best effort: a release sent on a new connection can reach a stopped server before the
//! timed-out request still queued on the old one, and then the grant lapses at its lease end,
//! as it would without clean-up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use lock_core::DistributedLock as _;

use crate::single_node::{RedisBackend, RedisLease};

/// At most this many clean-up threads run per process; past that, grants lapse on their own
/// (a server that times everyone out would otherwise draw a thread per failed call).
const MAX_RUNNING: usize = 4;

/// The clean-up threads' name (Linux shows 15 bytes of a thread name).
const NAME: &str = "distlock-rclean";

static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Releases `lease` on another thread, if fewer than [`MAX_RUNNING`] clean-ups are under way.
pub(crate) fn release_in_background(backend: &RedisBackend, lease: RedisLease, why: &'static str) {
    if RUNNING.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!(lock = %lease.name(), why, "too many clean-ups under way; the grant will lapse");
        return;
    }
    let backend = backend.clone();
    let spawned = thread::Builder::new().name(NAME.into()).spawn(move || {
        let name = lease.name().clone();
        match backend.release(lease) {
            Ok(released) => tracing::debug!(lock = %name, why, released, "gave back a grant in doubt"),
            Err(error) => tracing::warn!(lock = %name, why, %error, "giving back a grant in doubt failed; it will lapse"),
        }
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    });
    if spawned.is_err() {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}
