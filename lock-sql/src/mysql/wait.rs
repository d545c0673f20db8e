//! [`NativeWait`] for the row and advisory kinds: waiters queue in the server's lock manager
//! (InnoDB's row-lock queue, `GET_LOCK`'s queue). Each wait takes whole seconds (what
//! `innodb_lock_wait_timeout` and this `GET_LOCK` use take) and stays shorter than the socket's
//! read timeout, so a long wait is a series of slices; a deadline less than a second away is
//! met by polling with `NOWAIT` every [`POLL`].

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::{MySqlBackend, MySqlLease, MySqlLockKind};

/// The pause between `NOWAIT` attempts in the last second before a deadline.
const POLL: Duration = Duration::from_millis(50);

impl NativeWait for MySqlBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let _ = owner;
        check_lease(ttl)?;
        // The longest slice the read timeout allows (at least a second shorter).
        let max_slice = self.inner.pool.settings().io_timeout.as_secs().saturating_sub(1);
        loop {
            let sent_at = Instant::now();
            let left = deadline.map(|deadline| deadline.saturating_duration_since(sent_at));
            let slice = left.map_or(max_slice, |left| left.as_secs().min(max_slice));
            let wait = (slice > 0).then_some(slice);
            let lease = match self.inner.kind {
                MySqlLockKind::Row => self.row_acquire(name, ttl, wait)?,
                _ => self.advisory_acquire(name, ttl, wait)?,
            };
            if let Some(lease) = lease {
                return Ok(Some(Acquired::new(lease, sent_at)));
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            if wait.is_none() {
                let until = deadline.map_or(now + POLL, |deadline| deadline.min(now + POLL));
                thread::sleep(until.saturating_duration_since(now));
            }
        }
    }
}
