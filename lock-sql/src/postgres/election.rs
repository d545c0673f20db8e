//! [`Elections`] on PostgreSQL, every kind.
//!
//! An election named N is the kind's mutex of the key [`election_key`](crate::lock_key)`(N)`,
//! which no lock name makes, taken and waited for by the kind's own code (lock table and its
//! `NOTIFY` queue, row lock, advisory lock). Next to it, `<table>_lead` keeps one record per
//! election: the fence of the term that wrote it, the identity of the hold that wrote it and the
//! value. A campaign writes the record right after it wins (one round trip: until then followers
//! see the winner's token with an empty value); [`proclaim`](Elections::proclaim) rewrites it.
//! Each write is one statement whose `WHERE` asks the server whether the hold still holds, and
//! which never lowers the record's fence (a deposed leader cannot overwrite a later one).
//!
//! Whose record it is, per kind (`leader` returns the value only when the record is the current
//! hold's):
//! - **table**: the lock row's owner and fence are readable: the record stores the owner token,
//!   and counts while the row has that owner and fence and has not expired.
//! - **row**: the holding transaction's id (`pg_current_xact_id()`, PostgreSQL 13+; 64 bits,
//!   never reused), read on the holding connection: the record counts while
//!   `pg_xact_status` says that transaction is in progress — it ends exactly when the hold does.
//!   The record is written on another connection (a write in the holding transaction would be
//!   invisible until the hold ends). Whether anyone holds the row: its `xmax` transaction's lock
//!   in `pg_locks`.
//! - **advisory**: the winner also takes, on its holding session, the two-`integer` advisory
//!   lock (hash of the name, the term's fence): the record counts while one session holds both
//!   the election's lock and the marker of the record's fence, all read from `pg_locks`, which
//!   every role may read. A session's pid may be reused; a fence never is.
//!
//! A session kind's leadership gives its connection up when it ends (closed, not pooled), so a
//! session never holds two terms, and a marker never outlives its term.
//!
//! Notices: every record write and every release `NOTIFY`s `<table>_lead` with the election's
//! name; each client's `LISTEN` connection (`listener.rs`) wakes that election's watchers. A
//! leader that is lost without a release (an expired row, a killed session) sends none:
//! followers see it at their re-check ([`leader_recheck`](lock_core::leader_recheck)).

use std::time::Instant;

use lock_core::{Acquired, Elections, Error, Leader, LeaderWatch, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;

use super::error::BACKEND;
use super::lease::{Hold, PostgresLease};
use super::pool::PooledPg;
use super::{PostgresBackend, PostgresLockKind};
use crate::lease::session_gone;
use crate::lock_key::LockKey;
use crate::waiters::Registration;

/// The election statements, per kind (table, row, advisory).
#[derive(Debug)]
pub(crate) struct ElectionStatements {
    /// The `NOTIFY` channel of every election on these tables: the record table's name.
    pub(crate) channel: String,
    /// $1 name, $2 fence, $3 holder, $4 value, $5 the lock's key, $6 its advisory key, $7 the
    /// marker's first half: one row, how many records were written (0 or 1).
    write: [String; 3],
    /// $1 name, $2 the lock's key, $3 its advisory key, $4 the marker's first half: at most one
    /// row, (the holder's fence where readable, whether held, the record's fence and value
    /// when the record is the current hold's).
    read: [String; 3],
    notify: String,
    /// $1 a prefix: deletes the records of the elections whose names start with it.
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) delete_prefixed: String,
}

impl ElectionStatements {
    /// For the lock table `t`, the row table `rows` (quoted) and the record table `lead`.
    pub(crate) fn new(t: &str, rows: &str, lead: &crate::identifier::TableName) -> Self {
        let channel = lead.as_str().to_owned();
        let lead = lead.double_quoted();
        let database = "(SELECT oid FROM pg_database WHERE datname = current_database())";
        // The session holding advisory key `key` also holds the marker (`marker`, `low`).
        let holds_marker = |key: &str, marker: &str, low: &str| {
            format!(
                "EXISTS (SELECT 1 FROM pg_locks a JOIN pg_locks m ON m.pid = a.pid \
                 WHERE a.locktype = 'advisory' AND a.granted AND a.objsubid = 1 AND a.database = {database} \
                 AND ((a.classid::bigint << 32) | a.objid::bigint) = {key} \
                 AND m.locktype = 'advisory' AND m.granted AND m.objsubid = 2 AND m.database = {database} \
                 AND m.classid::bigint = {marker} AND m.objid::bigint = ({low} & 4294967295))"
            )
        };
        let in_progress = |xid: &str| {
            format!("pg_xact_status(CASE WHEN {xid} ~ '^[0-9]+$' THEN {xid}::xid8 END) = 'in progress'")
        };
        // The lock row stays locked (FOR SHARE) until the write commits: no acquirer takes it
        // in between.
        let guards = [
            format!(
                "EXISTS (SELECT 1 FROM {t} l WHERE l.name = $5 AND l.owner = $3 AND l.fence = $2 \
                 AND l.expires_at > clock_timestamp() FOR SHARE)"
            ),
            in_progress("$3"),
            holds_marker("$6", "$7", "$2"),
        ];
        let write = guards.map(|held| {
            format!(
                "WITH w AS (INSERT INTO {lead} AS r (name, fence, holder, value) \
                   SELECT $1, $2, $3, $4 WHERE {held} \
                   ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, holder = EXCLUDED.holder, \
                     value = EXCLUDED.value WHERE r.fence <= EXCLUDED.fence \
                   RETURNING r.name) \
                 SELECT count(*) FROM w, LATERAL (SELECT pg_notify('{channel}', w.name)) AS n"
            )
        });
        let row_locked = format!(
            "EXISTS (SELECT 1 FROM {rows} w JOIN pg_locks l ON l.locktype = 'transactionid' \
             AND l.transactionid = w.xmax AND l.granted WHERE w.name = $2)"
        );
        let key_held = format!(
            "EXISTS (SELECT 1 FROM pg_locks a WHERE a.locktype = 'advisory' AND a.granted AND a.objsubid = 1 \
             AND a.database = {database} AND ((a.classid::bigint << 32) | a.objid::bigint) = $3)"
        );
        let read = [
            format!(
                "SELECT l.fence, true, r.fence, r.value FROM {t} l \
                 LEFT JOIN {lead} r ON r.name = $1 AND r.fence = l.fence AND r.holder = l.owner \
                 WHERE l.name = $2 AND l.expires_at > clock_timestamp()"
            ),
            format!(
                "SELECT NULL::bigint, {row_locked}, r.fence, r.value FROM (SELECT 1) AS one \
                 LEFT JOIN {lead} r ON r.name = $1 AND {}",
                in_progress("r.holder")
            ),
            format!(
                "SELECT NULL::bigint, {key_held}, r.fence, r.value FROM (SELECT 1) AS one \
                 LEFT JOIN {lead} r ON r.name = $1 AND {}",
                holds_marker("$3", "$4", "r.fence")
            ),
        ];
        let notify = format!("SELECT pg_notify('{channel}', $1)");
        let delete_prefixed = format!("DELETE FROM {lead} WHERE starts_with(name, $1)");
        Self { channel, write, read, notify, delete_prefixed }
    }
}

/// Index of a kind's statements.
fn slot(kind: PostgresLockKind) -> usize {
    match kind {
        PostgresLockKind::Table => 0,
        PostgresLockKind::Row => 1,
        PostgresLockKind::Advisory => 2,
    }
}

impl Elections for PostgresBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<PostgresLease>>> {
        crate::election::campaign(self, request, value)
    }

    fn proclaim(&self, lease: &mut PostgresLease, value: &[u8]) -> Result<()> {
        if !lease.election {
            return Err(Error::invalid_config("proclaim needs a leadership's lease"));
        }
        let holder = self.holder_of(lease)?;
        match self.write_record(lease, (&holder, value), &self.inner.pool.get()?)? {
            true => Ok(()),
            false => Err(Error::NotHeld { name: lease.name.clone() }),
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let key = LockKey::election(name);
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.election.read[slot(self.inner.kind)].as_str();
        let (name, key_text) = (name.as_str(), key.as_str());
        let (advisory, marker) = (self.advisory_key(key_text), self.marker(name));
        let rows = connection.rows(
            "read the leader",
            sql,
            &[(&name, Type::TEXT), (&key_text, Type::TEXT), (&advisory, Type::INT8), (&marker, Type::INT8)],
        )?;
        let Some(row) = rows.first() else { return Ok(None) };
        let (current, held): (Option<i64>, bool) = (row.get(0), row.get(1));
        let (recorded, value): (Option<i64>, Option<Vec<u8>>) = (row.get(2), row.get(3));
        let token = |fence: i64| Some(lock_core::FencingToken::new(fence.unsigned_abs()));
        Ok(match (recorded, held) {
            (Some(fence), _) => Some(Leader::new(value.unwrap_or_default(), token(fence))),
            // Won, record not written yet (or the kind cannot read the holder's token).
            (None, true) => Some(Leader::new(Vec::new(), current.and_then(token))),
            (None, false) => None,
        })
    }

    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        let listener = &self.inner.listener;
        if !listener.wakes() {
            // Transaction pooling: no notices; the follower re-reads at its documented pace.
            return Ok(Box::new(lock_core::SleepingWatch));
        }
        let registration = listener.register_election(name.as_str());
        let settings = self.inner.pool.settings();
        listener.wait_listening(Instant::now() + settings.connect_timeout + settings.io_timeout);
        if !listener.is_listening() {
            return Err(Error::Timeout {
                backend: BACKEND,
                operation: "watch the leader",
                source: Some("the LISTEN connection did not come up".into()),
            });
        }
        Ok(Box::new(NotifiedWatch { registration }))
    }
}

impl PostgresBackend {
    /// Takes the election `name` away from its leader, as an administrator would (see
    /// [`break_lock`](Self::break_lock)): the lock row is marked free, or the session holding
    /// the row or advisory lock is terminated. For tests and emergencies.
    ///
    /// # Errors
    /// As any statement.
    pub fn break_leadership(&self, name: &LockName) -> Result<()> {
        let key = LockKey::election(name);
        match self.inner.kind {
            PostgresLockKind::Table => self.table_mark_free(&key),
            PostgresLockKind::Row | PostgresLockKind::Advisory => self.terminate_holder(&key),
        }
    }

    /// Tells watchers that the election `name` changed (after a release: the statements that
    /// write records notify themselves). Best effort: watchers re-check anyway.
    pub(crate) fn announce_election(&self, name: &LockName) {
        let sql = self.inner.tables.election.notify.as_str();
        let name = name.as_str();
        let sent = self
            .inner
            .pool
            .get()
            .and_then(|connection| connection.rows("notify the followers", sql, &[(&name, Type::TEXT)]));
        if let Err(error) = sent {
            tracing::debug!(%error, "could not notify an election's followers; they re-check on their own");
        }
    }

    /// The identity of `lease`'s hold that the record stores (module docs).
    fn holder_of(&self, lease: &mut PostgresLease) -> Result<String> {
        match &mut lease.hold {
            Hold::Table { owner } => Ok(owner.clone()),
            Hold::Row { connection } => {
                let connection = connection.get();
                let rows = connection
                    .rows("read the holding transaction", "SELECT pg_current_xact_id()::text", &[])
                    .map_err(|error| session_gone(error, &lease.name))?;
                rows.first().map(|row| row.get(0)).ok_or_else(|| Error::backend(BACKEND, "no transaction id"))
            }
            Hold::Advisory { .. } => {
                Ok(format!("marker {}:{}", self.marker(lease.name.as_str()), lease.fence.get() & 0xffff_ffff))
            }
            Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                Err(Error::invalid_config("an election needs a leadership's lease"))
            }
        }
    }

    /// Writes the record if `lease` still holds; whether it was written.
    fn write_record(
        &self,
        lease: &PostgresLease,
        (holder, value): (&str, &[u8]),
        connection: &PooledPg,
    ) -> Result<bool> {
        let sql = self.inner.tables.election.write[slot(self.inner.kind)].as_str();
        let key = lease.lock_key();
        let fence = i64::try_from(lease.fence.get())
            .map_err(|_| Error::backend(BACKEND, "a fencing token above BIGINT"))?;
        let (name, key_text) = (lease.name.as_str(), key.as_str());
        let (advisory, marker) = (self.advisory_key(key_text), self.marker(name));
        let rows = connection.rows(
            "write the leader's record",
            sql,
            &[
                (&name, Type::TEXT),
                (&fence, Type::INT8),
                (&holder, Type::TEXT),
                (&value, Type::BYTEA),
                (&key_text, Type::TEXT),
                (&advisory, Type::INT8),
                (&marker, Type::INT8),
            ],
        )?;
        Ok(rows.first().is_some_and(|row| row.get::<_, i64>(0) > 0))
    }

    /// The marker's first half for the election `name`, as `pg_locks.classid` shows it
    /// (an unsigned 32-bit number).
    fn marker(&self, name: &str) -> i64 {
        let hash = crate::key_hash::key(&self.inner.namespace, &format!("\u{3}{name}"));
        i64::from(u32::try_from(hash >> 32).unwrap_or(0))
    }
}

/// A `pg_locks.classid`-style number as the `integer` the lock functions take (same bits).
fn marker_half(marker: i64) -> i32 {
    i32::from_ne_bytes(u32::try_from(marker).unwrap_or(0).to_ne_bytes())
}

/// The low 32 bits of a fence as the `integer` the lock functions take (same bits).
fn fence_half(fence: u64) -> i32 {
    i32::from_ne_bytes(u32::try_from(fence & 0xffff_ffff).unwrap_or(0).to_ne_bytes())
}

/// Woken by the election's `NOTIFY`s through the client's `LISTEN` connection.
struct NotifiedWatch<'a> {
    registration: Registration<'a>,
}

impl LeaderWatch for NotifiedWatch<'_> {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        Ok(self.registration.wait_and_clear(until))
    }
}

impl crate::election::Office for PostgresBackend {
    type Writer = PooledPg;

    fn writer(&self) -> Result<PooledPg> {
        self.inner.pool.get()
    }

    /// One attempt at `key`'s lock, as [`DistributedLock::try_acquire`].
    fn try_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
    ) -> Result<Option<PostgresLease>> {
        use crate::queue_wait::Wait;
        match self.inner.kind {
            PostgresLockKind::Table => self.table_try(key, owner, ttl),
            PostgresLockKind::Row => Ok(self.row_acquire(key, ttl, Wait::No)?.map(|(lease, _)| lease)),
            PostgresLockKind::Advisory => {
                Ok(self.advisory_acquire(key, ttl, Wait::No)?.map(|(lease, _)| lease))
            }
        }
    }

    fn wait_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        self.acquire_key_until(key, owner, ttl, deadline)
    }

    /// After a win: the advisory kind takes its term's marker; then the first record.
    fn take_office(&self, lease: &mut PostgresLease, value: &[u8], writer: PooledPg) -> Result<()> {
        if let Hold::Advisory { connection, .. } = &mut lease.hold {
            let (marker, low) =
                (marker_half(self.marker(lease.name.as_str())), fence_half(lease.fence.get()));
            let rows = connection.get().rows(
                "mark the term",
                "SELECT pg_try_advisory_lock($1, $2)",
                &[(&marker, Type::INT4), (&low, Type::INT4)],
            )?;
            if !rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
                return Err(Error::backend(BACKEND, "the term's marker lock was taken"));
            }
        }
        let holder = self.holder_of(lease)?;
        if !self.write_record(lease, (&holder, value), &writer)? {
            // Lost between the win and the write: the renewal reports it.
            tracing::debug!(name = %lease.name, "a new leader could not write its record: its hold is gone");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_function_halves_keep_the_bits_pg_locks_shows() {
        assert_eq!(marker_half(0xffff_ffff), -1);
        assert_eq!(marker_half(5), 5);
        assert_eq!(fence_half(0x1_0000_0002), 2);
        assert_eq!(fence_half(0xffff_fffe), -2);
    }
}
