//! [`SqlLockBuilder`]: the builder both SQL backends share — settings, defaults, validation;
//! each database adds its own `build`.

use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

use crate::identifier::TableName;
use lock_core::redact_url as redact;

/// The longest connect or I/O timeout `build` takes (one hour, as on the Redis and ZooKeeper
/// backends).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Builds an SQL backend: [`PostgresLockBuilder`](crate::postgres::PostgresLockBuilder) or
/// [`MySqlLockBuilder`](crate::mysql::MySqlLockBuilder), `K` being the database's kind enum.
/// Every setter has a default; `build` validates them and opens a first connection (within the
/// connect timeout), so a wrong URL or password is reported there. The URL is
/// `postgres://`/`postgresql://` (or a libpq `key=value` string) or `mysql://`.
#[derive(Debug, Clone)]
#[must_use]
pub struct SqlLockBuilder<K> {
    pub(crate) settings: Settings,
    pub(crate) kind: K,
}

impl<K: Default> SqlLockBuilder<K> {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self { settings: Settings::new(url.into()), kind: K::default() }
    }
}

impl<K> SqlLockBuilder<K> {
    /// Which kind of lock: lock table, row lock or advisory lock. Defaults to the lock table.
    pub fn kind(mut self, kind: K) -> Self {
        self.kind = kind;
        self
    }

    /// The lock table's name (a plain identifier; the row-lock kind uses `<table>_rows`, the
    /// fencing sequence of the row and advisory kinds is `<table>_fence`). Every derived name
    /// must fit the database's identifier limit, so the name is at most 57 bytes on PostgreSQL
    /// (which would silently truncate a longer `<table>_fence` to 63 bytes, letting two tables
    /// share it) and 58 on MySQL; `build` rejects a longer one. Defaults to `"distlock_locks"`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.settings.table = table.into();
        self
    }

    /// How long connecting (TCP, handshake, authentication) and waiting for a pooled
    /// connection may take; at most [`MAX_TIMEOUT`]. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long one exchange may wait for its reply; a wait in the server's lock queue is
    /// bounded separately (see the kind); at most [`MAX_TIMEOUT`]. Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.settings.io_timeout = timeout;
        self
    }

    /// The pool's size. Row and advisory locks own a connection for as long as they are held,
    /// so this also caps how many of those one client holds at once: with every connection in
    /// use, `try_lock` answers [`Error::PoolExhausted`] at once, a timed wait waits for a
    /// connection until its deadline, `lock()` for the connect timeout. Defaults to 16.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.settings.max_connections = max;
        self
    }

    /// Whether the lock-table kind serves its waiters in arrival order (Redisson's `RFairLock`,
    /// the default) or gives a released lock to whoever asks first (its `RLock`).
    ///
    /// Either way waiters queue on the server (PostgreSQL: in the lock's row; MariaDB: in
    /// `<table>_queue`) and a release wakes only the oldest (PostgreSQL: `NOTIFY`; MariaDB: its
    /// doorbell, see the `mysql` module). Fair: only that waiter may take the free lock, and a
    /// caller that is not queued waits its turn, so nobody starves; a waiter that crashed holds
    /// up the queue until its entry lapses (at most 2 s plus the I/O timeout; the others notice
    /// at their next re-check, within a second). Non-fair: the woken waiter races everyone else
    /// (the releaser re-locking at once often wins), which gives more acquisitions per second
    /// under contention but no order. Clients of one lock should use one mode. The row and
    /// advisory kinds wait in the server's own lock queue, which is fair: `build` refuses
    /// `fair(false)` for them. Defaults to `true`.
    pub fn fair(mut self, fair: bool) -> Self {
        self.settings.fair = fair;
        self
    }

    /// The namespace of advisory locks (`namespace:name`), so that applications sharing a
    /// server keep their locks apart (the lock table and row kinds are kept apart by
    /// [`table`](Self::table)). Defaults to `"distlock"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.namespace = namespace.into();
        self
    }

    /// TLS for every connection: the mode, the roots to trust and a client certificate.
    ///
    /// The URL can say the same with the database's own parameter names (libpq's `sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey`; MySQL's `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`:
    /// see the `TLS` section of the `postgres` and `mysql` modules). These options
    /// decide the mode over the URL's; their files replace the URL's where they name any (a
    /// root or client certificate that only the URL names is kept). Defaults to the URL's TLS
    /// parameters, and without any to plaintext (unlike libpq and the MySQL client, whose
    /// default is `prefer`).
    ///
    /// `build` reads the files and reports a missing or malformed one as
    /// [`Error::InvalidConfig`]; a handshake that fails (an untrusted certificate, a wrong host
    /// name, a server without TLS) is [`Error::Tls`](lock_core::Error::Tls), and so is a
    /// TLS-only server's refusal of a plaintext connection.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.settings.tls = Some(tls);
        self
    }

    /// Whether the row and advisory kinds (mutexes and read-write locks) grant nothing while the
    /// server's sessions are younger than the lease asked for: after a restart, or a PostgreSQL
    /// reset of its backends, the server has forgotten every session lock while their holders may
    /// still believe them for up to a lease (see the crate docs, "Session holds across a server
    /// restart").
    /// The cost: no such lock is granted for up to a lease after the server (re)started — 30 s
    /// with the default lease; nothing in the steady state.
    ///
    /// Turn it off only where no client can hold a lock from before the server's start, such as
    /// a server started for a test. Defaults to `true`.
    pub fn restart_delay(mut self, enabled: bool) -> Self {
        self.settings.restart_delay = enabled;
        self
    }
}

/// Connection and naming settings of an SQL backend.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) url: String,
    pub(crate) table: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    pub(crate) max_connections: u32,
    pub(crate) namespace: String,
    pub(crate) fair: bool,
    /// Session kinds: no grants while the server's sessions are younger than the lease.
    pub(crate) restart_delay: bool,
    /// The builder's TLS options (the URL's parameters are merged in by `crate::tls`).
    pub(crate) tls: Option<TlsOptions>,
    /// PostgreSQL: the builder's pooler (over the URL's `pooler=`); `None`: not declared.
    #[cfg(feature = "postgres")]
    pub(crate) pooler: Option<crate::postgres::Pooler>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: show it redacted.
        let mut debug = f.debug_struct("Settings");
        debug
            .field("url", &self.address())
            .field("table", &self.table)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("max_connections", &self.max_connections)
            .field("namespace", &self.namespace)
            .field("fair", &self.fair)
            .field("restart_delay", &self.restart_delay)
            .field("tls", &self.tls);
        #[cfg(feature = "postgres")]
        debug.field("pooler", &self.pooler);
        debug.finish()
    }
}

impl Settings {
    pub(crate) fn new(url: String) -> Self {
        Self {
            url,
            table: "distlock_locks".into(),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            max_connections: 16,
            namespace: "distlock".into(),
            fair: true,
            restart_delay: true,
            tls: None,
            #[cfg(feature = "postgres")]
            pooler: None,
        }
    }

    /// The URL without its password.
    pub(crate) fn address(&self) -> String {
        redact(&self.url)
    }

    /// Checks everything but the URL's syntax, which the driver parses.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]: a URL of another scheme than `schemes` (or, with `key_values`,
    /// a string that is neither such a URL nor `key=value` pairs), a table name that is not a
    /// plain identifier, zero timeouts or pool size, an empty namespace or one with `:`,
    /// `fair(false)` for a kind other than the lock table (`lock_table` false).
    pub(crate) fn validate(&self, schemes: &[&str], key_values: bool, lock_table: bool) -> Result<TableName> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        let is_key_values = key_values && !self.url.contains("://") && self.url.contains('=');
        if !is_key_values && !schemes.iter().any(|scheme| self.url.starts_with(&format!("{scheme}://"))) {
            return invalid(format!("not a {}:// URL: {}", schemes[0], self.address()));
        }
        if self.connect_timeout.is_zero() || self.io_timeout.is_zero() || self.max_connections == 0 {
            return invalid("timeouts and max_connections must be greater than zero".into());
        }
        // As on the other backends: an hour is far past any sane timeout, and keeps every
        // deadline computed from one (a wait slice plus an I/O timeout, say) in range.
        if self.connect_timeout > MAX_TIMEOUT || self.io_timeout > MAX_TIMEOUT {
            return invalid(format!("timeouts must be at most {MAX_TIMEOUT:?}"));
        }
        if self.namespace.is_empty() || self.namespace.contains(':') {
            return invalid("the advisory-lock namespace must be non-empty and without `:`".into());
        }
        if !self.fair && !lock_table {
            return invalid("fair(false) applies to the lock-table kind only: row and advisory locks wait in the server's queue".into());
        }
        TableName::new(&self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_typed_errors() {
        let base = || Settings::new("mysql://h/db".into());
        let cases = [
            Settings::new("redis://h".into()),
            Settings { table: "x; DROP TABLE y".into(), ..base() },
            Settings { io_timeout: Duration::ZERO, ..base() },
            Settings { io_timeout: Duration::MAX, ..base() },
            Settings { connect_timeout: MAX_TIMEOUT + Duration::from_millis(1), ..base() },
            Settings { max_connections: 0, ..base() },
            Settings { namespace: "a:b".into(), ..base() },
        ];
        for settings in cases {
            assert!(
                matches!(settings.validate(&["mysql"], false, true), Err(Error::InvalidConfig { .. })),
                "{settings:?}"
            );
        }
        assert!(base().validate(&["mysql"], false, true).is_ok());
        let unfair = Settings { fair: false, ..base() };
        assert!(unfair.validate(&["mysql"], false, true).is_ok());
        assert!(matches!(unfair.validate(&["mysql"], false, false), Err(Error::InvalidConfig { .. })));
        let libpq = Settings::new("host=h password=p".into());
        assert!(libpq.validate(&["postgres"], true, true).is_ok());
        assert!(libpq.validate(&["mysql"], false, true).is_err());
        let shown = format!("{:?}", Settings::new("postgres://u:hunter2@h/db".into()));
        assert!(!shown.contains("hunter2"), "{shown}");
        // TLS parameters and options change nothing of that, in either URL form.
        for url in [
            "postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslkey=/k.pem",
            "host=h password='hunter2' sslmode=verify-full sslcert=/c.pem sslkey=/k.pem",
            "mysql://u:hunter2@h/db?ssl-mode=VERIFY_CA&ssl-ca=/ca.pem",
        ] {
            let tls = Some(TlsOptions::new(lock_core::TlsMode::Require).client_cert("/c.pem", "/k.pem"));
            let shown = format!("{:?}", Settings { tls, ..Settings::new(url.into()) });
            assert!(!shown.contains("hunter2") && shown.contains("/k.pem"), "{shown}");
        }
    }
}
