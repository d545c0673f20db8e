//! TLS for MySQL/MariaDB connections: [`TlsOptions`] as the `mysql` driver's [`SslOpts`]
//! (its rustls backend, ring provider), and [`Connector`], which opens connections and, for
//! `ssl-mode=PREFERRED`, falls back to plaintext when the server offers no TLS (the driver
//! itself treats TLS options as required), and maps a failed login ([`Connector::error`]).
//!
//! What the driver checks, per mode ([`TlsOptions::verification`]): nothing (`PREFERRED`,
//! `REQUIRED` without `ssl-ca`; the driver's "accept invalid certificates"), or the chain and
//! the host name or IP address (`VERIFY_IDENTITY`). The driver trusts the Mozilla roots
//! compiled into it (`webpki-roots`) **in addition to** `ssl-ca`, and offers no way to trust
//! `ssl-ca` alone: a certificate that a public CA issued for the host name passes
//! `VERIFY_IDENTITY` too. For the same reason chain-only verification (`VERIFY_CA`, and
//! `REQUIRED` with `ssl-ca`) is refused at build: with the public roots trusted and no host name
//! checked, any publicly trusted certificate for any host would pass, which authenticates
//! nothing.
//!
//! The driver skips TLS on a Unix socket (silently), so a `socket=` URL parameter with a mode
//! that requires TLS (or the driver's own TLS parameters) is refused at build too.

use std::time::{Duration, Instant};

use lock_core::{Error, Result, TlsMode, TlsOptions, Verification};
use mysql::{ClientIdentity, Conn, DriverError, Error as MySqlError, Opts, OptsBuilder, SslOpts};

use super::connection::{set_socket_timeout, Direction};
use super::error;

/// How to open a connection: the driver's options, and for `PREFERRED` the plaintext options
/// to fall back on.
#[derive(Clone)]
pub(crate) struct Connector {
    opts: Opts,
    plaintext: Option<Opts>,
}

impl Connector {
    /// Connections with `opts` and, when the URL or the builder set any, TLS as `tls` says
    /// (else the URL's own driver parameters, such as `root_cert_path`, stand).
    ///
    /// Side effect, process-wide: installs rustls's ring provider as the process's default
    /// crypto provider, unless one is installed already (see [`lock_core::install_ring_provider`]).
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidConfig`] when a file `tls` names cannot be read or parsed,
    /// for chain-only verification (`VERIFY_CA`, `REQUIRED` with `ssl-ca`), and for TLS on a
    /// Unix socket (`socket=` with a mode other than `DISABLED`/`PREFERRED`, or with the
    /// driver's own TLS parameters).
    pub(crate) fn new(opts: OptsBuilder, tls: Option<&TlsOptions>) -> Result<Self> {
        lock_core::install_ring_provider();
        let socket = Opts::from(opts.clone()).get_socket().is_some();
        let Some(tls) = tls else {
            let opts: Opts = opts.into();
            if socket && opts.get_ssl_opts().is_some() {
                return Err(tls_on_socket("the driver's TLS parameters"));
            }
            return Ok(Self { opts, plaintext: None });
        };
        if tls.mode() == TlsMode::Disable {
            return Ok(Self { opts: opts.ssl_opts(None).into(), plaintext: None });
        }
        if tls.verification() == Verification::Chain {
            return Err(Error::invalid_config(CHAIN_ONLY_REFUSED));
        }
        if socket && tls.mode() != TlsMode::Prefer {
            return Err(tls_on_socket("a TLS mode that requires TLS"));
        }
        // Read now, so that a missing or malformed file is `build`'s error, naming it.
        crate::tls::load(tls)?;
        let plaintext = (tls.mode() == TlsMode::Prefer).then(|| opts.clone().ssl_opts(None).into());
        // The driver would move a TLS connection to 127.0.0.1 onto the server's Unix socket
        // (in plaintext): a connection asked to use TLS stays on TCP.
        let opts = opts.ssl_opts(Some(ssl_opts(tls))).prefer_socket(false).into();
        Ok(Self { opts, plaintext })
    }

    /// The same connector with `change` applied to its options (both, for `PREFERRED`).
    pub(crate) fn map(self, change: impl Fn(OptsBuilder) -> OptsBuilder) -> Self {
        let change = |opts: Opts| -> Opts { change(OptsBuilder::from_opts(opts)).into() };
        Self { opts: change(self.opts), plaintext: self.plaintext.map(change) }
    }

    /// A new connection, its failure mapped ([`error`](Self::error)).
    ///
    /// # Errors
    /// As [`error`](Self::error).
    pub(crate) fn open(&self) -> Result<Conn> {
        self.connect().map_err(|failure| self.error(failure))
    }

    /// A new connection, within the connect timeout (the options' TCP connect timeout): the
    /// handshake, TLS, authentication and the session's first statements read and write with
    /// what is left of it, not with the (often longer) I/O timeout — a server that accepts and
    /// stays silent is given the connect timeout. The open connection then gets the options'
    /// own read and write timeouts. (Each read of the handshake is bounded by what was left
    /// when the attempt started, so the whole is within about one connect timeout after the TCP
    /// connection; the driver offers no overall deadline.)
    ///
    /// # Errors
    /// The driver's error.
    pub(crate) fn connect(&self) -> std::result::Result<Conn, MySqlError> {
        let deadline = self.opts.get_tcp_connect_timeout().map(|budget| Instant::now() + budget);
        let bounded = |opts: &Opts| -> Opts {
            let Some(deadline) = deadline else { return opts.clone() };
            // At least 1 ms: a zero socket timeout would mean none.
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let (read, write) = (opts.get_read_timeout(), opts.get_write_timeout());
            OptsBuilder::from_opts(opts.clone())
                .read_timeout(Some(read.map_or(left, |&read| left.min(read))))
                .write_timeout(Some(write.map_or(left, |&write| left.min(write))))
                .into()
        };
        let conn = match Conn::new(bounded(&self.opts)) {
            Err(MySqlError::DriverError(DriverError::TlsNotSupported)) if self.plaintext.is_some() => {
                let plaintext = self.plaintext.as_ref().expect("checked");
                tracing::warn!(
                    host = %plaintext.get_ip_or_hostname(),
                    "the server offers no TLS: connecting in plaintext (ssl-mode=PREFERRED)"
                );
                Conn::new(bounded(plaintext))
            }
            other => other,
        }?;
        if deadline.is_some() {
            for (direction, timeout) in [
                (Direction::Read, self.opts.get_read_timeout()),
                (Direction::Write, self.opts.get_write_timeout()),
            ] {
                // No timeout in the options: none on the socket (zero clears it).
                set_socket_timeout(&conn, direction, timeout.copied().unwrap_or(Duration::ZERO))
                    .map_err(|errno| MySqlError::from(std::io::Error::from(errno)))?;
            }
        }
        Ok(conn)
    }
}

impl Connector {
    /// The public error for a failed connection attempt.
    ///
    /// MariaDB refuses a plaintext login to a server with `require_secure_transport=ON` with
    /// `ER_ACCESS_DENIED_ERROR` (1045), the answer to a wrong password too (MySQL has a code of
    /// its own, 3159, mapped by the error module to [`lock_core::Error::Tls`]). The two cannot
    /// be told apart without logging in again over TLS (twice the connect time, a second
    /// strike against `max_password_errors`, and the credentials sent over a channel nobody
    /// verified), so a plaintext login denied with 1045 is
    /// [`lock_core::Error::Authentication`] with a hint naming both causes.
    pub(crate) fn error(&self, failure: MySqlError) -> lock_core::Error {
        if self.opts.get_ssl_opts().is_none() {
            return error::map_plaintext_connect(failure);
        }
        error::map(error::CONNECT, failure)
    }
}

/// Why chain-only verification is refused (see the module docs).
const CHAIN_ONLY_REFUSED: &str = "ssl-mode=VERIFY_CA (or REQUIRED with ssl-ca) is not supported on \
     MySQL/MariaDB: the mysql driver trusts the public Mozilla roots besides ssl-ca, so without a \
     host name check any publicly trusted certificate for any host would pass; use \
     ssl-mode=VERIFY_IDENTITY, which checks the host name (and also trusts the public roots)";

/// The error for TLS asked for on a Unix socket, which the driver would use in plaintext.
fn tls_on_socket(what: &str) -> Error {
    Error::invalid_config(format!(
        "the socket URL parameter with {what}: the mysql driver does not use TLS on a Unix socket \
         (the connection would be plaintext); connect over TCP, or use ssl-mode=DISABLED or \
         PREFERRED on the socket"
    ))
}

/// The driver's TLS options for `tls`.
fn ssl_opts(tls: &TlsOptions) -> SslOpts {
    let mut ssl = SslOpts::default()
        .with_root_cert_path(tls.root_cert_path().map(std::path::Path::to_path_buf))
        .with_client_identity(
            tls.client_cert_paths()
                .map(|(cert, key)| ClientIdentity::new(cert.to_path_buf(), key.to_path_buf())),
        );
    match tls.verification() {
        Verification::None => {
            ssl = ssl.with_danger_accept_invalid_certs(true).with_danger_skip_domain_validation(true);
        }
        // Refused by `Connector::new`; checking the host name as well is the safe reading.
        Verification::Chain | Verification::ChainAndHost => {}
    }
    ssl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_checks_what_it_names() {
        let check = |tls: TlsOptions| {
            let ssl = ssl_opts(&tls);
            (ssl.accept_invalid_certs(), ssl.skip_domain_validation())
        };
        assert_eq!(check(TlsOptions::new(TlsMode::Require)), (true, true));
        assert_eq!(check(TlsOptions::new(TlsMode::VerifyFull)), (false, false));
        let ssl = ssl_opts(&TlsOptions::new(TlsMode::VerifyFull).client_cert("/c.pem", "/k.pem"));
        assert_eq!(ssl.client_identity().map(ClientIdentity::cert_chain_path), Some("/c.pem".as_ref()));
    }

    #[test]
    fn only_preferred_falls_back_and_tls_stays_on_tcp() {
        let base = || OptsBuilder::new().ip_or_hostname(Some("127.0.0.1"));
        let preferred = Connector::new(base(), Some(&TlsOptions::new(TlsMode::Prefer))).unwrap();
        assert!(preferred.plaintext.as_ref().is_some_and(|plain| plain.get_ssl_opts().is_none()));
        assert!(!preferred.opts.get_prefer_socket());
        let required = Connector::new(base(), Some(&TlsOptions::new(TlsMode::Require))).unwrap();
        assert!(required.plaintext.is_none() && required.opts.get_ssl_opts().is_some());
        let disabled = Connector::new(base(), Some(&TlsOptions::new(TlsMode::Disable))).unwrap();
        assert!(disabled.opts.get_ssl_opts().is_none());
    }

    /// The driver builds its rustls configuration on the process default provider whichever way
    /// TLS is asked for (its own URL parameters too): every connector installs one.
    #[test]
    fn a_connector_without_tls_options_installs_the_crypto_provider() {
        let plain = OptsBuilder::new().ip_or_hostname(Some("127.0.0.1"));
        Connector::new(plain, None).unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    /// The driver trusts the public roots besides `ssl-ca`: checking the chain alone would let
    /// any publicly trusted certificate pass.
    #[test]
    fn chain_only_verification_is_refused() {
        let base = || OptsBuilder::new().ip_or_hostname(Some("127.0.0.1"));
        for tls in [
            TlsOptions::new(TlsMode::VerifyCa).root_cert("/ca.pem"),
            TlsOptions::new(TlsMode::VerifyCa),
            TlsOptions::new(TlsMode::Require).root_cert("/ca.pem"),
        ] {
            let refused = Connector::new(base(), Some(&tls)).err();
            assert!(
                matches!(&refused, Some(Error::InvalidConfig { reason }) if reason.contains("VERIFY_IDENTITY")),
                "{tls:?}: {refused:?}"
            );
        }
    }

    /// The driver skips TLS on a Unix socket: TLS asked for there would be plaintext.
    #[test]
    fn tls_on_a_unix_socket_is_refused() {
        let on_socket = || OptsBuilder::new().socket(Some("/run/mysqld/mysqld.sock"));
        for mode in [TlsMode::Require, TlsMode::VerifyFull] {
            let refused = Connector::new(on_socket(), Some(&TlsOptions::new(mode))).err();
            assert!(
                matches!(&refused, Some(Error::InvalidConfig { reason }) if reason.contains("socket")),
                "{mode:?}: {refused:?}"
            );
        }
        let driver_tls = on_socket().ssl_opts(Some(SslOpts::default()));
        assert!(matches!(Connector::new(driver_tls, None), Err(Error::InvalidConfig { .. })));
        for mode in [TlsMode::Disable, TlsMode::Prefer] {
            assert!(Connector::new(on_socket(), Some(&TlsOptions::new(mode))).is_ok(), "{mode:?}");
        }
        assert!(Connector::new(on_socket(), None).is_ok());
    }

    #[test]
    fn a_plaintext_access_denied_is_authentication_with_the_secure_transport_hint() {
        let plain = Connector::new(OptsBuilder::new().ip_or_hostname(Some("127.0.0.1")), None).unwrap();
        let denied = || {
            MySqlError::MySqlError(mysql::MySqlError {
                state: "28000".into(),
                message: "Access denied for user 'u'@'h' (using password: YES)".into(),
                code: 1045,
            })
        };
        let error = plain.error(denied());
        assert!(matches!(error, Error::Authentication { .. }), "{error:?}");
        assert!(error.to_string().contains("ssl-mode=REQUIRED or stronger"), "{error}");
        // Over TLS, a denial is a denial.
        let tls = Connector::new(
            OptsBuilder::new().ip_or_hostname(Some("127.0.0.1")),
            Some(&TlsOptions::new(TlsMode::Require)),
        )
        .unwrap();
        let error = tls.error(denied());
        assert!(matches!(error, Error::Authentication { .. }), "{error:?}");
        assert!(!error.to_string().contains("secure transport"), "{error}");
    }
}
