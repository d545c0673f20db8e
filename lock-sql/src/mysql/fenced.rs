//! [`MySqlFencedStore`]: a [`FencedStore`] in a MySQL or MariaDB table, one upsert per write that
//! checks and raises the row's fence in the same statement.
//!
//! MySQL reports *changed* rows, not matched ones, unless the client sets `CLIENT_FOUND_ROWS`:
//! a repeated identical write changes nothing and would read as refused. So the statement
//! records the fence it found in a session variable, and that decides.

use lock_core::{Error, FencedStore, FencingToken, Result};

use super::schema::hex;
use super::MySqlBackend;
use crate::identifier::TableName;

/// A [`FencedStore`] in the table `table (k VARBINARY(255) PRIMARY KEY, fence BIGINT UNSIGNED,
/// value LONGBLOB)`, on the connections of a [`MySqlBackend`].
#[derive(Debug, Clone)]
pub struct MySqlFencedStore {
    backend: MySqlBackend,
    table: TableName,
}

/// The longest key (the primary key's `VARBINARY(255)`).
const MAX_KEY: usize = 255;

impl MySqlFencedStore {
    /// The store in `table` on `backend`'s server ([`ensure_table`](Self::ensure_table) creates
    /// it).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `table` is not a plain identifier.
    pub fn new(backend: MySqlBackend, table: &str) -> Result<Self> {
        Ok(Self { backend, table: TableName::new(table)? })
    }

    /// Creates the table if it does not exist.
    ///
    /// # Errors
    /// As any statement.
    pub fn ensure_table(&self) -> Result<()> {
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS `{}` (k VARBINARY({MAX_KEY}) PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, \
             value LONGBLOB NOT NULL) ENGINE=InnoDB",
            self.table.as_str()
        );
        self.backend.inner.pool.get()?.run("create the fenced table", &ddl).map(drop)
    }

    /// `ALTER TABLE … ADD COLUMN IF NOT EXISTS fence BIGINT UNSIGNED NOT NULL DEFAULT 0`
    /// (MariaDB; MySQL has no `IF NOT EXISTS` here): the fence of a user's own table.
    pub fn add_fence_column_sql(table: &str, fence: &str) -> String {
        format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {fence} BIGINT UNSIGNED NOT NULL DEFAULT 0")
    }

    /// The fenced upsert of `key`, `value` and `token` (hex and decimal literals), then the
    /// fence it found: NULL for a new row, else the row's fence before the write, which wrote
    /// only if it was not above the token. Assignments run left to right, so `value` is
    /// decided on the old fence before `fence` is raised.
    fn write_sql(&self, key: &[u8], token: FencingToken, value: &[u8]) -> String {
        let (table, key, value) = (self.table.as_str(), hex(key), hex(value));
        format!(
            "SET @distlock_fence_found = NULL; \
             INSERT INTO `{table}` (k, fence, value) VALUES ({key}, {token}, {value}) \
             ON DUPLICATE KEY UPDATE \
             value = IF(fence <= VALUES(fence), VALUES(value), value), \
             fence = IF((@distlock_fence_found := fence) <= VALUES(fence), VALUES(fence), fence); \
             SELECT @distlock_fence_found"
        )
    }
}

impl FencedStore for MySqlFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        if key.len() > MAX_KEY {
            return Err(Error::invalid_config(format!(
                "fenced key of {} bytes: at most {MAX_KEY}",
                key.len()
            )));
        }
        let sql = self.write_sql(key.as_bytes(), token, value);
        let found: Option<u64> = self.backend.inner.pool.get()?.run("fenced write", &sql)?.last_value();
        lock_core::admit(key, found.map(FencingToken::new), token)
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let sql =
            format!("SELECT fence, value FROM `{}` WHERE k = {}", self.table.as_str(), hex(key.as_bytes()));
        let results = self.backend.inner.pool.get()?.run("fenced read", &sql)?;
        // A table made before, with other column types, is an error, not a panic.
        let Some(row) = results.first_row() else { return Ok(None) };
        let fence: Option<u64> = row.get_opt(0).and_then(Result::ok);
        let value: Option<Vec<u8>> = row.get_opt(1).and_then(Result::ok);
        match (fence, value) {
            (Some(fence), Some(value)) => Ok(Some((FencingToken::new(fence), value))),
            _ => Err(Error::Backend {
                backend: "mysql",
                source: format!("fenced read of {key}: the table's columns are not (BIGINT UNSIGNED, BLOB)")
                    .into(),
            }),
        }
    }
}
