//! [`TlsOptions`]: the TLS settings every backend takes, in one vocabulary.
//!
//! The modes are libpq's five (`sslmode`), because they are the most precise names in use:
//! MySQL's `ssl-mode` maps onto them one to one, and `rediss://` or a ZooKeeper TLS URL is
//! [`VerifyFull`](TlsMode::VerifyFull) unless the URL says otherwise. Each backend documents
//! its URL parameters; they all end up here, so the builders and the checks are the same.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Installs rustls's ring provider as the process's default crypto provider, once; a provider
/// installed before (by the application or any library) stays.
///
/// Drivers that build their rustls configs with `ClientConfig::builder()` (redis-rs, the `mysql`
/// crate, zookeeper-client) take the process default, and rustls panics there when more than
/// one provider is compiled in (ring and aws-lc-rs, as zookeeper-client's TLS brings) and none
/// is installed. Every backend calls this before its first TLS handshake.
#[cfg(feature = "rustls")]
pub fn install_ring_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err: another provider was installed first, which is the application's choice.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Whether to use TLS, and how much of the server's certificate to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TlsMode {
    /// Plaintext only.
    #[default]
    Disable,
    /// TLS if the server offers it, else plaintext; the certificate is not checked (libpq's
    /// `prefer`; only PostgreSQL and MySQL can negotiate this).
    Prefer,
    /// TLS or fail; the certificate is checked only if a root certificate is given (then as
    /// [`VerifyCa`](Self::VerifyCa), as libpq does).
    Require,
    /// TLS, and the server's certificate must chain to a trusted root; its name is not checked.
    VerifyCa,
    /// TLS, the certificate must chain to a trusted root and name the host connected to.
    VerifyFull,
}

impl TlsMode {
    /// libpq's `sslmode` value: `disable`, `prefer`, `require`, `verify-ca` or `verify-full`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for any other value, `allow` included: it means plaintext first
    /// and TLS only if the server insists, and reading it as `prefer` would do the opposite.
    pub fn from_libpq(value: &str) -> Result<Self> {
        Ok(match value {
            "disable" => TlsMode::Disable,
            "allow" => {
                return Err(Error::invalid_config(
                    "sslmode=allow (plaintext first, TLS only if the server insists) is not supported: \
                     use sslmode=prefer (TLS where the server offers it), require or verify-full",
                ))
            }
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            other => {
                return Err(Error::invalid_config(format!(
                    "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }

    /// MySQL's `ssl-mode` value, any case: `DISABLED`, `PREFERRED`, `REQUIRED`, `VERIFY_CA` or
    /// `VERIFY_IDENTITY`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for any other value.
    pub fn from_mysql(value: &str) -> Result<Self> {
        Ok(match value.to_ascii_uppercase().as_str() {
            "DISABLED" => TlsMode::Disable,
            "PREFERRED" => TlsMode::Prefer,
            "REQUIRED" => TlsMode::Require,
            "VERIFY_CA" => TlsMode::VerifyCa,
            "VERIFY_IDENTITY" => TlsMode::VerifyFull,
            _ => {
                return Err(Error::invalid_config(format!(
                    "ssl-mode={value}: expected DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                )))
            }
        })
    }

    /// libpq's name of the mode.
    pub fn as_libpq(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_libpq())
    }
}

/// What a connection must check of the server's certificate, once the mode and the files are
/// taken together ([`TlsOptions::verification`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Nothing (encryption against passive listeners only).
    None,
    /// The chain up to a trusted root.
    Chain,
    /// The chain and the host name (or IP address) connected to.
    ChainAndHost,
}

/// TLS settings: a [`TlsMode`], the roots to trust and the client's own certificate, as PEM
/// files. Built from a backend's URL parameters or with the methods here.
///
/// Without a root certificate file, verifying modes trust the platform's roots where the
/// driver can load them.
///
/// ```
/// use lock_core::{TlsMode, TlsOptions};
///
/// let tls = TlsOptions::new(TlsMode::VerifyFull)
///     .root_cert("/etc/ssl/private-ca.pem")
///     .client_cert("/etc/app/client.pem", "/etc/app/client.key");
/// assert!(tls.is_enabled());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsOptions {
    mode: TlsMode,
    root_cert: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
}

impl TlsOptions {
    /// Options with this mode and no files.
    pub fn new(mode: TlsMode) -> Self {
        Self { mode, root_cert: None, client_cert: None }
    }

    /// Trust the CA certificates in this PEM file (instead of the platform's roots).
    pub fn root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_cert = Some(path.into());
        self
    }

    /// Present this certificate chain (PEM) and its private key (PEM: PKCS#8, PKCS#1 or SEC1)
    /// to servers that ask for one.
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// The same options with another mode.
    pub fn with_mode(mut self, mode: TlsMode) -> Self {
        self.mode = mode;
        self
    }

    /// The mode.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether connections may use TLS at all (any mode but [`Disable`](TlsMode::Disable)).
    pub fn is_enabled(&self) -> bool {
        self.mode != TlsMode::Disable
    }

    /// The root certificate file, if one was given.
    pub fn root_cert_path(&self) -> Option<&Path> {
        self.root_cert.as_deref()
    }

    /// The client certificate and key files, if given.
    pub fn client_cert_paths(&self) -> Option<(&Path, &Path)> {
        self.client_cert.as_ref().map(|(cert, key)| (cert.as_path(), key.as_path()))
    }

    /// What must be checked of the server's certificate: as the mode says, except that
    /// [`Require`](TlsMode::Require) with a root certificate checks the chain (libpq's rule).
    pub fn verification(&self) -> Verification {
        match self.mode {
            TlsMode::Disable | TlsMode::Prefer => Verification::None,
            TlsMode::Require if self.root_cert.is_none() => Verification::None,
            TlsMode::Require | TlsMode::VerifyCa => Verification::Chain,
            TlsMode::VerifyFull => Verification::ChainAndHost,
        }
    }

    /// The root certificate file's contents, if one was given.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the file when it cannot be read.
    pub fn read_root_cert(&self) -> Result<Option<Vec<u8>>> {
        self.root_cert.as_deref().map(|path| read_pem(path, "root certificate")).transpose()
    }

    /// The client certificate's and key's contents, if given.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the file when one cannot be read.
    pub fn read_client_cert(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.client_cert
            .as_ref()
            .map(|(cert, key)| Ok((read_pem(cert, "client certificate")?, read_pem(key, "client key")?)))
            .transpose()
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| {
        Error::invalid_config(format!("cannot read the TLS {what} {}: {error}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_both_vocabularies() {
        for mode in
            [TlsMode::Disable, TlsMode::Prefer, TlsMode::Require, TlsMode::VerifyCa, TlsMode::VerifyFull]
        {
            assert_eq!(TlsMode::from_libpq(mode.as_libpq()).unwrap(), mode);
        }
        assert_eq!(TlsMode::from_mysql("verify_identity").unwrap(), TlsMode::VerifyFull);
        assert_eq!(TlsMode::from_mysql("REQUIRED").unwrap(), TlsMode::Require);
        assert!(matches!(TlsMode::from_libpq("on"), Err(Error::InvalidConfig { .. })));
        let allow = TlsMode::from_libpq("allow").unwrap_err().to_string();
        assert!(allow.contains("not supported"), "{allow}");
        assert!(matches!(TlsMode::from_mysql("verify-full"), Err(Error::InvalidConfig { .. })));
    }

    #[test]
    fn require_with_a_root_checks_the_chain() {
        assert_eq!(TlsOptions::new(TlsMode::Require).verification(), Verification::None);
        assert_eq!(TlsOptions::new(TlsMode::Require).root_cert("ca.pem").verification(), Verification::Chain);
        assert_eq!(TlsOptions::new(TlsMode::VerifyFull).verification(), Verification::ChainAndHost);
        assert_eq!(TlsOptions::new(TlsMode::Prefer).root_cert("ca.pem").verification(), Verification::None);
    }

    #[test]
    fn unreadable_files_are_config_errors_naming_the_file() {
        let tls = TlsOptions::new(TlsMode::VerifyFull).root_cert("/nonexistent/ca.pem");
        let error = tls.read_root_cert().unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { .. }));
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
