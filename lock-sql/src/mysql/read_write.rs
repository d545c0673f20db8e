//! Read-write locks on the row kind: `LOCK IN SHARE MODE` (read) and `FOR UPDATE` (write) on the
//! name's row of the read-write table, in a transaction left open on a connection the lease owns
//! — the row kind's session hold, idle limit (`wait_timeout`), bounded waits and fencing
//! sequence (`session.rs`). The advisory kind has none: `GET_LOCK` has no shared mode.
//!
//! - **Writers are not starved: the server's policy.** InnoDB makes a new record-lock request
//!   wait when it conflicts with any lock already queued on the record, waiting ones included:
//!   once a writer waits for `FOR UPDATE`, new shared requests queue behind it (and `NOWAIT`
//!   ones are refused). A timed wait is one statement, so the writer keeps its place until its
//!   deadline.
//! - **Downgrade: sound, but the lock stays exclusive.** A read asked under the writer's owner
//!   shares the writer's transaction ([`SharedSession`](crate::shared_session::SharedSession)).
//!   InnoDB keeps every record lock until the transaction ends (a rollback to a savepoint keeps
//!   them too), so the exclusive lock cannot be given up while the read lives on: releasing the
//!   write while its owner's read is held changes nothing on the server, and the read goes on
//!   excluding other readers until it is released (`COMMIT`). Never two holders; other readers
//!   wait longer than the contract allows (RW03 says so).

use std::time::{Duration, Instant};

use lock_core::{check_lease, Access, Acquired, Error, LockName, OwnerToken, Request, Result};

use super::connection::{Broken, MyConnection};
use super::error::{self, MyFailure, BACKEND};
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::session::{idle_limit_secs, set_idle_limit, IN_TRANSACTION, RESET_IDLE_LIMIT};
use super::MySqlBackend;
use crate::queue_wait::{in_queue_until, micros, Grant, Wait};
use crate::session_connection::SessionConnection;
use crate::shared_session::SharedSession;

impl MySqlBackend {
    /// [`ReadWrite::acquire_rw`](lock_core::ReadWrite::acquire_rw) on the row kind.
    pub(crate) fn row_rw(
        &self,
        request: &Request<'_>,
        access: Access,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        check_lease(request.ttl)?;
        if access == Access::Read {
            if let Some(session) = self.inner.writers.find(request.name, request.owner) {
                return self.row_downgrade(request, session).map(Some);
            }
        }
        in_queue_until(request.deadline, self.inner.pool.io_timeout(), |wait| {
            self.row_rw_once(request.name, request.owner, request.ttl, access, wait)
        })
    }

    fn row_rw_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        access: Access,
        wait: Wait,
    ) -> Result<Option<(MySqlLease, Grant)>> {
        let mut connection = self.inner.pool.get_for(wait.checkout())?;
        if !super::session::settled(&mut connection, ttl, wait)? {
            return Ok(None);
        }
        let literal = hex(name.as_str().as_bytes());
        let mut attempt = self.rw_lock(&mut connection, &literal, ttl, access, wait)?;
        if matches!(attempt, Attempt::NoRow) {
            match connection.try_run(&self.inner.tables.insert_rw_row(&literal)) {
                // A lock-wait error: the row exists, and someone holds it.
                Err(error) if !error::is_busy(&error) => {
                    return Err(error::map("insert the lock row", error))
                }
                _ => {}
            }
            attempt = self.rw_lock(&mut connection, &literal, ttl, access, wait)?;
        }
        let (fence, waited, sent) = match attempt {
            Attempt::Granted(fence, waited, sent) => (fence, waited, sent),
            Attempt::Busy => return Ok(None),
            Attempt::NoRow => {
                return Err(
                    MyFailure::Reply { operation: "acquire", detail: "the lock row vanished".into() }.into()
                )
            }
        };
        self.make_fence_durable(Some(&mut connection))?;
        let session = SharedSession::new(SessionConnection::new(connection));
        if access == Access::Write {
            self.inner.writers.insert(name, owner, &session);
        }
        let hold = Hold::ReadWrite { access, owner: *owner, session };
        Ok(Some((MySqlLease::new(name, fence, ttl, hold), Grant::new(sent, micros(waited)))))
    }

    /// One locking read; on anything but a grant, the transaction is rolled back.
    fn rw_lock(
        &self,
        connection: &mut MyConnection,
        name: &str,
        ttl: Duration,
        access: Access,
        wait: Wait,
    ) -> Result<Attempt> {
        let length = wait.length();
        let sql = self.inner.tables.lock_rw_row(name, access == Access::Write, length, idle_limit_secs(ttl));
        let sent = Instant::now();
        let outcome = match length {
            None => connection.try_run(&sql),
            Some(length) => connection.try_run_waiting(&sql, length),
        };
        let attempt = match outcome {
            Ok(results) => match results.first_row() {
                Some(row) => {
                    match (row.get::<Option<u64>, _>(0).flatten(), row.get::<Option<i64>, _>(1).flatten()) {
                        (Some(fence), waited) => {
                            return Ok(Attempt::Granted(fence, waited.unwrap_or(0), sent))
                        }
                        (None, _) => {
                            connection.poison();
                            return Err(
                                MyFailure::Reply { operation: "acquire", detail: "no fence".into() }.into()
                            );
                        }
                    }
                }
                None => Attempt::NoRow,
            },
            Err(error) if error::is_busy(&error) => Attempt::Busy,
            Err(error) => {
                // A transaction in an unknown state (maybe holding the lock): end the session.
                connection.poison();
                return Err(error::map("acquire", error));
            }
        };
        connection.run("roll back", &format!("ROLLBACK; {RESET_IDLE_LIMIT}"))?;
        Ok(attempt)
    }

    /// The read lock of a writer's owner: the writer's transaction already excludes everyone
    /// else; the read takes a fence on it.
    fn row_downgrade(
        &self,
        request: &Request<'_>,
        session: SharedSession<MyConnection>,
    ) -> Result<Acquired<MySqlLease>> {
        let sent = Instant::now();
        let fence = {
            let mut connection = session.lock();
            connection.get().run("acquire", &self.inner.tables.next_fence())?.last_value::<u64>()
        };
        let fence = fence.ok_or_else(|| {
            Error::from(MyFailure::Reply { operation: "acquire", detail: "no fence".into() })
        })?;
        self.make_fence_durable(None)?;
        let hold = Hold::ReadWrite { access: Access::Read, owner: *request.owner, session };
        Ok(Acquired::new(MySqlLease::new(request.name, fence, request.ttl, hold), sent))
    }

    /// Renewal: the session is alive; its idle limit is the lease again.
    pub(crate) fn rw_alive(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let Hold::ReadWrite { session, .. } = &lease.hold else { unreachable!("a read-write lease") };
        let check = format!("{}; {IN_TRANSACTION}", set_idle_limit(idle_limit_secs(ttl)));
        let mut connection = session.lock();
        match connection.get().try_run(&check) {
            Ok(results) if results.last_value::<i64>() == Some(1) => {
                lease.ttl = ttl;
                Ok(true)
            }
            Ok(_) => {
                // The transaction ended under the hold (see `IN_TRANSACTION`).
                connection.get().poison();
                Ok(false)
            }
            Err(error) if error::session_ended(&error) => Ok(false),
            Err(error) => Err(error::map("check the session", error)),
        }
    }

    /// `COMMIT` by the last lease on the transaction (see the module docs for a write released
    /// while its owner's read is held).
    pub(crate) fn rw_release(&self, lease: MySqlLease) -> Result<bool> {
        let Hold::ReadWrite { access, owner, session } = lease.hold else {
            unreachable!("a read-write lease")
        };
        if access == Access::Write {
            self.inner.writers.remove(&lease.name, &owner);
        }
        if session.is_shared() {
            return Ok(true);
        }
        let released = {
            let mut guard = session.lock();
            let connection = guard.get();
            match connection.broken() {
                None => {}
                Some(Broken::SessionEnded) => return Ok(false),
                Some(Broken::NoAnswer) => {
                    return Err(Error::Timeout {
                        backend: BACKEND,
                        operation: "release",
                        source: Some(
                            "an earlier call on the lock's connection got no answer; the connection is \
                             closed instead, which ends the session"
                                .into(),
                        ),
                    })
                }
            }
            connection.try_run(&format!("COMMIT; {RESET_IDLE_LIMIT}"))
        };
        match released {
            Ok(_) => {
                if let Ok(connection) = session.into_only() {
                    connection.give_back();
                }
                Ok(true)
            }
            Err(error) if error::session_ended(&error) => Ok(false),
            Err(error) => Err(error::map("release", error)),
        }
    }
}

/// What one locking read gave.
enum Attempt {
    /// The fence, the µs waited, and when the statement was sent.
    Granted(u64, i64, Instant),
    Busy,
    NoRow,
}
