//! [`NativeWait`] for the three kinds: lock-table waiters sleep until the release's `NOTIFY`, the
//! holder's expiry or a one-second re-check; row and advisory waiters queue in the database's own
//! lock manager (`lock_timeout` bounds each wait). A timed wait is one statement, which keeps its
//! place in the queue until the deadline; a wait without one re-queues every I/O timeout (at
//! least [`MIN_WAIT_SLICE`]).

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::listener::FALLBACK_RECHECK;
use super::{PostgresBackend, PostgresLease, PostgresLockKind};
use crate::queue_wait::Wait;
#[cfg(doc)]
use crate::queue_wait::MIN_WAIT_SLICE;

/// How long a waiter's note on the row lasts beyond one I/O timeout: it is renewed at each
/// re-check, at least every [`FALLBACK_RECHECK`]; a note that lapses under a waiter costs that
/// waiter its wake-up, not its place (it re-checks on its own).
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
        match self.inner.kind {
            PostgresLockKind::Table => self.table_wait(name, owner, ttl, deadline),
            PostgresLockKind::Row | PostgresLockKind::Advisory => self.queue_wait(name, ttl, deadline),
        }
    }
}

impl PostgresBackend {
    fn table_wait(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        let mut registration = None;
        loop {
            if let Some(registration) = &registration {
                // Notifications so far are answered by this attempt.
                super::listener::Registration::clear(registration);
            }
            let sent_at = Instant::now();
            if let Some(lease) = self.table_try(name, owner, ttl)? {
                return Ok(Some(Acquired::new(lease, sent_at)));
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let Some(waiting) = &registration else {
                // Listen first, then re-check: a release in between would otherwise be missed.
                registration = Some(self.inner.listener.register(name.as_str()));
                let until =
                    deadline.map_or(now + FALLBACK_RECHECK, |deadline| deadline.min(now + FALLBACK_RECHECK));
                self.inner.listener.wait_listening(until);
                continue;
            };
            // Listening now, say so on the row (a release then notifies); the row also tells when
            // the holder's lease ends, which sends no notification: re-check then.
            let hint = self.table_mark_waiting(name, WAITER_NOTE + self.inner.pool.settings().io_timeout)?;
            let wait = hint.min(FALLBACK_RECHECK);
            let until = deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
            waiting.wait(until);
        }
    }

    /// Waits in the server's lock queue: until the deadline in one statement, or without one in
    /// slices of the I/O timeout (at least [`MIN_WAIT_SLICE`]) so that a silent server is noticed.
    fn queue_wait(
        &self,
        name: &LockName,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        loop {
            let wait = Wait::next(deadline, self.inner.pool.settings().io_timeout);
            let granted = match self.inner.kind {
                PostgresLockKind::Row => self.row_acquire(name, ttl, wait)?,
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
