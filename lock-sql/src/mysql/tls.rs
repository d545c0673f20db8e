//! TLS for MySQL/MariaDB connections: [`TlsOptions`] as the `mysql` driver's [`SslOpts`]
//! (its rustls backend, ring provider), and [`Connector`], which opens connections and, for
//! `ssl-mode=PREFERRED`, falls back to plaintext when the server offers no TLS (the driver
//! itself treats TLS options as required), and tells a TLS-only server's refusal of a
//! plaintext login from a wrong password ([`Connector::error`]).
//!
//! What the driver checks, per mode ([`TlsOptions::verification`]): nothing
//! (`PREFERRED`, `REQUIRED` without `ssl-ca`; the driver's "accept invalid certificates"), the
//! chain only (`VERIFY_CA`, and `REQUIRED` with `ssl-ca`: its "skip domain validation"), the
//! chain and the host name or IP address (`VERIFY_IDENTITY`). The driver trusts the Mozilla
//! roots compiled into it (`webpki-roots`) **in addition to** `ssl-ca`, and offers no way to
//! trust `ssl-ca` alone: a certificate from a public CA passes `VERIFY_CA` too, and one that a
//! public CA issued for the host name passes `VERIFY_IDENTITY`.

use lock_core::{Result, TlsMode, TlsOptions, Verification};
use mysql::{ClientIdentity, Conn, DriverError, Error as MySqlError, Opts, OptsBuilder, SslOpts};

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
    /// (else the URL's own driver parameters, such as `require_ssl`, stand).
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidConfig`] when a file `tls` names cannot be read or parsed.
    pub(crate) fn new(opts: OptsBuilder, tls: Option<&TlsOptions>) -> Result<Self> {
        let Some(tls) = tls else { return Ok(Self { opts: opts.into(), plaintext: None }) };
        if tls.mode() == TlsMode::Disable {
            return Ok(Self { opts: opts.ssl_opts(None).into(), plaintext: None });
        }
        // Read now, so that a missing or malformed file is `build`'s error, naming it.
        crate::tls::load(tls)?;
        // The driver builds its rustls config on the process-wide crypto provider, and rustls
        // panics without one when a process has more than one compiled in.
        let _ = rustls::crypto::ring::default_provider().install_default();
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

    /// A new connection.
    ///
    /// # Errors
    /// The driver's error.
    pub(crate) fn connect(&self) -> std::result::Result<Conn, MySqlError> {
        match Conn::new(self.opts.clone()) {
            Err(MySqlError::DriverError(DriverError::TlsNotSupported)) if self.plaintext.is_some() => {
                Conn::new(self.plaintext.clone().expect("checked"))
            }
            other => other,
        }
    }
}

impl Connector {
    /// The public error for a failed connection attempt.
    ///
    /// MariaDB refuses a plaintext login to a server with `require_secure_transport=ON` with
    /// `ER_ACCESS_DENIED_ERROR` (1045), the answer to a wrong password too (MySQL has a code of
    /// its own, 3159, mapped by the error module). To tell the two apart, a plaintext login
    /// that was denied is tried once more over TLS (checking no certificate: this connection
    /// only diagnoses, and is closed at once; it sends nothing the plaintext attempt did not):
    /// if that one gets in, the server refused the plaintext, and the error says so
    /// ([`lock_core::Error::Tls`]).
    pub(crate) fn error(&self, failure: MySqlError) -> lock_core::Error {
        if self.opts.get_ssl_opts().is_none() && error::is_access_denied(&failure) {
            let diagnosis = OptsBuilder::from_opts(self.opts.clone())
                .ssl_opts(Some(ssl_opts(&TlsOptions::new(TlsMode::Require))))
                .prefer_socket(false);
            if Conn::new(diagnosis).is_ok() {
                return error::plaintext_refused(failure);
            }
        }
        error::map(error::CONNECT, failure)
    }
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
        Verification::Chain => ssl = ssl.with_danger_skip_domain_validation(true),
        Verification::ChainAndHost => {}
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
        assert_eq!(check(TlsOptions::new(TlsMode::Require).root_cert("/ca.pem")), (false, true));
        assert_eq!(check(TlsOptions::new(TlsMode::VerifyCa).root_cert("/ca.pem")), (false, true));
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
}
