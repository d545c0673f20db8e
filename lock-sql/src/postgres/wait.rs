//! [`NativeWait`] for the three kinds: lock-table waiters queue in the lock row and sleep until a
//! release's `NOTIFY` (to the oldest waiter's client), the holder's expiry or a one-second
//! re-check (through transaction pooling, without `NOTIFY`: a re-check within 4 to 25 ms); row and advisory waiters queue in the database's own
//! lock manager (`lock_timeout` bounds each wait). A timed wait is one statement, which keeps its
//! place in the queue until the deadline; a wait without one re-queues every I/O timeout (at
//! least [`MIN_WAIT_SLICE`]).

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::listener::FALLBACK_RECHECK;
use super::{PostgresBackend, PostgresLease, PostgresLockKind};
use crate::lock_key::LockKey;
#[cfg(doc)]
use crate::queue_wait::MIN_WAIT_SLICE;
use crate::queue_wait::{queued_grant, Wait};
use crate::waiters::Registration;

/// How long a waiter's queue entry lasts beyond one I/O timeout: it is renewed at each re-check,
/// at least every [`FALLBACK_RECHECK`]; an entry that lapses under a waiter costs that waiter its
/// place (it queues again at its next re-check).
const WAITER_NOTE: Duration = Duration::from_secs(2);

impl NativeWait for PostgresBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        check_lease(ttl)?;
        self.acquire_key_until(&LockKey::mutex(name), owner, ttl, deadline)
    }
}

impl PostgresBackend {
    /// [`NativeWait::acquire_until`] for a mutex's or an election's key.
    pub(crate) fn acquire_key_until(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        match self.inner.kind {
            PostgresLockKind::Table => self.table_wait(name, owner, ttl, deadline),
            PostgresLockKind::Row | PostgresLockKind::Advisory => self.queue_wait(name, ttl, deadline),
        }
    }

    fn table_wait(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        let listener = &self.inner.listener;
        // A first attempt that does not queue (one light statement): an uncontended lock, or
        // one that a non-fair caller takes at once, needs no LISTEN connection. On a fair lock,
        // a client whose LISTEN is in force already (it has waited before) attempts in the
        // queueing statement at once instead: as light when the lock is free, and on a busy
        // one (its queue, a caller that releases and asks again) one statement on the lock's
        // row fewer per hand-off. Not for a wait shorter than a re-check: it would likely end
        // queued, its leave racing the caller's next call's entry (the client's one entry).
        let now = Instant::now();
        let refused = if self.inner.fair
            && listener.is_listening()
            && deadline.is_none_or(|deadline| deadline >= now + FALLBACK_RECHECK)
        {
            false
        } else {
            let sent_at = Instant::now();
            if let Some(lease) = self.table_try(name, owner, ttl)? {
                return Ok(Some(Acquired::new(lease, sent_at)));
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
            true
        };
        let registration = listener.register(name.as_str());
        // Queue only with LISTEN in force: a release after the queue entry would otherwise be
        // missed.
        let now = Instant::now();
        listener.wait_listening(deadline.map_or(now + FALLBACK_RECHECK, |d| d.min(now + FALLBACK_RECHECK)));
        let mut requeued = false;
        let outcome =
            self.table_wait_queued(&registration, (name, owner, ttl), deadline, refused, &mut requeued);
        // Out of time, or a win that put the client back at the queue's tail for other threads
        // that have finished since (nobody renews that entry): leave.
        let queued = matches!(outcome, Ok(None)) || (requeued && outcome.is_ok());
        if registration.finish() && queued {
            // No other thread of this client waits: leave the queue rather than hold it up until
            // the entry lapses (a fair lock serves nobody behind a waiter that
            // left) — in the background, since the call's time is up. After an error the entry
            // lapses on its own.
            self.in_background("distlock-leave", {
                let name = name.clone();
                move |backend| backend.table_leave_queue(&name)
            });
        }
        outcome
    }

    /// Runs `work` on a short-lived thread of its own (clean-up that must not stretch a call
    /// past its deadline); a failure is logged, not reported.
    fn in_background(&self, thread: &str, work: impl FnOnce(&Self) -> Result<()> + Send + 'static) {
        let backend = self.clone();
        let spawned = std::thread::Builder::new().name(thread.into()).spawn(move || {
            if let Err(error) = work(&backend) {
                tracing::debug!(%error, "background clean-up failed; what it would have removed lapses on its own");
            }
        });
        if let Err(error) = spawned {
            tracing::debug!(%error, "could not start a clean-up thread");
        }
    }

    /// Attempts in the queueing statement until one wins or `deadline` passes, sleeping between
    /// them until a notification, the holder's expiry or a re-check. `refused`: the caller's
    /// own first attempt was refused (every win then waited); `requeued`: a win put the client
    /// back at the queue's tail for its other waiting threads.
    fn table_wait_queued(
        &self,
        registration: &Registration<'_>,
        (name, owner, ttl): (&LockKey, &OwnerToken, Duration),
        deadline: Option<Instant>,
        refused: bool,
        requeued: &mut bool,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        let note = WAITER_NOTE + self.inner.pool.settings().io_timeout;
        for round in 0.. {
            // Notifications so far are answered by this attempt.
            registration.clear();
            let sent_at = Instant::now();
            let keep = registration.others_waiting();
            let remaining = match self.table_try_or_queue(name, owner, ttl, note, keep)? {
                Ok(lease) => {
                    *requeued = keep;
                    return Ok(Some(Acquired::new(lease, sent_at).contended_if(refused || round > 0)));
                }
                Err(remaining) => remaining,
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            // The holder's expiry sends no notification: re-check then. A free lock that was not
            // ours (a fair queue's head takes it) is announced by its next release.
            let recheck = self.inner.listener.recheck_after(round);
            let wait = if remaining.is_zero() { recheck } else { remaining.min(recheck) };
            registration.wait(deadline.map_or(now + wait, |deadline| deadline.min(now + wait)));
        }
        unreachable!("the rounds outlast any wait")
    }

    /// Waits in the server's lock queue: until the deadline in one statement, or without one in
    /// slices of the I/O timeout (at least [`MIN_WAIT_SLICE`]) so that a silent server is noticed.
    fn queue_wait(
        &self,
        name: &LockKey,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        let mut retried = false;
        loop {
            let wait = Wait::next(deadline, self.inner.pool.settings().io_timeout);
            let granted = match self.inner.kind {
                PostgresLockKind::Row => self.row_acquire(name, ttl, wait)?,
                _ => self.advisory_acquire(name, ttl, wait)?,
            };
            if let Some((lease, grant)) = granted {
                return Ok(Some(queued_grant(lease, grant, retried)));
            }
            retried = true;
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
        }
    }
}
