//! Guarded writes on the lock's own server: [`PostgresBackend::execute_if_held`] runs a
//! statement only while the caller's lease still holds the lock, the check and the write
//! atomic on the server, in each kind's own way:
//! - lock table: one transaction that locks the lock row while the owner's lease runs (on the
//!   database clock), runs the statement and commits: no acquirer can take the row in between;
//! - row lock: the statement runs inside the holding transaction (under a savepoint, so a failed
//!   statement leaves the hold intact), and is committed with it when the lock is released, or
//!   rolled back with it when the lock is lost — the write is visible only once the lock is
//!   given back;
//! - advisory lock: on the holding session, after `pg_locks` shows the session still has the
//!   key; only the end of that session can take it away, and that fails the statement too.
//!
//! On the session kinds a connection that fails before the statement is sent ends the session,
//! and so the hold: that is [`Error::NotHeld`]. A failure during the statement is reported as
//! it is: the write may have been made, while the lock was held.

use lock_core::{Error, Result};
use tokio_postgres::types::{ToSql, Type};

use super::lease::Hold;
use super::{PostgresBackend, PostgresLease};
use crate::lease::session_gone;

/// The advisory kind's check: this session holds the exclusive advisory lock `$1`.
const ADVISORY_HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND mode = 'ExclusiveLock' AND objsubid = 1 \
     AND ((classid::bigint << 32) | objid::bigint) = $1)";

impl PostgresBackend {
    /// Runs `statement` with `params` on the lock's server if `lease` still holds the lock (see
    /// the module docs for how each kind makes that atomic); returns the rows it affected. Call
    /// it through [`LockGuard::with_lease`](lock_core::LockGuard::with_lease):
    /// `guard.with_lease(|pg, lease| pg.execute_if_held(lease, "UPDATE …", &[&id]))`.
    ///
    /// # Contract
    /// For the mutex. On the row kind the write commits with the release of the lock, not
    /// before.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the server no longer has the lock under this lease (nothing was
    /// written); [`Error::InvalidConfig`] for a read-write lock or a permit; the statement's
    /// errors (then nothing was written, and the hold is kept).
    pub fn execute_if_held(
        &self,
        lease: &mut PostgresLease,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let not_held = Error::NotHeld { name: lease.name.clone() };
        let key = lease.lock_key();
        let written = match &mut lease.hold {
            Hold::Table { owner } => {
                let connection = self.inner.pool.get()?;
                let (check, name, owner) =
                    (self.inner.tables.lock_if_held.as_str(), key.as_str(), owner.as_str());
                connection.run("guarded write", |client| async move {
                    client.batch_execute("BEGIN").await?;
                    let written = match client.query_opt(check, &[&name, &owner]).await {
                        Ok(Some(_)) => client.execute(statement, params).await.map(Some),
                        other => other.map(|_| None),
                    };
                    let end = if matches!(written, Ok(Some(_))) { "COMMIT" } else { "ROLLBACK" };
                    client.batch_execute(end).await?;
                    written
                })?
            }
            Hold::Row { connection } => {
                let connection = connection.get();
                connection
                    .run("guarded write", |client| async move {
                        client.batch_execute("SAVEPOINT distlock_guarded_write").await
                    })
                    .map_err(|error| session_gone(error, &lease.name))?;
                let written = connection
                    .run("guarded write", |client| async move { client.execute(statement, params).await });
                let end = match written {
                    Ok(_) => "RELEASE SAVEPOINT distlock_guarded_write",
                    Err(_) => "ROLLBACK TO SAVEPOINT distlock_guarded_write",
                };
                // Without its savepoint the holding transaction is gone (the statement ended it,
                // or the connection broke): the row lock with it. The session is ended, so the
                // hold is reported lost, and the write is refused.
                if connection
                    .run("guarded write", |client| async move { client.batch_execute(end).await })
                    .is_err()
                {
                    // Ended for good, so the next renewal sees it: the session terminates itself
                    // (not on a connection already gone, or still busy with the statement).
                    if !connection.is_stalled() && !connection.is_broken() {
                        let _ = connection.run("end the session", |client| async move {
                            client.batch_execute("SELECT pg_terminate_backend(pg_backend_pid())").await
                        });
                    }
                    // Never committed later: every call on it now fails, so the next renewal
                    // reports the hold lost and the release sends no `COMMIT`.
                    connection.end();
                    return Err(not_held);
                }
                Some(written?)
            }
            Hold::Advisory { key, connection } => {
                let key = *key;
                let connection = connection.get();
                let held: bool = connection
                    .run("guarded write", |client| async move {
                        client.query_typed(ADVISORY_HELD, &[(&key, Type::INT8)]).await
                    })
                    .map_err(|error| session_gone(error, &lease.name))?
                    .first()
                    .is_some_and(|row| row.get::<_, bool>(0));
                if held {
                    Some(connection.run("guarded write", |client| async move {
                        client.execute(statement, params).await
                    })?)
                } else {
                    None
                }
            }
            Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                return Err(Error::invalid_config(
                    "execute_if_held needs a mutex hold: shared holders cannot tell their writes apart",
                ))
            }
        };
        written.ok_or(not_held)
    }
}
