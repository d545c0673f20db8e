//! [`HeldLease`]: the state of one acquisition, shared by its guard and the renewal threads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::{DistributedLock, FencingToken, HoldKind};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::name::LockName;
use crate::options::OnLost;
use crate::state::HoldState;

/// One acquisition: the backend's lease plus what the holder believes about it.
///
/// The guard releases it; a renewal I/O thread extends it. Both go through the `lease` mutex, so a
/// release waits for an in-flight renewal and a renewal never touches a released lease.
pub(crate) struct HeldLease<B: DistributedLock> {
    pub(crate) name: LockName,
    /// The lease the holder may count on after each confirmation: the requested lease less the
    /// backend's [`lease_margin`](DistributedLock::lease_margin).
    pub(crate) valid_for: Duration,
    /// The lease requested from the server on each renewal.
    pub(crate) ttl: Duration,
    pub(crate) hold_kind: HoldKind,
    /// Whether the renewal thread extends (or, for sessions, checks) this hold. A session-bound
    /// hold that nobody checks lives as long as its session, with no clock on it.
    renewing: bool,
    /// `None` once released.
    pub(crate) lease: Mutex<Option<B::Lease>>,
    released: AtomicBool,
    /// Set the moment the hold is known lost, before the callback runs and the signal fires.
    lost_flag: AtomicBool,
    /// Set while the last liveness check of a session-bound hold failed.
    in_doubt: AtomicBool,
    /// Until when the lease is known to be valid: the send time of the last request the server
    /// confirmed, plus `valid_for`. For [`HoldKind::Session`] holds the lease is the session
    /// timeout: how long liveness checks may keep failing before the hold is lost.
    valid_until: Mutex<Instant>,
    pub(crate) fencing: Option<FencingToken>,
    pub(crate) lost: LostSignal,
    on_lost: Option<OnLost>,
}

impl<B: DistributedLock> HeldLease<B> {
    pub(crate) fn new(
        name: LockName,
        lease: B::Lease,
        sent_at: Instant,
        ttl: Duration,
        renewing: bool,
        backend: &B,
        on_lost: Option<OnLost>,
    ) -> Self {
        let fencing = backend.fencing().map(|f| f.fencing_token(&lease));
        // What the holder may count on: the lease less the backend's allowance for clock drift.
        let valid_for = ttl.saturating_sub(backend.lease_margin(ttl));
        Self {
            name,
            valid_for,
            ttl,
            hold_kind: backend.hold_kind(),
            renewing,
            lease: Mutex::new(Some(lease)),
            released: AtomicBool::new(false),
            lost_flag: AtomicBool::new(false),
            in_doubt: AtomicBool::new(false),
            valid_until: Mutex::new(sent_at + valid_for),
            fencing,
            lost: LostSignal::new(),
            on_lost,
        }
    }

    /// Whether the holder may still believe it holds the lock.
    pub(crate) fn is_held(&self) -> bool {
        self.state() == HoldState::Held
    }

    /// What the holder may believe now. Time alone turns a hold lost: a lease (or a checked
    /// session) past its last confirmed expiry is `Lost` even before the renewal timer says so.
    pub(crate) fn state(&self) -> HoldState {
        if self.released.load(Ordering::Acquire) {
            return HoldState::Released;
        }
        if self.lost_flag.load(Ordering::Acquire) || (self.expires() && Instant::now() >= self.valid_until())
        {
            return HoldState::Lost;
        }
        if self.in_doubt.load(Ordering::Acquire) {
            HoldState::InDoubt
        } else {
            HoldState::Held
        }
    }

    /// Whether the timer must report this hold lost when its confirmed expiry passes.
    pub(crate) fn expires(&self) -> bool {
        self.hold_kind == HoldKind::Lease || self.renewing
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost_flag.load(Ordering::Acquire)
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock()
    }

    /// Records a renewal the server confirmed, for a request sent at `sent_at`.
    pub(crate) fn confirm(&self, sent_at: Instant) {
        let mut valid_until = self.valid_until.lock();
        *valid_until = (*valid_until).max(sent_at + self.valid_for);
        self.in_doubt.store(false, Ordering::Release);
    }

    /// Records a renewal that failed without an answer. Only a session-bound hold turns into
    /// doubt: a lease stays valid on the server until its confirmed expiry, whatever the
    /// connection does.
    pub(crate) fn renewal_failed(&self) {
        if self.hold_kind == HoldKind::Session {
            self.in_doubt.store(true, Ordering::Release);
        }
    }

    /// Reports the hold lost, once: from then on it is not held; the callback runs; then the
    /// signal fires (so whoever the signal wakes sees the callback's effects).
    pub(crate) fn mark_lost(&self, why: &str) {
        if self.is_released() || self.lost_flag.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(lock = %self.name, why, "distributed lock lost");
        if let Some(callback) = &self.on_lost {
            // The callback runs on a renewal thread: its panic must not stop renewal.
            if catch_unwind(AssertUnwindSafe(|| callback(&self.name))).is_err() {
                tracing::error!(lock = %self.name, "the on_lost callback panicked");
            }
        }
        self.lost.fire();
    }

    /// Releases the lease on the backend.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the backend says the lock was no longer held under this lease; the
    /// backend's error when it could not be asked (the server then expires the lease on its own).
    pub(crate) fn release(&self, backend: &B) -> Result<()> {
        // Waits for a renewal batch of this client that holds the lease right now: at most that
        // backend call, which the backend bounds by its own timeouts.
        let lease = self.lease.lock().take();
        self.released.store(true, Ordering::Release);
        let Some(lease) = lease else { return Ok(()) };
        match backend.release(lease) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::NotHeld { name: self.name.clone() }),
            Err(error) => Err(error),
        }
    }
}
