//! [`PostgresLockBuilder`]: connection settings, table names and the lock kind.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Result};

use super::connection::{PgPool, PgSettings};
use super::listener::Listener;
use super::schema::Tables;
use super::{Inner, PostgresBackend, PostgresLockKind};
use crate::identifier::TableName;
use crate::url::redact;

/// Builds a [`PostgresBackend`]. Every setter has a default; [`build`](Self::build) validates
/// them and connects once, so a wrong URL or password is reported there.
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresLockBuilder {
    url: String,
    kind: PostgresLockKind,
    table: String,
    connect_timeout: Duration,
    io_timeout: Duration,
    max_connections: u32,
    namespace: String,
}

impl PostgresLockBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            kind: PostgresLockKind::default(),
            table: "distlock_locks".into(),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            max_connections: 16,
            namespace: "distlock".into(),
        }
    }

    /// Which kind of lock. Defaults to [`PostgresLockKind::Table`].
    pub fn kind(mut self, kind: PostgresLockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The lock table's name (a plain identifier; the row-lock kind uses `<table>_rows`, every
    /// kind's fencing sequence is `<table>_fence`). Defaults to `"distlock_locks"`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// How long connecting (TCP, startup, authentication) and waiting for a pooled connection may
    /// take. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one statement may wait for its reply (a wait in the server's lock queue gets its
    /// own deadline on top). Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// The pool's size. Row and advisory locks own a connection for as long as they are held, so
    /// this also caps how many of those one client holds at once. Defaults to 16.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// The namespace advisory-lock keys are hashed with (`namespace:name`), so that applications
    /// sharing a database keep their keys apart. Defaults to `"distlock"`.
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
    pub fn build(self) -> Result<PostgresBackend> {
        let invalid = |reason: String| Error::InvalidConfig { reason };
        if !self.url.starts_with("postgres://") && !self.url.starts_with("postgresql://") {
            return Err(invalid(format!("not a postgres:// URL: {}", redact(&self.url))));
        }
        let mut config = tokio_postgres::Config::from_str(&self.url)
            .map_err(|e| invalid(format!("bad postgres URL {}: {e}", redact(&self.url))))?;
        if self.connect_timeout.is_zero() || self.io_timeout.is_zero() || self.max_connections == 0 {
            return Err(invalid("timeouts and max_connections must be greater than zero".into()));
        }
        if self.namespace.is_empty() {
            return Err(invalid("the advisory-lock namespace must not be empty".into()));
        }
        let table = TableName::new(&self.table)?;
        config.connect_timeout(self.connect_timeout);
        config.application_name("distlock");
        let settings = PgSettings {
            max_connections: self.max_connections,
            connect_timeout: self.connect_timeout,
            io_timeout: self.io_timeout,
        };
        let pool = PgPool::new(config, settings)?;
        // Connect once now: a wrong password or an unreachable server is reported here.
        drop(pool.open_unpooled(None)?);
        let address = redact(&self.url);
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                tables: Tables::new(&table),
                listener: Listener::new(pool.clone(), table.as_str()),
                pool,
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
            PostgresLockBuilder::new("redis://h"),
            PostgresLockBuilder::new("postgres://h:notaport/db"),
            PostgresLockBuilder::new("postgres://h/db").table("x; DROP TABLE y"),
            PostgresLockBuilder::new("postgres://h/db").io_timeout(Duration::ZERO),
            PostgresLockBuilder::new("postgres://h/db").max_connections(0),
        ];
        for builder in cases {
            assert!(matches!(builder.clone().build(), Err(Error::InvalidConfig { .. })), "{builder:?}");
        }
    }
}
