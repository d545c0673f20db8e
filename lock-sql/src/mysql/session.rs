//! The row-lock and advisory-lock kinds: holds that live as long as a session, on a connection
//! the lease owns.
//!
//! - **Row**: `START TRANSACTION` and `SELECT … FOR UPDATE NOWAIT` by primary key, with the
//!   fence, in one round trip; the transaction stays open while held; release is `COMMIT`. The
//!   row is inserted first if absent — a `FOR UPDATE` on an absent key gives no exclusivity.
//! - **Advisory**: `GET_LOCK(namespace:name, 0)` and the fence in one statement; release is
//!   `RELEASE_LOCK`. `GET_LOCK` is re-entrant per session, so a connection that may still hold
//!   one never serves anyone else (`SessionConnection`).
//!
//! Renewal is a liveness check on the lease's connection: a session the server ended means the
//! lock is gone (`Ok(false)`); no answer in time means in doubt (an error).

use std::time::Duration;

use lock_core::{LockName, Result};

use super::connection::MyConnection;
use super::error::{self, MyFailure};
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;
use crate::session_connection::SessionConnection;

/// What one attempt on the server's lock queue gave.
enum Grant {
    Fence(u64),
    Busy,
    /// The row does not exist yet (row kind).
    NoRow,
}

impl MySqlBackend {
    /// Row kind: one attempt, waiting up to `wait_secs` in InnoDB's queue if given.
    pub(crate) fn row_acquire(
        &self,
        name: &LockName,
        ttl: Duration,
        wait_secs: Option<u64>,
    ) -> Result<Option<MySqlLease>> {
        let mut connection = self.inner.pool.get()?;
        let name_literal = hex(name.as_str().as_bytes());
        let mut grant = self.row_lock(&mut connection, &name_literal, wait_secs)?;
        if matches!(grant, Grant::NoRow) {
            match connection.try_run(&self.inner.tables.insert_row(&name_literal)) {
                // A lock-wait error: the row exists, and someone holds it.
                Err(error) if !error::is_busy(&error) => {
                    return Err(error::map("insert the lock row", error))
                }
                _ => {}
            }
            grant = self.row_lock(&mut connection, &name_literal, wait_secs)?;
        }
        match grant {
            Grant::Fence(fence) => {
                let hold = Hold::Row { connection: SessionConnection::new(connection) };
                Ok(Some(MySqlLease::new(name, fence, ttl, hold)))
            }
            Grant::Busy => Ok(None),
            Grant::NoRow => {
                Err(MyFailure::Reply { operation: "acquire", detail: "the lock row vanished".into() }.into())
            }
        }
    }

    fn row_lock(&self, connection: &mut MyConnection, name: &str, wait_secs: Option<u64>) -> Result<Grant> {
        let grant = match connection.try_run(&self.inner.tables.lock_row(name, wait_secs)) {
            Ok(results) => match results.first_value::<u64>() {
                Some(fence) => return Ok(Grant::Fence(fence)),
                None => Grant::NoRow,
            },
            Err(error) if error::is_busy(&error) => Grant::Busy,
            Err(error) => {
                // A transaction in an unknown state (maybe holding the lock): end the session.
                connection.poison();
                return Err(error::map("acquire", error));
            }
        };
        connection.run("roll back", "ROLLBACK")?;
        Ok(grant)
    }

    /// Advisory kind: one attempt, waiting up to `wait_secs` in the server's queue.
    pub(crate) fn advisory_acquire(
        &self,
        name: &LockName,
        ttl: Duration,
        wait_secs: Option<u64>,
    ) -> Result<Option<MySqlLease>> {
        let mut connection = self.inner.pool.get()?;
        let key = self.advisory_key(name);
        let fence: Option<u64> =
            match connection.try_run(&self.inner.tables.get_lock(&key, wait_secs.unwrap_or(0))) {
                Ok(results) => results.last_value(),
                Err(error) => return Err(error::map("acquire", error)),
            };
        Ok(fence.map(|fence| {
            let hold = Hold::Advisory { key, connection: SessionConnection::new(connection) };
            MySqlLease::new(name, fence, ttl, hold)
        }))
    }

    /// Renewal of a session hold: is the session (and, for `GET_LOCK`, the lock) still there?
    pub(crate) fn session_alive(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let (connection, check) = match &mut lease.hold {
            Hold::Row { connection } => (connection, "DO 1".to_owned()),
            Hold::Advisory { key, connection } => {
                (connection, format!("SELECT IFNULL(IS_USED_LOCK({key}) = CONNECTION_ID(), 0)"))
            }
            Hold::Table { .. } => unreachable!("a session lease"),
        };
        match connection.get().try_run(&check) {
            Ok(results) => {
                let alive = results.last_value::<i64>().is_none_or(|held| held == 1);
                if alive {
                    lease.ttl = ttl;
                }
                Ok(alive)
            }
            Err(error) if error::session_ended(&error) => Ok(false),
            Err(error) => Err(error::map("check the session", error)),
        }
    }

    pub(crate) fn session_release(&self, lease: MySqlLease) -> Result<bool> {
        let (mut connection, sql) = match lease.hold {
            Hold::Row { connection } => (connection, "COMMIT".to_owned()),
            Hold::Advisory { key, connection } => (connection, format!("SELECT RELEASE_LOCK({key})")),
            Hold::Table { .. } => unreachable!("a session lease"),
        };
        match connection.get().try_run(&sql) {
            // COMMIT has no value; RELEASE_LOCK says 1 when it released this session's lock.
            Ok(results) => {
                let released = results.last_value::<i64>().is_none_or(|released| released == 1);
                if released {
                    connection.give_back();
                }
                Ok(released)
            }
            // The session is gone, and with it the lock: it was not held any more.
            Err(error) if error::session_ended(&error) => Ok(false),
            // Dropping `connection` ends the session, which releases the lock.
            Err(error) => Err(error::map("release", error)),
        }
    }

    /// Kills the connection holding `name`'s row or advisory lock.
    pub(crate) fn kill_holder(&self, name: &LockName) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        let sql = match self.inner.kind {
            super::MySqlLockKind::Row => self.inner.tables.row_holder(&hex(name.as_str().as_bytes())),
            _ => format!("SELECT IS_USED_LOCK({})", self.advisory_key(name)),
        };
        let holder: Option<u64> = connection.run("find the holder", &sql)?.last_value();
        if let Some(holder) = holder {
            match connection.try_run(&format!("KILL {holder}")) {
                // ER_NO_SUCH_THREAD: it ended in the meantime.
                Err(mysql::Error::MySqlError(server)) if server.code == 1094 => {}
                other => drop(other.map_err(|e| error::map("kill the holder", e))?),
            }
        }
        Ok(())
    }
}
