//! The row-lock and advisory-lock kinds: holds that live as long as a session, on a connection
//! the lease owns.
//!
//! - **Row**: `START TRANSACTION` and `SELECT … FOR UPDATE` by primary key, with the fence, in
//!   one round trip; the transaction stays open while held; release is `COMMIT`. The row is
//!   inserted first if absent — a `FOR UPDATE` on an absent key gives no exclusivity.
//! - **Advisory**: `GET_LOCK(namespace:name, wait)` and the fence in one statement; release is
//!   `RELEASE_LOCK`. `GET_LOCK` is re-entrant per session, so a connection that may still hold
//!   one never serves anyone else (`SessionConnection`): an acquisition that fails after the
//!   request was sent ends its session, and so does a release that did not release.
//!
//! A grant's token is durable before the grant returns (see the flush table in `schema.rs`): the
//! advisory round trip commits a write after its `NEXTVAL`; the row kind's holding transaction
//! stays open, so the client's flush connection (outside the pool, see `fence_flush.rs`) commits
//! one after the grant — one more round trip, shared by concurrent grants.
//!
//! Renewal is a liveness check on the lease's connection: a session the server ended means the
//! lock is gone (`Ok(false)`); no answer in time means in doubt (an error).
//!
//! # The server-side limit
//! The round trip that grants the lock also sets the session's `wait_timeout` (and MariaDB's
//! idle limits inside a transaction, [`set_idle_limit`]) — how long the
//! server waits for the next request before it closes the connection, ending the session and
//! releasing its locks — to the lease, rounded **up** to whole seconds (the variable takes whole
//! seconds; rounded down, the server could free the lock before the holder counts it lost). Each
//! check sets it again; the releasing round trip, and the roll-back of a refused attempt, reset it
//! to the server's default, so a pooled connection is never timed out. The session ends at least
//! a lease after the holder's last confirmed check, and at most the rounding (under a second),
//! the drift margin and a one-way latency after the holder is told it lost the lock. A check keeps
//! the session busy, so a healthy holder is never timed out.

use std::time::{Duration, Instant};

use lock_core::{Error, Result};

use super::connection::{Broken, MyConnection, Results};
use super::error::{self, MyFailure, BACKEND};
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;
use crate::lock_key::LockKey;
use crate::queue_wait::{micros, Grant as QueueGrant, Wait};
use crate::restart_delay;
use crate::session_connection::SessionConnection;

/// A row hold's transaction is still open (1) — ended by the server (a deadlock victim, a
/// Galera brute-force abort, `innodb_rollback_on_timeout`) without ending the session, it has
/// released the row, and the hold is lost (0).
pub(crate) const IN_TRANSACTION: &str = "SELECT @@in_transaction";

/// Resets the session's idle limits (after a release or a refused attempt).
pub(crate) const RESET_IDLE_LIMIT: &str = "SET SESSION wait_timeout = @@GLOBAL.wait_timeout, \
     idle_transaction_timeout = @@GLOBAL.idle_transaction_timeout, \
     idle_write_transaction_timeout = @@GLOBAL.idle_write_transaction_timeout, \
     idle_readonly_transaction_timeout = @@GLOBAL.idle_readonly_transaction_timeout";

/// Sets the session's idle limit to `secs` (see the module docs): `wait_timeout`, and MariaDB's
/// limits for a session idle inside a transaction, each of which, when set (a DBA's
/// `idle_write_transaction_timeout = 5`, say), takes the place of `wait_timeout` there — and
/// would end a row hold, whose transaction stays open, before its lease.
pub(crate) fn set_idle_limit(secs: u64) -> String {
    format!(
        "SET SESSION wait_timeout = {secs}, idle_transaction_timeout = {secs}, \
         idle_write_transaction_timeout = {secs}, idle_readonly_transaction_timeout = {secs}"
    )
}

/// A granted attempt: the lease, the earliest the server can have granted it, and the server's
/// wait in its queue.
pub(crate) type Granted = (MySqlLease, QueueGrant);

/// What one attempt on the server's lock queue gave.
enum Grant {
    /// The fence, and the µs waited in the queue by the server's clock.
    Fence(u64, i64),
    Busy,
    /// The row does not exist yet (row kind).
    NoRow,
}

impl MySqlBackend {
    /// Row kind: one attempt, waiting in InnoDB's queue as `wait` says.
    pub(crate) fn row_acquire(&self, name: &LockKey, ttl: Duration, wait: Wait) -> Result<Option<Granted>> {
        let mut connection = self.inner.pool.get_for(wait.checkout())?;
        if !settled(&mut connection, ttl, wait)? {
            return Ok(None);
        }
        let name_literal = hex(name.as_str().as_bytes());
        let mut attempt = self.row_lock(&mut connection, &name_literal, ttl, wait)?;
        if matches!(attempt.0, Grant::NoRow) {
            match connection.try_run(&self.inner.tables.insert_row(&name_literal)) {
                // A lock-wait error: the row exists, and someone holds it.
                Err(error) if !error::is_busy(&error) => {
                    return Err(error::map("insert the lock row", error))
                }
                _ => {}
            }
            attempt = self.row_lock(&mut connection, &name_literal, ttl, wait)?;
        }
        match attempt {
            (Grant::Fence(fence, waited), sent) => {
                self.make_fence_durable(Some(&mut connection))?;
                let hold = Hold::Row { connection: SessionConnection::new(connection) };
                Ok(Some((MySqlLease::keyed(name, fence, ttl, hold), QueueGrant::new(sent, micros(waited)))))
            }
            (Grant::Busy, _) => Ok(None),
            (Grant::NoRow, _) => {
                Err(MyFailure::Reply { operation: "acquire", detail: "the lock row vanished".into() }.into())
            }
        }
    }

    /// Flushes the redo log past a token the holding transaction took (its `NEXTVAL`), with a
    /// committed write on the flush connection: after a crash the sequence restarts above
    /// the token. On failure the token is not handed out, and `holding` (the grant's connection,
    /// when the grant is new) is ended with its lock.
    ///
    /// # Errors
    /// The flush connection could not be opened, or the statement failed.
    pub(crate) fn make_fence_durable(&self, holding: Option<&mut MyConnection>) -> Result<()> {
        let sql = self.inner.tables.make_durable("TRUE");
        let outcome = self.inner.fence_flush.after(
            Instant::now(),
            || self.inner.flush_pool.get(),
            |other| other.run("make the fence durable", &sql).map(drop),
        );
        if let (Err(_), Some(holding)) = (&outcome, holding) {
            holding.poison();
        }
        outcome
    }

    /// Also returns when the statement was sent (at the latest).
    fn row_lock(
        &self,
        connection: &mut MyConnection,
        name: &str,
        ttl: Duration,
        wait: Wait,
    ) -> Result<(Grant, Instant)> {
        let length = wait.length();
        let sql = self.inner.tables.lock_row(name, length, idle_limit_secs(ttl));
        let sent = Instant::now();
        let grant = match run_waiting(connection, &sql, length) {
            Ok(results) => match results.first_row() {
                Some(row) => return Ok((fence_and_wait(row)?, sent)),
                None => Grant::NoRow,
            },
            Err(error) if error::is_busy(&error) => Grant::Busy,
            Err(error) => {
                // A transaction in an unknown state (maybe holding the lock): end the session.
                connection.poison();
                return Err(error::map("acquire", error));
            }
        };
        connection.run("roll back", &format!("ROLLBACK; {RESET_IDLE_LIMIT}"))?;
        Ok((grant, sent))
    }

    /// Advisory kind: one attempt, waiting in the server's queue as `wait` says.
    pub(crate) fn advisory_acquire(
        &self,
        name: &LockKey,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<Granted>> {
        let mut connection = self.inner.pool.get_for(wait.checkout())?;
        if !settled(&mut connection, ttl, wait)? {
            return Ok(None);
        }
        let key = self.advisory_key(name.as_str());
        let length = wait.length();
        let sql = self.inner.tables.get_lock(&key, length.unwrap_or(Duration::ZERO), idle_limit_secs(ttl));
        let sent = Instant::now();
        let granted = run_waiting(&mut connection, &sql, length)
            .map_err(|error| error::map("acquire", error))
            .and_then(|results| match results.first_row() {
                Some(row) if row.get::<Option<u64>, _>(0).flatten().is_some() => {
                    fence_and_wait(row).map(Some)
                }
                Some(_) => Ok(None),
                None => Err(MyFailure::Reply { operation: "acquire", detail: "no row".into() }.into()),
            });
        match granted {
            Ok(Some(Grant::Fence(fence, waited))) => {
                let hold = Hold::Advisory { key, connection: SessionConnection::new(connection) };
                Ok(Some((MySqlLease::keyed(name, fence, ttl, hold), QueueGrant::new(sent, micros(waited)))))
            }
            Ok(_) => Ok(None),
            Err(error) => {
                // `GET_LOCK` may have granted the lock before a later part of the round trip
                // failed (or as the reply was lost): end the session, and its locks with it.
                connection.poison();
                Err(error)
            }
        }
    }

    /// Renewal of a session hold: is the session (and, for `GET_LOCK`, the lock; for a row lock,
    /// its transaction: [`IN_TRANSACTION`]) still there? The check sets the session's idle
    /// limit to `ttl` again.
    pub(crate) fn session_alive(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let limit = set_idle_limit(idle_limit_secs(ttl));
        let (row, check) = match &lease.hold {
            Hold::Row { .. } => (true, format!("{limit}; {IN_TRANSACTION}")),
            Hold::Advisory { key, .. } => {
                (false, format!("{limit}; SELECT IFNULL(IS_USED_LOCK({key}) = CONNECTION_ID(), 0)"))
            }
            Hold::Table { .. } | Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                unreachable!("a mutex session lease")
            }
        };
        let (Hold::Row { connection } | Hold::Advisory { connection, .. }) = &mut lease.hold else {
            unreachable!("a mutex session lease")
        };
        match connection.get().try_run(&check) {
            Ok(results) => {
                let alive = results.last_value::<i64>().is_none_or(|held| held == 1);
                if alive {
                    lease.ttl = ttl;
                } else if row {
                    // The transaction ended under the hold: the session is not the hold any more.
                    connection.get().poison();
                }
                Ok(alive)
            }
            Err(error) if error::session_ended(&error) => Ok(false),
            Err(error) => Err(error::map("check the session", error)),
        }
    }

    pub(crate) fn session_release(&self, lease: MySqlLease) -> Result<bool> {
        // A leadership's session is closed, not pooled: a session holds one term at most, and
        // the row kind's term marker goes first (`election.rs`).
        let pooled = !lease.election;
        let unmark = match lease.election {
            true => format!("DO RELEASE_LOCK({}); ", self.term_marker(&lease.name)),
            false => String::new(),
        };
        let (mut connection, sql) = match lease.hold {
            Hold::Row { connection } => (connection, format!("{unmark}COMMIT; {RESET_IDLE_LIMIT}")),
            Hold::Advisory { key, connection } => {
                (connection, format!("SELECT RELEASE_LOCK({key}); {RESET_IDLE_LIMIT}"))
            }
            Hold::Table { .. } | Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                unreachable!("a mutex session lease")
            }
        };
        match connection.get().broken() {
            None => {}
            // The session is gone, and with it the lock: it was not held any more.
            Some(Broken::SessionEnded) => return Ok(false),
            // An earlier call got no answer: the connection cannot be asked again. Dropping it
            // ends the session, which releases the lock.
            Some(Broken::NoAnswer) => {
                return Err(Error::Timeout {
                    backend: BACKEND,
                    operation: "release",
                    source: Some(
                        "an earlier call on the lock's connection got no answer; the connection is closed \
                     instead, which ends the session"
                            .into(),
                    ),
                })
            }
        }
        match connection.get().try_run(&sql) {
            // COMMIT has no value; RELEASE_LOCK says 1 when it released this session's lock, 0
            // when another session holds it, NULL when nobody does.
            Ok(results) => {
                let released = released(&results);
                if released && pooled {
                    connection.give_back();
                }
                // Otherwise `connection` is dropped: whatever this session still holds ends
                // with it, and it never goes back to the pool.
                Ok(released)
            }
            // The session is gone, and with it the lock: it was not held any more.
            Err(error) if error::session_ended(&error) => Ok(false),
            // Dropping `connection` ends the session, which releases the lock.
            Err(error) => Err(error::map("release", error)),
        }
    }

    /// Kills the connection holding `name`'s row or advisory lock.
    pub(crate) fn kill_holder(&self, name: &LockKey) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        if self.inner.kind == super::MySqlLockKind::Row {
            // The `holder` column keeps the last holder's id after its release (the `COMMIT`
            // keeps it), and that connection may hold another lock by now: kill only the
            // holder of a row that is locked.
            let probe = self.inner.tables.row_free_probe(&hex(name.as_str().as_bytes()));
            let probed = connection.try_run(&probe);
            connection.run("roll back", "ROLLBACK")?;
            match probed {
                Ok(_) => return Ok(()),
                Err(error) if error::is_busy(&error) => {}
                Err(error) => return Err(error::map("find the holder", error)),
            }
        }
        let sql = match self.inner.kind {
            super::MySqlLockKind::Row => self.inner.tables.row_holder(&hex(name.as_str().as_bytes())),
            _ => format!("SELECT IS_USED_LOCK({})", self.advisory_key(name.as_str())),
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

/// Whether a session lock for a lease of `ttl` may be granted on `connection` now (its server has
/// been up for at least a lease), after sleeping as `wait` allows; see [`crate::restart_delay`].
/// Asks the server once per connection.
pub(crate) fn settled(connection: &mut MyConnection, ttl: Duration, wait: Wait) -> Result<bool> {
    let mut age = connection.sessions_age;
    let settled = restart_delay::settled(&mut age, ttl, wait, || {
        let results = connection.run("ask the server's age", "SHOW GLOBAL STATUS LIKE 'Uptime'")?;
        let uptime = results
            .first_row()
            .and_then(|row| row.get_opt::<String, _>(1))
            .and_then(std::result::Result::ok)
            .and_then(|uptime| uptime.parse::<u64>().ok())
            .ok_or_else(|| MyFailure::Reply {
                operation: "ask the server's age",
                detail: "no Uptime".into(),
            })?;
        // Whole seconds, truncated: the server may have started almost a second later.
        Ok(Duration::from_secs(uptime.saturating_sub(1)))
    });
    connection.sessions_age = age;
    settled
}

/// Whether a release's results say the lock was released: `COMMIT` returns no row; the
/// `RELEASE_LOCK` row must say 1 (not 0, not `NULL`).
fn released(results: &Results) -> bool {
    match results.first_row() {
        None => true,
        Some(row) => row.get::<Option<i64>, _>(0).flatten() == Some(1),
    }
}

/// Runs a statement that waits in the server's queue for `length` (`None`: does not wait).
fn run_waiting(
    connection: &mut MyConnection,
    sql: &str,
    length: Option<Duration>,
) -> std::result::Result<Results, mysql::Error> {
    match length {
        None => connection.try_run(sql),
        Some(length) => connection.try_run_waiting(sql, length),
    }
}

/// `wait_timeout` for a lease of `ttl`: whole seconds, rounded up (never below the lease).
pub(crate) fn idle_limit_secs(ttl: Duration) -> u64 {
    (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1)
}

/// The fence and the µs waited, from a granting row.
fn fence_and_wait(row: &mysql::Row) -> Result<Grant> {
    match (row.get::<Option<u64>, _>(0).flatten(), row.get::<Option<i64>, _>(1).flatten()) {
        (Some(fence), waited) => Ok(Grant::Fence(fence, waited.unwrap_or(0))),
        (None, _) => Err(MyFailure::Reply { operation: "acquire", detail: "no fence".into() }.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_limit_is_rounded_up() {
        assert_eq!(idle_limit_secs(Duration::from_millis(1)), 1);
        assert_eq!(idle_limit_secs(Duration::from_secs(3)), 3);
        assert_eq!(idle_limit_secs(Duration::from_millis(3001)), 4);
    }
}

/// Against the shared harness server.
#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use lock_core::{DistributedLock, OwnerToken};
    use lock_testkit::suite::unique_name;

    use super::*;
    use crate::mysql::MySqlLockKind;
    use crate::testkit::MySqlTarget;

    const TTL: Duration = Duration::from_secs(10);

    fn backend(kind: MySqlLockKind, table: &str, pool: u32) -> MySqlBackend {
        MySqlBackend::builder(MySqlTarget::new(kind).url())
            .kind(kind)
            // The harness started the server for this run: no lock predates it.
            .restart_delay(false)
            .table(table)
            .max_connections(pool)
            .connect_timeout(Duration::from_secs(2))
            .io_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    }

    fn session_id(lease: &mut MySqlLease) -> u32 {
        match &mut lease.hold {
            Hold::Advisory { connection, .. } | Hold::Row { connection } => connection.get().id(),
            Hold::Table { .. } | Hold::ReadWrite { .. } | Hold::Permit { .. } => unreachable!(),
        }
    }

    /// A row hold whose transaction the server ended without ending the session (here a
    /// `ROLLBACK` behind the lease; a deadlock victim or a Galera abort in practice) has lost its
    /// row: the next check says so, and the release does not claim it.
    #[test]
    fn a_row_hold_whose_transaction_ended_is_lost() {
        use lock_core::{Access, Deadline, ReadWrite as _, Request};

        let locks = backend(MySqlLockKind::Row, "distlock_locks", 4);
        locks.ensure_schema().unwrap();
        let mut mutex =
            locks.try_acquire(&unique_name("tx-ended"), &OwnerToken::random(), TTL).unwrap().expect("free");
        let owner = OwnerToken::random();
        let name = unique_name("tx-ended-rw");
        let read = Request::new(&name, &owner, TTL, Deadline::Now, (Duration::ZERO, Duration::ZERO));
        let mut read = locks.acquire_rw(&read, Access::Read).unwrap().expect("free").lease;
        match &mut mutex.hold {
            Hold::Row { connection } => connection.get().run("end the transaction", "ROLLBACK").unwrap(),
            _ => unreachable!(),
        };
        match &read.hold {
            Hold::ReadWrite { session, .. } => {
                session.lock().get().run("end the transaction", "ROLLBACK").unwrap();
            }
            _ => unreachable!(),
        };
        assert!(!locks.extend(&mut mutex, TTL).unwrap(), "a row lock whose transaction ended is held");
        assert!(!locks.extend(&mut read, TTL).unwrap(), "a read lock whose transaction ended is held");
        assert!(!locks.release(mutex).unwrap() && !locks.release(read).unwrap(), "released what was gone");
    }

    /// Breaking a free row lock kills nobody: the row's `holder` still names its last holder's
    /// connection, which went back to the pool and now holds another lock.
    #[test]
    fn breaking_a_free_row_lock_kills_nobody() {
        let locks = backend(MySqlLockKind::Row, "distlock_locks", 2);
        locks.ensure_schema().unwrap();
        let (free, held) = (unique_name("break-free"), unique_name("break-held"));
        let mut first = locks.try_acquire(&free, &OwnerToken::random(), TTL).unwrap().expect("free");
        let id = session_id(&mut first);
        assert!(locks.release(first).unwrap());
        let mut other = locks.try_acquire(&held, &OwnerToken::random(), TTL).unwrap().expect("free");
        assert_eq!(session_id(&mut other), id, "the pool hands out its last connection first");
        locks.break_lock(&free).unwrap();
        assert!(locks.extend(&mut other, TTL).unwrap(), "breaking a free lock ended another hold");
        assert!(locks.release(other).unwrap());
    }

    /// `RELEASE_LOCK` answering `NULL` (nobody holds the lock: it went behind the holder's back)
    /// is not a release, and the connection does not go back to the pool.
    #[test]
    fn a_release_lock_of_null_is_not_released_and_ends_the_session() {
        let locks = backend(MySqlLockKind::Advisory, "distlock_locks", 1);
        locks.ensure_schema().unwrap();
        let name = unique_name("release-null");
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).unwrap().expect("free");
        let id = session_id(&mut lease);
        let Hold::Advisory { key, connection } = &mut lease.hold else { unreachable!() };
        connection.get().run("release behind the lease", &format!("DO RELEASE_LOCK({key})")).unwrap();
        assert!(!locks.release(lease).unwrap(), "RELEASE_LOCK gave NULL, yet the release reported success");
        let mut connection = locks.inner.pool.get().unwrap();
        assert_ne!(connection.id(), id, "the connection went back to the pool");
    }

    /// `GET_LOCK` granted, then the same round trip failed (here: the fencing sequence has run
    /// out, which only the `NEXTVAL` after a granted `GET_LOCK` finds): the session is ended, so
    /// the lock is free for others at once, and the pool never hands out a connection still
    /// holding it.
    #[test]
    fn a_failure_after_get_lock_ends_the_session() {
        use mysql::prelude::Queryable;
        let table = format!("exhausted_{}", std::process::id());
        let url = MySqlTarget::new(MySqlLockKind::Advisory).url().to_owned();
        let mut admin = mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap();
        admin
            .query_drop(format!(
                "CREATE OR REPLACE SEQUENCE {table}_fence MINVALUE 1 MAXVALUE 2 NOCACHE NOCYCLE"
            ))
            .unwrap();
        admin.query_drop(format!("DO NEXTVAL({table}_fence); DO NEXTVAL({table}_fence)")).unwrap();
        let broken = backend(MySqlLockKind::Advisory, &table, 1);
        let name = unique_name("after-get-lock");
        let error =
            broken.try_acquire(&name, &OwnerToken::random(), TTL).expect_err("the sequence has run out");
        // The failure came after the grant, not before GET_LOCK ran.
        assert!(error.to_string().contains("run out"), "{error}");
        let rival = backend(MySqlLockKind::Advisory, "distlock_locks", 4);
        rival.ensure_schema().unwrap();
        let started = std::time::Instant::now();
        let taken = loop {
            if let Some(lease) = rival.try_acquire(&name, &OwnerToken::random(), TTL).unwrap() {
                break lease;
            }
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "the failed acquisition's session kept the lock"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(rival.release(taken).unwrap());
        admin.query_drop(format!("DROP SEQUENCE {table}_fence")).unwrap();
    }

    /// A server whose idle limit inside transactions is shorter than the lease (MariaDB's
    /// `idle_*_transaction_timeout`, which take the place of `wait_timeout` in a transaction,
    /// set globally by a DBA) ends no row hold before its lease: the grant sets them too.
    #[test]
    fn a_servers_idle_transaction_limit_ends_no_row_hold_early() {
        use lock_core::{Access, Deadline, ReadWrite as _, Request};
        use lock_testkit::harness::MariaDbServer;
        use mysql::prelude::Queryable as _;

        let server = MariaDbServer::start().unwrap();
        let mut root = mysql::Conn::new(mysql::Opts::from_url(&server.root_url()).unwrap()).unwrap();
        root.query_drop(
            "SET GLOBAL idle_transaction_timeout = 1, idle_write_transaction_timeout = 1, \
             idle_readonly_transaction_timeout = 1",
        )
        .unwrap();
        let locks = MySqlBackend::builder(server.url())
            .kind(MySqlLockKind::Row)
            // The server is new: no lock predates it.
            .restart_delay(false)
            .build()
            .unwrap();
        locks.ensure_schema().unwrap();
        let ttl = Duration::from_secs(10);
        let (mutex, rw) = (unique_name("idle-mutex"), unique_name("idle-rw"));
        let mut held = locks.try_acquire(&mutex, &OwnerToken::random(), ttl).unwrap().expect("free");
        let owner = OwnerToken::random();
        let read = Request::new(&rw, &owner, ttl, Deadline::Now, (Duration::ZERO, Duration::ZERO));
        let mut read = locks.acquire_rw(&read, Access::Read).unwrap().expect("free").lease;
        // Twice the server's limit, well inside the lease: nothing may have ended the sessions.
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            locks.try_acquire(&mutex, &OwnerToken::random(), ttl).unwrap().is_none(),
            "a rival got the lock"
        );
        let writer = OwnerToken::random();
        let write = Request::new(&rw, &writer, ttl, Deadline::Now, (Duration::ZERO, Duration::ZERO));
        assert!(locks.acquire_rw(&write, Access::Write).unwrap().is_none(), "a writer got past the read");
        assert!(locks.extend(&mut held, ttl).unwrap() && locks.extend(&mut read, ttl).unwrap());
        assert!(locks.release(held).unwrap() && locks.release(read).unwrap());
    }
}
