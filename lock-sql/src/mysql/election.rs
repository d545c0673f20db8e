//! [`Elections`] on MySQL and MariaDB, every kind.
//!
//! An election named N is the kind's mutex of the key [`election_key`](crate::lock_key)`(N)`,
//! which no lock name makes, taken and waited for by the kind's own code (lock table and its
//! doorbell queue, InnoDB row lock, `GET_LOCK`). Next to it, `<table>_lead` keeps one record per
//! election: the fence of the term that wrote it, the identity of the hold that wrote it, when
//! (database clock) and the value. A campaign writes the record right after it wins;
//! [`proclaim`](Elections::proclaim) rewrites it. Each write is one statement whose `WHERE` asks
//! the server whether the hold still holds, and which never lowers the record's fence.
//!
//! Whose record it is, per kind (`leader` returns the value only when the record is the current
//! hold's):
//! - **table**: the lock row's owner and fence are readable: the record stores the owner token.
//!   Until the winner's record is written (one round trip) followers see its token and an empty
//!   value.
//! - **advisory**: `IS_USED_LOCK` names the holding connection: the record stores its
//!   `CONNECTION_ID()`, written on the holding connection itself (it is in no transaction) in
//!   the round trip after the grant.
//! - **row**: InnoDB's row locks are not visible to others without the `PROCESS` privilege
//!   (`information_schema.INNODB_TRX`), so the winner also takes, on its holding connection, a
//!   `GET_LOCK` term marker (`namespace:\u{3}N`, hashed when long): the record stores that
//!   connection's id and counts while `IS_USED_LOCK(marker)` names it; the record is written on
//!   another connection (a write in the holding transaction is invisible until the hold ends).
//!   Between the row's grant and the marker (one round trip) followers see no leader.
//!
//! Connection ids are not reused while the server runs; a record written before the server's
//! start (`Uptime`) never counts, so ids that a restart hands out again cannot revive one. A
//! session kind's leadership gives its connection up when it ends (closed, not pooled), so a
//! connection never holds two terms.
//!
//! MariaDB and MySQL have no notifications: [`watch_leader`](Elections::watch_leader) is a
//! [`SleepingWatch`], so followers see changes at their re-check, every
//! [`leader_recheck`](lock_core::leader_recheck) of the lease (at most a second). (The lock
//! table's doorbell rings one waiter per release; ringing every follower of every election
//! would need a registry of followers, which this does not keep.)

use std::time::Instant;

use lock_core::{
    Acquired, Elections, Error, FencingToken, Leader, LeaderWatch, LockName, OwnerToken, Request, Result,
    SleepingWatch,
};

use super::connection::MyConnection;
use super::error::BACKEND;
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::{MySqlBackend, MySqlLockKind};
use crate::lease::session_gone;
use crate::lock_key::LockKey;

/// The database clock's reading of the server's start, less a second (`Uptime` is whole
/// seconds): records written before it are from an earlier run of the server.
const STARTED: &str =
    "(UTC_TIMESTAMP(6) - INTERVAL (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
     WHERE VARIABLE_NAME = 'UPTIME') + 1 SECOND)";

impl Elections for MySqlBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<MySqlLease>>> {
        crate::election::campaign(self, request, value)
    }

    fn proclaim(&self, lease: &mut MySqlLease, value: &[u8]) -> Result<()> {
        if !lease.election {
            return Err(Error::invalid_config("proclaim needs a leadership's lease"));
        }
        match self.write_record(lease, value, None)? {
            true => Ok(()),
            false => Err(Error::NotHeld { name: lease.name.clone() }),
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let key = LockKey::election(name);
        let lead = &self.inner.tables.lead;
        let literal = hex(name.as_str().as_bytes());
        let sql = match self.inner.kind {
            MySqlLockKind::Table => format!(
                "SELECT l.fence, TRUE, r.fence, r.value FROM {} l LEFT JOIN {lead} r ON r.name = {literal} \
                 AND r.fence = l.fence AND r.holder = l.owner \
                 WHERE l.name = {} AND l.expires_at > UTC_TIMESTAMP(6)",
                self.inner.tables.locks,
                hex(key.as_str().as_bytes()),
            ),
            MySqlLockKind::Row | MySqlLockKind::Advisory => {
                let holder = format!("IS_USED_LOCK({})", self.session_mark(name, &key));
                format!(
                    "SELECT NULL, {holder} IS NOT NULL, r.fence, r.value FROM (SELECT 1) AS one \
                     LEFT JOIN {lead} r ON r.name = {literal} AND r.holder = CONCAT({holder}) \
                     AND r.written_at >= {STARTED}"
                )
            }
        };
        let results = self.inner.pool.get()?.run("read the leader", &sql)?;
        let Some(row) = results.sets.last().and_then(|set| set.1.first()) else { return Ok(None) };
        let current: Option<u64> = row.get::<Option<u64>, _>(0).flatten();
        let held = row.get::<Option<i64>, _>(1).flatten().unwrap_or(0) != 0;
        let recorded: Option<u64> = row.get::<Option<u64>, _>(2).flatten();
        Ok(match (recorded, held) {
            (Some(fence), _) => {
                let value: Vec<u8> = row.get::<Option<Vec<u8>>, _>(3).flatten().unwrap_or_default();
                Some(Leader::new(value, Some(FencingToken::new(fence))))
            }
            // Won, record not written yet (or the kind cannot read the holder's token).
            (None, true) => Some(Leader::new(Vec::new(), current.map(FencingToken::new))),
            (None, false) => None,
        })
    }

    /// No notices on MySQL or MariaDB (see the module docs): followers re-check.
    fn watch_leader(&self, _name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        Ok(Box::new(SleepingWatch))
    }
}

impl MySqlBackend {
    /// Takes the election `name` away from its leader, as an administrator would (see
    /// [`break_lock`](Self::break_lock)): the lock row is marked free, or the connection holding
    /// the row or advisory lock is killed. For tests and emergencies.
    ///
    /// # Errors
    /// As any statement.
    pub fn break_leadership(&self, name: &LockName) -> Result<()> {
        let key = LockKey::election(name);
        match self.inner.kind {
            MySqlLockKind::Table => self.table_mark_free(&key),
            MySqlLockKind::Row | MySqlLockKind::Advisory => self.kill_holder(&key),
        }
    }

    /// The row kind's term marker of the election `name` (a `GET_LOCK` name, as a literal).
    pub(crate) fn term_marker(&self, name: &LockName) -> String {
        self.advisory_key(&format!("\u{3}{name}"))
    }

    /// The `GET_LOCK` name that tells a session kind's current hold: the marker (row kind) or
    /// the election's lock itself (advisory kind).
    fn session_mark(&self, name: &LockName, key: &LockKey) -> String {
        match self.inner.kind {
            MySqlLockKind::Row => self.term_marker(name),
            _ => self.advisory_key(key.as_str()),
        }
    }

    /// Writes the record if `lease` still holds; whether it was written.
    fn write_record(
        &self,
        lease: &mut MySqlLease,
        value: &[u8],
        writer: Option<MyConnection>,
    ) -> Result<bool> {
        // The table and row kinds write on another connection: the one checked out for it, if any.
        let other = |writer: Option<MyConnection>| writer.map_or_else(|| self.inner.pool.get(), Ok);
        let key = lease.lock_key();
        let (name, fence) = (hex(lease.name.as_str().as_bytes()), lease.fence.get());
        let upsert = |holder: &str, held: &str| {
            // Assigned left to right, each seeing the columns assigned before: `fence` last.
            let newer = "fence <= VALUES(fence)";
            format!(
                "INSERT INTO {} (name, fence, holder, written_at, value) \
                 SELECT {name}, {fence}, {holder}, UTC_TIMESTAMP(6), {} FROM DUAL WHERE {held} \
                 ON DUPLICATE KEY UPDATE value = IF({newer}, VALUES(value), value), \
                   holder = IF({newer}, VALUES(holder), holder), \
                   written_at = IF({newer}, VALUES(written_at), written_at), \
                   fence = IF({newer}, VALUES(fence), fence)",
                self.inner.tables.lead,
                hex(value),
            )
        };
        let results = match &mut lease.hold {
            Hold::Table { owner } => {
                let held = format!(
                    "EXISTS (SELECT 1 FROM {} WHERE name = {} AND owner = {owner} AND fence = {fence} \
                     AND expires_at > UTC_TIMESTAMP(6))",
                    self.inner.tables.locks,
                    hex(key.as_str().as_bytes())
                );
                other(writer)?.run("write the leader's record", &upsert(owner, &held))?
            }
            // On the holding connection, in no transaction: visible at once.
            Hold::Advisory { key, connection } => {
                let held = format!("IS_USED_LOCK({key}) = CONNECTION_ID()");
                let sql = upsert("CONCAT(CONNECTION_ID())", &held);
                connection
                    .get()
                    .run("write the leader's record", &sql)
                    .map_err(|e| session_gone(e, &lease.name))?
            }
            // Elsewhere: the holding transaction's writes are invisible until it ends.
            Hold::Row { connection } => {
                let id: Option<u64> = connection
                    .get()
                    .run("read the holding connection", "SELECT CONNECTION_ID()")
                    .map_err(|e| session_gone(e, &lease.name))?
                    .last_value();
                let id = id.ok_or_else(|| Error::backend(BACKEND, "no connection id"))?;
                let held = format!("IS_USED_LOCK({}) = {id}", self.term_marker(&lease.name));
                let sql = upsert(&format!("CONCAT({id})"), &held);
                other(writer)?.run("write the leader's record", &sql)?
            }
            Hold::ReadWrite { .. } | Hold::Permit { .. } => {
                return Err(Error::invalid_config("an election needs a leadership's lease"))
            }
        };
        // 1: inserted, 2: updated; 0: not held, or a later leader's record (or the same
        // values to the microsecond, which the clock rules out).
        Ok(results.affected(0) > 0)
    }
}

impl crate::election::Office for MySqlBackend {
    /// The advisory kind writes on its holding connection, outside any transaction.
    type Writer = Option<MyConnection>;

    fn writer(&self) -> Result<Option<MyConnection>> {
        match self.inner.kind {
            MySqlLockKind::Advisory => Ok(None),
            MySqlLockKind::Table | MySqlLockKind::Row => self.inner.pool.get().map(Some),
        }
    }

    /// One attempt at `key`'s lock, as [`DistributedLock::try_acquire`].
    fn try_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
    ) -> Result<Option<MySqlLease>> {
        use crate::queue_wait::Wait;
        match self.inner.kind {
            MySqlLockKind::Table => self.table_try(key, owner, ttl),
            MySqlLockKind::Row => Ok(self.row_acquire(key, ttl, Wait::No)?.map(|(lease, _)| lease)),
            MySqlLockKind::Advisory => Ok(self.advisory_acquire(key, ttl, Wait::No)?.map(|(lease, _)| lease)),
        }
    }

    fn wait_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        self.acquire_key_until(key, owner, ttl, deadline)
    }

    /// After a win: the row kind takes its term's marker; then the first record.
    fn take_office(&self, lease: &mut MySqlLease, value: &[u8], writer: Option<MyConnection>) -> Result<()> {
        if let Hold::Row { connection } = &mut lease.hold {
            // The previous leader's session may still be closing (its marker goes with it): wait
            // for it, but for half the read timeout only, so a marker that stays taken is a
            // refusal, never a read timeout that poisons the holding connection.
            let wait = self.inner.pool.io_timeout().as_secs_f64() / 2.0;
            let sql = format!("SELECT GET_LOCK({}, {wait:.3})", self.term_marker(&lease.name));
            let marked: Option<i64> = connection.get().run("mark the term", &sql)?.last_value();
            if marked != Some(1) {
                return Err(Error::backend(BACKEND, "the term's marker lock stayed taken"));
            }
        }
        if !self.write_record(lease, value, writer)? {
            // Lost between the win and the write: the renewal reports it.
            tracing::debug!(name = %lease.name, "a new leader could not write its record: its hold is gone");
        }
        Ok(())
    }
}
