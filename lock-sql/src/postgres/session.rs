//! The row-lock and advisory-lock kinds: holds that live as long as a session, on a connection
//! the lease owns.
//!
//! - **Row**: `BEGIN` and `SELECT … FOR UPDATE` on the name's row, pipelined (one round trip);
//!   the transaction stays open while the lock is held; release is `COMMIT`. The row is inserted
//!   first if absent — a `FOR UPDATE` on an absent key locks nothing.
//! - **Advisory**: `pg_try_advisory_lock(key)` (or `pg_advisory_lock` for a wait) on a stable
//!   hash of `namespace:name`; release is `pg_advisory_unlock`. Advisory locks are re-entrant per
//!   session, so a connection that may still hold one is never returned to the pool
//!   (`SessionConnection`).
//!
//! Both take their fencing token from a sequence in the same statement as the grant, and make it
//! durable before the grant returns (a flushed commit after the `nextval`, see
//! `schema::DURABLE`): the advisory statement commits durably itself; the row kind's holding
//! transaction stays open, so the client's flush connection (outside the pool, see
//! `fence_flush.rs`) commits one WAL record after the grant — one more round trip, shared by
//! concurrent grants.
//!
//! Renewal is a liveness check on the lease's connection: a session the server ended (killed
//! connection, restart, idle limit) means the lock is gone — `Ok(false)`; no answer in time means
//! in doubt — an error.
//!
//! # The server-side limit
//! A holder cut off from the server is told it lost the lock once no check succeeded for a whole
//! lease (less a clock-drift margin); the server must then end the session by itself. The
//! statement that grants the lock also sets the session's idle limit to the lease, and each check
//! sets it again (one statement, no extra round trip):
//! - row: `idle_in_transaction_session_timeout`, local to the holding transaction (`COMMIT` or
//!   `ROLLBACK` undoes it);
//! - advisory: `idle_session_timeout`, set only when granted and `RESET` by the releasing round
//!   trip, so a connection back in the pool is never timed out.
//!
//! The server counts idleness from its reply to the last request, which it sent after the holder
//! sent that request: the session ends at least a lease after the holder's last confirmed check —
//! never before the holder counts the lock lost — and about one margin and one one-way latency
//! after; one check interval later when the cut swallowed the reply to a check the server
//! answered (the server's count restarted, the holder's did not). A check keeps the session busy,
//! so a healthy holder is never timed out.

use std::time::{Duration, Instant};

use lock_core::{Error, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::connection::{CallFailure, Param};
use super::error::{PgFailure, BACKEND};
use super::lease::{Hold, PostgresLease};
use super::pool::PooledPg;
use super::table::millis;
use super::PostgresBackend;
use crate::lock_key::LockKey;
use crate::queue_wait::{micros, Grant as QueueGrant, Wait};
use crate::restart_delay;
use crate::session_connection::SessionConnection;

/// The server-side `lock_timeout` in ms (as text, for `set_config`) and the client-side limit of
/// the call (the wait plus one I/O timeout); `None` = do not wait.
fn limits(wait: Wait, io_timeout: Duration) -> (Option<String>, Duration) {
    match wait.length() {
        None => (None, io_timeout),
        Some(length) => (Some(millis(length).to_string()), length + io_timeout),
    }
}

/// A granted attempt: the lease, the earliest the server can have granted it, and the server's
/// wait in its queue.
pub(crate) type Granted = (PostgresLease, QueueGrant);

/// What one attempt on the server's lock queue gave.
enum Grant {
    /// The fence, and how long the statement waited in the queue (µs, by the server's clock).
    Fence(i64, i64),
    Busy,
    /// The row does not exist yet (row kind).
    NoRow,
}

impl PostgresBackend {
    /// Row kind: one attempt, waiting in the server's queue as `wait` says.
    pub(crate) fn row_acquire(&self, name: &LockKey, ttl: Duration, wait: Wait) -> Result<Option<Granted>> {
        let connection = self.inner.pool.get_for(wait.checkout())?;
        if !settled(&connection, ttl, wait)? {
            return Ok(None);
        }
        let mut attempt = self.row_lock(&connection, name, ttl, wait)?;
        if matches!(attempt.0, Grant::NoRow) {
            self.insert_row(&connection, name)?;
            attempt = self.row_lock(&connection, name, ttl, wait)?;
        }
        match attempt {
            (Grant::Fence(fence, waited), sent) => {
                if let Some(young_for) = too_young_in_grant(&connection, ttl)? {
                    give_back_young(connection, young_for, wait);
                    return Ok(None);
                }
                self.make_fence_durable(Some(&connection))?;
                let hold = Hold::Row { connection: SessionConnection::new(connection) };
                Ok(Some((
                    PostgresLease::keyed(name, unsigned(fence), ttl, hold),
                    QueueGrant::new(sent, micros(waited)),
                )))
            }
            (Grant::Busy, _) => Ok(None),
            (Grant::NoRow, _) => {
                Err(PgFailure::Reply { operation: "acquire", detail: "the lock row vanished".into() }.into())
            }
        }
    }

    /// Flushes the WAL past a token the holding transaction took (a commit with a WAL record
    /// on the flush connection flushes every record before it): after a crash the sequence
    /// restarts above it. On failure the token is not handed out, and `holding` (the grant's
    /// connection, when the grant is new) is dropped with its lock.
    ///
    /// # Errors
    /// The flush connection could not be opened, or the statement failed.
    pub(crate) fn make_fence_durable(&self, holding: Option<&PooledPg>) -> Result<()> {
        let sql = self.inner.tables.make_durable.as_str();
        let outcome = self.inner.fence_flush.after(
            Instant::now(),
            || self.inner.pool.open_unpooled(None),
            |other| other.rows("make the fence durable", sql, &[]).map(drop),
        );
        if let (Err(_), Some(holding)) = (&outcome, holding) {
            holding.discard();
        }
        outcome
    }

    fn insert_row(&self, connection: &PooledPg, name: &LockKey) -> Result<()> {
        let sql = self.inner.tables.insert_row.as_str();
        let name = name.as_str();
        connection
            .run("insert the lock row", |client| async move {
                client.execute_typed(sql, &[(&name, Type::TEXT)]).await
            })
            .map(drop)
    }

    /// `BEGIN` + the locking statement in one round trip; on anything but a grant, `ROLLBACK`.
    /// Also returns when the statement was sent (at the latest).
    fn row_lock(
        &self,
        connection: &PooledPg,
        name: &LockKey,
        ttl: Duration,
        wait: Wait,
    ) -> Result<(Grant, Instant)> {
        let tables = &self.inner.tables;
        let name_text = name.as_str();
        let idle = idle_limit(ttl);
        let (lock_timeout, limit) = limits(wait, connection.io_timeout());
        let sent = Instant::now();
        let outcome = match &lock_timeout {
            None => connection.query(
                "acquire",
                limit,
                true,
                &tables.lock_row_nowait,
                &[(&name_text, Type::TEXT), (&idle, Type::TEXT)],
            ),
            Some(ms) => connection.query(
                "acquire",
                limit,
                true,
                &tables.lock_row_wait,
                &[(&name_text, Type::TEXT), (&idle, Type::TEXT), (ms, Type::TEXT)],
            ),
        };
        let grant = match outcome {
            Ok(rows) => match rows.first() {
                Some(row) => return Ok((fence_and_wait(row), sent)),
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
        Ok((grant, sent))
    }

    /// Advisory kind: one attempt, waiting in the server's queue as `wait` says.
    pub(crate) fn advisory_acquire(
        &self,
        name: &LockKey,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<Granted>> {
        let connection = self.inner.pool.get_for(wait.checkout())?;
        if !settled(&connection, ttl, wait)? {
            return Ok(None);
        }
        let key = self.advisory_key(name.as_str());
        let tables = &self.inner.tables;
        let idle = idle_limit(ttl);
        let (lock_timeout, limit) = limits(wait, connection.io_timeout());
        let sent = Instant::now();
        let outcome = match &lock_timeout {
            None => connection.query(
                "acquire",
                limit,
                false,
                &tables.try_advisory,
                &[(&key, Type::INT8), (&idle, Type::TEXT)],
            ),
            Some(ms) => connection.query(
                "acquire",
                limit,
                false,
                &tables.wait_advisory,
                &[(&key, Type::INT8), (&idle, Type::TEXT), (ms, Type::TEXT)],
            ),
        };
        let grant = match outcome {
            Ok(rows) => rows.first().map(fence_and_wait),
            Err(CallFailure::Driver(error)) if is_busy(&error) => {
                if lock_timeout.is_some() {
                    undo_raced_grant(&connection, "SELECT pg_advisory_unlock($1)", &[(&key, Type::INT8)]);
                }
                None
            }
            Err(failure) => {
                // The lock may have been granted before the failure (or as the reply was lost):
                // the connection is dropped, and its session's locks go with it.
                connection.discard();
                return Err(call_error("acquire", failure));
            }
        };
        if matches!(grant, Some(Grant::Fence(..))) {
            if let Some(young_for) = too_young_in_grant(&connection, ttl)? {
                give_back_young(connection, young_for, wait);
                return Ok(None);
            }
        }
        Ok(match grant {
            Some(Grant::Fence(fence, waited)) => {
                let hold = Hold::Advisory { key, connection: SessionConnection::new(connection) };
                Some((
                    PostgresLease::keyed(name, unsigned(fence), ttl, hold),
                    QueueGrant::new(sent, micros(waited)),
                ))
            }
            _ => None,
        })
    }

    /// Renewal of a session hold: is the session still there? The check sets the session's idle
    /// limit to `ttl` again (so it always matches the lease the holder counts on).
    pub(crate) fn session_alive(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let (connection, setting, local) = match &mut lease.hold {
            Hold::Row { connection } => (connection.get(), "idle_in_transaction_session_timeout", true),
            Hold::Advisory { connection, .. } => {
                (connection.get(), self.inner.tables.idle_session_setting, false)
            }
            Hold::Table { .. } | Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                unreachable!("a mutex session lease")
            }
        };
        let sql = format!("SELECT set_config('{setting}', $1, {local})");
        let sql = sql.as_str();
        let idle = idle_limit(ttl);
        let idle = idle.as_str();
        // Parsed with its parameters in the same round trip (unnamed statement).
        let checked = connection.run_for("check the session", connection.io_timeout(), |client| async move {
            client.query_typed(sql, &[(&idle, Type::TEXT)]).await
        });
        match checked {
            Ok(_) => {
                lease.ttl = ttl;
                Ok(true)
            }
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => Err(call_error("check the session", failure)),
        }
    }

    pub(crate) fn session_release(&self, lease: PostgresLease) -> Result<bool> {
        // A leadership's session is closed, not pooled: a session holds one term at most
        // (`election.rs`).
        let pooled = !lease.election;
        let (mut connection, key) = match lease.hold {
            Hold::Row { connection } => (connection, None),
            Hold::Advisory { key, connection } => (connection, Some(key)),
            Hold::Table { .. } | Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                unreachable!("a mutex session lease")
            }
        };
        let pg = connection.get();
        if pg.is_stalled() {
            // The last check got no answer: asking again would most likely cost another I/O
            // timeout. Dropping `connection` ends the session, which releases the lock.
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
        let released = match key {
            None => {
                pg.run_for("release", pg.io_timeout(), |client| async move {
                    client.batch_execute("COMMIT").await
                })
                .map(|()| true)
            }
            // The unlock and the reset of the idle limit, pipelined.
            Some(key) => pg
                .query_then(
                    "release",
                    "SELECT pg_advisory_unlock($1)",
                    &[(&key, Type::INT8)],
                    &format!("RESET {}", self.inner.tables.idle_session_setting),
                )
                .map(|rows| rows.first().is_some_and(|row| row.get::<_, bool>(0))),
        };
        match released {
            Ok(true) => {
                if pooled {
                    connection.give_back();
                }
                Ok(true)
            }
            // Not this session's lock any more; the session is ended (dropped), to be sure.
            Ok(false) => Ok(false),
            // The session is gone, and with it the lock: it was not held any more.
            Err(failure) if failure.session_ended() => Ok(false),
            // Dropping `connection` ends the session, which releases the lock.
            Err(failure) => Err(call_error("release", failure)),
        }
    }

    /// Terminates the session holding `name`'s row or advisory lock.
    pub(crate) fn terminate_holder(&self, name: &LockKey) -> Result<()> {
        let connection = self.inner.pool.get()?;
        let key = self.advisory_key(name.as_str());
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

/// The server's sessions' age, by its clock: since the later of the postmaster's start and the
/// last reset of the backends (crash recovery resets the statistics; see [`crate::restart_delay`]).
const SESSIONS_AGE: &str =
    "SELECT (extract(epoch FROM clock_timestamp() - greatest(pg_postmaster_start_time(), \
                            (SELECT stats_reset FROM pg_stat_archiver))) * 1000000)::bigint";

/// Whether a session lock for a lease of `ttl` may be granted on `connection` now (its server's
/// sessions are at least a lease old), after sleeping as `wait` allows; see
/// [`crate::restart_delay`]. Asks the server once per connection; behind a pooler, not here
/// but inside the grant ([`too_young_in_grant`]).
pub(crate) fn settled(connection: &PooledPg, ttl: Duration, wait: Wait) -> Result<bool> {
    if connection.settles_in_grant() {
        return Ok(true);
    }
    let known = connection.sessions_age();
    let mut age = known.get();
    let settled = restart_delay::settled(&mut age, ttl, wait, || sessions_age(connection));
    known.set(age);
    settled
}

/// Behind a pooler, [`settled`] for a grant just made on `connection`: a pooler's client
/// connection outlives the server sessions behind it (through transaction pooling it meets a
/// new one with each transaction, and PgBouncer reconnects to a restarted server without a
/// word), so what a connection once learned of the server's age proves nothing, and the age is
/// asked on the server session that holds the grant — inside its transaction, before anyone is
/// told. `Some(how much younger)` than `ttl` the server is: the grant must go
/// ([`give_back_young`]). Without a pooler (or the delay), `None` at once.
///
/// # Errors
/// The age could not be read (the connection is marked for discarding, which ends the grant
/// with it).
pub(crate) fn too_young_in_grant(connection: &PooledPg, ttl: Duration) -> Result<Option<Duration>> {
    if !connection.settles_in_grant() {
        return Ok(None);
    }
    let age = sessions_age(connection).inspect_err(|_| connection.discard())?;
    Ok(Some(ttl.saturating_sub(age)).filter(|young_for| !young_for.is_zero()))
}

/// Gives back a grant [`too_young_in_grant`] refused — the connection is dropped, which ends the
/// transaction or session holding it — and sleeps through `young_for` as far as `wait` allows.
pub(crate) fn give_back_young(connection: PooledPg, young_for: Duration, wait: Wait) {
    connection.discard();
    drop(connection);
    restart_delay::wait_out(young_for, wait);
}

/// The server's sessions' age ([`SESSIONS_AGE`]), asked on `connection`.
fn sessions_age(connection: &PooledPg) -> Result<Duration> {
    let row = connection
        .run("ask the server's age", |client| async move { client.query_typed(SESSIONS_AGE, &[]).await })?;
    let micros = row
        .first()
        .and_then(|row| row.try_get::<_, Option<i64>>(0).ok().flatten())
        .ok_or_else(|| PgFailure::Reply { operation: "ask the server's age", detail: "no age".into() })?;
    // A clock stepped back since the start counts as a server just started.
    Ok(Duration::from_micros(u64::try_from(micros).unwrap_or(0)))
}

/// Gives back a session-level advisory lock that a waiting statement may have been granted as
/// its `lock_timeout` fired: PostgreSQL then reports the timeout (`55P03`, "busy") yet keeps the
/// grant (`LockErrorCleanup` records a grant that raced the timeout), and a session lock outlives
/// the failed statement — the session would hold the lock unseen, back in the pool. Measured
/// here: 177 of 1,902 timed-out 1 ms waits on a lock released at random moments. `unlock` is the
/// `pg_advisory_unlock…` call for the waited key and mode (a no-op, with a warning, when nothing
/// was granted); when it cannot be run, the session is ended instead.
pub(crate) fn undo_raced_grant(connection: &PooledPg, unlock: &str, params: &[Param<'_>]) {
    let undone = connection.query(
        "give back a grant that raced its timeout",
        connection.io_timeout(),
        false,
        unlock,
        params,
    );
    match undone {
        Ok(rows) => {
            if rows.first().is_some_and(|row| row.try_get::<_, bool>(0).unwrap_or(false)) {
                tracing::debug!("postgres: gave back an advisory lock granted as its wait timed out");
            }
        }
        Err(_) => connection.discard(),
    }
}

/// The session's idle limit for a lease of `ttl`, in ms as `set_config` takes it: exactly the
/// lease (leases are whole milliseconds of at most a day, well within the setting's range).
pub(crate) fn idle_limit(ttl: Duration) -> String {
    millis(ttl).max(1).to_string()
}

/// The fence and the µs waited, from a granting row.
fn fence_and_wait(row: &Row) -> Grant {
    Grant::Fence(row.get(0), row.get(1))
}

/// `NOWAIT` refused, or `lock_timeout` ran out: the lock is held by someone else.
pub(crate) fn is_busy(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

pub(crate) fn call_error(operation: &'static str, failure: CallFailure) -> Error {
    failure.into_error(operation)
}

/// A `bigint` fence (sequences and counters start at 1) as the token's `u64`.
pub(crate) fn unsigned(fence: i64) -> u64 {
    u64::try_from(fence).unwrap_or(0)
}

/// Against the shared harness server.
#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use std::sync::Arc;

    use lock_core::{DistributedLock, NativeWait, OwnerToken};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::identifier::TableName;
    use crate::postgres::listener::Listener;
    use crate::postgres::schema::Tables;
    use crate::postgres::{Inner, PostgresLockKind};
    use crate::testkit::PostgresTarget;

    /// Before PostgreSQL 14 there is no `idle_session_timeout`: the advisory statements set a
    /// placeholder instead and work unchanged (acquire, wait, check, release).
    #[test]
    fn advisory_holds_work_without_idle_session_timeout() {
        let base = PostgresTarget::new(PostgresLockKind::Advisory).backend().unwrap();
        let mut tables = Tables::new(&TableName::new("distlock_locks").unwrap(), true).unwrap();
        tables.without_idle_session_timeout();
        let pool = base.inner.pool.clone();
        let locks = PostgresBackend {
            inner: Arc::new(Inner {
                listener: Listener::new(pool.clone(), &tables.election.channel, true),
                pool,
                tables,
                kind: PostgresLockKind::Advisory,
                pooler: crate::postgres::Pooler::None,
                fair: true,
                namespace: "distlock".into(),
                address: String::new(),
                writers: Default::default(),
                fence_flush: Default::default(),
            }),
        };
        let ttl = Duration::from_secs(10);
        let name = unique_name("pre14");
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().expect("free");
        assert!(locks.extend(&mut lease, ttl).unwrap());
        assert!(locks.release(lease).unwrap());
        let deadline = Some(Instant::now() + Duration::from_secs(1));
        let acquired =
            locks.acquire_until(&name, &OwnerToken::random(), ttl, deadline).unwrap().expect("free");
        assert!(locks.release(acquired.lease).unwrap());
    }

    /// A row hold's connection ended by [`PgConnection::end`] (as a guarded write reported as
    /// not made ends it when its savepoint step got no answer) never commits what its
    /// transaction wrote: the next check reports the hold lost, and the release sends no
    /// `COMMIT` (with one, the row below would be there).
    ///
    /// [`PgConnection::end`]: crate::postgres::connection::PgConnection::end
    #[test]
    fn an_ended_row_session_never_commits_what_it_wrote() {
        let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
        let table = format!("distlock_ended_{}", OwnerToken::random().to_hex());
        // `sql` on a pooled connection: its rows.
        let run = |sql: String| {
            let connection = locks.inner.pool.get().unwrap();
            connection.run("test", |client| async move { client.simple_query(&sql).await }).unwrap()
        };
        run(format!("CREATE TABLE {table} (v int)"));
        let ttl = Duration::from_secs(10);
        let name = unique_name("ended");
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().expect("free");
        let insert = format!("INSERT INTO {table} VALUES (1)");
        assert_eq!(locks.execute_if_held(&mut lease, &insert, &[]).unwrap(), 1);
        let Hold::Row { connection } = &mut lease.hold else { panic!("a row hold") };
        connection.get().end();

        assert!(!locks.extend(&mut lease, ttl).unwrap(), "an ended session's hold is lost");
        assert!(!locks.release(lease).unwrap_or(false), "an ended session released");
        let count = run(format!("SELECT count(*) FROM {table}"));
        let count = count.iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        });
        run(format!("DROP TABLE {table}"));
        assert_eq!(count.as_deref(), Some("0"), "the ended session's write was committed");
        // And the lock is free again once the server sees the connection close.
        let deadline = Some(Instant::now() + Duration::from_secs(5));
        let again = locks.acquire_until(&name, &OwnerToken::random(), ttl, deadline).unwrap().expect("freed");
        assert!(locks.release(again.lease).unwrap());
    }
}
