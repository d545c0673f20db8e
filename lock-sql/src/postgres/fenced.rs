//! [`PostgresFencedStore`]: a [`FencedStore`] in a PostgreSQL table, one upsert per write that
//! checks and raises the row's fence in the same statement.

use lock_core::{Error, FencedStore, FencingToken, Result};
use tokio_postgres::types::Type;

use super::PostgresBackend;
use crate::identifier::TableName;

/// A [`FencedStore`] in the table `table (key TEXT PRIMARY KEY, fence BIGINT, value BYTEA)`, on
/// the connections of a [`PostgresBackend`].
///
/// Each write is one statement (see [`write_sql`](Self::write_sql)), so the fence check and the
/// write are atomic on the server; a user's own table gets the same guard from a `fence`
/// column ([`add_fence_column_sql`](Self::add_fence_column_sql)) and the same `WHERE`.
#[derive(Debug, Clone)]
pub struct PostgresFencedStore {
    backend: PostgresBackend,
    table: TableName,
    write: String,
    read: String,
}

impl PostgresFencedStore {
    /// The store in `table` on `backend`'s server ([`ensure_table`](Self::ensure_table) creates
    /// it).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `table` is not a plain identifier.
    pub fn new(backend: PostgresBackend, table: &str) -> Result<Self> {
        let table = TableName::new(table)?;
        let quoted = table.double_quoted();
        let write = Self::write_sql(&quoted, "key", "value", "fence");
        let read = format!("SELECT fence, value FROM {quoted} WHERE key = $1");
        Ok(Self { backend, table, write, read })
    }

    /// Creates the table if it does not exist.
    ///
    /// # Errors
    /// As any statement.
    pub fn ensure_table(&self) -> Result<()> {
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, fence BIGINT NOT NULL, value BYTEA NOT NULL)",
            self.table.double_quoted()
        );
        let connection = self.backend.inner.pool.get()?;
        let ddl = ddl.as_str();
        let create = || {
            connection.run("create the fenced table", |client| async move { client.batch_execute(ddl).await })
        };
        // Two sessions creating the same table at once: the loser sees a unique violation on
        // the catalog (`IF NOT EXISTS` does not cover the race); the table exists either way.
        create().or_else(|_| create())
    }

    /// `ALTER TABLE … ADD COLUMN IF NOT EXISTS fence BIGINT NOT NULL DEFAULT 0`: the fence of a
    /// user's own table (0: below every token, so existing rows take the first write).
    pub fn add_fence_column_sql(table: &str, fence: &str) -> String {
        format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {fence} BIGINT NOT NULL DEFAULT 0")
    }

    /// The fenced upsert: `$1` the key, `$2` the value, `$3` the token. It returns the row's new
    /// fence when the write happened and no row when a higher token had written the key (a
    /// missing row is created: an upsert, not a refusal).
    pub fn write_sql(table: &str, key: &str, value: &str, fence: &str) -> String {
        format!(
            "INSERT INTO {table} AS fenced ({key}, {value}, {fence}) VALUES ($1, $2, $3) \
             ON CONFLICT ({key}) DO UPDATE SET {value} = EXCLUDED.{value}, {fence} = EXCLUDED.{fence} \
             WHERE fenced.{fence} <= EXCLUDED.{fence} RETURNING {fence}"
        )
    }
}

/// PostgreSQL's `BIGINT`: tokens above `i64::MAX` do not fit.
fn signed(key: &str, token: FencingToken) -> Result<i64> {
    i64::try_from(token.get())
        .map_err(|_| Error::invalid_config(format!("fencing token {token} of {key} exceeds BIGINT")))
}

impl FencedStore for PostgresFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        let fence = signed(key, token)?;
        let sql = self.write.as_str();
        // A refusal is told apart by the fence that refused it; fences only rise, so that fence
        // is still above the token, unless the row was deleted meanwhile: then once more.
        for _ in 0..2 {
            let connection = self.backend.inner.pool.get()?;
            let written = connection.run("fenced write", |client| async move {
                // Unnamed: safe behind a pooler (`pooler.rs`).
                client
                    .query_typed(sql, &[(&key, Type::TEXT), (&value, Type::BYTEA), (&fence, Type::INT8)])
                    .await
            })?;
            if !written.is_empty() {
                return Ok(());
            }
            lock_core::admit(key, self.read(key)?.map(|(highest, _)| highest), token)?;
        }
        Err(Error::Backend {
            backend: "postgres",
            source: format!("fenced write of {key}: refused, yet no higher fence was found").into(),
        })
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let connection = self.backend.inner.pool.get()?;
        let sql = self.read.as_str();
        let rows = connection.run("fenced read", |client| async move {
            client.query_typed(sql, &[(&key, Type::TEXT)]).await
        })?;
        let row = rows.into_iter().next();
        // A table made before, with other column types, is an error, not a panic.
        row.map(|row| {
            let fence: i64 = row.try_get(0)?;
            Ok((FencingToken::new(fence.unsigned_abs()), row.try_get(1)?))
        })
        .transpose()
        .map_err(|error: tokio_postgres::Error| Error::Backend {
            backend: "postgres",
            source: format!("fenced read of {key}: the table's columns: {error}").into(),
        })
    }
}
