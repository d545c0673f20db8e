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
    /// off a later grant to the same owner (a re-entered lock).
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
