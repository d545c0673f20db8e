//! The tables and statements, built once per backend from the configured table name.
//!
//! ```sql
//! -- The lock table (kind Table): one row per name ever locked. A release marks the row free
//! -- (expires_at = -infinity) instead of deleting it, so the fence never restarts.
//! CREATE TABLE IF NOT EXISTS distlock_locks (
//!     name        text COLLATE "C" PRIMARY KEY,  -- byte-exact: 'Order' <> 'order', 'a' <> 'a '
//!     owner       text NOT NULL,
//!     hold_count  integer NOT NULL,
//!     fence       bigint NOT NULL,
//!     expires_at  timestamptz NOT NULL,
//!     acquired_at timestamptz NOT NULL,
//!     -- The clients waiting for the name, oldest first: `<until ms>:<LISTEN channel>` each
//!     -- (see `waiter_queue.rs`). A release NOTIFYs the oldest only.
//!     waiters     text[] NOT NULL DEFAULT '{}');
//! -- The row-lock kind's rows: one per name, inserted before its first lock.
//! CREATE TABLE IF NOT EXISTS distlock_locks_rows (name text COLLATE "C" PRIMARY KEY);
//! -- Fencing tokens of the row and advisory kinds. A sequence is never rolled back: a holder
//! -- whose connection is killed cannot hand its token to the next holder. It is not durable by
//! -- itself either (see `DURABLE`): each grant commits a WAL write after taking its token.
//! CREATE SEQUENCE IF NOT EXISTS distlock_locks_fence;
//! -- Semaphores (every kind): one row per name, with the count its holders use and their
//! -- permits, `<expires, ms since the epoch>:<owner>` each (see `semaphore.rs`).
//! CREATE TABLE IF NOT EXISTS distlock_locks_sem (
//!     name    text COLLATE "C" PRIMARY KEY,
//!     permits integer NOT NULL,
//!     fence   bigint NOT NULL,
//!     holders text[] NOT NULL);
//! -- Read-write locks of the row kind: three rows per name (the lock, a gate, the writers'
//! -- turn; see `row_read_write.rs`), inserted before the name's first lock.
//! CREATE TABLE IF NOT EXISTS distlock_locks_rw (
//!     name text COLLATE "C" NOT NULL,
//!     part smallint NOT NULL,
//!     PRIMARY KEY (name, part));
//! -- Elections (every kind; see `election.rs`): per election, the leader's record — the
//! -- fence of the term that wrote it, who wrote it (the hold's identity) and its value.
//! CREATE TABLE IF NOT EXISTS distlock_locks_lead (
//!     name   text COLLATE "C" PRIMARY KEY,
//!     fence  bigint NOT NULL,
//!     holder text NOT NULL,
//!     value  bytea NOT NULL);
//! ```
//!
//! Read-write locks of the advisory kind use advisory keys only, no table.

use lock_core::{Access, Result};

use super::election::ElectionStatements;
use super::read_write::mode_suffix;
use super::row_read_write::RowReadWriteStatements;
use super::waiter_queue::{contains, entry, head, noted, without};
use crate::identifier::TableName;

/// PostgreSQL's identifier limit (`NAMEDATALEN - 1`): a longer name is silently truncated.
const MAX_IDENTIFIER: usize = 63;

/// The statements of one backend.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) ddl: String,
    // Lock table.
    pub(crate) acquire: String,
    /// A waiter's attempt: takes the lock, or queues the waiter (renewing its place) and
    /// returns the holder's remaining lease.
    pub(crate) acquire_or_queue: String,
    /// A waiter that stops waiting leaves the queue, and passes a wake-up it may have taken on
    /// to the next waiter.
    pub(crate) leave_queue: String,
    pub(crate) extend: String,
    pub(crate) extend_many: String,
    pub(crate) release: String,
    pub(crate) remaining: String,
    /// A guarded write's check (`guarded.rs`): $1 name, $2 owner; a row while the owner's lease
    /// runs, locked until the write's transaction ends.
    pub(crate) lock_if_held: String,
    pub(crate) mark_free: String,
    /// Deletes the rows of names with a prefix — lock table, row table, semaphore and
    /// read-write rows (`distlock compare`'s and `bench`'s clean-up on a user's server);
    /// returns how many.
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) delete_prefixed: String,
    // Row locks. Each locking statement returns (fence, µs waited in the server's queue) and
    // sets the session's idle limit in the same statement (see `session.rs`).
    pub(crate) insert_row: String,
    pub(crate) lock_row_nowait: String,
    pub(crate) lock_row_wait: String,
    pub(crate) row_holder_pid: String,
    /// Run on another connection after a row-kind grant: flushes the WAL past the grant's
    /// `nextval` (which the holding transaction, open until the release, cannot).
    pub(crate) make_durable: String,
    // Advisory locks.
    pub(crate) try_advisory: String,
    pub(crate) wait_advisory: String,
    /// The setting that limits an advisory holder's idle session: `idle_session_timeout`, or on
    /// servers before PostgreSQL 14, which lack it, a placeholder of no effect.
    pub(crate) idle_session_setting: &'static str,
    /// Read-write locks (advisory kind).
    pub(crate) read_write: ReadWriteStatements,
    /// Semaphores (every kind).
    pub(crate) permits: PermitStatements,
    /// Read-write locks (row kind).
    pub(crate) row_read_write: RowReadWriteStatements,
    /// Elections (every kind).
    pub(crate) election: ElectionStatements,
}

/// The advisory kind's read-write statements, indexed by mode (read, write): each returns
/// (fence, µs waited) when granted, no row when not, and sets the idle limit when granted.
#[derive(Debug)]
pub(crate) struct ReadWriteStatements {
    /// $1, $2 the key's halves, $3 the idle limit in ms.
    pub(crate) try_lock: [String; 2],
    /// As `try_lock`, and $4 the `lock_timeout` in ms, for this statement only.
    pub(crate) wait_lock: [String; 2],
}

/// The semaphore statements (`semaphore.rs`).
#[derive(Debug)]
pub(crate) struct PermitStatements {
    /// An acquisition's first attempt: waits for the row lock, decides on the latest row.
    pub(crate) acquire: String,
    /// A waiter's re-check: as `acquire`, but a look that finds no permit free refuses without
    /// locking or writing the row.
    pub(crate) recheck: String,
    pub(crate) extend: String,
    /// A renewal batch's permits in one statement.
    pub(crate) extend_many: String,
    pub(crate) release: String,
}

impl Tables {
    /// `fair`: a free lock goes to the oldest waiter (others, and new callers, queue behind
    /// it); otherwise to whoever asks first.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](lock_core::Error::InvalidConfig) when a derived name (`_rows`,
    /// `_fence`) would be over PostgreSQL's 63-byte identifier limit.
    pub(crate) fn new(table: &TableName, fair: bool) -> Result<Self> {
        let t = table.double_quoted();
        let rows = table.derived("_rows", MAX_IDENTIFIER)?.double_quoted();
        let fence = table.derived("_fence", MAX_IDENTIFIER)?.double_quoted();
        let sem = table.derived("_sem", MAX_IDENTIFIER)?.double_quoted();
        let rw = table.derived("_rw", MAX_IDENTIFIER)?.double_quoted();
        let lead = table.derived("_lead", MAX_IDENTIFIER)?;
        // $1 name, $2 owner, $3 lease in ms. One clock reading per statement: the new row's
        // `acquired_at` (EXCLUDED.acquired_at) is "now" in the conflict branch.
        let now = "EXCLUDED.acquired_at";
        let same_owner_valid = "l.owner = EXCLUDED.owner AND l.expires_at >= EXCLUDED.acquired_at";
        let expired = "l.expires_at < EXCLUDED.acquired_at";
        // Fair: a caller outside the queue takes a free lock only when nobody waits; a waiter
        // ($4 its channel) only at the head of the queue. Re-entry never waits.
        let (free_for_caller, free_for_waiter) = if fair {
            (
                format!("{expired} AND {} IS NULL", head("l.waiters", now)),
                format!("{expired} AND coalesce({}, $4) = $4", head("l.waiters", now)),
            )
        } else {
            (expired.to_owned(), expired.to_owned())
        };
        let waiter_takes = format!("({same_owner_valid}) OR ({free_for_waiter})");
        // `SELECT`s a notification of `r`'s queue head (`$1` the name) where `condition` holds
        // and someone waits.
        let wake_head = |condition: &str| {
            format!(
                "SELECT pg_notify(x.h, $1) FROM r, LATERAL (SELECT {} AS h) AS x \
                 WHERE x.h IS NOT NULL AND {condition}",
                head("r.waiters", "clock_timestamp()")
            )
        };
        Ok(Self {
            ddl: format!(
                "CREATE TABLE IF NOT EXISTS {t} (name text COLLATE \"C\" PRIMARY KEY, owner text NOT NULL, \
                 hold_count integer NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL, \
                 acquired_at timestamptz NOT NULL, waiters text[] NOT NULL DEFAULT '{{}}'); \
                 DO $distlock$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_attribute \
                   WHERE attrelid = '{t}'::regclass AND attname = 'waiters' AND NOT attisdropped) \
                 THEN ALTER TABLE {t} ADD COLUMN IF NOT EXISTS waiters text[] NOT NULL DEFAULT '{{}}'; \
                 END IF; END $distlock$; \
                 CREATE TABLE IF NOT EXISTS {rows} (name text COLLATE \"C\" PRIMARY KEY); \
                 CREATE SEQUENCE IF NOT EXISTS {fence}; \
                 CREATE TABLE IF NOT EXISTS {sem} (name text COLLATE \"C\" PRIMARY KEY, \
                 permits integer NOT NULL, fence bigint NOT NULL, holders text[] NOT NULL); \
                 CREATE TABLE IF NOT EXISTS {rw} (name text COLLATE \"C\" NOT NULL, part smallint NOT NULL, \
                 PRIMARY KEY (name, part)); \
                 CREATE TABLE IF NOT EXISTS {} (name text COLLATE \"C\" PRIMARY KEY, fence bigint NOT NULL, \
                 holder text NOT NULL, value bytea NOT NULL);",
                lead.double_quoted()
            ),
            acquire: format!(
                "WITH now AS (SELECT clock_timestamp() AS t) \
                 INSERT INTO {t} AS l (name, owner, hold_count, fence, expires_at, acquired_at) \
                 SELECT $1, $2, 1, 1, now.t + $3 * interval '1 millisecond', now.t FROM now \
                 ON CONFLICT (name) DO UPDATE SET \
                   hold_count = CASE WHEN {same_owner_valid} THEN l.hold_count + 1 ELSE 1 END, \
                   fence = CASE WHEN {same_owner_valid} THEN l.fence ELSE l.fence + 1 END, \
                   expires_at = CASE WHEN {same_owner_valid} \
                     THEN GREATEST(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END, \
                   acquired_at = CASE WHEN {same_owner_valid} THEN l.acquired_at ELSE EXCLUDED.acquired_at END, \
                   owner = EXCLUDED.owner \
                 WHERE ({same_owner_valid}) OR ({free_for_caller}) \
                 RETURNING fence"
            ),
            // $4 the waiter's channel, $5 how long its queue entry lives in ms, $6 whether the
            // client has other threads waiting for the name (then it stays queued, at the
            // tail). Always updates the row (which a waiter's queue entry needs), so it returns
            // a row whether or not it took the lock: (fence, taken, holder's remaining ms); the
            // decision is computed once (`d`). Taken: the row is ours and valid (an own lapsed
            // lease the queue kept us from retaking is not).
            acquire_or_queue: format!(
                "WITH now AS (SELECT clock_timestamp() AS t) \
                 INSERT INTO {t} AS l (name, owner, hold_count, fence, expires_at, acquired_at, waiters) \
                 SELECT $1, $2, 1, 1, now.t + $3 * interval '1 millisecond', now.t, \
                   CASE WHEN $6 THEN ARRAY[{new_entry}] ELSE '{{}}'::text[] END FROM now \
                 ON CONFLICT (name) DO UPDATE SET \
                   (hold_count, fence, expires_at, acquired_at, owner, waiters) = (SELECT \
                     CASE WHEN d.reenters THEN l.hold_count + 1 WHEN d.takes THEN 1 ELSE l.hold_count END, \
                     CASE WHEN d.takes AND NOT d.reenters THEN l.fence + 1 ELSE l.fence END, \
                     CASE WHEN d.reenters THEN GREATEST(l.expires_at, EXCLUDED.expires_at) \
                       WHEN d.takes THEN EXCLUDED.expires_at ELSE l.expires_at END, \
                     CASE WHEN d.takes AND NOT d.reenters THEN EXCLUDED.acquired_at ELSE l.acquired_at END, \
                     CASE WHEN d.takes THEN EXCLUDED.owner ELSE l.owner END, \
                     CASE WHEN NOT d.takes THEN {queued} \
                       WHEN $6 THEN {left} || ARRAY[{requeued}] ELSE {left} END \
                   FROM (SELECT {same_owner_valid} AS reenters, {waiter_takes} AS takes) AS d) \
                 RETURNING fence, owner = $2 AND expires_at >= clock_timestamp(), \
                   CASE WHEN expires_at > clock_timestamp() \
                     THEN ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint ELSE 0 END",
                new_entry = entry("now.t", "$4", "$5"),
                queued = noted("l.waiters", now, "$4", "$5"),
                left = without("l.waiters", now, "$4"),
                requeued = entry(now, "$4", "$5"),
            ),
            // $1 name, $2 the waiter's channel. Notifies the new head when the lock is free: the
            // leaving waiter may have been notified of that release and will not take it.
            leave_queue: format!(
                "WITH r AS (UPDATE {t} SET waiters = {left} \
                   WHERE name = $1 AND {mine} RETURNING expires_at, waiters) \
                 {wake}",
                left = without("waiters", "clock_timestamp()", "$2"),
                mine = contains("waiters", "$2"),
                wake = wake_head("r.expires_at < clock_timestamp()"),
            ),
            extend: format!(
                "UPDATE {t} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE name = $1 AND owner = $2 AND expires_at >= clock_timestamp() RETURNING 1"
            ),
            extend_many: format!(
                "UPDATE {t} AS l SET expires_at = clock_timestamp() + v.ms * interval '1 millisecond' \
                 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(name, owner, ms) \
                 WHERE l.name = v.name AND l.owner = v.owner AND l.expires_at >= clock_timestamp() \
                 RETURNING l.name, l.owner"
            ),
            // The release itself wakes the queue's head, in the same statement, and only when
            // someone waits: a transaction that notifies takes a database-wide lock at commit,
            // which would serialize the releases of independent names.
            release: format!(
                "WITH r AS (UPDATE {t} SET hold_count = hold_count - 1, \
                   expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE '-infinity' END \
                   WHERE name = $1 AND owner = $2 AND expires_at >= clock_timestamp() \
                   RETURNING hold_count, waiters) \
                 SELECT (SELECT count(*) FROM r), \
                   ({wake}) IS NULL",
                wake = wake_head("r.hold_count = 0"),
            ),
            remaining: format!(
                "SELECT GREATEST(1, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint \
                 FROM {t} WHERE name = $1 AND expires_at > clock_timestamp()"
            ),
            lock_if_held: format!(
                "SELECT 1 FROM {t} WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp() FOR UPDATE"
            ),
            mark_free: format!(
                "WITH r AS (UPDATE {t} SET expires_at = '-infinity' WHERE name = $1 RETURNING waiters) \
                 {wake}",
                wake = wake_head("true"),
            ),
            delete_prefixed: format!(
                "WITH a AS (DELETE FROM {t} WHERE starts_with(name, $1) RETURNING 1), \
                      b AS (DELETE FROM {rows} WHERE starts_with(name, $1) RETURNING 1), \
                      c AS (DELETE FROM {sem} WHERE starts_with(name, $1) RETURNING 1), \
                      d AS (DELETE FROM {rw} WHERE starts_with(name, $1) RETURNING 1) \
                 SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b) + (SELECT count(*) FROM c) \
                   + (SELECT count(*) FROM d)"
            ),
            // Cannot wait on a held row: a conflicting committed row means "exists".
            insert_row: format!("INSERT INTO {rows} (name) VALUES ($1) ON CONFLICT DO NOTHING"),
            // $1 name, $2 the idle limit in ms (local to the holding transaction: COMMIT undoes
            // it). The select list runs only for a locked row.
            lock_row_nowait: format!(
                "WITH l AS (SELECT name FROM {rows} WHERE name = $1 FOR UPDATE NOWAIT) \
                 SELECT nextval('{fence}'), 0::bigint, \
                   set_config('idle_in_transaction_session_timeout', $2, true) FROM l"
            ),
            // $3 = lock_timeout in ms, local to the transaction. `c.t0` is read before the wait,
            // the select list after the grant: their difference is the time spent queued.
            lock_row_wait: format!(
                "WITH c AS (SELECT set_config('lock_timeout', $3, true) AS t, clock_timestamp() AS t0), \
                 l AS (SELECT r.name, c.t0 FROM {rows} r, c WHERE r.name = $1 FOR UPDATE OF r) \
                 SELECT nextval('{fence}'), {WAITED}, \
                   set_config('idle_in_transaction_session_timeout', $2, true) FROM l"
            ),
            // The transaction that holds a row lock is the one in the row's xmax.
            row_holder_pid: format!(
                "SELECT l.pid FROM {rows} r JOIN pg_locks l \
                 ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.granted \
                 WHERE r.name = $1"
            ),
            make_durable: format!("SELECT {DURABLE}"),
            // $1 key, $2 the idle limit in ms (for the session: the release resets it). No row
            // when busy; the limit is set only when granted.
            try_advisory: format!(
                "WITH g AS (SELECT pg_try_advisory_lock($1) AS granted) \
                 SELECT nextval('{fence}'), 0::bigint, set_config('{IDLE_SESSION}', $2, false), {DURABLE} \
                 FROM g WHERE g.granted"
            ),
            // $3 = lock_timeout in ms, for this statement only.
            wait_advisory: format!(
                "WITH c AS (SELECT set_config('lock_timeout', $3, true) AS t, clock_timestamp() AS t0) \
                 SELECT nextval('{fence}'), {WAITED}, set_config('{IDLE_SESSION}', $2, false), {DURABLE} \
                 FROM c, LATERAL (SELECT pg_advisory_lock($1) WHERE c.t IS NOT NULL) AS g"
            ),
            idle_session_setting: IDLE_SESSION,
            read_write: ReadWriteStatements {
                try_lock: [Access::Read, Access::Write].map(|access| {
                    format!(
                        "WITH g AS (SELECT pg_try_advisory_lock{mode}($1, $2) AS granted) \
                         SELECT nextval('{fence}'), 0::bigint, set_config('{IDLE_SESSION}', $3, false), {DURABLE} \
                         FROM g WHERE g.granted",
                        mode = mode_suffix(access)
                    )
                }),
                wait_lock: [Access::Read, Access::Write].map(|access| {
                    format!(
                        "WITH c AS (SELECT set_config('lock_timeout', $4, true) AS t, clock_timestamp() AS t0) \
                         SELECT nextval('{fence}'), {WAITED}, set_config('{IDLE_SESSION}', $3, false), {DURABLE} \
                         FROM c, LATERAL (SELECT pg_advisory_lock{mode}($1, $2) WHERE c.t IS NOT NULL) AS g",
                        mode = mode_suffix(access)
                    )
                }),
            },
            permits: permit_statements(&sem),
            row_read_write: RowReadWriteStatements::new(&rw, &fence),
            election: ElectionStatements::new(&t, &rows, &lead),
        })
    }

    /// For a server before PostgreSQL 14 (no `idle_session_timeout`): advisory holds get no
    /// server-side idle limit — a holder cut off keeps its lock until TCP notices — and the
    /// statements set a custom placeholder instead, so that they work unchanged.
    pub(crate) fn without_idle_session_timeout(&mut self) {
        const PLACEHOLDER: &str = "distlock.idle_session_timeout";
        self.try_advisory = self.try_advisory.replace(IDLE_SESSION, PLACEHOLDER);
        self.wait_advisory = self.wait_advisory.replace(IDLE_SESSION, PLACEHOLDER);
        self.idle_session_setting = PLACEHOLDER;
        for sql in self.read_write.try_lock.iter_mut().chain(self.read_write.wait_lock.iter_mut()) {
            *sql = sql.replace(IDLE_SESSION, PLACEHOLDER);
        }
    }
}

/// The semaphore statements on table `sem` (quoted). A permit is an entry
/// `<expires, ms since the epoch>:<owner>` in the name's row; every statement works on that one
/// row, so the row lock orders them, and the conflict branch sees the latest committed row.
fn permit_statements(sem: &str) -> PermitStatements {
    let now_ms = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    let expires = "split_part(e, ':', 1)::bigint";
    let owner = "split_part(e, ':', 2)";
    let mine_live =
        format!("EXISTS (SELECT 1 FROM unnest(holders) AS e WHERE {owner} = $2 AND {expires} >= {now_ms})");
    let holder = format!("({now_ms} + $3)::text || ':' || $2");
    let returned = format!("fence, EXISTS (SELECT 1 FROM unnest(holders) AS e WHERE {owner} = $2), permits, cardinality(holders)");
    // The acquisition's upsert of `source` (the new row's values); the conflict branch prunes
    // expired permits and adds the new one when one is free.
    let upsert = |source: &str| {
        format!(
            "INSERT INTO {sem} AS s (name, permits, fence, holders) {source} \
             ON CONFLICT (name) DO UPDATE SET (permits, fence, holders) = (SELECT \
               CASE WHEN d.takes THEN EXCLUDED.permits ELSE s.permits END, \
               CASE WHEN d.takes THEN s.fence + 1 ELSE s.fence END, \
               CASE WHEN d.takes THEN d.live || EXCLUDED.holders ELSE d.live END \
             FROM (SELECT l.live, cardinality(l.live) = 0 \
                 OR (s.permits = EXCLUDED.permits AND cardinality(l.live) < EXCLUDED.permits) AS takes \
               FROM (SELECT coalesce(array_agg(e), '{{}}') AS live FROM unnest(s.holders) AS e \
                 WHERE {expires} >= {now_ms}) AS l) AS d)",
        )
    };
    PermitStatements {
        // $1 name, $2 owner, $3 lease in ms, $4 permits. Always writes the row (expired
        // permits pruned); returns (fence, granted, the holders' count, how many hold).
        // Granted: nobody holds a permit (a new count may be set), or the count is the same and
        // one is free.
        acquire: format!("{upsert} RETURNING {returned}", upsert = upsert(&format!("VALUES ($1, $4, 1, ARRAY[{holder}])"))),
        // The same, after a look at the row (`p`, the statement's snapshot, no lock): when it
        // shows no permit free for this count, the upsert is skipped, and the refusal costs no
        // row lock and no write, so waiters on a full semaphore cost the server reads. A look
        // that missed a release only delays the waiter to its next poll. (Not for the first
        // attempt: there, waiting for a releaser's row lock hands its permit over sooner.)
        recheck: format!(
            "WITH p AS (SELECT s.permits, (SELECT count(*) FROM unnest(s.holders) AS e \
                 WHERE {expires} >= {now_ms})::integer AS live FROM {sem} AS s WHERE s.name = $1), \
             u AS ({upsert} RETURNING {returned}) \
             SELECT * FROM u \
             UNION ALL SELECT 0::bigint, false, p.permits, p.live FROM p WHERE NOT EXISTS (SELECT 1 FROM u)",
            upsert = upsert(&format!(
                "SELECT $1, $4, 1, ARRAY[{holder}] \
                 WHERE NOT EXISTS (SELECT 1 FROM p WHERE p.live > 0 AND (p.permits <> $4 OR p.live >= $4))"
            )),
        ),
        // $1 name, $2 owner, $3 lease in ms.
        extend: format!(
            "UPDATE {sem} SET holders = ARRAY(SELECT CASE WHEN {owner} = $2 \
               THEN ({now_ms} + $3)::text || ':' || $2 ELSE e END FROM unnest(holders) AS e) \
             WHERE name = $1 AND {mine_live} RETURNING 1"
        ),
        // $1 names, $2 owners, $3 leases in ms (arrays, one item per permit). Locks the names'
        // rows in name order (two batches never wait for each other in a cycle), extends each
        // live permit of the batch, and returns (name, owner) of each permit held after it.
        extend_many: format!(
            "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(name, owner, ms)),              locked AS (SELECT name FROM {sem} WHERE name IN (SELECT name FROM v) ORDER BY name FOR UPDATE),              u AS (UPDATE {sem} AS s SET holders = ARRAY(SELECT CASE WHEN v.owner IS NOT NULL AND {expires} >= {now_ms}                  THEN ({now_ms} + v.ms)::text || ':' || v.owner ELSE e END                FROM unnest(s.holders) AS e LEFT JOIN v ON v.name = s.name AND v.owner = {owner})              WHERE s.name IN (SELECT name FROM locked) RETURNING s.name, s.holders)              SELECT u.name, {owner} FROM u, unnest(u.holders) AS e              WHERE EXISTS (SELECT 1 FROM v WHERE v.name = u.name AND v.owner = {owner}) AND {expires} >= {now_ms}"
        ),
        // $1 name, $2 owner.
        release: format!(
            "UPDATE {sem} SET holders = ARRAY(SELECT e FROM unnest(holders) AS e WHERE {owner} <> $2) \
             WHERE name = $1 AND {mine_live} RETURNING 1"
        ),
    }
}

/// Select-list items that make the statement's transaction commit durably: a transactional WAL
/// record (it gives the transaction an xid, so its commit is flushed before the reply) and
/// `synchronous_commit` raised from `off` for this transaction only.
///
/// Why: `nextval` WAL-logs a sequence only every 32 values, and a transaction without an xid
/// (one that only called `nextval`) commits without flushing — after a crash (`kill -9`, an
/// immediate shutdown) the sequence restarts below tokens already handed out. A flushed commit
/// after the `nextval` flushes every WAL record before it, the sequence's included (also the one
/// another session wrote for the values it pre-logged). `pg_logical_emit_message` is open to
/// every role and needs no `wal_level = logical`; it costs one fsync per grant (group commit
/// shares it among concurrent grants).
pub(crate) const DURABLE: &str = "pg_logical_emit_message(true, 'distlock', 'fence'), \
    set_config('synchronous_commit', CASE current_setting('synchronous_commit') \
    WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true)";

/// The advisory kind's server-side limit (PostgreSQL 14+).
const IDLE_SESSION: &str = "idle_session_timeout";

/// Microseconds since `t0` (read before the wait), rounded down.
const WAITED: &str = "floor(extract(epoch FROM clock_timestamp() - t0) * 1000000)::bigint";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_fit_or_the_table_name_is_refused() {
        let longest = TableName::new(&"t".repeat(57)).unwrap();
        assert!(Tables::new(&longest, true).is_ok());
        // 58 to 63 bytes: accepted as a name, but `<name>_fence` would be truncated.
        for length in 58..=63 {
            let table = TableName::new(&"t".repeat(length)).unwrap();
            assert!(
                matches!(Tables::new(&table, true), Err(lock_core::Error::InvalidConfig { .. })),
                "{length}"
            );
        }
    }
}
