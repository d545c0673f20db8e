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
//!     acquired_at timestamptz NOT NULL);
//! -- The row-lock kind's rows: one per name, inserted before its first lock.
//! CREATE TABLE IF NOT EXISTS distlock_locks_rows (name text COLLATE "C" PRIMARY KEY);
//! -- Fencing tokens of the row and advisory kinds. A sequence is never rolled back: a holder
//! -- whose connection is killed cannot hand its token to the next holder.
//! CREATE SEQUENCE IF NOT EXISTS distlock_locks_fence;
//! ```

use crate::identifier::TableName;

/// The statements of one backend.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) ddl: String,
    pub(crate) channel: String,
    // Lock table.
    pub(crate) acquire: String,
    pub(crate) extend: String,
    pub(crate) extend_many: String,
    pub(crate) release: String,
    pub(crate) remaining: String,
    pub(crate) mark_free: String,
    /// Deletes the lock-table and row-table rows of names with a prefix (`distlock compare`'s
    /// clean-up on a user's server); returns how many.
    pub(crate) delete_prefixed: String,
    // Row locks.
    pub(crate) insert_row: String,
    pub(crate) lock_row_nowait: String,
    pub(crate) lock_row_wait: String,
    pub(crate) row_holder_pid: String,
    // Advisory locks.
    pub(crate) try_advisory: String,
    pub(crate) wait_advisory: String,
}

impl Tables {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.double_quoted();
        let rows = TableName::new(&format!("{}_rows", table.as_str()))
            .map_or_else(|_| format!("\"{}_r\"", table.as_str()), |rows| rows.double_quoted());
        let fence = format!("\"{}_fence\"", table.as_str());
        let channel = format!("distlock_{}", table.as_str());
        // $1 name, $2 owner, $3 lease in ms. One clock reading per statement.
        let same_owner_valid = "l.owner = EXCLUDED.owner AND l.expires_at >= EXCLUDED.acquired_at";
        Self {
            ddl: format!(
                "CREATE TABLE IF NOT EXISTS {t} (name text COLLATE \"C\" PRIMARY KEY, owner text NOT NULL, \
                 hold_count integer NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL, \
                 acquired_at timestamptz NOT NULL); \
                 CREATE TABLE IF NOT EXISTS {rows} (name text COLLATE \"C\" PRIMARY KEY); \
                 CREATE SEQUENCE IF NOT EXISTS {fence};"
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
                 WHERE l.expires_at < EXCLUDED.acquired_at OR l.owner = EXCLUDED.owner \
                 RETURNING fence"
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
            // The release itself announces a free lock ($3 = the channel), in the same statement.
            release: format!(
                "WITH r AS (UPDATE {t} SET hold_count = hold_count - 1, \
                   expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE '-infinity' END \
                   WHERE name = $1 AND owner = $2 AND expires_at >= clock_timestamp() RETURNING hold_count) \
                 SELECT (SELECT count(*) FROM r), \
                   (SELECT pg_notify($3, $1) FROM r WHERE hold_count = 0) IS NULL"
            ),
            remaining: format!(
                "SELECT GREATEST(1, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint \
                 FROM {t} WHERE name = $1 AND expires_at > clock_timestamp()"
            ),
            mark_free: format!("UPDATE {t} SET expires_at = '-infinity' WHERE name = $1"),
            delete_prefixed: format!(
                "WITH a AS (DELETE FROM {t} WHERE starts_with(name, $1) RETURNING 1), \
                      b AS (DELETE FROM {rows} WHERE starts_with(name, $1) RETURNING 1) \
                 SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)"
            ),
            // Cannot wait on a held row: a conflicting committed row means "exists".
            insert_row: format!("INSERT INTO {rows} (name) VALUES ($1) ON CONFLICT DO NOTHING"),
            lock_row_nowait: format!(
                "WITH l AS (SELECT name FROM {rows} WHERE name = $1 FOR UPDATE NOWAIT) \
                 SELECT nextval('{fence}') FROM l"
            ),
            // $2 = lock_timeout in ms, local to the transaction.
            lock_row_wait: format!(
                "WITH c AS (SELECT set_config('lock_timeout', $2, true)), \
                 l AS (SELECT name FROM {rows}, c WHERE name = $1 FOR UPDATE OF {rows}) \
                 SELECT nextval('{fence}') FROM l"
            ),
            // The transaction that holds a row lock is the one in the row's xmax.
            row_holder_pid: format!(
                "SELECT l.pid FROM {rows} r JOIN pg_locks l \
                 ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.granted \
                 WHERE r.name = $1"
            ),
            // $1 key. NULL when busy, else the fence.
            try_advisory: format!(
                "SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('{fence}') END"
            ),
            // $2 = lock_timeout in ms, for this statement only.
            wait_advisory: format!(
                "WITH c AS (SELECT set_config('lock_timeout', $2, true) AS t) \
                 SELECT nextval('{fence}') FROM c, LATERAL (SELECT pg_advisory_lock($1) WHERE c.t IS NOT NULL) AS g"
            ),
            channel,
        }
    }
}
