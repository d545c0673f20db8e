//! Read-write locks on the row kind: `FOR SHARE` (read) and `FOR UPDATE` (write) on the name's
//! row of the read-write table, in a transaction left open on a connection the lease owns — the
//! row kind's session hold, idle limit, bounded waits and fencing sequence (`session.rs`).
//!
//! Each name has three rows in `<table>_rw` (apart from the mutex's `<table>_rows`, so an RW lock
//! "x" never contends with the mutex "x"): part 0 the lock itself, part 1 a gate, part 2 the
//! writers' turn.
//!
//! - **Why a gate: the server's policy.** PostgreSQL grants `FOR SHARE` on a row that is only
//!   share-locked without looking at waiters: a writer waiting for `FOR UPDATE` would be starved
//!   by a stream of overlapping readers. So a reader first passes the gate — `FOR SHARE` on part
//!   1 inside a savepoint, rolled back at once (PostgreSQL releases row locks taken after a
//!   savepoint when it is rolled back) — and a writer closes it (`FOR UPDATE` on part 1) before
//!   it waits for the readers to leave part 0: new readers wait at the gate, in the server's
//!   queue, and the writer gets the lock as soon as the readers inside are done.
//! - **Writers.** Take their turn (`FOR UPDATE` on part 2: one writer at a time, readers never
//!   touch it), then `FOR SHARE` on part 0 at the transaction's top level, then, after
//!   `SAVEPOINT distlock_write`, the gate and `FOR UPDATE` on part 0.
//! - **Downgrade.** A read asked under the writer's owner shares the writer's transaction
//!   ([`SharedSession`](crate::shared_session::SharedSession)). Releasing the write while that
//!   read is held is `ROLLBACK TO SAVEPOINT distlock_write`: the gate and the exclusive lock go,
//!   the top-level `FOR SHARE` and the writers' turn stay — other readers share the lock again,
//!   writers wait until the read is released (`COMMIT`). At no moment is the lock free.
//! - **Bounded.** `lock_timeout` is set to what is left of the wait before each statement that
//!   may wait (`NOWAIT` for a single attempt); a refused attempt rolls back, releasing whatever
//!   it had taken.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Access, Acquired, Error, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::connection::CallFailure;
use super::error::{PgFailure, BACKEND};
use super::lease::{Hold, PostgresLease};
use super::pool::PooledPg;
use super::session::{call_error, idle_limit, is_busy, unsigned};
use super::table::millis;
use super::PostgresBackend;
use crate::queue_wait::{in_queue_until, micros, Grant, Wait};
use crate::session_connection::SessionConnection;
use crate::shared_session::SharedSession;

/// The savepoint a write lock's exclusive locks are taken after.
pub(crate) const WRITE_SAVEPOINT: &str = "distlock_write";

/// The row kind's read-write statements; `[no wait, wait]` pairs. $1 is the name.
#[derive(Debug)]
pub(crate) struct RowReadWriteStatements {
    /// Inserts the name's three rows if absent (never waits on a held row).
    pub(crate) insert: String,
    /// The writers' turn (part 2).
    pub(crate) turn: [String; 2],
    /// `FOR SHARE` on part 0 at the top level; $2 the idle limit in ms, set for the transaction.
    pub(crate) share_top: [String; 2],
    /// Closes the gate (part 1).
    pub(crate) close_gate: [String; 2],
    /// Passes the gate (part 1).
    pub(crate) pass_gate: [String; 2],
    /// `FOR UPDATE` on part 0: (fence, µs waited).
    pub(crate) exclusive: [String; 2],
    /// `FOR SHARE` on part 0: (fence, µs waited); $2 the idle limit in ms.
    pub(crate) shared: [String; 2],
    /// A fence (a downgrade's).
    pub(crate) fence: String,
}

impl RowReadWriteStatements {
    /// The statements on the read-write table `rw` and the fencing sequence `fence` (quoted).
    pub(crate) fn new(rw: &str, fence: &str) -> Self {
        let both = |make: &dyn Fn(&str) -> String| [make(" NOWAIT"), make("")];
        let waited = "floor(extract(epoch FROM clock_timestamp() - l.t0) * 1000000)::bigint";
        let idle = "set_config('idle_in_transaction_session_timeout', $2, true)";
        let part = |part: u8, mode: &'static str| {
            move |nowait: &str| {
                format!("SELECT 1 FROM {rw} WHERE name = $1 AND part = {part} FOR {mode}{nowait}")
            }
        };
        Self {
            insert: format!(
                "INSERT INTO {rw} (name, part) VALUES ($1, 0), ($1, 1), ($1, 2) ON CONFLICT DO NOTHING"
            ),
            turn: both(&part(2, "UPDATE")),
            share_top: both(&|nowait| {
                format!("SELECT {idle} FROM {rw} WHERE name = $1 AND part = 0 FOR SHARE{nowait}")
            }),
            close_gate: both(&part(1, "UPDATE")),
            pass_gate: both(&part(1, "SHARE")),
            exclusive: both(&|nowait| {
                format!(
                    "WITH c AS (SELECT clock_timestamp() AS t0), \
                     l AS (SELECT r.name, c.t0 FROM {rw} r, c WHERE r.name = $1 AND r.part = 0 \
                       FOR UPDATE OF r{nowait}) \
                     SELECT nextval('{fence}'), {waited} FROM l"
                )
            }),
            shared: both(&|nowait| {
                format!(
                    "WITH c AS (SELECT clock_timestamp() AS t0), \
                     l AS (SELECT r.name, c.t0 FROM {rw} r, c WHERE r.name = $1 AND r.part = 0 \
                       FOR SHARE OF r{nowait}) \
                     SELECT nextval('{fence}'), {waited}, {idle} FROM l"
                )
            }),
            fence: format!("SELECT nextval('{fence}'), 0::bigint"),
        }
    }
}

impl PostgresBackend {
    /// [`ReadWrite::acquire_rw`](lock_core::ReadWrite::acquire_rw) on the row kind.
    pub(crate) fn row_rw(
        &self,
        request: &Request<'_>,
        access: Access,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        check_lease(request.ttl)?;
        if access == Access::Read {
            if let Some(session) = self.inner.writers.find(request.name, request.owner) {
                return self.row_downgrade(request, session).map(Some);
            }
        }
        in_queue_until(request.deadline, self.inner.pool.settings().io_timeout, |wait| {
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
    ) -> Result<Option<(PostgresLease, Grant)>> {
        let connection = self.inner.pool.get_for(wait.checkout())?;
        if !super::session::settled(&connection, ttl, wait)? {
            return Ok(None);
        }
        let statements = &self.inner.tables.row_read_write;
        let until = wait.length().map(|length| Instant::now() + length);
        let limit = wait.length().unwrap_or(Duration::ZERO) + connection.io_timeout();
        let name_text = name.as_str();
        let idle = idle_limit(ttl);
        let (name_text, idle) = (&name_text, &idle);
        let sent = Instant::now();
        let outcome = connection.run_for("acquire", limit, |client| async move {
            let w = usize::from(until.is_some());
            client.query_typed(&statements.insert, &[(name_text, Type::TEXT)]).await?;
            client.batch_execute("BEGIN").await?;
            let steps: Vec<(&str, bool, bool)> = match access {
                // (statement, takes the idle limit, may wait)
                Access::Write => vec![
                    (statements.turn[w].as_str(), false, true),
                    (statements.share_top[w].as_str(), true, true),
                    ("SAVEPOINT distlock_write", false, false),
                    (statements.close_gate[w].as_str(), false, true),
                    (statements.exclusive[w].as_str(), false, true),
                ],
                Access::Read => vec![
                    ("SAVEPOINT distlock_gate", false, false),
                    (statements.pass_gate[w].as_str(), false, true),
                    ("ROLLBACK TO SAVEPOINT distlock_gate", false, false),
                    (statements.shared[w].as_str(), true, true),
                ],
            };
            let mut last = Vec::new();
            for (sql, with_idle, waits) in steps {
                if !sql.starts_with("SELECT") && !sql.starts_with("WITH") {
                    client.batch_execute(sql).await?;
                    continue;
                }
                if let (Some(until), true) = (until, waits) {
                    set_lock_timeout(client, until).await?;
                }
                last = if with_idle {
                    client.query_typed(sql, &[(name_text, Type::TEXT), (idle, Type::TEXT)]).await?
                } else {
                    client.query_typed(sql, &[(name_text, Type::TEXT)]).await?
                };
                if last.is_empty() {
                    break;
                }
            }
            Ok(last)
        });
        let granted = match outcome {
            Ok(rows) => rows.first().map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1))),
            Err(CallFailure::Driver(error)) if is_busy(&error) => None,
            Err(failure) => {
                // A transaction in an unknown state (maybe holding the lock): never reuse it.
                connection.discard();
                return Err(call_error("acquire", failure));
            }
        };
        let Some((fence, waited)) = granted else {
            // Refused (or the rows vanished): whatever the attempt took goes.
            connection.run("roll back", |client| async move { client.batch_execute("ROLLBACK").await })?;
            return Ok(None);
        };
        if let Some(young_for) = super::session::too_young_in_grant(&connection, ttl)? {
            super::session::give_back_young(connection, young_for, wait);
            return Ok(None);
        }
        self.make_fence_durable(Some(&connection))?;
        let session = SharedSession::new(SessionConnection::new(connection));
        if access == Access::Write {
            self.inner.writers.insert(name, owner, &session);
        }
        let hold = Hold::ReadWrite { access, owner: *owner, session };
        Ok(Some((PostgresLease::new(name, unsigned(fence), ttl, hold), Grant::new(sent, micros(waited)))))
    }

    /// The read lock of a writer's owner: the writer's transaction already excludes every
    /// other writer; the read takes a fence on it.
    fn row_downgrade(
        &self,
        request: &Request<'_>,
        session: SharedSession<PooledPg>,
    ) -> Result<Acquired<PostgresLease>> {
        let sent = Instant::now();
        let fence: i64 = {
            let mut connection = session.lock();
            let connection = connection.get();
            let rows = connection.rows("acquire", &self.inner.tables.row_read_write.fence, &[])?;
            rows.first().map(|row| row.get(0)).ok_or_else(|| {
                Error::from(PgFailure::Reply { operation: "acquire", detail: "no fence".into() })
            })?
        };
        self.make_fence_durable(None)?;
        let hold = Hold::ReadWrite { access: Access::Read, owner: *request.owner, session };
        Ok(Acquired::new(PostgresLease::new(request.name, unsigned(fence), request.ttl, hold), sent))
    }

    /// Releases a row-kind read-write lease: `COMMIT` by the last lease on the transaction; a
    /// write released while its owner's read is held rolls back to its savepoint (the read's
    /// `FOR SHARE` and the writers' turn stay); a read released while the write is held has
    /// nothing of its own to let go.
    pub(crate) fn row_rw_release(&self, lease: PostgresLease) -> Result<bool> {
        let Hold::ReadWrite { access, owner, session } = lease.hold else {
            unreachable!("a read-write lease")
        };
        if access == Access::Write {
            self.inner.writers.remove(&lease.name, &owner);
        }
        let last = !session.is_shared();
        if !last && access == Access::Read {
            return Ok(true);
        }
        let sql = if last { "COMMIT".to_owned() } else { format!("ROLLBACK TO SAVEPOINT {WRITE_SAVEPOINT}") };
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
            let sql = sql.as_str();
            connection.run_for("release", connection.io_timeout(), |client| async move {
                client.batch_execute(sql).await
            })
        };
        match released {
            Ok(()) => {
                if let (true, Ok(connection)) = (last, session.into_only()) {
                    connection.give_back();
                }
                Ok(true)
            }
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => Err(call_error("release", failure)),
        }
    }
}

/// Sets `lock_timeout` for the transaction to what is left until `until` (at least 1 ms).
async fn set_lock_timeout(client: &Client, until: Instant) -> std::result::Result<(), tokio_postgres::Error> {
    let ms = millis(until.saturating_duration_since(Instant::now())).max(1).to_string();
    let ms = ms.as_str();
    client.query_typed("SELECT set_config('lock_timeout', $1, true)", &[(&ms, Type::TEXT)]).await.map(drop)
}
