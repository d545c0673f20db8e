//! The steps every primitive's acquisition shares: re-entering a hold the thread already has,
//! and recording a fresh one (hold count, close check, renewal, guard).

use std::sync::Arc;

use crate::abilities::Deadline;
use crate::backend::{Acquired, DistributedLock};
use crate::backoff::Backoff;
use crate::client::Shared;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::held::HeldLease;
use crate::name::LockName;
use crate::observe::Attempt;
use crate::owner::OwnerToken;
use crate::reentrancy::{HoldSlot, HoldTable, Reentry};

/// What the current thread already has of `name`'s `slot` lock: `Some(answer)` when that decides
/// the acquisition (entered again, or refused), `None` when the backend must be asked.
///
/// # Errors
/// [`Error::Closed`] after close; [`Error::NotHeld`] when the thread's hold is lost;
/// [`Error::WouldDeadlock`] when a non-reentrant hold is asked to wait for itself.
pub(crate) fn reentered<B: DistributedLock>(
    shared: &Arc<Shared<B>>,
    name: &LockName,
    slot: HoldSlot,
    deadline: Deadline,
) -> Result<Option<Option<LockGuard<B>>>> {
    if shared.is_closed() {
        return Err(Error::Closed);
    }
    match shared.holds.reenter(name, slot, shared.options.reentrant && slot != HoldSlot::Leader) {
        Reentry::Entered(held) if !held.is_held() => {
            shared.holds.exit(HoldTable::<B>::current_thread(), name, slot);
            Err(Error::NotHeld { name: name.clone() })
        }
        Reentry::Entered(held) => Ok(Some(Some(LockGuard::new(Arc::clone(shared), held)))),
        Reentry::Refused => match deadline {
            Deadline::Now => Ok(Some(None)),
            Deadline::At(_) | Deadline::Never => Err(Error::WouldDeadlock { name: name.clone() }),
        },
        Reentry::NotHeld => Ok(None),
    }
}

/// Records how the server acquisition of `name`'s `slot` lock by `owner` timed by `attempt`
/// ended; a fresh hold is recorded for the current thread, renewed, and handed out as a guard.
///
/// # Errors
/// The acquisition's error; [`Error::Closed`] when the client was closed meanwhile (the
/// acquisition is then released).
pub(crate) fn record<B: DistributedLock>(
    shared: &Arc<Shared<B>>,
    (name, slot, owner): (&LockName, HoldSlot, OwnerToken),
    attempt: Attempt,
    acquired: Result<Option<Acquired<B::Lease>>>,
) -> Result<Option<LockGuard<B>>> {
    let acquired = match acquired {
        Ok(Some(acquired)) => acquired,
        Ok(None) => {
            attempt.finish(Ok(None));
            return Ok(None);
        }
        Err(error) => {
            attempt.finish(Err(shared.observer.describe(&error)));
            return Err(error);
        }
    };
    let token = shared.backend.fencing().map(|fencing| fencing.fencing_token(&acquired.lease));
    attempt.finish(Ok(Some((acquired.contended, token))));
    let sent_at = acquired.sent_at;
    let options = &shared.options;
    let observed = (Arc::clone(&shared.observer), attempt.hold_metrics());
    let held =
        Arc::new(HeldLease::new((name.clone(), slot, owner), acquired, &*shared.backend, options, observed));
    // Recorded and checked against `close` in one step: a close either sees this hold (and
    // releases it) or has already refused it.
    if !shared.holds.insert_unless_closed(Arc::clone(&held)) {
        if let Err(error) = held.release(&shared.backend) {
            let (lock, error) = (shared.observer.shown(name), shared.observer.describe(&error));
            tracing::debug!(%lock, %error, "releasing an acquisition that finished after close");
        }
        return Err(Error::Closed);
    }
    shared.leases.track(Arc::clone(&held), sent_at, options.renewal.then_some(options.renew_interval));
    Ok(Some(LockGuard::new(Arc::clone(shared), held)))
}

/// Calls `attempt` — an unbounded wait — until it returns a guard. A backend returning early from
/// an unbounded wait breaks its contract; it is asked again, after a pause.
///
/// # Errors
/// The first error `attempt` returns.
pub(crate) fn until_acquired<B: DistributedLock>(
    shared: &Shared<B>,
    mut attempt: impl FnMut() -> Result<Option<LockGuard<B>>>,
) -> Result<LockGuard<B>> {
    let (min, max) = shared.options.backoff();
    let mut backoff = Backoff::new(min, max);
    loop {
        if let Some(guard) = attempt()? {
            return Ok(guard);
        }
        backoff.sleep_until(None);
    }
}
