//! Semaphores on every kind: the permits table (`schema.rs`), one row per name holding the count
//! and the permits, each a lease with its own expiry on the database clock — the lock table's
//! design, so a crashed holder's permit comes back when its lease runs out. One statement
//! acquires (pruning expired permits, checking the count), extends or releases, each bound to
//! the permit's owner token. Waiters poll with the client's backoff ([`lock_core::poll_until`]):
//! the table has no wake-ups. A re-check that finds no permit free reads the row without locking
//! or writing it, so waiters on a full semaphore cost the server reads, not writes.
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

/// Which statement an attempt runs (`schema.rs`).
#[derive(Clone, Copy)]
enum Attempt {
    /// Waits for a releaser's row lock, so a permit freed meanwhile is handed over at once.
    First,
    /// A waiter's poll: refused without a lock or a write while the semaphore looks full.
    Recheck,
}

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
        let mut first = true;
        poll_until(request, |_| {
            let attempt = if std::mem::take(&mut first) { Attempt::First } else { Attempt::Recheck };
            self.permit_once(request.name, request.owner, request.ttl, count, attempt)
        })
    }

    fn permit_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        permits: i32,
        attempt: Attempt,
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
        let statements = &self.inner.tables.permits;
        let sql = match attempt {
            Attempt::First => &statements.acquire,
            Attempt::Recheck => &statements.recheck,
        };
        let rows = connection.acquire_rows("acquire a permit", (sql, params), ttl, undo)?;
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

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use lock_core::DistributedLock as _;
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::postgres::PostgresLockKind;
    use crate::testkit::PostgresTarget;

    const TTL: Duration = Duration::from_secs(30);

    /// The row's version and lock marks (`xmin`, `xmax`, `ctid`): they change when a statement
    /// writes or locks the row.
    fn row_marks(locks: &PostgresBackend, name: &LockName) -> String {
        // `UPDATE <the permits table> SET …`
        let release = &locks.inner.tables.permits.release;
        let table = release.split_whitespace().nth(1).expect("a table name");
        let sql = format!(
            "SELECT xmin::text || ' ' || xmax::text || ' ' || ctid::text FROM {table} WHERE name = $1"
        );
        let connection = locks.inner.pool.get().unwrap();
        let name = name.as_str();
        let rows = connection.rows("test", &sql, &[(&name, Type::TEXT)]).unwrap();
        rows[0].get(0)
    }

    /// SEM: a waiter's re-check on a full semaphore neither writes nor locks the permits row, so
    /// waiters cost the server reads; a permit freed is still taken at the next poll.
    #[test]
    fn sem_a_poll_on_a_full_semaphore_writes_nothing() {
        let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
        let name = unique_name("sem-full-poll");
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let owner = OwnerToken::random();
                locks.permit_once(&name, &owner, TTL, 2, Attempt::First).unwrap().expect("a free permit")
            })
            .collect();
        let before = row_marks(&locks, &name);
        let waiter = OwnerToken::random();
        for _ in 0..10 {
            assert!(
                locks.permit_once(&name, &waiter, TTL, 2, Attempt::Recheck).unwrap().is_none(),
                "over-admitted"
            );
        }
        // A poll that asks for another count is refused without a write too, and told why.
        assert!(matches!(
            locks.permit_once(&name, &waiter, TTL, 3, Attempt::Recheck),
            Err(Error::PermitsMismatch { .. })
        ));
        assert_eq!(row_marks(&locks, &name), before, "a refused poll wrote or locked the row");
        let mut holders = holders.into_iter();
        assert!(locks.release(holders.next().unwrap()).unwrap());
        let taken = locks.permit_once(&name, &waiter, TTL, 2, Attempt::Recheck).unwrap();
        assert!(taken.is_some(), "a re-check did not take a freed permit");
    }
}
