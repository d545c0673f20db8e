//! [`MySqlLockBuilder`]: connection settings, table names and the lock kind.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Result};
use mysql::Opts;

use super::connection::{MyPool, MySettings};
use super::schema::Tables;
use super::{Inner, MySqlBackend, MySqlLockKind};
use crate::identifier::TableName;

/// Builds a [`MySqlBackend`]. Every setter has a default; [`build`](Self::build) validates them
/// and connects once, so a wrong URL or password is reported there.
#[derive(Debug, Clone)]
#[must_use]
pub struct MySqlLockBuilder {
    url: String,
    kind: MySqlLockKind,
    table: String,
    connect_timeout: Duration,
    io_timeout: Duration,
    max_connections: usize,
    namespace: String,
}

impl MySqlLockBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            kind: MySqlLockKind::default(),
            table: "distlock_locks".into(),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            max_connections: 16,
            namespace: "distlock".into(),
        }
    }

    /// Which kind of lock. Defaults to [`MySqlLockKind::Table`].
    pub fn kind(mut self, kind: MySqlLockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The lock table's name (a plain identifier; the row-lock kind uses `<table>_rows`, the row
    /// and advisory kinds' fencing sequence is `<table>_fence`). Defaults to `"distlock_locks"`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// How long connecting and waiting for a pooled connection may take. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one exchange may wait for its reply (the socket's read and write timeouts). A
    /// wait in the server's lock queue is cut into slices shorter than this. Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// The pool's size. Row and advisory locks own a connection for as long as they are held, so
    /// this also caps how many of those one client holds at once. Defaults to 16.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The prefix of `GET_LOCK` names (`namespace:name`), so that applications sharing a server
    /// keep their locks apart. Defaults to `"distlock"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Validates the settings and connects once.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, a table name that is not a plain identifier,
    /// zero timeouts or pool size; [`Error::Connection`], [`Error::Timeout`] or
    /// [`Error::Authentication`] when the server cannot be reached or refuses the credentials.
    pub fn build(self) -> Result<MySqlBackend> {
        let address = crate::redact(&self.url);
        let invalid = |reason: String| Error::InvalidConfig { reason };
        if !self.url.starts_with("mysql://") {
            return Err(invalid(format!("not a mysql:// URL: {address}")));
        }
        let opts = Opts::from_url(&self.url).map_err(|e| invalid(format!("bad mysql URL {address}: {e}")))?;
        if self.connect_timeout.is_zero() || self.io_timeout.is_zero() || self.max_connections == 0 {
            return Err(invalid("timeouts and max_connections must be greater than zero".into()));
        }
        if self.namespace.is_empty() || self.namespace.contains(':') {
            return Err(invalid("the advisory-lock namespace must be non-empty and without `:`".into()));
        }
        let table = TableName::new(&self.table)?;
        let settings = MySettings {
            max_connections: self.max_connections,
            connect_timeout: self.connect_timeout,
            io_timeout: self.io_timeout,
        };
        let pool = MyPool::new(opts, settings)?;
        // Connect once now: a wrong password or an unreachable server is reported here.
        drop(pool.get()?);
        Ok(MySqlBackend {
            inner: Arc::new(Inner {
                pool,
                tables: Tables::new(&table),
                kind: self.kind,
                namespace: self.namespace,
                address,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_typed_errors_before_any_connection() {
        let cases = [
            MySqlLockBuilder::new("postgres://h/db"),
            MySqlLockBuilder::new("mysql://h:notaport/db"),
            MySqlLockBuilder::new("mysql://h/db").table("x; DROP TABLE y"),
            MySqlLockBuilder::new("mysql://h/db").io_timeout(Duration::ZERO),
            MySqlLockBuilder::new("mysql://h/db").max_connections(0),
        ];
        for builder in cases {
            assert!(matches!(builder.clone().build(), Err(Error::InvalidConfig { .. })), "{builder:?}");
        }
    }
}
