//! Read-write locks on the advisory kind: `pg_advisory_lock_shared` (read) and
//! `pg_advisory_lock` (write), or their `pg_try_…` forms, held by a session the lease owns, with
//! the advisory kind's bounded waits (`lock_timeout` for the statement, re-queued in slices when
//! there is no deadline), idle limit and fencing sequence (`session.rs`).
//!
//! - **Names.** The two-`integer` advisory key space (the 64-bit name hash split in halves), which
//!   PostgreSQL keeps apart from the one-`bigint` space of the mutex: an RW lock "x" never
//!   contends with the mutex "x".
//! - **Writers are not starved: the server's policy.** PostgreSQL's lock manager makes a new
//!   request wait when its mode conflicts with a request already *waiting* (the lock's wait
//!   mask), not only with the granted ones: once a writer waits in the queue, new shared
//!   requests queue behind it, and `pg_try_advisory_lock_shared` answers false. A timed wait is
//!   one statement, so the writer keeps its place until its deadline (a wait without one
//!   re-queues every slice, and may let readers in then).
//! - **Downgrade.** A read asked under the owner of a write lease of this backend is taken on the
//!   writer's own session ([`SharedSession`](crate::shared_session::SharedSession)), where
//!   PostgreSQL grants it at once (a session that holds a lock is placed ahead of waiters it
//!   conflicts with); releasing the write then unlocks only the exclusive mode, and the read
//!   lives on alone on that session.
//! - **Leases.** Each lease's session is checked by renewal as the mutex's; a release unlocks its
//!   own mode, and the last lease on a session also resets the idle limit and gives the
//!   connection back.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Access, Acquired, Error, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;

use super::connection::CallFailure;
use super::error::BACKEND;
use super::lease::{Hold, PostgresLease};
use super::pool::PooledPg;
use super::session::{call_error, idle_limit, is_busy, undo_raced_grant, unsigned};
use super::table::millis;
use super::PostgresBackend;
use crate::queue_wait::{granted_after, in_queue_until, micros, Grant, Wait};
use crate::session_connection::SessionConnection;
use crate::shared_session::SharedSession;

/// The `pg_advisory_lock…` function suffix of each mode.
pub(crate) fn mode_suffix(access: Access) -> &'static str {
    match access {
        Access::Read => "_shared",
        Access::Write => "",
    }
}

impl PostgresBackend {
    /// The RW lock's key in the two-`integer` advisory key space: the mutex's 64-bit hash, split.
    pub(crate) fn rw_key(&self, name: &LockName) -> (i32, i32) {
        let key = crate::key_hash::key(&self.inner.namespace, name.as_str());
        let [a, b, c, d, e, f, g, h] = key.to_be_bytes();
        (i32::from_be_bytes([a, b, c, d]), i32::from_be_bytes([e, f, g, h]))
    }

    /// [`ReadWrite::acquire_rw`](lock_core::ReadWrite::acquire_rw) on the advisory kind.
    pub(crate) fn advisory_rw(
        &self,
        request: &Request<'_>,
        access: Access,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        check_lease(request.ttl)?;
        if access == Access::Read {
            if let Some(session) = self.inner.writers.find(request.name, request.owner) {
                return self.advisory_downgrade(request, session).map(Some);
            }
        }
        in_queue_until(request.deadline, self.inner.pool.settings().io_timeout, |wait| {
            self.advisory_rw_once(request.name, request.owner, request.ttl, access, wait)
        })
    }

    /// One attempt on the server's lock queue, waiting as `wait` says.
    fn advisory_rw_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        access: Access,
        wait: Wait,
    ) -> Result<Option<(PostgresLease, Grant)>> {
        let connection = self.inner.pool.get_for(wait.checkout())?;
        if !super::session::settled(&connection, ttl, wait)? {
            return Ok(None);
        }
        let granted = match self.rw_lock_on(&connection, name, ttl, access, wait.length()) {
            Ok(granted) => granted,
            Err(error) => {
                // The lock may have been granted as the reply was lost: the session ends.
                connection.discard();
                return Err(error);
            }
        };
        let Some((fence, waited, sent)) = granted else { return Ok(None) };
        if let Some(young_for) = super::session::too_young_in_grant(&connection, ttl)? {
            super::session::give_back_young(connection, young_for, wait);
            return Ok(None);
        }
        let session = SharedSession::new(SessionConnection::new(connection));
        if access == Access::Write {
            self.inner.writers.insert(name, owner, &session);
        }
        let hold = Hold::ReadWrite { access, owner: *owner, session };
        Ok(Some((PostgresLease::new(name, unsigned(fence), ttl, hold), Grant::new(sent, micros(waited)))))
    }

    /// The locking statement on `connection`: `Some((fence, µs waited, sent))` when granted.
    fn rw_lock_on(
        &self,
        connection: &PooledPg,
        name: &LockName,
        ttl: Duration,
        access: Access,
        wait: Option<Duration>,
    ) -> Result<Option<(i64, i64, Instant)>> {
        let (high, low) = self.rw_key(name);
        let idle = idle_limit(ttl);
        let statements = &self.inner.tables.read_write;
        let index = usize::from(access == Access::Write);
        let sent = Instant::now();
        let outcome = match wait {
            None => connection.query(
                "acquire",
                connection.io_timeout(),
                false,
                &statements.try_lock[index],
                &[(&high, Type::INT4), (&low, Type::INT4), (&idle, Type::TEXT)],
            ),
            Some(length) => {
                let ms = millis(length).max(1).to_string();
                connection.query(
                    "acquire",
                    length + connection.io_timeout(),
                    false,
                    &statements.wait_lock[index],
                    &[(&high, Type::INT4), (&low, Type::INT4), (&idle, Type::TEXT), (&ms, Type::TEXT)],
                )
            }
        };
        match outcome {
            Ok(rows) => Ok(rows.first().map(|row| (row.get(0), row.get(1), sent))),
            Err(CallFailure::Driver(error)) if is_busy(&error) => {
                if wait.is_some() {
                    let unlock = format!("SELECT pg_advisory_unlock{}($1, $2)", mode_suffix(access));
                    undo_raced_grant(connection, &unlock, &[(&high, Type::INT4), (&low, Type::INT4)]);
                }
                Ok(None)
            }
            Err(failure) => Err(call_error("acquire", failure)),
        }
    }

    /// The read lock of a writer's owner, on the writer's session: granted at once, whatever
    /// waits (the waiting form, bounded by one I/O timeout, since the `pg_try_…` form refuses
    /// when a writer waits even to the session that holds the lock).
    fn advisory_downgrade(
        &self,
        request: &Request<'_>,
        session: SharedSession<PooledPg>,
    ) -> Result<Acquired<PostgresLease>> {
        let granted = {
            let mut connection = session.lock();
            let connection = connection.get();
            let io_timeout = connection.io_timeout();
            let granted =
                self.rw_lock_on(connection, request.name, request.ttl, Access::Read, Some(io_timeout));
            if granted.is_err() {
                // The read may have been granted before the failure: the writer's session must not
                // go back to the pool with a hold nobody knows of (ending it ends the write hold
                // too, which its renewal then reports).
                connection.discard();
            }
            granted?
        };
        let Some((fence, waited, sent)) = granted else {
            return Err(Error::Backend {
                backend: BACKEND,
                source: "the writer's own session was refused the read lock".into(),
            });
        };
        let hold = Hold::ReadWrite { access: Access::Read, owner: *request.owner, session };
        let lease = PostgresLease::new(request.name, unsigned(fence), request.ttl, hold);
        Ok(Acquired::new(lease, granted_after(sent, micros(waited))))
    }

    /// Renewal of a read-write lease: its session is alive, and its idle limit is the lease.
    pub(crate) fn rw_alive(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let Hold::ReadWrite { session, .. } = &lease.hold else { unreachable!("a read-write lease") };
        let checked = {
            let mut connection = session.lock();
            let connection = connection.get();
            let sql = match self.inner.kind {
                super::PostgresLockKind::Row => {
                    "SELECT set_config('idle_in_transaction_session_timeout', $1, true)".to_owned()
                }
                _ => format!("SELECT set_config('{}', $1, false)", self.inner.tables.idle_session_setting),
            };
            let idle = idle_limit(ttl);
            connection.query(
                "check the session",
                connection.io_timeout(),
                false,
                &sql,
                &[(&idle, Type::TEXT)],
            )
        };
        match checked {
            Ok(_) => {
                lease.ttl = ttl;
                Ok(true)
            }
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => Err(call_error("check the session", failure)),
        }
    }

    /// Unlocks the lease's own mode; the last lease on the session also resets its idle limit
    /// and gives the connection back.
    pub(crate) fn rw_release(&self, lease: PostgresLease) -> Result<bool> {
        if self.inner.kind == super::PostgresLockKind::Row {
            return self.row_rw_release(lease);
        }
        let Hold::ReadWrite { access, owner, session } = lease.hold else {
            unreachable!("a read-write lease")
        };
        let (high, low) = self.rw_key(&lease.name);
        if access == Access::Write {
            // No read may join the session from here on.
            self.inner.writers.remove(&lease.name, &owner);
        }
        let unlock = format!("SELECT pg_advisory_unlock{}($1, $2)", mode_suffix(access));
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
            [(&high, Type::INT4), (&low, Type::INT4)];
        let reset = format!("RESET {}", self.inner.tables.idle_session_setting);
        let last = !session.is_shared();
        let released = {
            let mut guard = session.lock();
            let connection = guard.get();
            if connection.is_stalled() {
                return Err(Error::Timeout {
                    backend: BACKEND,
                    operation: "release",
                    source: Some(
                        "the last call on the lock's connection got no answer; the connection is closed \
                         instead, which ends the session"
                            .into(),
                    ),
                });
            }
            if last {
                connection.query_then("release", &unlock, &params, &reset)
            } else {
                connection.query("release", connection.io_timeout(), false, &unlock, &params)
            }
        };
        match released {
            Ok(rows) if rows.first().is_some_and(|row| row.get::<_, bool>(0)) => {
                // A session whose idle limit was not reset (another lease let go meanwhile)
                // ends instead of going back to the pool.
                if let (true, Ok(connection)) = (last, session.into_only()) {
                    connection.give_back();
                }
                Ok(true)
            }
            // Not this session's lock any more: the session ends once no lease shares it.
            Ok(_) => Ok(false),
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => Err(call_error("release", failure)),
        }
    }
}
