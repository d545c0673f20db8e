//! Guarded writes on the lock's own server: [`MySqlBackend::execute_if_held`] runs a statement
//! only while the caller's lease still holds the lock, the check and the write atomic on the
//! server, in each kind's own way:
//! - lock table: one transaction that locks the lock row while the owner's lease runs (on the
//!   database clock), runs the statement and commits: no acquirer can take the row in between;
//! - row lock: the statement runs inside the holding transaction (under a savepoint, so a failed
//!   statement leaves the hold intact), and is committed with it when the lock is released, or
//!   rolled back with it when the lock is lost — the write is visible only once the lock is
//!   given back;
//! - advisory lock (`GET_LOCK`): on the holding session, after `IS_USED_LOCK` shows the session
//!   still has it; only the end of that session can take it away, and that fails the statement
//!   too.
//!
//! A row kind's statement that ends the holding transaction — a deadlock InnoDB resolves by
//! rolling all of it back, a statement that commits implicitly (DDL) — ends the hold: the
//! session is closed, the hold reported lost, and the call returns [`Error::NotHeld`] (a DDL
//! statement's effect then stays: run none under a row lock).
//!
//! On the session kinds a connection that fails before the statement is sent ends the session,
//! and so the hold: that is [`Error::NotHeld`]. A failure during the statement is reported as
//! it is: the write may have been made, while the lock was held.

use lock_core::{Error, Result};

use super::lease::Hold;
use super::schema::hex;
use super::{MySqlBackend, MySqlLease};
use crate::lease::session_gone;

impl MySqlBackend {
    /// Runs `statement` (SQL text: quote or hex-encode values yourself, e.g. with
    /// `mysql_driver`'s escaping) on the lock's server if `lease` still holds the lock (see the
    /// module docs for how each kind makes that atomic); returns the rows it affected. Call it
    /// through [`LockGuard::with_lease`](lock_core::LockGuard::with_lease):
    /// `guard.with_lease(|my, lease| my.execute_if_held(lease, "UPDATE …"))`.
    ///
    /// # Contract
    /// For the mutex. On the row kind the write commits with the release of the lock, not
    /// before. MySQL counts changed rows (without `CLIENT_FOUND_ROWS`): a write of the values a
    /// row already has affects 0 rows, and is still made.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the server no longer has the lock under this lease (nothing was
    /// written); [`Error::InvalidConfig`] for a read-write lock or a permit; the statement's
    /// errors (then nothing was written, and the hold is kept).
    pub fn execute_if_held(&self, lease: &mut MySqlLease, statement: &str) -> Result<u64> {
        let not_held = || Error::NotHeld { name: lease.name.clone() };
        let key = lease.lock_key();
        match &mut lease.hold {
            Hold::Table { owner } => {
                let mut connection = self.inner.pool.get()?;
                let check = self.inner.tables.lock_if_held(&hex(key.as_str().as_bytes()), owner);
                // Any failure after START TRANSACTION still ends the transaction: the pooled
                // connection must not carry it (and its row locks) to its next user.
                let written =
                    connection.run("guarded write", &check).and_then(|held| match held.last_value::<i64>() {
                        Some(_) => connection
                            .run("guarded write", statement)
                            .map(|results| Some(results.affected(0))),
                        None => Ok(None),
                    });
                let end = if matches!(written, Ok(Some(_))) { "COMMIT" } else { "ROLLBACK" };
                if let Err(error) = connection.run("guarded write", end) {
                    connection.poison();
                    // A failed COMMIT leaves the write undecided: say so, not the statement's Ok.
                    if end == "COMMIT" {
                        return Err(error);
                    }
                }
                written?.ok_or_else(not_held)
            }
            Hold::Row { connection } => {
                let connection = connection.get();
                connection
                    .run("guarded write", "SAVEPOINT distlock_guarded_write")
                    .map_err(|e| session_gone(e, &lease.name))?;
                let written = connection.run("guarded write", statement);
                let end = match written {
                    Ok(_) => "RELEASE SAVEPOINT distlock_guarded_write",
                    Err(_) => "ROLLBACK TO SAVEPOINT distlock_guarded_write",
                };
                // Without its savepoint the holding transaction is gone: a deadlock or (with
                // innodb_rollback_on_timeout) a lock wait rolled all of it back, or the statement
                // committed it. The row lock went with it: the session is ended, so the hold is
                // reported lost, and the write is refused.
                if connection.run("guarded write", end).is_err() {
                    connection.poison();
                    return Err(not_held());
                }
                Ok(written?.affected(0))
            }
            Hold::Advisory { key, connection } => {
                let connection = connection.get();
                let check = format!("SELECT IS_USED_LOCK({key}) <=> CONNECTION_ID()");
                let held =
                    connection.run("guarded write", &check).map_err(|e| session_gone(e, &lease.name))?;
                if held.last_value::<i64>() != Some(1) {
                    return Err(not_held());
                }
                Ok(connection.run("guarded write", statement)?.affected(0))
            }
            Hold::ReadWrite { .. } | Hold::Permit { .. } => Err(Error::invalid_config(
                "execute_if_held needs a mutex hold: shared holders cannot tell their writes apart",
            )),
        }
    }
}
