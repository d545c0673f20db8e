//! [`Leadership`]: the guard of a won election.

use std::fmt;

use crate::backend::{DistributedLock, FencingToken};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lost::LostSignal;
use crate::name::LockName;
use crate::state::HoldState;

/// Leadership of an election, won by [`Election::campaign`](crate::Election::campaign) and its
/// siblings; resigns when dropped.
///
/// # Contract
/// - **Leader until told otherwise, never after a rival.** Leadership is a lease, renewed in the
///   background like a lock's: when it cannot be confirmed it is reported lost (through
///   [`lost_signal`](Self::lost_signal) and [`is_leader`](Self::is_leader)) a clock-drift margin
///   before the server could let another candidate win.
/// - **In doubt is not leader.** [`is_leader`](Self::is_leader) is true only in
///   [`HoldState::Held`]: a session hold whose liveness check failed counts as not leader
///   (Curator's default for `SUSPENDED`), though it may come back.
/// - **Fence the leader's writes.** Being told on time does not stop a paused leader's write in
///   flight: pass [`fencing_token`](Self::fencing_token) to the store it writes to.
#[must_use = "if unused the leadership is resigned at once"]
pub struct Leadership<B: DistributedLock> {
    guard: LockGuard<B>,
}

impl<B: DistributedLock> Leadership<B> {
    pub(crate) fn new(guard: LockGuard<B>) -> Self {
        Self { guard }
    }

    /// The election's name.
    pub fn name(&self) -> &LockName {
        self.guard.name()
    }

    /// Whether this candidate is leader now: the leadership is held, not in doubt, not lost,
    /// not resigned.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// The leadership's [`HoldState`] (held, in doubt, lost or released).
    pub fn state(&self) -> HoldState {
        self.guard.state()
    }

    /// The fencing token of this term, where the backend issues tokens: greater than every
    /// earlier leader's.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.guard.fencing_token()
    }

    /// A handle that fires when the leadership is lost (not when it is resigned).
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Publishes `value` for followers ([`Election::leader`](crate::Election::leader)), on the
    /// condition, checked by the server in the same step as the write, that this candidate still
    /// leads: a deposed leader cannot overwrite its successor's value.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the leadership is resigned or the server no longer has it (nothing
    /// was written); the server's errors.
    pub fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<()> {
        self.guard.with_lease(|backend, lease| match backend.elections() {
            Some(elections) => elections.proclaim(lease, value.as_ref()),
            None => Err(Error::Unsupported { backend: backend.backend_name(), feature: "leader election" }),
        })
    }

    /// Runs `write` with the leadership's backend and lease, as
    /// [`LockGuard::with_lease`]: for a guarded write on the election's own server.
    ///
    /// # Errors
    /// As [`LockGuard::with_lease`].
    pub fn with_lease<R>(&self, write: impl FnOnce(&B, &mut B::Lease) -> Result<R>) -> Result<R> {
        self.guard.with_lease(write)
    }

    /// Gives up the leadership now, so another candidate can win at once.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`]: the server's errors (the lease then runs out on its own).
    pub fn resign(self) -> Result<()> {
        self.guard.unlock()
    }
}

impl<B: DistributedLock> fmt::Debug for Leadership<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", self.name())
            .field("state", &self.state())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}
