//! [`NativeWait`] for the three kinds: lock-table waiters queue in the queue table and sleep
//! until their doorbell rings (a release), the holder's expiry or a one-second re-check; row and
//! advisory waiters queue in the server's lock manager (InnoDB's row-lock queue, `GET_LOCK`'s
//! queue). A timed wait is one statement, which keeps its
//! place in the queue until the deadline (to the microsecond: `GET_LOCK` takes fractions of a
//! second, and `max_statement_time` cuts a row-lock wait); a wait without one re-queues every
//! I/O timeout (at least [`MIN_WAIT_SLICE`]). The socket's read timeout is stretched to each
//! statement's wait plus the I/O timeout, so no wait is cut short or turned into polling by a
//! short I/O timeout.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::doorbell::FALLBACK_RECHECK;
use super::{MySqlBackend, MySqlLease, MySqlLockKind};
use crate::queue_wait::Wait;
use crate::waiters::Registration;

/// How long a waiter's queue entry lasts beyond one I/O timeout: it is renewed at each re-check,
/// at least every [`FALLBACK_RECHECK`]; an entry that lapses under a waiter costs that waiter its
/// place (it queues again at its next re-check).
const WAITER_NOTE: Duration = Duration::from_secs(2);
#[cfg(doc)]
use crate::queue_wait::MIN_WAIT_SLICE;

impl NativeWait for MySqlBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        check_lease(ttl)?;
        if self.inner.kind == MySqlLockKind::Table {
            return self.table_wait(name, owner, ttl, deadline);
        }
        loop {
            let wait = Wait::next(deadline, self.inner.pool.io_timeout());
            let granted = match self.inner.kind {
                MySqlLockKind::Row => self.row_acquire(name, ttl, wait)?,
                _ => self.advisory_acquire(name, ttl, wait)?,
            };
            if let Some((lease, granted_after)) = granted {
                return Ok(Some(Acquired::new(lease, granted_after)));
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
        }
    }
}

impl MySqlBackend {
    fn table_wait(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let doorbell = &self.inner.doorbell;
        // A first attempt that does not queue (one light statement): an uncontended lock, or
        // one that a non-fair caller takes at once, needs no doorbell.
        let sent_at = Instant::now();
        if let Some(lease) = self.table_try(name, owner, ttl)? {
            return Ok(Some(Acquired::new(lease, sent_at)));
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
        let registration = doorbell.register(name.as_str());
        let now = Instant::now();
        let until = deadline.map_or(now + FALLBACK_RECHECK, |d| d.min(now + FALLBACK_RECHECK));
        // Queue only with the doorbell connected: its id is what a release rings.
        let Some(waiter) = doorbell.wait_ready(until) else {
            return self.table_wait_unqueued(&registration, name, owner, ttl, deadline);
        };
        let mut queued = false;
        let outcome = self.table_wait_queued(&registration, name, owner, ttl, waiter, deadline, &mut queued);
        let won = matches!(outcome, Ok(Some(_)));
        let others = registration.others_waiting();
        // Out of the queue once done: a fair lock serves nobody behind an entry whose waiter
        // stopped waiting, until it lapses. After a win with other threads of this client
        // still waiting, the client moves to the tail instead. After an error the entry lapses
        // on its own: one more statement would stretch the call past its bound.
        if queued && outcome.is_ok() && (won || !others) {
            let requeue = (won && others).then(|| WAITER_NOTE + self.inner.pool.io_timeout());
            if let Err(error) = self.table_dequeue(name, waiter, requeue) {
                tracing::debug!(%error, "could not leave the lock's queue; the entry lapses on its own");
            }
        }
        outcome
    }

    /// Attempts, queueing after the first refusal (and renewing the entry at each re-check),
    /// then sleeping until the doorbell rings, the holder's lease ends or a second passes.
    /// `queued`: whether this client's entry is (or may be) in the queue.
    #[allow(clippy::too_many_arguments)]
    fn table_wait_queued(
        &self,
        registration: &Registration<'_>,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        waiter: u32,
        deadline: Option<Instant>,
        queued: &mut bool,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let note = WAITER_NOTE + self.inner.pool.io_timeout();
        let mut renewed_at: Option<Instant> = None;
        // The caller's first attempt was just refused: queue before the next.
        let mut attempt = false;
        loop {
            let mut remaining = Duration::ZERO;
            if attempt {
                // Rings so far are answered by this attempt.
                registration.clear();
                let sent_at = Instant::now();
                remaining = match self.table_try_as(name, owner, ttl, Some(waiter))? {
                    Ok(lease) => return Ok(Some(Acquired::new(lease, sent_at))),
                    Err(remaining) => remaining,
                };
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Ok(None);
                }
            }
            attempt = true;
            // Join the queue, or renew the entry once it is a re-check old: a release after
            // this rings the client; one before it left the lock free, which the answer says.
            if renewed_at.is_none_or(|at| at.elapsed() >= FALLBACK_RECHECK) {
                *queued = true;
                match self.table_queue(name, waiter, note)? {
                    // No row yet: the next attempt creates it.
                    None => continue,
                    Some(Ok(left)) if left.is_zero() => continue,
                    Some(Ok(left)) => remaining = left,
                    Some(Err(())) => remaining = Duration::ZERO,
                }
                renewed_at = Some(Instant::now());
            }
            let now = Instant::now();
            // The holder's expiry rings nobody: re-check then. A free lock that is the queue
            // head's is announced by its next release.
            let wait = if remaining.is_zero() { FALLBACK_RECHECK } else { remaining.min(FALLBACK_RECHECK) };
            registration.wait(deadline.map_or(now + wait, |deadline| deadline.min(now + wait)));
        }
    }

    /// Without a doorbell (it could not connect): plain attempts, at the holder's expiry and at
    /// least every [`FALLBACK_RECHECK`].
    fn table_wait_unqueued(
        &self,
        registration: &Registration<'_>,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        loop {
            let sent_at = Instant::now();
            if let Some(lease) = self.table_try(name, owner, ttl)? {
                return Ok(Some(Acquired::new(lease, sent_at)));
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let remaining = self.table_remaining(name)?.unwrap_or(FALLBACK_RECHECK);
            let wait = remaining.min(FALLBACK_RECHECK);
            registration.wait(deadline.map_or(now + wait, |deadline| deadline.min(now + wait)));
        }
    }
}
