//! [`NativeWait`] for the row and advisory kinds: waiters queue in the server's lock manager
//! (InnoDB's row-lock queue, `GET_LOCK`'s queue). A timed wait is one statement, which keeps its
//! place in the queue until the deadline (to the microsecond: `GET_LOCK` takes fractions of a
//! second, and `max_statement_time` cuts a row-lock wait); a wait without one re-queues every
//! I/O timeout (at least [`MIN_WAIT_SLICE`]). The socket's read timeout is stretched to each
//! statement's wait plus the I/O timeout, so no wait is cut short or turned into polling by a
//! short I/O timeout.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::{MySqlBackend, MySqlLease, MySqlLockKind};
use crate::queue_wait::Wait;
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
        let _ = owner;
        check_lease(ttl)?;
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
