//! Semaphores on every kind: the permits table (`schema.rs`): per name a header row with the
//! count and the fence counter, and one row per permit with its expiry on the database clock —
//! the lock table's design, so a crashed holder's permit comes back when its lease runs out. An
//! acquisition is one transaction in one round trip, ordered per name by the header row's lock,
//! that counts the live permits with a locking read; extend and release are one statement each
//! on their permit's row, bound to the permit's owner token — so an acquirer's count waits for a
//! renewal or release in progress and never sees a permit expired that its renewal keeps. Waiters poll
//! with the client's backoff ([`lock_core::poll_until`]).
//!
//! On the row and advisory kinds too: `GET_LOCK` slots would need the count kept and checked
//! atomically with the grant somewhere no session owns; the table does that in one transaction.

use std::time::Duration;

use lock_core::{check_lease, poll_until, Acquired, Error, LockName, OwnerToken, Request, Result};

use super::error::{self, MyFailure};
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;

impl MySqlBackend {
    /// [`Permits::acquire_permit`](lock_core::Permits::acquire_permit).
    pub(crate) fn acquire_permit_polling(
        &self,
        request: &Request<'_>,
        permits: u32,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        if i32::try_from(permits).is_err() {
            return Err(Error::invalid_config(format!("at most {} permits per semaphore", i32::MAX)));
        }
        poll_until(request, |_| self.permit_once(request.name, request.owner, request.ttl, permits))
    }

    fn permit_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        permits: u32,
    ) -> Result<Option<MySqlLease>> {
        let mut connection = self.inner.pool.get()?;
        let owner = hex(owner.to_hex().as_bytes());
        let sql = self.inner.tables.acquire_permit(&hex(name.as_str().as_bytes()), &owner, permits, ttl);
        let results = match connection.try_run(&sql) {
            Ok(results) => results,
            // Refused by InnoDB (the transaction was rolled back): contention.
            Err(failure) if error::is_deadlock(&failure) || error::is_busy(&failure) => {
                connection.poison();
                return Ok(None);
            }
            Err(failure) => {
                // The transaction may still be open: never reuse the connection.
                connection.poison();
                return Err(error::map("acquire a permit", failure));
            }
        };
        // The only statement that returns rows (the fence is read inside the transaction).
        let row = results.first_row().ok_or_else(|| {
            Error::from(MyFailure::Reply { operation: "acquire a permit", detail: "no row".into() })
        })?;
        let value = |index: usize| row.get::<Option<i64>, _>(index).flatten().unwrap_or(0);
        if value(0) == 1 {
            let fence = u64::try_from(value(1)).unwrap_or(0);
            return Ok(Some(MySqlLease::new(name, fence, ttl, Hold::Permit { owner })));
        }
        let (held_with, holding) = (value(2), value(3));
        if holding > 0 && held_with != i64::from(permits) {
            return Err(Error::PermitsMismatch {
                name: name.clone(),
                asked: permits,
                held_with: u32::try_from(held_with).unwrap_or(0),
            });
        }
        Ok(None)
    }

    pub(crate) fn permit_extend(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.extend_permit(&hex(lease.name.as_str().as_bytes()), owner, ttl);
        let extended = connection.run("extend a permit", &sql)?.affected(0) == 1;
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    pub(crate) fn permit_release(&self, lease: &MySqlLease) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.release_permit(&hex(lease.name.as_str().as_bytes()), owner);
        Ok(connection.run("release a permit", &sql)?.affected(0) == 1)
    }
}
