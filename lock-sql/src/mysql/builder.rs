//! [`MySqlLockBuilder`]: building a [`MySqlBackend`] from the shared settings.

use std::sync::Arc;

use lock_core::{Error, Result};
use mysql::{Opts, OptsBuilder};

use super::doorbell::Doorbell;
use super::pool::{MyPool, MySettings};
use super::schema::Tables;
use super::tls::Connector;
use super::{Inner, MySqlBackend, MySqlLockKind};
use crate::builder::SqlLockBuilder;

/// Builds a [`MySqlBackend`]: the shared settings of [`SqlLockBuilder`], and a [`MySqlLockKind`].
pub type MySqlLockBuilder = SqlLockBuilder<MySqlLockKind>;

impl MySqlLockBuilder {
    /// Validates the settings and connects once.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, a table name that is not a plain identifier
    /// (or longer than 58 characters: `<table>_fence` must fit MySQL's 64-character
    /// identifiers), zero timeouts or pool size, TLS parameters that are unknown or inconsistent
    /// or name unreadable files, chain-only verification (`VERIFY_CA`, `REQUIRED` with
    /// `ssl-ca`: the driver also trusts the public roots, so use `VERIFY_IDENTITY`), TLS asked
    /// for on a Unix socket (`socket=`); [`Error::Connection`], [`Error::Timeout`] or
    /// [`Error::Authentication`] when the server cannot be reached or refuses the credentials
    /// (on a plaintext connection, with a hint that MariaDB refuses a plaintext login to a
    /// TLS-only server that way too); [`Error::Tls`] when the TLS handshake fails (an untrusted
    /// certificate, a wrong host name, a server without TLS) or a TLS-only MySQL server refuses
    /// a plaintext connection (error 3159).
    ///
    /// Side effect: installs rustls's ring provider as the process's default crypto provider,
    /// unless one is installed already.
    pub fn build(self) -> Result<MySqlBackend> {
        let table = self.settings.validate(&["mysql"], false, self.kind == MySqlLockKind::Table)?;
        let settings = &self.settings;
        let address = settings.address();
        let tables = Tables::new(&table, settings.fair)?;
        let (url, tls) = crate::tls::resolve(settings, &crate::tls::MYSQL)?;
        let opts = Opts::from_url(&url)
            .map_err(|e| Error::InvalidConfig { reason: format!("bad mysql URL {address}: {e}") })?;
        let opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(settings.connect_timeout))
            .read_timeout(Some(settings.io_timeout))
            .write_timeout(Some(settings.io_timeout))
            // Row locks: a locking read of an absent key takes no gap lock under READ COMMITTED
            // (under REPEATABLE READ it would block unrelated inserts and deadlock).
            .init(vec![
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                // The statements' `UPDATE … SET` assignments read the columns assigned before
                // them (MariaDB's default); `SIMULTANEOUS_ASSIGNMENT` would change that.
                "SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'SIMULTANEOUS_ASSIGNMENT', '')",
            ]);
        let connector = Connector::new(opts, tls.as_ref())?;
        // One ringer per server and TLS setting (see the doorbell).
        let server = format!("{} {tls:?}", settings.url);
        let doorbell = Doorbell::new(server, connector.clone(), settings.io_timeout);
        let pool_settings = MySettings {
            max_connections: settings.max_connections,
            connect_timeout: settings.connect_timeout,
            io_timeout: settings.io_timeout,
            restart_delay: settings.restart_delay,
        };
        let flush_pool = MyPool::new(connector.clone(), MySettings { max_connections: 1, ..pool_settings });
        let pool = MyPool::new(connector, pool_settings);
        // Connect once now: a wrong password or an unreachable server is reported here.
        drop(pool.get()?);
        Ok(MySqlBackend {
            inner: Arc::new(Inner {
                pool,
                tables,
                doorbell,
                kind: self.kind,
                fair: self.settings.fair,
                namespace: self.settings.namespace,
                address,
                writers: Default::default(),
                fence_flush: Default::default(),
                rang: Default::default(),
                flush_pool,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_name_whose_derived_names_would_be_too_long_is_refused() {
        let built = MySqlLockBuilder::new("mysql://127.0.0.1:1/db").table("t".repeat(59)).build();
        assert!(
            matches!(&built, Err(Error::InvalidConfig { reason }) if reason.contains("_fence")),
            "{built:?}"
        );
    }

    /// A listener that accepts and never answers: `build` gives up after the connect timeout
    /// (the handshake is part of connecting), not after the longer I/O timeout.
    #[test]
    fn a_silent_server_is_given_the_connect_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepting = std::thread::spawn(move || {
            // Held open, silent, until the client gives up.
            let accepted: Vec<_> = listener.incoming().take(1).collect();
            std::thread::sleep(std::time::Duration::from_secs(8));
            drop(accepted);
        });
        let (connect, io) = (std::time::Duration::from_secs(1), std::time::Duration::from_secs(5));
        let started = std::time::Instant::now();
        let built = MySqlLockBuilder::new(format!("mysql://u:p@127.0.0.1:{port}/db"))
            .connect_timeout(connect)
            .io_timeout(io)
            .build();
        let took = started.elapsed();
        println!("build() against a silent listener (connect {connect:?}, I/O {io:?}): {took:?}");
        assert!(matches!(built, Err(Error::Timeout { .. } | Error::Connection { .. })), "{built:?}");
        assert!(took < connect + std::time::Duration::from_millis(900), "build() took {took:?}");
        drop(accepting);
    }

    #[test]
    fn a_malformed_url_is_a_typed_error_before_any_connection() {
        let built = MySqlLockBuilder::new("mysql://h:notaport/db").build();
        assert!(matches!(built, Err(Error::InvalidConfig { .. })), "{built:?}");
    }
}
