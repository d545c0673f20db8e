//! [`LockGuard`]: proof of holding a lock; releases it when dropped.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::ThreadId;

use crate::backend::{DistributedLock, FencingToken, HoldKind};
use crate::client::Shared;
use crate::error::Error;
use crate::error::Result;
use crate::held::HeldLease;
use crate::lost::LostSignal;
use crate::name::LockName;
use crate::reentrancy::HoldTable;
use crate::state::HoldState;

/// Holds a lock until dropped or [`unlock`](Self::unlock)ed.
///
/// The guard owns what it needs (like parking_lot's `ArcMutexGuard`), so it may outlive the
/// [`Lock`](crate::Lock) and the [`LockClient`](crate::LockClient) it came from, be returned from
/// a function and kept in a struct: it keeps its client alive, and only an explicit
/// [`LockClient::close`](crate::LockClient::close) ends its hold under it (the guard then
/// reports [`HoldState::Released`]).
///
/// Dropping releases (a release error is logged through `tracing`); [`unlock`](Self::unlock)
/// releases and returns the result. A guard of a reentrant lock entered twice releases the
/// backend's lock only when the last guard goes.
///
/// A guard stays on the thread that locked: only the owning thread may unlock (Java's
/// `ReentrantLock` rule), and the compiler enforces it.
///
/// A guard that is leaked (`mem::forget`) keeps its lock for as long as the process renews it —
/// with renewal on (the default), until the process exits, as with Redisson's watchdog; with
/// renewal off, until the lease runs out.
///
/// ```compile_fail,E0277
/// # use lock_core::{LockClient, MemoryBackend};
/// let client = LockClient::new(MemoryBackend::new());
/// let lock = client.lock_named("x").unwrap();
/// let guard = lock.lock().unwrap();
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard)); // error: `LockGuard` cannot be sent between threads
/// });
/// ```
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct LockGuard<B: DistributedLock> {
    shared: Arc<Shared<B>>,
    held: Arc<HeldLease<B>>,
    /// The thread whose hold count this guard is part of.
    thread: ThreadId,
    released: bool,
    /// Guards are neither `Send` nor `Sync`: hold counts are per thread.
    _not_send: PhantomData<*const ()>,
}

impl<B: DistributedLock> LockGuard<B> {
    pub(crate) fn new(shared: Arc<Shared<B>>, held: Arc<HeldLease<B>>) -> Self {
        shared.add_handle();
        Self {
            shared,
            held,
            thread: HoldTable::<B>::current_thread(),
            released: false,
            _not_send: PhantomData,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.held.name
    }

    /// The fencing token issued with this acquisition, if the backend issues them.
    ///
    /// Send it with every write to the protected resource, and have the resource reject tokens
    /// lower than the highest it has seen.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.held.fencing
    }

    /// Whether the lock is still believed held: [`state`](Self::state) is [`HoldState::Held`] —
    /// not lost, not in doubt, and not past the last expiry (or session timeout) the server
    /// confirmed, by this process's clock.
    ///
    /// Check it before an irreversible step; a fencing token is the stronger protection.
    pub fn is_held(&self) -> bool {
        self.state() == HoldState::Held
    }

    /// What the holder may believe now: held, in doubt (a session-bound hold whose liveness
    /// check failed), lost, or released. See [`HoldState`].
    pub fn state(&self) -> HoldState {
        match self.held.state() {
            HoldState::Held
                if self.held.hold_kind == HoldKind::Session && self.shared.backend.session_suspended() =>
            {
                HoldState::InDoubt
            }
            state => state,
        }
    }

    /// Runs `write` with this hold's backend and lease: for a write on the lock's own server
    /// that the server makes conditional on the hold, in one atomic step (a backend's
    /// `…_if_held`, such as `RedisBackend::set_if_held` or `ZooKeeperBackend::set_data_if_held`).
    /// Renewal and release of this lease wait until `write` returns (the client's other leases
    /// renew as usual): a write that outlasts the lease loses the hold. Calling `with_lease` of
    /// the same guard inside `write` deadlocks.
    ///
    /// The server decides, not this process's belief: `write` runs also for a hold already
    /// reported lost (the server refuses it then; a loss is reported a clock-drift margin early,
    /// when the server may still have the lock and so may still take the write safely).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the guard's lock was released; else what `write` returns (the
    /// backends' `…_if_held` report a hold the server no longer has as [`Error::NotHeld`]).
    pub fn with_lease<R>(&self, write: impl FnOnce(&B, &mut B::Lease) -> Result<R>) -> Result<R> {
        let mut lease = self.held.lease.lock();
        match lease.as_mut() {
            Some(lease) => write(&self.shared.backend, lease),
            None => Err(Error::NotHeld { name: self.held.name.clone() }),
        }
    }

    /// A handle that fires if the lock is lost while held.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost.clone()
    }

    /// Releases the lock (or, for a nested guard of a reentrant lock, one hold of it).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock was no longer held by this owner (it expired, was taken
    /// over or deleted — for a nested guard, when the lock is known to be lost); the backend's
    /// error when the server could not be asked (a lease then runs out on its own, a session- or
    /// connection-bound hold ends with its session).
    pub fn unlock(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        if self.held.is_released() {
            // Released under the guard by `LockClient::close` or `Lock::force_unlock`.
            return Ok(());
        }
        if !self.shared.holds.exit(self.thread, &self.held.name, self.held.slot) {
            // A nested hold: the lock stays held by the outer guard, unless it is gone.
            return if self.held.is_held() {
                Ok(())
            } else {
                Err(Error::NotHeld { name: self.held.name.clone() })
            };
        }
        let released = self.held.release(&self.shared.backend);
        self.shared.leases.note_released();
        released
    }
}

impl<B: DistributedLock> Drop for LockGuard<B> {
    fn drop(&mut self) {
        // A panicking backend must not turn an unwinding panic into an abort.
        match catch_unwind(AssertUnwindSafe(|| self.release())) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                let error = self.held.describe(&error);
                tracing::warn!(lock = %self.held.shown_name(), %error, "releasing a dropped lock guard failed")
            }
            Err(_) => {
                tracing::error!(lock = %self.held.shown_name(), "the backend panicked while releasing a dropped guard")
            }
        }
        // The last handle of a client whose `LockClient`s are all gone closes it.
        if catch_unwind(AssertUnwindSafe(|| self.shared.drop_handle())).is_err() {
            tracing::error!(lock = %self.held.shown_name(), "the backend panicked while closing a dropped client");
        }
    }
}

impl<B: DistributedLock> fmt::Debug for LockGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.held.name)
            .field("fencing_token", &self.held.fencing)
            .field("held", &self.is_held())
            .finish()
    }
}
