//! [`HeldLease`]: the state of one acquisition, shared by its guard and the renewal threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::{Acquired, DistributedLock, FencingToken, HoldKind};
use crate::callbacks;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::name::LockName;
use crate::observe::{HoldMetrics, Observer, ShownName};
use crate::options::{LockOptions, OnLost};
use crate::owner::OwnerToken;
use crate::reentrancy::HoldSlot;
use crate::state::HoldState;

/// One acquisition: the backend's lease plus what the holder believes about it.
///
/// The guard releases it; a renewal I/O thread extends it. Both go through the `lease` mutex, so a
/// release waits for an in-flight renewal and a renewal never touches a released lease.
pub(crate) struct HeldLease<B: DistributedLock> {
    pub(crate) name: LockName,
    pub(crate) slot: HoldSlot,
    /// The owner token the lease is bound to (a writer's read lock is asked under it).
    pub(crate) owner: OwnerToken,
    /// The lease the holder may count on after each confirmation: the requested lease less the
    /// backend's [`lease_margin`](DistributedLock::lease_margin) and the clock-drift margin of
    /// the rest.
    pub(crate) valid_for: Duration,
    /// The lease requested from the server on each renewal.
    pub(crate) ttl: Duration,
    pub(crate) hold_kind: HoldKind,
    /// `None` once released.
    pub(crate) lease: Mutex<Option<B::Lease>>,
    released: AtomicBool,
    /// Set the moment the hold is known lost, before the callback runs and the signal fires.
    lost_flag: AtomicBool,
    /// Set while the last liveness check of a session-bound hold failed.
    in_doubt: AtomicBool,
    /// The backend's own doubt about the lease ([`DistributedLock::doubt_signal`]).
    doubt: Option<crate::DoubtSignal>,
    /// Set while the last renewal of this hold got no answer (set under the `lease` mutex, so a
    /// release that waited for that renewal sees it).
    unanswered: AtomicBool,
    /// Set when a renewal's answer was that the lock is gone (set under the `lease` mutex, so a
    /// release that waited for that renewal reports the loss itself).
    gone: AtomicBool,
    /// Until when the lease is known to be valid: the send time of the last request the server
    /// confirmed, plus `valid_for`. For [`HoldKind::Session`] holds the lease is the session
    /// timeout: how long liveness checks may keep failing before the hold is lost.
    valid_until: Mutex<Instant>,
    pub(crate) fencing: Option<FencingToken>,
    pub(crate) lost: LostSignal,
    on_lost: Option<OnLost>,
    observer: Arc<Observer>,
    metrics: HoldMetrics,
}

impl<B: DistributedLock> HeldLease<B> {
    /// A hold of `name`'s `slot` lock by `owner`, won by `acquired` under `options`: its lease
    /// counts from the winning request's send time, less the backend's
    /// [`lease_margin`](DistributedLock::lease_margin) and the clock-drift margin of the rest.
    /// It reports to its client's `observer` and its own `metrics`.
    pub(crate) fn new(
        (name, slot, owner): (LockName, HoldSlot, OwnerToken),
        acquired: Acquired<B::Lease>,
        backend: &B,
        options: &LockOptions,
        (observer, metrics): (Arc<Observer>, HoldMetrics),
    ) -> Self {
        let Acquired { lease, sent_at, .. } = acquired;
        let ttl = options.lease;
        let unvouched = backend.lease_margin(ttl).min(ttl);
        let margin = unvouched + options.drift_margin(ttl - unvouched);
        let on_lost = options.on_lost.clone();
        let fencing = backend.fencing().map(|f| f.fencing_token(&lease));
        let doubt = backend.doubt_signal(&lease);
        let valid_for = ttl.saturating_sub(margin);
        let lost = LostSignal::new();
        lost.set_expiry(sent_at + valid_for);
        Self {
            name,
            slot,
            owner,
            valid_for,
            ttl,
            hold_kind: backend.hold_kind(),
            lease: Mutex::new(Some(lease)),
            released: AtomicBool::new(false),
            lost_flag: AtomicBool::new(false),
            in_doubt: AtomicBool::new(false),
            doubt,
            unanswered: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            valid_until: Mutex::new(sent_at + valid_for),
            fencing,
            lost,
            on_lost,
            observer,
            metrics,
        }
    }

    /// The name as this client's spans and events show it.
    pub(crate) fn shown_name(&self) -> ShownName<'_> {
        self.observer.shown(&self.name)
    }

    /// `error`'s text as this client's spans and events show it.
    pub(crate) fn describe(&self, error: &Error) -> String {
        self.observer.describe(error)
    }

    /// Whether the holder may still believe it holds the lock.
    pub(crate) fn is_held(&self) -> bool {
        self.state() == HoldState::Held
    }

    /// What the holder may believe now. Time alone turns a hold lost: a hold past its last
    /// confirmed expiry is `Lost` even before the renewal timer says so. That holds for session
    /// holds too, with renewal on or off: the server may end a session that nobody confirmed for
    /// a whole lease (the SQL kinds set their server-side idle limit to the lease).
    pub(crate) fn state(&self) -> HoldState {
        if self.released.load(Ordering::Acquire) {
            return HoldState::Released;
        }
        if self.lost_flag.load(Ordering::Acquire) || Instant::now() >= self.valid_until() {
            return HoldState::Lost;
        }
        if self.in_doubt.load(Ordering::Acquire) || self.doubt.as_ref().is_some_and(|doubt| doubt.is_raised())
        {
            HoldState::InDoubt
        } else {
            HoldState::Held
        }
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

    /// Records a renewal the server confirmed, for a request sent at `sent_at` — unless the hold
    /// already counts as lost by the clock: a confirmation that comes after the holder may have
    /// been told never turns the loss back into a hold.
    pub(crate) fn confirm(&self, sent_at: Instant) {
        let mut valid_until = self.valid_until.lock();
        // (A release meanwhile settled the signal: it ignores the new expiry.)
        if Instant::now() >= *valid_until {
            return;
        }
        *valid_until = (*valid_until).max(sent_at + self.valid_for);
        self.lost.set_expiry(*valid_until);
        self.in_doubt.store(false, Ordering::Release);
    }

    /// Counts an in-doubt episode when the hold is in doubt now and was not at the last look:
    /// a failed liveness check, the backend's doubt signal, or a suspended session. Looked at
    /// after each renewal.
    pub(crate) fn observe_doubt(&self, backend: &B) {
        let doubted = self.in_doubt.load(Ordering::Acquire)
            || self.doubt.as_ref().is_some_and(|doubt| doubt.is_raised())
            || (self.hold_kind == HoldKind::Session && backend.session_suspended());
        self.metrics.in_doubt(doubted);
    }

    /// Records how the renewal just made (under the `lease` mutex) went: unanswered, or
    /// answered that the lock is gone.
    pub(crate) fn note_answer(&self, outcome: &Result<bool>) {
        self.unanswered.store(outcome.is_err(), Ordering::Release);
        if matches!(outcome, Ok(false)) {
            self.gone.store(true, Ordering::Release);
        }
    }

    /// Records a renewal that failed without an answer. Only a session-bound hold turns into
    /// doubt: a lease stays valid on the server until its confirmed expiry, whatever the
    /// connection does.
    pub(crate) fn renewal_failed(&self) {
        if self.hold_kind == HoldKind::Session {
            self.in_doubt.store(true, Ordering::Release);
        }
    }

    /// Reports the hold lost, once: from then on it is not held, the signal fires, and the
    /// callback is handed to a callback thread (user code never runs on a renewal thread). A
    /// released hold is left alone: its release reported any loss itself.
    pub(crate) fn mark_lost(&self, why: &str) {
        if !self.is_released() {
            self.report_lost(why);
        }
    }

    /// [`mark_lost`](Self::mark_lost) without the released check: the one path every loss takes,
    /// whoever sees it first (the timer, a renewal, or the holder's own release of a hold the
    /// clock already counted lost), so `on_lost` runs exactly once per loss.
    fn report_lost(&self, why: &str) {
        if self.lost_flag.swap(true, Ordering::AcqRel) {
            return;
        }
        // Counted before the signal fires: a holder woken by it sees the loss in the metrics.
        self.metrics.lost();
        self.lost.fire();
        tracing::warn!(lock = %self.shown_name(), why, "distributed lock lost");
        if let Some(callback) = &self.on_lost {
            let (callback, name) = (Arc::clone(callback), self.name.clone());
            callbacks::run(move || callback(&name));
        }
    }

    /// Settles the signal of a hold that ends now; a loss the clock already counted is reported
    /// (once) before the hold counts as released, so the timer cannot skip it.
    fn settle(&self) {
        let expired = self.lost.settle();
        if self.gone.load(Ordering::Acquire) {
            // A renewal found the lock gone just before this release got the lease: the batch
            // reports it only after the release, which would leave it unreported.
            self.report_lost(GONE);
        } else if expired {
            self.report_lost(lost_reason(self.hold_kind));
        }
        self.released.store(true, Ordering::Release);
    }

    /// Marks the hold released and drops its lease without asking the server (a lease runs out
    /// on its own; dropping a session hold's lease ends its connection).
    pub(crate) fn abandon(&self) {
        let lease = self.lease.lock().take();
        self.settle();
        self.metrics.abandoned();
        drop(lease);
    }

    /// Releases the lease on the backend.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the backend says the lock was no longer held under this lease; the
    /// backend's error when it could not be asked (the server then expires the lease on its own).
    pub(crate) fn release(&self, backend: &B) -> Result<()> {
        let span = self.observer.release_span(&self.name, self.slot.primitive(), self.fencing);
        let _entered = span.enter();
        let outcome = self.release_lease(backend);
        // A hold that ended lost (reported by now, by whichever path saw it first) fails its
        // release by no fault of the release.
        self.metrics.released(&outcome, self.is_lost(), &span, |error| self.describe(error));
        outcome
    }

    fn release_lease(&self, backend: &B) -> Result<()> {
        // Waits for a renewal of this lease in flight right now: at most that backend call, which
        // the backend bounds by one connect and one I/O timeout.
        let (lease, waited) = match self.lease.try_lock() {
            Some(mut slot) => (slot.take(), false),
            None => (self.lease.lock().take(), true),
        };
        // Lost by the clock, the timer not having said so yet: reported here, as the timer leaves
        // released holds alone.
        self.settle();
        let Some(lease) = lease else { return Ok(()) };
        if waited && self.unanswered.load(Ordering::Acquire) {
            // The server did not answer the renewal just made: asking again would double the
            // bound of this call. Dropping the lease ends a session hold's connection; a lease
            // runs out on the server on its own.
            drop(lease);
            return Err(Error::Timeout {
                backend: backend.backend_name(),
                operation: "release",
                source: Some(
                    "the renewal in flight got no answer, so the server was not asked again (a lease \
                     runs out on its own, a session hold ends with its connection)"
                        .into(),
                ),
            });
        }
        match backend.release(lease) {
            // Released in time on the server, but the holder was already told it lost the lock
            // (the clock-drift margin, counted by the clock even before the renewal timer
            // reported it): its critical section was not covered to the end.
            Ok(true) if self.is_lost() || self.lost.is_lost() => {
                Err(Error::NotHeld { name: self.name.clone() })
            }
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::NotHeld { name: self.name.clone() }),
            Err(error) => Err(error),
        }
    }
}

/// Why a hold the server no longer has is lost.
pub(crate) const GONE: &str = "the server says the lock is no longer held";

/// Why a hold whose confirmed expiry passed is lost.
pub(crate) fn lost_reason(hold_kind: HoldKind) -> &'static str {
    match hold_kind {
        HoldKind::Session => "no liveness check succeeded within the session timeout",
        _ => "the lease ran out before a renewal was confirmed",
    }
}
