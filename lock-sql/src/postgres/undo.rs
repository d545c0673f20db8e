//! The PostgreSQL undo of an unanswered lock-table or permit acquisition (see `crate::undo`):
//! sent behind the request on the same connection when the pool drops it, so the server runs it
//! right after the request whenever it catches up (an undo on another connection could overtake
//! the request and find nothing to undo). Its thread waits for the answer up to the grant's lease
//! (at most [`MAX_WAIT`]); past that the undo is on its way anyway, and the server still reads it
//! before the connection's end.

use std::time::{Duration, Instant};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use lock_core::Result;

use super::connection::{Param, PgConnection, Wire};
use super::PostgresBackend;
use crate::undo::MAX_WAIT;

/// Statements (with their text parameters) to send behind an unanswered request, and until when
/// to wait for their answers.
pub(crate) struct FollowUp {
    statements: Vec<(String, Vec<String>)>,
    until: Instant,
}

impl PgConnection {
    /// Runs the acquisition `sql` with `params` like [`rows`](Self::rows). When it left and got
    /// no reply in time, the statements `undo` makes (SQL, text parameters) follow it on this
    /// connection once the pool drops it, waiting up to `lease` for their answer on a thread of
    /// their own. Nothing follows a statement that never left (preparing it failed) or that
    /// failed otherwise.
    ///
    /// # Errors
    /// As [`rows`](Self::rows).
    pub(crate) fn acquire_rows(
        &self,
        operation: &'static str,
        (sql, params): (&str, &[Param<'_>]),
        lease: Duration,
        undo: impl FnOnce() -> Vec<(String, Vec<String>)>,
    ) -> Result<Vec<Row>> {
        let ready = self.ready(sql, params)?;
        self.run_ready(operation, &ready).inspect_err(|_| {
            if self.is_stalled() {
                let until = Instant::now() + lease.min(MAX_WAIT);
                *self.follow_up.borrow_mut() = Some(FollowUp { statements: undo(), until });
            }
        })
    }
}

/// Sends `follow_up` on `wire` and waits for the answers, on a thread of its own; closes the
/// connection when done.
pub(super) fn send_behind(wire: Wire, follow_up: FollowUp) {
    crate::undo::spawn(move || run(&wire, &follow_up));
}

fn run(wire: &Wire, follow_up: &FollowUp) {
    let params: Vec<Vec<(&(dyn ToSql + Sync), Type)>> = follow_up
        .statements
        .iter()
        .map(|(_, params)| params.iter().map(|param| (param as &(dyn ToSql + Sync), Type::TEXT)).collect())
        .collect();
    let client = &wire.client;
    // `join_all` polls in order, and each call sends its request on its first poll: the
    // statements leave at once, in order, behind the unanswered one. Unnamed: parsed with the
    // call, nothing to prepare first (which would wait for the unanswered reply).
    let calls =
        follow_up.statements.iter().zip(&params).map(|((sql, _), params)| client.query_typed(sql, params));
    let left = follow_up.until.saturating_duration_since(Instant::now());
    match wire.drive(None, left, futures_util::future::join_all(calls)) {
        Ok(outcomes) => match outcomes.into_iter().find_map(std::result::Result::err) {
            None => tracing::debug!("undid an unanswered acquisition"),
            Some(error) => tracing::debug!(%error, "undoing an unanswered acquisition failed"),
        },
        Err(_) => tracing::debug!("no answer to an undo: an unanswered acquisition lapses at its lease end"),
    }
}

impl PostgresBackend {
    /// Runs `sql` ($1 `name`, $2 `owner`), a kind's owner-checked release. When it never left
    /// (no connection, or preparing it got no answer: a stall), it is sent again in the
    /// background until it leaves or the `lease` is over, so the lock is free as soon as the
    /// server answers again, not at its lease end. A release that left and got no answer is not
    /// sent again: the server runs it when it gets to it, and a second one could take a hold
    /// off a later grant to the same owner (a re-entered lock). Nor is one whose connection
    /// closed under it: the server may have run it (the pool's checkout already replaced a
    /// connection the server had ended while it sat idle).
    ///
    /// # Errors
    /// The release's own failure (the background retry is not waited for).
    pub(crate) fn run_release(
        &self,
        operation: &'static str,
        sql: &str,
        (name, owner): (&str, &str),
        lease: Duration,
    ) -> Result<Vec<Row>> {
        // `Err(Ok(error))`: never sent; `Err(Err(error))`: sent, maybe run.
        let once = move |backend: &Self, sql: &str, name: &str, owner: &str| {
            let params: [Param<'_>; 2] = [(&name, Type::TEXT), (&owner, Type::TEXT)];
            let connection = backend.inner.pool.get().map_err(Ok)?;
            let ready = connection.ready(sql, &params).map_err(Ok)?;
            connection.run_ready(operation, &ready).map_err(Err)
        };
        match once(self, sql, name, owner) {
            Ok(rows) => Ok(rows),
            Err(Err(sent)) => Err(sent),
            Err(Ok(unsent)) => {
                if unsent.is_retryable() {
                    let backend = self.clone();
                    let (sql, name, owner) = (sql.to_owned(), name.to_owned(), owner.to_owned());
                    crate::undo::retry_until(Instant::now() + lease, operation, move || {
                        match once(&backend, &sql, &name, &owner) {
                            Err(Ok(unsent)) => Err(unsent),
                            Ok(_) | Err(Err(_)) => Ok(()),
                        }
                    });
                }
                Err(unsent)
            }
        }
    }
}

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use lock_core::{Deadline, DistributedLock as _, LockName, OwnerToken, Request};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::postgres::{PostgresLease, PostgresLockKind};
    use crate::testkit::PostgresTarget;

    const LEASE: Duration = Duration::from_secs(30);

    /// Ends the sessions of `locks`'s pooled connections from `admin`, and waits until they are
    /// gone: what a restart, an administrator or `idle_session_timeout` does to idle connections.
    fn end_pooled_sessions(locks: &PostgresBackend, admin: &PostgresBackend) {
        let pid: i32 = {
            let connection = locks.inner.pool.get().unwrap();
            connection.rows("test", "SELECT pg_backend_pid()", &[]).unwrap()[0].get(0)
        };
        let connection = admin.inner.pool.get().unwrap();
        connection.rows("test", "SELECT pg_terminate_backend($1)", &[(&pid, Type::INT4)]).unwrap();
        let gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1";
        while connection.rows("test", gone, &[(&pid, Type::INT4)]).unwrap()[0].get::<_, i64>(0) > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn taken(locks: &PostgresBackend, name: &LockName) -> PostgresLease {
        locks.try_acquire(name, &OwnerToken::random(), LEASE).unwrap().expect("free")
    }

    fn permit(locks: &PostgresBackend, name: &LockName) -> Option<PostgresLease> {
        let owner = OwnerToken::random();
        let request = Request::new(name, &owner, LEASE, Deadline::Now, (Duration::ZERO, Duration::ZERO));
        locks.acquire_permit_polling(&request, 1).unwrap().map(|acquired| acquired.lease)
    }

    /// Calls on pooled connections the server ended while they sat idle (a restart, an
    /// administrator, an idle limit) work, on other connections: an acquisition succeeds, and a
    /// release frees the lock at once, not at its lease end (a lock-table hold, then a permit).
    #[test]
    fn calls_on_connections_the_server_ended_while_idle_work() {
        let target = PostgresTarget::new(PostgresLockKind::Table);
        let (locks, admin) = (target.backend_with(LEASE, 1).unwrap(), target.backend().unwrap());
        let name = unique_name("release-ended");
        end_pooled_sessions(&locks, &admin);
        let lease = taken(&locks, &name);
        end_pooled_sessions(&locks, &admin);
        let held_permit = permit(&locks, &name).expect("a free permit");
        end_pooled_sessions(&locks, &admin);
        assert!(locks.release(lease).unwrap(), "the lock was held");
        assert!(admin.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().is_some(), "still held");
        end_pooled_sessions(&locks, &admin);
        assert!(locks.release(held_permit).unwrap(), "the permit was held");
        assert!(permit(&admin, &name).is_some(), "the permit is still taken");
    }
}
