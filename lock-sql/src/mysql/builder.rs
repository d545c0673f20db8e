//! [`MySqlLockBuilder`]: building a [`MySqlBackend`] from the shared settings.

use std::sync::Arc;

use lock_core::{Error, Result};
use mysql::Opts;

use super::connection::{MyPool, MySettings};
use super::schema::Tables;
use super::{Inner, MySqlBackend, MySqlLockKind};
use crate::builder::SqlLockBuilder;

/// Builds a [`MySqlBackend`]: the shared settings of [`SqlLockBuilder`], and a [`MySqlLockKind`].
pub type MySqlLockBuilder = SqlLockBuilder<MySqlLockKind>;

impl MySqlLockBuilder {
    /// Validates the settings and connects once.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, a table name that is not a plain identifier,
    /// zero timeouts or pool size; [`Error::Connection`], [`Error::Timeout`] or
    /// [`Error::Authentication`] when the server cannot be reached or refuses the credentials.
    pub fn build(self) -> Result<MySqlBackend> {
        let table = self.settings.validate(&["mysql"])?;
        let settings = &self.settings;
        let address = settings.address();
        let opts = Opts::from_url(&settings.url)
            .map_err(|e| Error::InvalidConfig { reason: format!("bad mysql URL {address}: {e}") })?;
        let pool = MyPool::new(
            opts,
            MySettings {
                max_connections: settings.max_connections,
                connect_timeout: settings.connect_timeout,
                io_timeout: settings.io_timeout,
            },
        )?;
        // Connect once now: a wrong password or an unreachable server is reported here.
        drop(pool.get()?);
        Ok(MySqlBackend {
            inner: Arc::new(Inner {
                pool,
                tables: Tables::new(&table),
                kind: self.kind,
                namespace: self.settings.namespace,
                address,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_url_is_a_typed_error_before_any_connection() {
        let built = MySqlLockBuilder::new("mysql://h:notaport/db").build();
        assert!(matches!(built, Err(Error::InvalidConfig { .. })), "{built:?}");
    }
}
