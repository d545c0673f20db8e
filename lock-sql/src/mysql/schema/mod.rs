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
//! -- The lock table's and the semaphores' waiters (a semaphore's under its own key, see
//! -- `lock_key.rs`), oldest first (seq): one entry per waiting client, naming its doorbell
//! -- connection (see `doorbell.rs`), which lapses at `until` unless renewed.
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
//! -- Elections (every kind; see `election.rs`): per election, the leader's record — the fence
//! -- of the term that wrote it, who wrote it (the hold's identity), when, and its value.
//! CREATE TABLE IF NOT EXISTS distlock_locks_lead (
//!     name       VARBINARY(255) NOT NULL PRIMARY KEY,
//!     fence      BIGINT         NOT NULL,
//!     holder     VARBINARY(64)  NOT NULL,
//!     written_at DATETIME(6)    NOT NULL,
//!     value      LONGBLOB       NOT NULL) ENGINE=InnoDB;
//! ```

//!
//! The statements live by primitive: `mutex.rs` (the lock table, row locks, `GET_LOCK`),
//! `read_write.rs` (the row kind's read-write locks and the fence sequence), `semaphore.rs`.

mod mutex;
mod read_write;
mod semaphore;

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
    pub(crate) locks: String,
    rows: String,
    fence: String,
    queue: String,
    rw: String,
    sem: String,
    flush: String,
    pub(crate) lead: String,
    /// Lock table: a free lock goes to the oldest waiter (else to whoever asks first).
    fair: bool,
    /// The eight names, unquoted (validated identifiers).
    names: [String; 8],
}

/// The current time on the database clock, constant within a statement.
const NOW: &str = "UTC_TIMESTAMP(6)";

impl Tables {
    /// Moves the queue entry under `key` of a client's old doorbell bell `old` to its new bell
    /// `new` in place (a doorbell that reconnected has a new id). Where `new` has an entry
    /// already (another thread of the client queued under it first), the old one goes instead:
    /// a plain rename would fail on the duplicate key.
    fn rename_entry(&self, key: &str, old: u64, new: u64) -> String {
        let queue = &self.queue;
        format!(
            "UPDATE IGNORE {queue} SET waiter = {new} WHERE name = {key} AND waiter = {old}; \
             DELETE FROM {queue} WHERE name = {key} AND waiter = {old}; "
        )
    }

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
        let lead = table.derived("_lead", MAX_IDENTIFIER)?;
        Ok(Self {
            locks: format!("`{t}`"),
            rows: format!("`{}`", rows.as_str()),
            fence: format!("`{}`", fence.as_str()),
            queue: format!("`{}`", queue.as_str()),
            rw: format!("`{}`", rw.as_str()),
            sem: format!("`{}`", sem.as_str()),
            flush: format!("`{}`", flush.as_str()),
            lead: format!("`{}`", lead.as_str()),
            fair,
            names: [
                t.to_owned(),
                rows.as_str().to_owned(),
                fence.as_str().to_owned(),
                queue.as_str().to_owned(),
                rw.as_str().to_owned(),
                sem.as_str().to_owned(),
                flush.as_str().to_owned(),
                lead.as_str().to_owned(),
            ],
        })
    }

    /// How many rows [`existing`](Self::existing) lists when the schema is up to date.
    pub(crate) const COUNT: usize = 9;

    /// The `GET_LOCK` name (an SQL expression) that clients creating these tables in this
    /// database take in turn: short whatever the table's name (lock names have a length limit).
    pub(crate) fn schema_lock_key(&self) -> String {
        format!("CONCAT('distlock-schema:', CRC32(CONCAT(DATABASE(), '.', '{}')))", self.names[0])
    }

    /// Which of the tables (and the sequence) exist in the current database (sequences are
    /// listed as tables), and the lock table's newest column.
    pub(crate) fn existing(&self) -> String {
        let [locks, rows, fence, queue, rw, sem, flush, lead] = &self.names;
        format!(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() \
             AND table_name IN ('{locks}', '{rows}', '{fence}', '{queue}', '{rw}', '{sem}', '{flush}', '{lead}') \
             UNION ALL SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() \
             AND table_name = '{locks}' AND column_name = 'ring_until'"
        )
    }

    /// The statements that create what `existing` (the rows [`existing`](Self::existing)
    /// returned) lacks, and only that: `CREATE … IF NOT EXISTS` on a table that exists still
    /// waits for its metadata lock, which every open row-lock transaction holds, so a schema
    /// that gained a table (an upgrade) must not touch the others.
    pub(crate) fn ddl(&self, existing: &[String]) -> String {
        let Self { locks, rows, fence, queue, rw, sem, flush, lead, .. } = self;
        let [n_locks, n_rows, n_fence, n_queue, n_rw, n_sem, n_flush, n_lead] = &self.names;
        let has = |name: &str| existing.iter().any(|table| table == name);
        let statements = [
            (n_locks.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {locks} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
                 owner VARBINARY(64) NOT NULL, hold_count INT NOT NULL, fence BIGINT NOT NULL, \
                 expires_at DATETIME(6) NOT NULL, acquired_at DATETIME(6) NOT NULL, \
                 ring BIGINT UNSIGNED NULL, ring_until DATETIME(6) NULL) ENGINE=InnoDB"
            )),
            ("ring_until", format!(
                "ALTER TABLE {locks} ADD COLUMN IF NOT EXISTS ring BIGINT UNSIGNED NULL, \
                 ADD COLUMN IF NOT EXISTS ring_until DATETIME(6) NULL"
            )),
            (n_rows.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {rows} (name VARBINARY(255) NOT NULL PRIMARY KEY, \
                 holder BIGINT UNSIGNED NULL) ENGINE=InnoDB"
            )),
            (n_fence.as_str(), format!("CREATE SEQUENCE IF NOT EXISTS {fence}")),
            (n_queue.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {queue} (seq BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
                 name VARBINARY(255) NOT NULL, waiter BIGINT UNSIGNED NOT NULL, until DATETIME(6) NOT NULL, \
                 UNIQUE KEY name_waiter (name, waiter)) ENGINE=InnoDB"
            )),
            (n_rw.as_str(), format!("CREATE TABLE IF NOT EXISTS {rw} (name VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB")),
            (n_sem.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {sem} (name VARBINARY(255) NOT NULL, owner VARBINARY(64) NOT NULL, \
                 permits INT NOT NULL, fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, \
                 PRIMARY KEY (name, owner)) ENGINE=InnoDB"
            )),
            (n_flush.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {flush} (slot INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB"
            )),
            (n_lead.as_str(), format!(
                "CREATE TABLE IF NOT EXISTS {lead} (name VARBINARY(255) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL, \
                 holder VARBINARY(64) NOT NULL, written_at DATETIME(6) NOT NULL, value LONGBLOB NOT NULL) ENGINE=InnoDB"
            )),
        ];
        statements
            .into_iter()
            .filter(|(table, _)| !has(table))
            .map(|(_, statement)| statement)
            .collect::<Vec<_>>()
            .join("; ")
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
}

/// Reads the server's clock before a wait (see [`WAITED`]).
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
    fn an_upgrade_creates_only_what_is_missing() {
        let tables = Tables::new(&TableName::new("t").unwrap(), true).unwrap();
        let everything = tables.ddl(&[]);
        assert_eq!(everything.matches("CREATE").count(), 8, "{everything}");
        let mut existing: Vec<String> = tables.names.to_vec();
        existing.push("ring_until".into());
        assert_eq!(tables.ddl(&existing), "");
        existing.retain(|name| name != "t_lead");
        let upgrade = tables.ddl(&existing);
        assert!(
            upgrade.starts_with("CREATE TABLE IF NOT EXISTS `t_lead`") && !upgrade.contains(';'),
            "{upgrade}"
        );
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
