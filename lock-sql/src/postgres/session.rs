//! The row-lock and advisory-lock kinds: holds that live as long as a session, on a connection
//! the lease owns.
//!
//! - **Row**: `BEGIN` and `SELECT … FOR UPDATE NOWAIT` on the name's row, pipelined (one round
//!   trip); the transaction stays open while the lock is held; release is `COMMIT`. The row is
//!   inserted first if absent — a `FOR UPDATE` on an absent key locks nothing.
//! - **Advisory**: `pg_try_advisory_lock(key)` on a stable hash of `namespace:name`; release is
//!   `pg_advisory_unlock`. Advisory locks are re-entrant per session, so a connection that may
//!   still hold one is never returned to the pool (`SessionConnection`).
//!
//! Both take their fencing token from a sequence in the same statement as the grant. Renewal is a
//! liveness check on the lease's connection: a session the server ended (killed connection,
//! restart) means the lock is gone — `Ok(false)`; no answer in time means in doubt — an error.

use std::time::{Duration, Instant};

use lock_core::{Error, LockName, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::connection::{CallFailure, PooledPg};
use super::error::PgFailure;
use super::lease::{Hold, PostgresLease};
use super::table::millis;
use super::PostgresBackend;
use crate::session_connection::SessionConnection;

/// A wait in the server's lock queue without a deadline is made of slices this long, so that a
/// server that stops answering is noticed (each slice is bounded on the client too).
pub(crate) const WAIT_SLICE: Duration = Duration::from_secs(5);

/// What one attempt on the server's lock queue gave.
enum Grant {
    Fence(i64),
    Busy,
    /// The row does not exist yet (row kind).
    NoRow,
}

impl PostgresBackend {
    /// Row kind: one attempt, waiting in the server's queue until `deadline` if one is given.
    pub(crate) fn row_acquire(
        &self,
        name: &LockName,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<PostgresLease>> {
        let connection = self.inner.pool.get()?;
        let mut grant = self.row_lock(&connection, name, deadline)?;
        if matches!(grant, Grant::NoRow) {
            self.insert_row(&connection, name)?;
            grant = self.row_lock(&connection, name, deadline)?;
        }
        match grant {
            Grant::Fence(fence) => {
                let hold = Hold::Row { connection: SessionConnection::new(connection) };
                Ok(Some(PostgresLease::new(name, unsigned(fence), ttl, hold)))
            }
            Grant::Busy => Ok(None),
            Grant::NoRow => {
                Err(PgFailure::Reply { operation: "acquire", detail: "the lock row vanished".into() }.into())
            }
        }
    }

    fn insert_row(&self, connection: &PooledPg, name: &LockName) -> Result<()> {
        let sql = self.inner.tables.insert_row.as_str();
        let name = name.as_str();
        connection
            .run("insert the lock row", |client| async move {
                client.execute_typed(sql, &[(&name, Type::TEXT)]).await
            })
            .map(drop)
    }

    /// `BEGIN` + the locking statement in one round trip; on anything but a grant, `ROLLBACK`.
    fn row_lock(&self, connection: &PooledPg, name: &LockName, deadline: Option<Instant>) -> Result<Grant> {
        let tables = &self.inner.tables;
        let name_text = name.as_str();
        let (wait, limit) = wait_limits(deadline, connection.io_timeout());
        let outcome = match &wait {
            None => {
                connection.query("acquire", limit, true, &tables.lock_row_nowait, &[(&name_text, Type::TEXT)])
            }
            Some(ms) => connection.query(
                "acquire",
                limit,
                true,
                &tables.lock_row_wait,
                &[(&name_text, Type::TEXT), (ms, Type::TEXT)],
            ),
        };
        let grant = match outcome {
            Ok(rows) => match rows.first() {
                Some(row) => return Ok(Grant::Fence(row.get(0))),
                None => Grant::NoRow,
            },
            Err(CallFailure::Driver(error)) if is_busy(&error) => Grant::Busy,
            Err(failure) => {
                // A transaction in an unknown state (maybe holding the lock): never reuse it.
                connection.discard();
                return Err(call_error("acquire", failure));
            }
        };
        connection.run("roll back", |client| async move { client.batch_execute("ROLLBACK").await })?;
        Ok(grant)
    }

    /// Advisory kind: one attempt, waiting in the server's queue until `deadline` if one is given.
    pub(crate) fn advisory_acquire(
        &self,
        name: &LockName,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<PostgresLease>> {
        let connection = self.inner.pool.get()?;
        let key = self.advisory_key(name);
        let tables = &self.inner.tables;
        let (wait, limit) = wait_limits(deadline, connection.io_timeout());
        let outcome = match &wait {
            None => connection.query("acquire", limit, false, &tables.try_advisory, &[(&key, Type::INT8)]),
            Some(ms) => connection.query(
                "acquire",
                limit,
                false,
                &tables.wait_advisory,
                &[(&key, Type::INT8), (ms, Type::TEXT)],
            ),
        };
        let fence: Option<i64> = match outcome {
            Ok(rows) => rows.first().and_then(|row| row.get(0)),
            Err(CallFailure::Driver(error)) if is_busy(&error) => None,
            Err(failure) => {
                // The lock may have been granted as the reply was lost: the connection is broken
                // and dropped, and its session's locks go with it.
                connection.discard();
                return Err(call_error("acquire", failure));
            }
        };
        Ok(fence.map(|fence| {
            let hold = Hold::Advisory { key, connection: SessionConnection::new(connection) };
            PostgresLease::new(name, unsigned(fence), ttl, hold)
        }))
    }

    /// Renewal of a session hold: is the session still there?
    pub(crate) fn session_alive(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let connection = match &mut lease.hold {
            Hold::Row { connection } | Hold::Advisory { connection, .. } => connection.get(),
            Hold::Table { .. } => unreachable!("a session lease"),
        };
        match connection.run_for("check the session", connection.io_timeout(), |client| async move {
            client.simple_query("").await
        }) {
            Ok(_) => {
                lease.ttl = ttl;
                Ok(true)
            }
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => Err(call_error("check the session", failure)),
        }
    }

    pub(crate) fn session_release(&self, lease: PostgresLease) -> Result<bool> {
        match lease.hold {
            Hold::Row { mut connection } => {
                let pg = connection.get();
                let timeout = pg.io_timeout();
                let committed =
                    pg.run_for(
                        "release",
                        timeout,
                        |client| async move { client.batch_execute("COMMIT").await },
                    );
                match committed {
                    Ok(()) => {
                        connection.give_back();
                        Ok(true)
                    }
                    // The session is gone, and with it the lock: it was not held any more.
                    Err(failure) if failure.session_ended() => Ok(false),
                    // Dropping the connection ends the session, which releases the lock.
                    Err(failure) => Err(call_error("release", failure)),
                }
            }
            Hold::Advisory { key, mut connection } => {
                let pg = connection.get();
                let timeout = pg.io_timeout();
                let unlocked = pg.query(
                    "release",
                    timeout,
                    false,
                    "SELECT pg_advisory_unlock($1)",
                    &[(&key, Type::INT8)],
                );
                match unlocked {
                    Ok(rows) if rows.first().is_some_and(|row| row.get::<_, bool>(0)) => {
                        connection.give_back();
                        Ok(true)
                    }
                    Ok(_) => Ok(false),
                    Err(failure) if failure.session_ended() => Ok(false),
                    Err(failure) => Err(call_error("release", failure)),
                }
            }
            Hold::Table { .. } => unreachable!("a session lease"),
        }
    }

    /// Terminates the session holding `name`'s row or advisory lock.
    pub(crate) fn terminate_holder(&self, name: &LockName) -> Result<()> {
        let connection = self.inner.pool.get()?;
        let key = self.advisory_key(name);
        let row_sql = self.inner.tables.row_holder_pid.as_str();
        let name = name.as_str();
        let row_kind = matches!(self.inner.kind, super::PostgresLockKind::Row);
        let pids: Vec<i32> = connection.run("find the holder", |client| async move {
            let rows = if row_kind {
                client.query_typed(row_sql, &[(&name, Type::TEXT)]).await?
            } else {
                let sql = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                           AND ((classid::bigint << 32) | objid::bigint) = $1";
                client.query_typed(sql, &[(&key, Type::INT8)]).await?
            };
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })?;
        for pid in pids {
            connection.run("terminate the holder", |client| async move {
                client.query_typed("SELECT pg_terminate_backend($1)", &[(&pid, Type::INT4)]).await
            })?;
        }
        Ok(())
    }
}

/// For a wait until `deadline`: the server-side `lock_timeout` in ms (as text, for `set_config`),
/// and the client-side limit of the call (the wait plus one I/O timeout). `None` = do not wait.
fn wait_limits(deadline: Option<Instant>, io_timeout: Duration) -> (Option<String>, Duration) {
    match deadline {
        None => (None, io_timeout),
        Some(deadline) => {
            let wait = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            (Some(millis(wait).to_string()), wait + io_timeout)
        }
    }
}

/// `NOWAIT` refused, or `lock_timeout` ran out: the lock is held by someone else.
fn is_busy(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

fn call_error(operation: &'static str, failure: CallFailure) -> Error {
    failure.into_error(operation)
}

/// A `bigint` fence (sequences and counters start at 1) as the token's `u64`.
pub(crate) fn unsigned(fence: i64) -> u64 {
    u64::try_from(fence).unwrap_or(0)
}
