//! The tables and statements. Statements are sent as text in one round trip (several statements
//! where a step needs them), with every value written as a hex literal (`X'…'`) or a number:
//! nothing a caller passes is ever parsed as SQL, whatever the server's `sql_mode`.
//!
//! ```sql
//! -- The lock table (kind Table). VARBINARY keys compare bytes exactly: MariaDB's default
//! -- collations would make 'Order' = 'order' and 'a' = 'a '. A release marks the row free
//! -- (expires_at in the past) instead of deleting it, so the fence never restarts.
//! CREATE TABLE IF NOT EXISTS distlock_locks (
//!     name        VARBINARY(255) NOT NULL PRIMARY KEY,
//!     owner       VARBINARY(64)  NOT NULL,
//!     hold_count  INT            NOT NULL,
//!     fence       BIGINT         NOT NULL,
//!     expires_at  DATETIME(6)    NOT NULL,   -- UTC_TIMESTAMP(6): no time zone, no DST
//!     acquired_at DATETIME(6)    NOT NULL,
//!     -- The oldest waiter's doorbell and until when its entry lives (kept by the waiters'
//!     -- own transactions): a release reads them from the row it updates, at no extra cost.
//!     ring        BIGINT UNSIGNED NULL,
//!     ring_until  DATETIME(6)    NULL) ENGINE=InnoDB;
//! -- The lock table's waiters, oldest first (seq): one entry per waiting client, naming its
//! -- doorbell connection (see `doorbell.rs`), which lapses at `until` unless renewed.
//! CREATE TABLE IF NOT EXISTS distlock_locks_queue (
//!     seq    BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
//!     name   VARBINARY(255)  NOT NULL,
//!     waiter BIGINT UNSIGNED NOT NULL,
//!     until  DATETIME(6)     NOT NULL,
//!     UNIQUE KEY name_waiter (name, waiter)) ENGINE=InnoDB;
//! -- The row-lock kind's rows; `holder` is the holding connection's id, written inside the
//! -- holding transaction (visible to READ UNCOMMITTED readers: who holds it).
//! CREATE TABLE IF NOT EXISTS distlock_locks_rows (
//!     name   VARBINARY(255) NOT NULL PRIMARY KEY,
//!     holder BIGINT UNSIGNED NULL) ENGINE=InnoDB;
//! -- Fencing tokens of the row and advisory kinds (MariaDB >= 10.3). A sequence is not rolled
//! -- back: a holder whose connection is killed cannot hand its token to the next holder.
//! -- Nor is it durable by itself: see `_flush`.
//! CREATE SEQUENCE IF NOT EXISTS distlock_locks_fence;
//! -- A sequence's updates reach the redo log but nothing flushes it (they are no transaction's
//! -- writes): a server killed soon after hands out its last tokens again (checked with kill -9
//! -- and innodb_flush_log_at_trx_commit=1). So each grant commits a write here after its
//! -- NEXTVAL: that commit flushes the redo log past the sequence's update. One row per slot
//! -- (connection id mod 1024), so that concurrent grants rarely wait for each other's commit.
//! CREATE TABLE IF NOT EXISTS distlock_locks_flush (
//!     slot INT    NOT NULL PRIMARY KEY,
//!     n    BIGINT NOT NULL) ENGINE=InnoDB;
//! -- Read-write locks of the row kind: one row per name, apart from the mutex's rows (an RW
//! -- lock "x" never contends with the mutex "x"), inserted before the name's first lock.
//! CREATE TABLE IF NOT EXISTS distlock_locks_rw (
//!     name VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB;
//! -- Semaphores (every kind; see `semaphore.rs`): per name, a header row (owner = '') with the
//! -- count its holders use and the fence counter, and one row per permit with its expiry.
//! CREATE TABLE IF NOT EXISTS distlock_locks_sem (
//!     name       VARBINARY(255) NOT NULL,
//!     owner      VARBINARY(64)  NOT NULL,
//!     permits    INT            NOT NULL,
//!     fence      BIGINT         NOT NULL,
//!     expires_at DATETIME(6)    NOT NULL,
//!     PRIMARY KEY (name, owner)) ENGINE=InnoDB;
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use lock_core::Result;

use crate::identifier::TableName;

/// MySQL's and MariaDB's identifier limit (a longer name is an error, at `ensure_schema`).
const MAX_IDENTIFIER: usize = 64;

/// `'…'` for `bytes`, as a hex literal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut literal = String::with_capacity(3 + 2 * bytes.len());
    literal.push_str("X'");
    for byte in bytes {
        let _ = write!(literal, "{byte:02x}");
    }
    literal.push('\'');
    literal
}

/// Microseconds, for `INTERVAL n MICROSECOND`.
pub(crate) fn micros(duration: Duration) -> u128 {
    duration.as_micros()
}

/// The tables of one backend, quoted.
#[derive(Debug)]
pub(crate) struct Tables {
    locks: String,
    rows: String,
    fence: String,
    queue: String,
    rw: String,
    sem: String,
    flush: String,
    /// Lock table: a free lock goes to the oldest waiter (else to whoever asks first).
    fair: bool,
    /// The seven names, unquoted (validated identifiers).
    names: [String; 7],
}

/// The current time on the database clock, constant within a statement.
const NOW: &str = "UTC_TIMESTAMP(6)";

impl Tables {
    /// # Errors
    /// [`Error::InvalidConfig`](lock_core::Error::InvalidConfig) when a derived name (`_rows`,
    /// `_fence`) would be over the 64-character identifier limit.
    pub(crate) fn new(table: &TableName, fair: bool) -> Result<Self> {
        let t = table.as_str();
        let rows = table.derived("_rows", MAX_IDENTIFIER)?;
        let fence = table.derived("_fence", MAX_IDENTIFIER)?;
        let queue = table.derived("_queue", MAX_IDENTIFIER)?;
        let rw = table.derived("_rw", MAX_IDENTIFIER)?;
        let sem = table.derived("_sem", MAX_IDENTIFIER)?;
        let flush = table.derived("_flush", MAX_IDENTIFIER)?;
        Ok(Self {
            locks: format!("`{t}`"),
            rows: format!("`{}`", rows.as_str()),
            fence: format!("`{}`", fence.as_str()),
            queue: format!("`{}`", queue.as_str()),
            rw: format!("`{}`", rw.as_str()),
            sem: format!("`{}`", sem.as_str()),
            flush: format!("`{}`", flush.as_str()),
            fair,
            names: [
                t.to_owned(),
                rows.as_str().to_owned(),
                fence.as_str().to_owned(),
                queue.as_str().to_owned(),
                rw.as_str().to_owned(),
                sem.as_str().to_owned(),
                flush.as_str().to_owned(),
            ],
        })
    }

    /// How many rows [`existing`](Self::existing) lists when the schema is up to date.
    pub(crate) const COUNT: usize = 8;

    /// Which of the tables (and the sequence) exist in the current database (sequences are
    /// listed as tables), and the lock table's newest column.
    pub(crate) fn existing(&self) -> String {
        let [locks, rows, fence, queue, rw, sem, flush] = &self.names;
        format!(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() \
             AND table_name IN ('{locks}', '{rows}', '{fence}', '{queue}', '{rw}', '{sem}', '{flush}') \
             UNION ALL SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() \
             AND table_name = '{locks}' AND column_name = 'ring_until'"
        )
    }

    pub(crate) fn ddl(&self) -> String {
        let Self { locks, rows, fence, queue, rw, sem, flush, .. } = self;
        format!(
            "CREATE TABLE IF NOT EXISTS {locks} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
             owner VARBINARY(64) NOT NULL, hold_count INT NOT NULL, fence BIGINT NOT NULL, \
             expires_at DATETIME(6) NOT NULL, acquired_at DATETIME(6) NOT NULL, \
             ring BIGINT UNSIGNED NULL, ring_until DATETIME(6) NULL) ENGINE=InnoDB; \
             ALTER TABLE {locks} ADD COLUMN IF NOT EXISTS ring BIGINT UNSIGNED NULL, \
             ADD COLUMN IF NOT EXISTS ring_until DATETIME(6) NULL; \
             CREATE TABLE IF NOT EXISTS {rows} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
             holder BIGINT UNSIGNED NULL) ENGINE=InnoDB; \
             CREATE SEQUENCE IF NOT EXISTS {fence}; \
             CREATE TABLE IF NOT EXISTS {queue} (seq BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             name VARBINARY(255) NOT NULL, waiter BIGINT UNSIGNED NOT NULL, until DATETIME(6) NOT NULL, \
             UNIQUE KEY name_waiter (name, waiter)) ENGINE=InnoDB; \
             CREATE TABLE IF NOT EXISTS {rw} (name VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB; \
             CREATE TABLE IF NOT EXISTS {sem} (name VARBINARY(255) NOT NULL, owner VARBINARY(64) NOT NULL, \
             permits INT NOT NULL, fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, \
             PRIMARY KEY (name, owner)) ENGINE=InnoDB; \
             CREATE TABLE IF NOT EXISTS {flush} (slot INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB"
        )
    }

    /// Commits a write to the flush table (in autocommit; `WHERE` the condition holds): the
    /// commit flushes the redo log past every sequence update before it, so that a token taken
    /// before it survives a crash (see the schema above).
    pub(crate) fn make_durable(&self, condition: &str) -> String {
        format!(
            "INSERT INTO {flush} (slot, n) SELECT CONNECTION_ID() % 1024, 1 FROM DUAL WHERE {condition} \
             ON DUPLICATE KEY UPDATE n = {flush}.n + 1",
            flush = self.flush
        )
    }

    /// Acquire (or re-enter) in one statement, then read the fence it set. The `ON DUPLICATE KEY
    /// UPDATE` assignments run left to right, each seeing the columns assigned before it:
    /// `owner` is decided from the old `expires_at`, and `expires_at` is assigned last (assigned
    /// first, the later tests would see the new expiry and report a false win). A refused
    /// attempt changes nothing: 0 affected rows; a win is 1 (insert) or 2 (update). Fair: an
    /// expired lock is not free while the queue's oldest waiter (the row's `ring`) lives, except
    /// to that waiter (`waiter`: the caller's doorbell's bell when it is queued). The last row: the
    /// fence, and (`with_remaining`) the holder's remaining ms.
    pub(crate) fn acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        waiter: Option<u64>,
        with_remaining: bool,
    ) -> String {
        let locks = &self.locks;
        let us = micros(ttl);
        let valid_mine = format!("owner = VALUES(owner) AND expires_at >= {NOW}");
        let expired = match (self.fair, waiter) {
            (false, _) => format!("expires_at < {NOW}"),
            (true, None) => format!("(expires_at < {NOW} AND NOT COALESCE(ring_until >= {NOW}, FALSE))"),
            (true, Some(me)) => {
                format!("(expires_at < {NOW} AND NOT COALESCE(ring_until >= {NOW} AND ring <> {me}, FALSE))")
            }
        };
        let remaining = match with_remaining {
            false => String::new(),
            true => format!(
                ", (SELECT GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000)) \
                 FROM {locks} WHERE name = {name})"
            ),
        };
        format!(
            "INSERT INTO {locks} (name, owner, hold_count, fence, expires_at, acquired_at) \
             VALUES ({name}, {owner}, 1, LAST_INSERT_ID(1), {NOW} + INTERVAL {us} MICROSECOND, {NOW}) \
             ON DUPLICATE KEY UPDATE \
               hold_count = IF({valid_mine}, hold_count + 1, IF({expired}, 1, hold_count)), \
               fence = IF({valid_mine}, LAST_INSERT_ID(fence), IF({expired}, LAST_INSERT_ID(fence + 1), fence)), \
               acquired_at = IF({expired}, VALUES(acquired_at), acquired_at), \
               owner = IF({expired}, VALUES(owner), owner), \
               expires_at = IF(owner = VALUES(owner), IF({expired}, VALUES(expires_at), \
                 IF(expires_at >= {NOW}, GREATEST(expires_at, VALUES(expires_at)), expires_at)), expires_at); \
             SELECT LAST_INSERT_ID(){remaining}"
        )
    }

    /// Puts waiter `waiter` (its doorbell's bell: server tag and connection id) in `name`'s queue, or renews its
    /// entry (which keeps its place; a lapsed one goes to the tail), so that it lives `note`;
    /// lapsed entries of the name (crashed waiters') are deleted on the way. (A plain `VALUES`
    /// insert: `INSERT … SELECT` would hold the table's AUTO-INC lock to the statement's end and
    /// deadlock with the queue transactions of other names.) In
    /// one transaction that first locks the lock's row: queue changes serialize with each other
    /// and with the releases that read the head from that row. The last row: whether the lock
    /// has a row (else the caller attempts again, which creates it; the entry is harmless), and the holder's remaining ms — 0 when the lock is
    /// free for this waiter now (a release came first: attempt again, no ring will come), -1
    /// when it is free for the queue's head only (a release rings this waiter in its turn).
    pub(crate) fn queue(&self, name: &str, waiter: u64, replaces: Option<u64>, note: Duration) -> String {
        let Self { locks, queue, .. } = self;
        // A doorbell that reconnected has a new id: its entry takes it in place.
        let rename = replaces.map_or(String::new(), |old| {
            format!("UPDATE {queue} SET waiter = {waiter} WHERE name = {name} AND waiter = {old}; ")
        });
        let note_us = micros(note);
        let mine = if self.fair {
            format!(" AND COALESCE(ring_until < {NOW} OR ring = {waiter}, TRUE)")
        } else {
            String::new()
        };
        format!(
            "START TRANSACTION; \
             SET @distlock_found = FALSE; \
             SELECT TRUE INTO @distlock_found FROM {locks} WHERE name = {name} FOR UPDATE; \
             DELETE FROM {queue} WHERE name = {name} AND until < {NOW}; \
             {rename}\
             INSERT INTO {queue} (name, waiter, until) \
               VALUES ({name}, {waiter}, {NOW} + INTERVAL {note_us} MICROSECOND) \
               ON DUPLICATE KEY UPDATE until = VALUES(until); \
             {}; \
             COMMIT; \
             SELECT @distlock_found, IF(expires_at < {NOW}, IF(TRUE{mine}, 0, -1), \
               GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000))) \
             FROM {locks} WHERE name = {name}",
            self.refresh_ring(name)
        )
    }

    /// Takes waiter `waiter` out of `name`'s queue — or, `requeue` (other threads of its
    /// client still wait), moves it to the tail with an entry living that long — as `queue`
    /// does, in one transaction. The last row names the waiter to ring when the lock is free
    /// (a waiter that leaves may have been rung for a release it will not take).
    pub(crate) fn dequeue(&self, name: &str, waiter: u64, requeue: Option<Duration>) -> String {
        let Self { locks, queue, .. } = self;
        let requeue = requeue.map_or(String::new(), |note| {
            format!(
                "INSERT INTO {queue} (name, waiter, until) \
                 VALUES ({name}, {waiter}, {NOW} + INTERVAL {} MICROSECOND); ",
                micros(note)
            )
        });
        format!(
            "START TRANSACTION; \
             SELECT TRUE INTO @distlock_found FROM {locks} WHERE name = {name} FOR UPDATE; \
             DELETE FROM {queue} WHERE name = {name} AND waiter = {waiter}; \
             {requeue}{}; COMMIT; {}",
            self.refresh_ring(name),
            self.next_waiter(name)
        )
    }

    /// Copies the queue's oldest live entry into the lock row (inside a transaction that locked
    /// the row and changed the queue).
    fn refresh_ring(&self, name: &str) -> String {
        let Self { locks, queue, .. } = self;
        let head = format!("FROM {queue} WHERE name = {name} AND until >= {NOW} ORDER BY seq LIMIT 1");
        format!("UPDATE {locks} SET ring = (SELECT waiter {head}), ring_until = (SELECT until {head}) WHERE name = {name}")
    }

    /// The oldest live waiter for `name` when the lock is free: its doorbell id, or `NULL`.
    fn next_waiter(&self, name: &str) -> String {
        format!(
            "SELECT IF(expires_at < {NOW} AND ring_until >= {NOW}, ring, NULL) FROM {} WHERE name = {name}",
            self.locks
        )
    }

    pub(crate) fn extend(&self, name: &str, owner: &str, ttl: Duration) -> String {
        format!(
            "UPDATE {} SET expires_at = {NOW} + INTERVAL {} MICROSECOND \
             WHERE name = {name} AND owner = {owner} AND expires_at >= {NOW}",
            self.locks,
            micros(ttl)
        )
    }

    /// One round trip for a batch: extend every lease still held, then list which are held.
    /// (`items`: name, owner, lease; `permits`: the items are semaphore permits, else lock-table
    /// leases. Both are rows keyed by name and owner with an expiry, and a permit's owner is
    /// never the header's empty one.)
    pub(crate) fn extend_many(&self, items: &[(String, String, Duration)], permits: bool) -> String {
        let locks = if permits { &self.sem } else { &self.locks };
        let mut values = String::new();
        let mut pairs = String::new();
        for (index, (name, owner, ttl)) in items.iter().enumerate() {
            if index > 0 {
                values.push_str(" UNION ALL ");
                pairs.push_str(", ");
            }
            let _ = write!(values, "SELECT {name} AS name, {owner} AS owner, {} AS us", micros(*ttl));
            let _ = write!(pairs, "({name}, {owner})");
        }
        format!(
            "UPDATE {locks} AS l JOIN ({values}) AS v ON l.name = v.name AND l.owner = v.owner \
             SET l.expires_at = {NOW} + INTERVAL v.us MICROSECOND WHERE l.expires_at >= {NOW}; \
             SELECT name, owner FROM {locks} WHERE (name, owner) IN ({pairs}) AND expires_at >= {NOW}"
        )
    }

    /// `expires_at` first: it must see the hold count before the decrement. The same statement
    /// reads the waiter to ring, when the lock is now free and someone waits, from the row it
    /// updates (`ring` is assigned itself: an `UPDATE` returns no rows); the variable counts only
    /// if this statement updated the row (else it is an earlier statement's).
    pub(crate) fn release(&self, name: &str, owner: &str) -> String {
        // Non-fair: a ring is spent on the release that sends it; the rung waiter, if it loses
        // the race, queues again (which re-arms it). Else every release would ring, and many
        // `KILL`s a second slow the server down for everyone. Fair: `ring_until` also keeps the
        // free lock for the head, and the head's win moves the ring to the next waiter.
        let consume =
            if self.fair { "" } else { ", ring_until = IF(@distlock_ring IS NULL, ring_until, NULL)" };
        format!(
            "UPDATE {} SET expires_at = IF(hold_count > 1, expires_at, '1970-01-01 00:00:01'), \
             hold_count = hold_count - 1, \
             ring = COALESCE(@distlock_ring := IF(hold_count = 0 AND ring_until >= {NOW}, ring, NULL), ring){consume} \
             WHERE name = {name} AND owner = {owner} AND expires_at >= {NOW}; \
             SELECT IF(ROW_COUNT() > 0, @distlock_ring, NULL)",
            self.locks
        )
    }

    pub(crate) fn remaining(&self, name: &str) -> String {
        format!(
            "SELECT GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000)) \
             FROM {} WHERE name = {name} AND expires_at > {NOW}",
            self.locks
        )
    }

    /// Deletes the lock-table and row-table rows of names that start with the bytes `prefix`
    /// (`distlock compare`'s clean-up on a user's server).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn delete_prefixed(&self, prefix: &[u8]) -> String {
        let (length, literal) = (prefix.len(), hex(prefix));
        format!(
            "DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; \
             DELETE FROM {} WHERE LEFT(name, {length}) = {literal}",
            self.locks, self.rows, self.queue
        )
    }

    /// Frees the lock; then the waiter to ring, as [`release`](Self::release).
    pub(crate) fn mark_free(&self, name: &str) -> String {
        format!(
            "UPDATE {} SET expires_at = '1970-01-01 00:00:01' WHERE name = {name}; {}",
            self.locks,
            self.next_waiter(name)
        )
    }

    /// Creates the row of a name about to be locked for the first time, waiting at most
    /// [`INSERT_WAIT`] for a lock on its place in the index. A fresh key can meet a short-lived
    /// lock on its gap (another client's insert checking a neighbouring key for a duplicate takes
    /// one, even under READ COMMITTED), which is no holder of this lock: refused at once, a
    /// `try_lock` of a free name was reported held (seen once in CI). A row that a holder
    /// inserted and locked since this attempt looked makes the duplicate check wait for that
    /// holder, cut at the same bound: a lock-wait error then means the row exists.
    pub(crate) fn insert_row(&self, name: &str) -> String {
        format!(
            "SET STATEMENT innodb_lock_wait_timeout = 1, max_statement_time = {} FOR \
             INSERT IGNORE INTO {} (name) VALUES ({name})",
            seconds(INSERT_WAIT),
            self.rows
        )
    }

    /// Opens the holding transaction and locks the row — `NOWAIT`, or waiting up to `wait` (to
    /// the microsecond: `max_statement_time` cuts the wait that `innodb_lock_wait_timeout`, whole
    /// seconds, bounds) — then sets the session's idle limit to `idle_secs`. The session is READ
    /// COMMITTED (set when the connection opens), so a locking read of an absent key takes no gap
    /// lock. The locking `SELECT` returns the fence and the µs waited (see [`WAITED`]), so there
    /// is a row exactly when this transaction locked the row (none when the row does not exist;
    /// the caller then rolls back, which also resets the idle limit). A refused lock is an error,
    /// which stops the batch before the idle limit is set.
    pub(crate) fn lock_row(&self, name: &str, wait: Option<Duration>, idle_secs: u64) -> String {
        let Self { rows, fence, .. } = self;
        let select = match wait {
            None => format!("SELECT NEXTVAL({fence}), 0 FROM {rows} WHERE name = {name} FOR UPDATE NOWAIT"),
            Some(wait) => format!(
                "SET STATEMENT innodb_lock_wait_timeout = {}, max_statement_time = {} FOR \
                 SELECT NEXTVAL({fence}), {WAITED} FROM {rows} WHERE name = {name} FOR UPDATE",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                seconds(wait)
            ),
        };
        // The `UPDATE` never waits: after a grant the row is this transaction's; without one
        // (no row seen), a row someone inserted and locked since is contention (1205).
        format!(
            "{START_CLOCK}; START TRANSACTION; {select}; \
             SET STATEMENT innodb_lock_wait_timeout = 0 FOR \
               UPDATE {rows} SET holder = CONNECTION_ID() WHERE name = {name}; \
             SET SESSION wait_timeout = {idle_secs}"
        )
    }

    /// The connection holding `name`'s row, read without waiting (READ UNCOMMITTED sees the
    /// holder's uncommitted `holder` column).
    pub(crate) fn row_holder(&self, name: &str) -> String {
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; SELECT holder FROM {} WHERE name = {name}",
            self.rows
        )
    }

    /// `GET_LOCK`, waiting up to `wait` (MariaDB takes fractions of a second), and when granted
    /// the fence and the session's idle limit — one round trip. The row: the fence (`NULL` when
    /// busy) and the µs waited. A grant's token is made durable in the same round trip.
    pub(crate) fn get_lock(&self, key: &str, wait: Duration, idle_secs: u64) -> String {
        format!(
            "{START_CLOCK}; \
             SELECT @distlock_fence := IF(GET_LOCK({key}, {}) = 1, NEXTVAL({}), NULL), {WAITED}; \
             SET SESSION wait_timeout = IF(@distlock_fence IS NULL, @@SESSION.wait_timeout, {idle_secs}); \
             {durable}",
            seconds(wait),
            self.fence,
            durable = self.make_durable("@distlock_fence IS NOT NULL"),
        )
    }
}

/// Reads the server's clock before a wait (see [`WAITED`]).
impl Tables {
    /// Read-write lock (row kind): the transaction and the locking read of the name's row in the
    /// read-write table (`LOCK IN SHARE MODE` for a read: MariaDB has no `FOR SHARE`, MySQL 8
    /// takes both), with the fence and the µs waited; no row when the row is absent. Waits as
    /// [`lock_row`](Self::lock_row).
    pub(crate) fn lock_rw_row(
        &self,
        name: &str,
        write: bool,
        wait: Option<Duration>,
        idle_secs: u64,
    ) -> String {
        let Self { rw, fence, .. } = self;
        let mode = if write { "FOR UPDATE" } else { "LOCK IN SHARE MODE" };
        let select = match wait {
            None => format!("SELECT NEXTVAL({fence}), 0 FROM {rw} WHERE name = {name} {mode} NOWAIT"),
            Some(wait) => format!(
                "SET STATEMENT innodb_lock_wait_timeout = {}, max_statement_time = {} FOR \
                 SELECT NEXTVAL({fence}), {WAITED} FROM {rw} WHERE name = {name} {mode}",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                seconds(wait)
            ),
        };
        format!("{START_CLOCK}; START TRANSACTION; {select}; SET SESSION wait_timeout = {idle_secs}")
    }

    /// Inserts the name's read-write row if absent (as [`insert_row`](Self::insert_row)).
    pub(crate) fn insert_rw_row(&self, name: &str) -> String {
        format!(
            "SET STATEMENT innodb_lock_wait_timeout = 1, max_statement_time = {} FOR \
             INSERT IGNORE INTO {} (name) VALUES ({name})",
            seconds(INSERT_WAIT),
            self.rw
        )
    }

    /// A fence from the sequence.
    pub(crate) fn next_fence(&self) -> String {
        format!("SELECT NEXTVAL({})", self.fence)
    }

    /// Semaphore: one permit of `permits` for `owner` (hex literals), in one transaction that
    /// the header row's lock orders per name against other acquirers. Renewals and releases are
    /// single statements on their own permit's row (no header lock, so a renewal batch locks no
    /// header): the count is a locking read, which waits for any renewal or release of a permit
    /// in progress and then reads the committed row (READ COMMITTED). A non-locking count once
    /// saw a permit whose renewal was evaluated at its expiry but not yet committed as expired,
    /// and admitted a second holder beside it. The fence is read before `COMMIT`: after it,
    /// the next acquirer may have counted on. The one row returned: (granted, fence, the
    /// holders' count, how many hold).
    pub(crate) fn acquire_permit(&self, name: &str, owner: &str, permits: u32, ttl: Duration) -> String {
        let sem = &self.sem;
        let us = micros(ttl);
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) VALUES ({name}, X'', {permits}, 0, {NOW}) \
               ON DUPLICATE KEY UPDATE fence = fence; \
             SELECT COUNT(*) INTO @distlock_live FROM {sem} \
               WHERE name = {name} AND owner <> X'' AND expires_at >= {NOW} FOR UPDATE; \
             SELECT permits INTO @distlock_held FROM {sem} WHERE name = {name} AND owner = X''; \
             SET @distlock_takes = (@distlock_live = 0 OR (@distlock_held = {permits} AND @distlock_live < {permits})); \
             DELETE FROM {sem} WHERE name = {name} AND owner <> X'' AND expires_at < {NOW}; \
             UPDATE {sem} SET permits = IF(@distlock_takes, {permits}, permits), \
               fence = fence + IF(@distlock_takes, 1, 0) WHERE name = {name} AND owner = X''; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) \
               SELECT {name}, {owner}, {permits}, 0, {NOW} + INTERVAL {us} MICROSECOND FROM DUAL WHERE @distlock_takes; \
             SELECT @distlock_takes + 0, fence, @distlock_held, @distlock_live FROM {sem} \
               WHERE name = {name} AND owner = X''; \
             COMMIT"
        )
    }

    /// Semaphore: extends `owner`'s valid permit (affected rows: 1 when it did).
    pub(crate) fn extend_permit(&self, name: &str, owner: &str, ttl: Duration) -> String {
        format!(
            "UPDATE {} SET expires_at = {NOW} + INTERVAL {} MICROSECOND \
             WHERE name = {name} AND owner = {owner} AND owner <> X'' AND expires_at >= {NOW}",
            self.sem,
            micros(ttl)
        )
    }

    /// Semaphore: releases `owner`'s valid permit (affected rows: 1 when it did).
    pub(crate) fn release_permit(&self, name: &str, owner: &str) -> String {
        format!(
            "DELETE FROM {} WHERE name = {name} AND owner = {owner} AND owner <> X'' AND expires_at >= {NOW}",
            self.sem
        )
    }
}

const START_CLOCK: &str = "SET @distlock_t0 = SYSDATE(6)";

/// Microseconds since [`START_CLOCK`], read in the select list of the granting statement (after
/// the grant): how long the statement waited in the queue, by the server's clock.
const WAITED: &str = "TIMESTAMPDIFF(MICROSECOND, @distlock_t0, SYSDATE(6))";

/// The longest the insert of a fresh lock row waits for a lock on its place in the index.
const INSERT_WAIT: Duration = Duration::from_millis(100);

/// Seconds with microseconds, as `GET_LOCK` and `max_statement_time` take them (at least 1 µs:
/// `max_statement_time = 0` would mean no limit).
fn seconds(duration: Duration) -> String {
    format!("{}.{:06}", duration.as_secs(), duration.subsec_micros().max(u32::from(duration.is_zero())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_written_to_the_microsecond() {
        assert_eq!(seconds(Duration::from_millis(1500)), "1.500000");
        assert_eq!(seconds(Duration::ZERO), "0.000001");
        let tables = Tables::new(&TableName::new("t").unwrap(), true).unwrap();
        let sql = tables.lock_row("X'61'", Some(Duration::from_millis(1500)), 3);
        assert!(sql.contains("innodb_lock_wait_timeout = 2, max_statement_time = 1.500000"), "{sql}");
    }

    #[test]
    fn derived_names_must_fit_64_characters() {
        assert!(Tables::new(&TableName::new(&"t".repeat(58)).unwrap(), true).is_ok());
        let long = TableName::new(&"t".repeat(59)).unwrap();
        assert!(matches!(Tables::new(&long, true), Err(lock_core::Error::InvalidConfig { .. })));
    }

    #[test]
    fn values_are_hex_literals() {
        assert_eq!(hex(b"a'; DROP"), "X'61273b2044524f50'");
        assert_eq!(hex(b""), "X''");
    }
}
