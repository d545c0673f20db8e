//! The server options `exec`, `elect` and `leader` share, and the backend they name.

use std::time::Duration;

use clap::Args;
use distlock::AnyBackend;

/// Which server, which kind of lock on it, and how long to wait for it.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The lock server: a `redis://`, `rediss://`, `postgres://`, `postgresql://`, `mysql://`,
    /// `zk://`, `etcd://` or `etcds://` URL, a libpq `key=value` string, or comma-separated
    /// `redis://` URLs (Redlock).
    #[arg(long)]
    pub url: String,
    /// The kind of lock where a scheme has several: `redis`, `redis-hash` or `redlock`;
    /// `pg-table`, `pg-row` or `pg-advisory`; `mysql-table`, `mysql-row` or `mysql-advisory`.
    /// Defaults to the first of each (`redlock` for a list of URLs).
    #[arg(long)]
    pub kind: Option<String>,
    /// How long to wait for a connection, and for each reply of the server (on etcd, at most half
    /// its 10 s session TTL).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub timeout: Duration,
}

impl ServerArgs {
    /// The backend the URL names, through the facade's [`distlock::parse_url_opts`] as every
    /// command does, with its schema in place.
    ///
    /// # Errors
    /// A bad URL or kind, an unreachable server: the message names the URL without its password.
    pub fn connect(&self) -> Result<AnyBackend, String> {
        let backend = self.connect_read_only()?;
        backend.ensure_schema().map_err(|e| format!("preparing {}: {e}", distlock::redact_url(&self.url)))?;
        Ok(backend)
    }

    /// The backend the URL names, without creating its schema: for commands that only read
    /// (`distlock leader`), which a read-only database role may run.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_read_only(&self) -> Result<AnyBackend, String> {
        let mut options =
            distlock::ConnectOptions::new().connect_timeout(self.timeout).io_timeout(self.timeout);
        if let Some(kind) = &self.kind {
            options = options.kind(kind.parse().map_err(|e: distlock::Error| e.to_string())?);
        }
        distlock::parse_url_opts(&self.url, &options)
            .map_err(|e| format!("connecting to {}: {e}", distlock::redact_url(&self.url)))
    }
}
