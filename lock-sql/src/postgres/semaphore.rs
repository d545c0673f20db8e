//! Semaphores on every kind: the permits table (`schema.rs`), one row per name holding the count
//! and the permits, each a lease with its own expiry on the database clock — the lock table's
//! design, so a crashed holder's permit comes back when its lease runs out. One statement
//! acquires (pruning expired permits, checking the count), extends or releases, each bound to
//! the permit's owner token. Waiters poll with the client's backoff ([`lock_core::poll_until`]):
//! the table has no wake-ups.
//!
//! On the row and advisory kinds too: a session-bound semaphore (N slot keys or rows tried in
//! turn) would need the count kept somewhere that outlives no session and is checked atomically
//! with the grant; the table gives that in one statement, and a permit lease then behaves the way
//! the session kinds' holds do (lost once no renewal succeeded for a whole lease).

use std::time::Duration;

use lock_core::{check_lease, poll_until, Acquired, Error, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;

use super::connection::Param;
use super::lease::{Hold, PostgresLease};
use super::session::unsigned;
use super::table::millis;
use super::PostgresBackend;

impl PostgresBackend {
    /// [`Permits::acquire_permit`](lock_core::Permits::acquire_permit).
    pub(crate) fn acquire_permit_polling(
        &self,
        request: &Request<'_>,
        permits: u32,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        let count = i32::try_from(permits)
            .map_err(|_| Error::invalid_config(format!("at most {} permits per semaphore", i32::MAX)))?;
        poll_until(request, |_| self.permit_once(request.name, request.owner, request.ttl, count))
    }

    fn permit_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        permits: i32,
    ) -> Result<Option<PostgresLease>> {
        let connection = self.inner.pool.get()?;
        let token = owner.to_hex();
        let (name_text, token_text, ms) = (name.as_str(), token.as_str(), millis(ttl));
        let params: &[Param<'_>] =
            &[(&name_text, Type::TEXT), (&token_text, Type::TEXT), (&ms, Type::INT8), (&permits, Type::INT4)];
        // The undo of an unanswered acquisition (`undo.rs`): the owner-checked release.
        let undo = || {
            vec![(
                self.inner.tables.permits.release.clone(),
                vec![name_text.to_owned(), token_text.to_owned()],
            )]
        };
        let rows = connection.acquire_rows(
            "acquire a permit",
            (&self.inner.tables.permits.acquire, params),
            ttl,
            undo,
        )?;
        let Some(row) = rows.first() else { return Ok(None) };
        if row.get::<_, bool>(1) {
            return Ok(Some(PostgresLease::new(
                name,
                unsigned(row.get(0)),
                ttl,
                Hold::Permit { owner: token },
            )));
        }
        let (held_with, holding) = (row.get::<_, i32>(2), row.get::<_, i32>(3));
        if holding > 0 && held_with != permits {
            return Err(Error::PermitsMismatch {
                name: name.clone(),
                asked: permits.unsigned_abs(),
                held_with: held_with.unsigned_abs(),
            });
        }
        Ok(None)
    }

    pub(crate) fn permit_extend(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let connection = self.inner.pool.get()?;
        let (name, owner, ms) = (lease.name.as_str(), owner.as_str(), millis(ttl));
        let extended = !connection
            .rows(
                "extend a permit",
                &self.inner.tables.permits.extend,
                &[(&name, Type::TEXT), (&owner, Type::TEXT), (&ms, Type::INT8)],
            )?
            .is_empty();
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    pub(crate) fn permit_release(&self, lease: &PostgresLease) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let (name, owner) = (lease.name.as_str(), owner.as_str());
        let sql = self.inner.tables.permits.release.as_str();
        let rows = self.run_release("release a permit", sql, (name, owner), lease.ttl)?;
        Ok(!rows.is_empty())
    }
}
