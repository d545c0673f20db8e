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
//! - **One round trip.** An attempt's statements are pipelined: sent at once, each waiting in
//!   the server's queue for the one before.
//!   A reader's gate (savepoint, `FOR SHARE`, rollback) is one simple query, so that a
//!   refusal there skips the rest of it and fails the steps after: separate steps would let
//!   the rollback clear the refusal, and the read would take part 0 behind the waiting writer.
//! - **Bounded.** Each statement that may wait sets `lock_timeout` to what is left, on the
//!   server's clock, of the attempt's wait (`NOWAIT` for a single attempt); a refused attempt
//!   rolls back, releasing whatever it had taken. (`lock_timeout` bounds each wait for a lock:
//!   a `FOR UPDATE` behind several readers waits for them one by one, each for up to that
//!   much; the client gives up at the attempt's end plus the I/O timeout and drops the
//!   connection.)

use std::time::{Duration, Instant};

use lock_core::{check_lease, Access, Acquired, Error, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;

use super::connection::{CallFailure, Param, Step};
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
///
/// A waiting statement sets its own `lock_timeout` to what is left of the attempt's wait, read
/// from the server clock against [`until`](Self::until), so that an attempt whose statements are
/// pipelined (sent at once, each waiting in the server for the one before) still waits no longer
/// in all than it was given.
#[derive(Debug)]
pub(crate) struct RowReadWriteStatements {
    /// Inserts the name's three rows if absent (never waits on a held row).
    pub(crate) insert: String,
    /// Sets the attempt's end, $1 ms from now, for the transaction (`distlock.wait_until`).
    pub(crate) until: String,
    /// The writers' turn (part 2).
    pub(crate) turn: [String; 2],
    /// `FOR SHARE` on part 0 at the top level; $2 the idle limit in ms, set for the transaction.
    pub(crate) share_top: [String; 2],
    /// Closes the gate (part 1).
    pub(crate) close_gate: [String; 2],
    /// Passes the gate (part 1): run inside a simple query, between a savepoint and its
    /// rollback, so that a refusal skips the rest of the string.
    pub(crate) pass_gate: [String; 2],
    /// `FOR UPDATE` on part 0: (fence, µs waited).
    pub(crate) exclusive: [String; 2],
    /// `FOR SHARE` on part 0: (fence, µs waited); $2 the idle limit in ms.
    pub(crate) shared: [String; 2],
    /// A fence (a downgrade's).
    pub(crate) fence: String,
}

/// The names a connection prepares [`RowReadWriteStatements::pass_gate`] under (no wait, wait).
const GATE_STATEMENT: [&str; 2] = ["distlock_pass_gate_nowait", "distlock_pass_gate"];

/// Where a waiting attempt keeps its end: a custom setting, local to the transaction and set
/// before any savepoint (a rolled-back savepoint would undo it).
const WAIT_UNTIL: &str = "distlock.wait_until";

impl RowReadWriteStatements {
    /// The statements on the read-write table `rw` and the fencing sequence `fence` (quoted).
    pub(crate) fn new(rw: &str, fence: &str) -> Self {
        // `c` is read before the row is locked (the lock is taken on the join's rows): `t`
        // sets the wait's limit, `t0` when the wait began.
        let now_ms = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
        let left = format!("greatest(1, current_setting('{WAIT_UNTIL}')::bigint - {now_ms})::text");
        let with = |nowait: &str| {
            let limit = if nowait.is_empty() {
                format!("set_config('lock_timeout', {left}, true)")
            } else {
                "''".into()
            };
            format!("WITH c AS (SELECT {limit} AS t, clock_timestamp() AS t0)")
        };
        let both = |make: &dyn Fn(&str) -> String| [make(" NOWAIT"), make("")];
        let waited = "floor(extract(epoch FROM clock_timestamp() - l.t0) * 1000000)::bigint";
        let idle = "set_config('idle_in_transaction_session_timeout', $2, true)";
        let part = |part: u8, mode: &'static str| {
            move |nowait: &str| {
                format!(
                    "{with} SELECT 1 FROM {rw} r, c WHERE r.name = $1 AND r.part = {part} FOR {mode} OF r{nowait}",
                    with = with(nowait)
                )
            }
        };
        let part_zero = |mode: &'static str, select: String| {
            move |nowait: &str| {
                format!(
                    "{with}, l AS (SELECT r.name, c.t0 FROM {rw} r, c WHERE r.name = $1 AND r.part = 0 \
                       FOR {mode} OF r{nowait}) \
                     SELECT {select} FROM l",
                    with = with(nowait)
                )
            }
        };
        Self {
            insert: format!(
                "INSERT INTO {rw} (name, part) VALUES ($1, 0), ($1, 1), ($1, 2) ON CONFLICT DO NOTHING"
            ),
            until: format!("SELECT set_config('{WAIT_UNTIL}', ({now_ms} + $1)::text, true)"),
            turn: both(&part(2, "UPDATE")),
            share_top: both(&part_zero("SHARE", idle.to_owned())),
            close_gate: both(&part(1, "UPDATE")),
            pass_gate: both(&part(1, "SHARE")),
            exclusive: both(&part_zero("UPDATE", format!("nextval('{fence}'), {waited}"))),
            shared: both(&part_zero("SHARE", format!("nextval('{fence}'), {waited}, {idle}"))),
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
        // The name's rows are inserted only when an attempt finds them missing (a new name):
        // then the failed attempt's transaction is rolled back, and the rows inserted, in the
        // retry's own round trip.
        let mut attempt = self.row_rw_attempt(&connection, name, ttl, access, wait, &[])?;
        if let Attempt::NoRows = attempt.0 {
            let insert = self.inner.tables.row_read_write.insert.as_str();
            let name_text = name.as_str();
            let name_only: &[Param<'_>] = &[(&name_text, Type::TEXT)];
            let first = [Step::Simple("ROLLBACK"), Step::Query(insert, name_only)];
            attempt = self.row_rw_attempt(&connection, name, ttl, access, wait, &first)?;
        }
        let (Attempt::Granted { fence, waited }, sent) = attempt else {
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

    /// One round trip of an attempt: `first`, then the transaction's steps, each waiting in the
    /// server's queue for the one before (`lock_timeout` from the attempt's end, see the
    /// statements). Anything but a grant leaves the transaction open for the caller to roll back;
    /// a failure discards the connection. Also returns when the steps were sent.
    fn row_rw_attempt(
        &self,
        connection: &PooledPg,
        name: &LockName,
        ttl: Duration,
        access: Access,
        wait: Wait,
        first: &[Step<'_>],
    ) -> Result<(Attempt, Instant)> {
        let statements = &self.inner.tables.row_read_write;
        let w = usize::from(wait.length().is_some());
        let limit = wait.length().unwrap_or(Duration::ZERO) + connection.io_timeout();
        let wait_ms = millis(wait.length().unwrap_or(Duration::ZERO)).max(1);
        let name_text = name.as_str();
        let idle = idle_limit(ttl);
        let name_only: &[Param<'_>] = &[(&name_text, Type::TEXT)];
        let with_idle: &[Param<'_>] = &[(&name_text, Type::TEXT), (&idle, Type::TEXT)];
        let wait_only: &[Param<'_>] = &[(&wait_ms, Type::INT8)];
        // A refusal at the gate must end the attempt: as separate steps, the rollback to the
        // savepoint would clear the refusal and the read would take the lock row behind a
        // waiting writer. In one simple query an error skips the rest of the string, and every
        // later step fails in the aborted transaction.
        // Its statement is prepared once per connection and run by `EXECUTE` (a simple query
        // would plan it on every attempt); behind a pooler it is sent whole.
        let gate = match access {
            Access::Read => {
                let (prepared, pass) = (GATE_STATEMENT[w], &statements.pass_gate[w]);
                let name_literal = literal(name_text);
                let by_name = connection.prepare_by_name(prepared, &format!("(text) AS {pass}"));
                let pass = match by_name {
                    Ok(true) => format!("EXECUTE {prepared}({name_literal})"),
                    Ok(false) => pass.replace("$1", &name_literal),
                    Err(failure) => {
                        connection.discard();
                        return Err(call_error("acquire", failure));
                    }
                };
                format!("SAVEPOINT distlock_gate; {pass}; ROLLBACK TO SAVEPOINT distlock_gate")
            }
            Access::Write => String::new(),
        };
        let mut steps: Vec<Step<'_>> = first.iter().map(Step::clone).collect();
        steps.push(Step::Simple("BEGIN"));
        if w == 1 {
            steps.push(Step::Query(&statements.until, wait_only));
        }
        let first_lock = steps.len();
        match access {
            Access::Write => steps.extend([
                Step::Query(&statements.turn[w], name_only),
                Step::Query(&statements.share_top[w], with_idle),
                Step::Simple("SAVEPOINT distlock_write"),
                Step::Query(&statements.close_gate[w], name_only),
                Step::Query(&statements.exclusive[w], name_only),
            ]),
            Access::Read => {
                steps.extend([Step::Simple(&gate), Step::Query(&statements.shared[w], with_idle)])
            }
        }
        let sent = Instant::now();
        let attempt = match connection.pipeline("acquire", limit, &steps) {
            Ok(replies) => {
                let mut locks = steps.iter().zip(&replies).skip(first_lock);
                if locks.all(|(step, rows)| matches!(step, Step::Simple(_)) || !rows.is_empty()) {
                    // The last step returns the fence and the time waited.
                    let row = replies.last().and_then(|rows| rows.first()).expect("a lock step's row");
                    Attempt::Granted { fence: row.get(0), waited: row.get(1) }
                } else {
                    Attempt::NoRows
                }
            }
            Err(CallFailure::Driver(error)) if is_busy(&error) => Attempt::Busy,
            Err(failure) => {
                // A transaction in an unknown state (maybe holding the lock): never reuse it.
                connection.discard();
                return Err(call_error("acquire", failure));
            }
        };
        Ok((attempt, sent))
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

/// `text` as a string literal that means `text` whatever `standard_conforming_strings` says:
/// `E'…'`, quotes and backslashes doubled (as libpq's `PQescapeLiteral`).
fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// How one attempt ended.
enum Attempt {
    /// Granted: the fence and the µs waited in the last step.
    Granted { fence: i64, waited: i64 },
    /// Refused: `NOWAIT`, or `lock_timeout` ran out.
    Busy,
    /// A step found no row: the name's rows are not there (yet).
    NoRows,
}

#[cfg(test)]
mod tests {
    use super::literal;

    #[test]
    fn literals_double_quotes_and_backslashes() {
        assert_eq!(literal("a"), "E'a'");
        assert_eq!(literal("it's"), "E'it''s'");
        assert_eq!(literal(r"a\'; DROP"), r"E'a\\''; DROP'");
    }
}

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use std::thread;

    use lock_core::{Deadline, DistributedLock as _, OwnerToken, ReadWrite as _};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::postgres::PostgresLockKind;
    use crate::testkit::PostgresTarget;

    const TTL: Duration = Duration::from_secs(30);
    const UNIT: Duration = Duration::from_secs(1);
    const BACKOFF: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(50));

    fn locks() -> PostgresBackend {
        PostgresTarget::new(PostgresLockKind::Row).backend().unwrap()
    }

    fn take(
        locks: &PostgresBackend,
        name: &LockName,
        access: Access,
        deadline: Deadline,
    ) -> Option<PostgresLease> {
        let owner = OwnerToken::random();
        let request = Request::new(name, &owner, TTL, deadline, BACKOFF);
        locks.acquire_rw(&request, access).unwrap().map(|acquired| acquired.lease)
    }

    /// Returns once a writer holds `name`'s row `part` (`turn` or `close_gate` of the
    /// statements: its `NOWAIT` locking statement is refused), panics if `writer` ends first.
    fn wait_for_writer<T>(
        locks: &PostgresBackend,
        name: &LockName,
        part: fn(&RowReadWriteStatements) -> &[String; 2],
        writer: &thread::ScopedJoinHandle<'_, T>,
    ) {
        let turn_taken = || {
            let connection = locks.inner.pool.get().unwrap();
            let turn = part(&locks.inner.tables.row_read_write)[0].as_str();
            let name_text = name.as_str();
            let name_text = &name_text;
            let outcome = connection.run_for("test", UNIT, |client| async move {
                client.batch_execute("BEGIN").await?;
                client.query_typed(turn, &[(name_text, Type::TEXT)]).await
            });
            connection.run("test", |client| async move { client.batch_execute("ROLLBACK").await }).unwrap();
            matches!(outcome, Err(CallFailure::Driver(error)) if is_busy(&error))
        };
        while !turn_taken() {
            assert!(!writer.is_finished(), "the writer ended before taking the turn");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// A write that waits twice in one attempt — for the writers' turn, then for a reader — gives
    /// up at its one deadline: its pipelined statements each take `lock_timeout` from the
    /// attempt's end on the server's clock (a full wait per statement would end it two units
    /// late here).
    #[test]
    fn a_write_waiting_twice_gives_up_at_its_deadline() {
        let locks = locks();
        let name = unique_name("rw-two-waits");
        let reader = take(&locks, &name, Access::Read, Deadline::Now).expect("free");
        let first = thread::scope(|scope| {
            // A first writer takes the turn and waits for the reader for two units.
            let first =
                scope.spawn(|| take(&locks, &name, Access::Write, Deadline::At(Instant::now() + 2 * UNIT)));
            wait_for_writer(&locks, &name, |s| &s.turn, &first);
            // The second writer waits for the turn until the first gives up, then for the reader.
            let started = Instant::now();
            let second = take(&locks, &name, Access::Write, Deadline::At(started + 3 * UNIT));
            let took = started.elapsed();
            assert!(second.is_none(), "the reader still holds the lock");
            assert!(took > UNIT * 5 / 2 && took < 4 * UNIT, "a write given 3 s gave up after {took:?}");
            first.join().unwrap()
        });
        assert!(first.is_none(), "the reader still held the lock");
        assert!(locks.release(reader).unwrap());
    }

    /// A read turned away at the closed gate holds nothing, even before its transaction is
    /// rolled back: the waiting writer gets the lock as soon as the reader inside leaves. (Were
    /// the refusal cleared by the savepoint's rollback, the read would take the lock row behind
    /// the writer, and the writer would wait for that too.)
    #[test]
    fn a_read_refused_at_the_gate_takes_nothing() {
        let locks = locks();
        let name = unique_name("rw-gate");
        let reader = take(&locks, &name, Access::Read, Deadline::Now).expect("free");
        thread::scope(|scope| {
            let writer =
                scope.spawn(|| take(&locks, &name, Access::Write, Deadline::At(Instant::now() + 10 * UNIT)));
            wait_for_writer(&locks, &name, |s| &s.close_gate, &writer);
            // The writer has closed the gate and waits for the reader inside.
            let refused = locks.inner.pool.get().unwrap();
            let attempt = locks.row_rw_attempt(&refused, &name, TTL, Access::Read, Wait::No, &[]).unwrap().0;
            assert!(matches!(attempt, Attempt::Busy), "a read went past a waiting writer");
            assert!(locks.release(reader).unwrap());
            let writer = writer.join().unwrap().expect("the writer gets the lock once the reader left");
            refused.run("test", |client| async move { client.batch_execute("ROLLBACK").await }).unwrap();
            assert!(locks.release(writer).unwrap());
        });
    }
}
