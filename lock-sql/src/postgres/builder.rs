//! [`PostgresLockBuilder`]: building a [`PostgresBackend`] from the shared settings.

use std::str::FromStr as _;
use std::sync::Arc;

use lock_core::{Error, Result};

use super::listener::Listener;
use super::pool::{PgPool, PgSettings};
use super::pooler::{self, Pooler};
use super::schema::Tables;
use super::{Inner, PostgresBackend, PostgresLockKind};
use crate::builder::SqlLockBuilder;

/// Builds a [`PostgresBackend`]: the shared settings of [`SqlLockBuilder`], and a [`PostgresLockKind`].
pub type PostgresLockBuilder = SqlLockBuilder<PostgresLockKind>;

impl PostgresLockBuilder {
    /// The connection pooler between this client and PostgreSQL (PgBouncer's `pool_mode`),
    /// over the URL's `pooler=` parameter. Set it behind a pooler: probes can miss pooling, and
    /// then named prepared statements and session locks break (see the crate docs, "Behind a
    /// pooler"). `Pooler::None` says there is none and silences the warning `build` logs when the
    /// server answers on another port than the URL's. Undeclared by default.
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.settings.pooler = Some(pooler);
        self
    }

    /// Validates the settings and connects once (twice where its probe suspects a pooler: see
    /// [`Pooler`]), each connection within the connect timeout.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, a table name that is not a plain identifier
    /// (or longer than 57 bytes: `<table>_fence` must fit PostgreSQL's 63-byte identifiers), zero
    /// timeouts or pool size, `fair(false)` on the row or advisory kind, TLS parameters that are
    /// unknown or inconsistent or name unreadable files; [`Error::Connection`],
    /// [`Error::Timeout`] or [`Error::Authentication`] when the server cannot be reached or
    /// refuses the credentials; [`Error::Tls`] when the TLS handshake fails (an untrusted
    /// certificate, a wrong host name, a server without TLS) or a TLS-only server refuses a
    /// plaintext connection. [`Error::InvalidConfig`] for statement pooling (declared, or met by
    /// the probe), the advisory kind through transaction pooling, and transaction pooling met
    /// where the settings did not declare it (see [`Pooler`]).
    pub fn build(self) -> Result<PostgresBackend> {
        let table = self.settings.validate(
            &["postgres", "postgresql"],
            true,
            self.kind == PostgresLockKind::Table,
        )?;
        let settings = &self.settings;
        let address = settings.address();
        let (url, tls) = crate::tls::resolve(settings, &crate::tls::LIBPQ)?;
        let (url, url_pooler) = pooler::take_from_url(&url)?;
        let declared = settings.pooler.or(url_pooler);
        let pooler = declared.unwrap_or_default();
        pooler.check(self.kind)?;
        let tls = tls.unwrap_or_default();
        let mut config = tokio_postgres::Config::from_str(&url)
            .map_err(|e| Error::InvalidConfig { reason: format!("bad postgres URL {address}: {e}") })?;
        config.connect_timeout(settings.connect_timeout);
        config.application_name("distlock");
        config.ssl_mode(super::tls::ssl_mode(tls.mode()));
        let pool = PgPool::new(
            config.clone(),
            super::tls::connector(&tls)?,
            PgSettings {
                max_connections: settings.max_connections,
                connect_timeout: settings.connect_timeout,
                io_timeout: settings.io_timeout,
                warn_plaintext: tls.mode() == lock_core::TlsMode::Prefer,
                restart_delay: settings.restart_delay,
                unnamed_statements: pooler.unnamed_statements(),
                settle_in_grant: settings.restart_delay && pooler != Pooler::None,
            },
        )?;
        let mut tables = Tables::new(&table, settings.fair)?;
        // Connect once now: a wrong password or an unreachable server is reported here.
        let probe = pool.open_unpooled(None)?;
        let server = pooler::probe(&pool, &probe, &config, declared, self.kind)?;
        if server.version < 140_000 {
            tables.without_idle_session_timeout();
        }
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                listener: Listener::new(pool.clone(), &tables.election.channel, pooler.can_listen()),
                tables,
                pool,
                kind: self.kind,
                pooler,
                fair: self.settings.fair,
                namespace: self.settings.namespace,
                address,
                writers: Default::default(),
                fence_flush: Default::default(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_name_whose_derived_names_would_be_truncated_is_refused() {
        // 58 bytes: a valid identifier, but `<name>_fence` would be cut to 63 bytes.
        let built = PostgresLockBuilder::new("postgres://127.0.0.1:1/db").table("t".repeat(58)).build();
        assert!(
            matches!(&built, Err(Error::InvalidConfig { reason }) if reason.contains("_fence")),
            "{built:?}"
        );
    }

    #[test]
    fn a_malformed_url_is_a_typed_error_before_any_connection() {
        let built = PostgresLockBuilder::new("postgres://h:notaport/db").build();
        assert!(matches!(built, Err(Error::InvalidConfig { .. })), "{built:?}");
    }
}
