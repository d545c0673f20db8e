//! TLS for every Redis URL and deployment: the URL's TLS parameters, the builders'
//! [`TlsOptions`], and what a failed handshake or a plaintext client at a TLS port is reported as.
//!
//! | URL part | meaning |
//! | --- | --- |
//! | `rediss://`, `rediss+sentinel://`, `rediss+cluster://` | TLS, [`VerifyFull`](TlsMode::VerifyFull) unless said otherwise |
//! | `?cacert=<file>` | trust the CA certificates in this PEM file instead of the platform's roots |
//! | `?cert=<file>&key=<file>` | present this client certificate chain and key (PEM) |
//! | `?sslmode=verify-full\|verify-ca\|require` | libpq's modes: check chain and host name, the chain only, or (without `cacert`) nothing |
//! | `#insecure` | redis-rs's spelling of `sslmode=require` without `cacert`: no check at all |
//!
//! The names are `redis-cli`'s flags (`--cacert`, `--cert`, `--key`). They are taken out of the
//! URL before redis-rs parses it (it would ignore them, and the Sentinel and Cluster URL
//! parsers refuse unknown options), and apply to every server the URL leads to: the node, the
//! sentinels and the primary they name, or every cluster node. Files are read once, when the
//! backend is built.
//!
//! redis-rs does the handshake (rustls); verification without the host name
//! ([`VerifyCa`](TlsMode::VerifyCa)) and without anything (`#insecure`) are its
//! `danger_accept_invalid_hostnames` and `insecure` switches (feature `tls-rustls-insecure`).

use std::fmt;

use lock_core::{TlsMode, TlsOptions, TlsParameters, TlsVocabulary, Verification};
use redis::{ConnectionAddr, ConnectionInfo, RedisError};

/// `url` without its TLS parameters (and `#insecure`), and the TLS options the URL gives:
/// `None` for a plaintext scheme (`redis://…`), which must then have no TLS parameter.
///
/// # Errors
/// A description of the mistake (never the URL's password): a TLS parameter on a plaintext
/// URL, a `cert` without `key` (or the reverse), an unknown or impossible `sslmode`, `cacert`
/// with `#insecure`, a parameter that is not UTF-8 once decoded.
pub(crate) fn split_url(url: &str) -> Result<(String, Option<TlsOptions>), String> {
    let vocabulary = &TlsVocabulary::REDIS_CLI;
    let (scheme, _) = url.split_once("://").unwrap_or(("", url));
    let is_tls = matches!(
        scheme.to_ascii_lowercase().as_str(),
        "rediss" | "rediss+sentinel" | "rediss+cluster" | "valkeys"
    );
    // redis-rs knows no fragment but `#insecure`; it reports any other itself.
    let (url, insecure) = match url.strip_suffix("#insecure") {
        Some(url) => (url, true),
        None => (url, false),
    };
    let (stripped, taken) =
        TlsParameters::take_from_url(url, vocabulary).map_err(|error| error.to_string())?;
    if !is_tls {
        if insecure {
            return Err("#insecure is a TLS setting: use a rediss:// URL".into());
        }
        if !taken.is_empty() {
            let [cacert, cert, key, sslmode] = vocabulary.names();
            return Err(format!(
                "{cacert}=, {cert}=, {key}= and {sslmode}= are TLS settings: use a rediss:// URL (or \
                 rediss+sentinel://, rediss+cluster://)"
            ));
        }
        return Ok((stripped, None));
    }
    let default_mode = match (taken.mode, insecure) {
        (Some(_), true) => return Err("#insecure and sslmode= both set the TLS mode: keep one".into()),
        (None, true) => TlsMode::Require,
        (_, false) => TlsMode::VerifyFull,
    };
    if insecure && taken.root.is_some() {
        return Err("#insecure checks no certificate, so cacert= would be ignored: drop one (sslmode=verify-ca checks the chain only)".into());
    }
    let options = taken.into_options(vocabulary, default_mode).map_err(|error| error.to_string())?;
    check_mode(&options)?;
    Ok((stripped, Some(options)))
}

/// Refuses the modes Redis cannot do: it has no plaintext fallback to negotiate.
fn check_mode(options: &TlsOptions) -> Result<(), String> {
    match options.mode() {
        TlsMode::Prefer => Err("sslmode=prefer needs a server that negotiates TLS; Redis does not: \
                                use require, verify-ca or verify-full"
            .into()),
        TlsMode::Disable if options.root_cert_path().is_some() || options.client_cert_paths().is_some() => {
            Err("TLS is disabled, yet certificate files are given".into())
        }
        _ => Ok(()),
    }
}

/// TLS settings loaded for use: the verification and the certificates' contents.
#[derive(Clone)]
pub(crate) struct TlsConfig {
    /// `None`: plaintext.
    tls: Option<Loaded>,
}

#[derive(Clone)]
struct Loaded {
    verification: Verification,
    #[cfg(feature = "tls")]
    certificates: redis::TlsCertificates,
}

impl TlsConfig {
    /// Checks `options` and reads their files.
    ///
    /// # Errors
    /// A description of what is wrong: a mode Redis cannot do, an unreadable file, TLS without
    /// the `tls` feature.
    pub(crate) fn load(options: &TlsOptions) -> Result<Self, String> {
        check_mode(options)?;
        if !options.is_enabled() {
            return Ok(TlsConfig { tls: None });
        }
        Self::load_enabled(options)
    }

    #[cfg(feature = "tls")]
    fn load_enabled(options: &TlsOptions) -> Result<Self, String> {
        let reason = |error: lock_core::Error| error.to_string();
        let certificates = redis::TlsCertificates {
            root_cert: options.read_root_cert().map_err(reason)?,
            client_tls: options
                .read_client_cert()
                .map_err(reason)?
                .map(|(client_cert, client_key)| redis::ClientTlsConfig { client_cert, client_key }),
        };
        Ok(TlsConfig { tls: Some(Loaded { verification: options.verification(), certificates }) })
    }

    #[cfg(not(feature = "tls"))]
    fn load_enabled(options: &TlsOptions) -> Result<Self, String> {
        let _ = options;
        Err("TLS needs lock-redis's `tls` feature".into())
    }

    /// `info` with these TLS settings: the same host, port, credentials and database, over TLS
    /// (or plaintext).
    ///
    /// # Errors
    /// A Unix socket (no TLS there); certificates that do not parse.
    pub(crate) fn apply(&self, info: &ConnectionInfo) -> Result<ConnectionInfo, String> {
        let (host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.clone(), *port)
            }
            _ if self.tls.is_none() => return Ok(info.clone()),
            _ => return Err("TLS needs a TCP address, not a Unix socket".into()),
        };
        match &self.tls {
            None => Ok(info.clone().set_addr(ConnectionAddr::Tcp(host, port))),
            Some(loaded) => loaded.apply(info, host, port),
        }
    }
}

impl Loaded {
    #[cfg(feature = "tls")]
    fn apply(&self, info: &ConnectionInfo, host: String, port: u16) -> Result<ConnectionInfo, String> {
        let insecure = self.verification == Verification::None;
        let info = info.clone().set_addr(ConnectionAddr::TcpTls { host, port, insecure, tls_params: None });
        let client = redis::Client::build_with_tls(info, self.certificates.clone())
            .map_err(|error| format!("the TLS certificates: {error}"))?;
        let info = client.get_connection_info().clone();
        if self.verification != Verification::Chain {
            return Ok(info);
        }
        let mut addr = info.addr().clone();
        addr.set_danger_accept_invalid_hostnames(true);
        Ok(info.set_addr(addr))
    }

    #[cfg(not(feature = "tls"))]
    fn apply(&self, _: &ConnectionInfo, _: String, _: u16) -> Result<ConnectionInfo, String> {
        unreachable!("TLS settings are only loaded with the `tls` feature")
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the certificates' contents.
        f.debug_struct("TlsConfig").field("verification", &self.tls.as_ref().map(|t| t.verification)).finish()
    }
}

/// A redis-rs client for a single-server `url`, with the URL's TLS parameters applied (for
/// connections that go around the backend: the test support's probes).
///
/// # Errors
/// As [`split_url`] and [`TlsConfig::load`], or a URL redis-rs refuses.
#[cfg(feature = "testkit")]
pub(crate) fn open_client(url: &str) -> Result<redis::Client, String> {
    let (plain, tls) = split_url(url)?;
    let client =
        redis::Client::open(plain.as_str()).map_err(|error| format!("invalid Redis URL: {error}"))?;
    let Some(options) = tls else { return Ok(client) };
    install_provider();
    let info = TlsConfig::load(&options)?.apply(client.get_connection_info())?;
    redis::Client::open(info).map_err(|error| error.to_string())
}

/// [`lock_core::install_ring_provider`] with TLS compiled in; nothing without.
pub(crate) fn install_provider() {
    #[cfg(feature = "tls")]
    lock_core::install_ring_provider();
}

/// The rustls error behind `error`, if a TLS handshake (or a later TLS record) failed.
///
/// redis-rs keeps the I/O error as an `Arc<dyn Error>` source, and the I/O error holds the
/// rustls error as its inner error (not as a source): each layer is looked into.
#[cfg(feature = "tls")]
pub(crate) fn rustls_cause(error: &RedisError) -> Option<rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    fn look_into(error: &(dyn std::error::Error + 'static)) -> Option<rustls::Error> {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls.clone());
        }
        if let Some(shared) = error.downcast_ref::<Shared>() {
            return look_into(&**shared);
        }
        if let Some(inner) = error.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            return look_into(inner);
        }
        error.source().and_then(look_into)
    }
    look_into(error)
}

/// A plaintext connection the server closed during the connection setup: what a TLS-only port
/// does to a plaintext client (Redis resets it after a failed handshake).
#[derive(Debug)]
struct ClosedDuringSetup(RedisError);

impl fmt::Display for ClosedDuringSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the server closed the connection during the connection setup \
             (a TLS-only port does that to plaintext clients: use a rediss:// URL)",
        )
    }
}

impl std::error::Error for ClosedDuringSetup {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// `error`, from setting up a connection at `addr`, with the hint that the port may serve TLS
/// only when a plaintext connection was closed or reset by the server (not refused). Still an
/// I/O error of a dropped connection, so it keeps its meaning (and retry rules).
pub(crate) fn explain_setup_failure(addr: &ConnectionAddr, error: RedisError) -> RedisError {
    let closed = error.is_connection_dropped() && !error.is_connection_refusal() && !error.is_timeout();
    if !matches!(addr, ConnectionAddr::Tcp(..)) || !closed {
        return error;
    }
    RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionReset, ClosedDuringSetup(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, Option<TlsOptions>) {
        split_url(url).unwrap_or_else(|error| panic!("{url}: {error}"))
    }

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let (url, tls) =
            split("rediss://:pw@h:6380/2?cacert=%2Fetc%2Fca.pem&cert=c.pem&key=k.pem&protocol=resp3");
        assert_eq!(url, "rediss://:pw@h:6380/2?protocol=resp3");
        let expected =
            TlsOptions::new(TlsMode::VerifyFull).root_cert("/etc/ca.pem").client_cert("c.pem", "k.pem");
        assert_eq!(tls, Some(expected));

        let (url, tls) =
            split("rediss+sentinel://s1,s2/m?sentinel_password=x&sslmode=verify-ca&cacert=ca.pem");
        assert_eq!(url, "rediss+sentinel://s1,s2/m?sentinel_password=x");
        assert_eq!(tls.unwrap().verification(), Verification::Chain);

        let (url, tls) = split("rediss://h/#insecure");
        assert_eq!(url, "rediss://h/");
        assert_eq!(tls.unwrap().verification(), Verification::None);

        let (url, tls) = split("rediss+cluster://n1,n2/");
        assert_eq!(url, "rediss+cluster://n1,n2/");
        assert_eq!(tls, Some(TlsOptions::new(TlsMode::VerifyFull)));

        let (url, tls) = split("redis://:p%40ss@h:1/?protocol=3");
        assert_eq!((url.as_str(), tls), ("redis://:p%40ss@h:1/?protocol=3", None));
        // A `+` in a form-encoded value is a space, as in the rest of the query.
        assert_eq!(split("rediss://h/?cacert=my+ca.pem").1.unwrap().root_cert_path().unwrap(), "my ca.pem");
    }

    #[test]
    fn impossible_tls_settings_are_refused_without_the_password() {
        for url in [
            "redis://:hunter2@h/?cacert=ca.pem",
            "redis+sentinel://:hunter2@s/m?sslmode=require",
            "rediss://:hunter2@h/?cert=c.pem",
            "rediss://:hunter2@h/?key=k.pem",
            "rediss://:hunter2@h/?sslmode=prefer",
            "rediss://:hunter2@h/?sslmode=disable&cacert=ca.pem",
            "rediss://:hunter2@h/?sslmode=on",
            "rediss://:hunter2@h/?cacert=ca.pem#insecure",
            "rediss://:hunter2@h/?sslmode=verify-ca#insecure",
            "rediss://:hunter2@h/?cacert=%FF",
            "redis://:hunter2@h/#insecure",
        ] {
            let error = split_url(url).err().unwrap_or_else(|| panic!("{url} was accepted"));
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
    }

    #[test]
    fn loading_reports_unreadable_files_and_modes_redis_cannot_do() {
        let missing = TlsOptions::new(TlsMode::VerifyFull).root_cert("/nonexistent/ca.pem");
        let error = TlsConfig::load(&missing).unwrap_err();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
        assert!(TlsConfig::load(&TlsOptions::new(TlsMode::Prefer)).is_err());
        assert!(TlsConfig::load(&TlsOptions::new(TlsMode::Disable)).unwrap().tls.is_none());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn modes_become_redis_rs_switches_on_every_address() {
        let plain = redis::IntoConnectionInfo::into_connection_info("redis://:pw@h:7000/3").unwrap();
        let apply = |options: TlsOptions| TlsConfig::load(&options).unwrap().apply(&plain).unwrap();
        let full = apply(TlsOptions::new(TlsMode::VerifyFull));
        assert!(matches!(full.addr(), ConnectionAddr::TcpTls { insecure: false, .. }));
        assert_eq!((full.redis_settings().password(), full.redis_settings().db()), (Some("pw"), 3));
        let none = apply(TlsOptions::new(TlsMode::Require));
        assert!(matches!(none.addr(), ConnectionAddr::TcpTls { insecure: true, .. }));
        // Chain only: redis-rs's parameters carry the switch (not inspectable), so at least the
        // address stays a verifying one.
        let chain = apply(TlsOptions::new(TlsMode::VerifyCa));
        assert!(matches!(chain.addr(), ConnectionAddr::TcpTls { insecure: false, tls_params: Some(_), .. }));
        let disabled = TlsConfig::load(&TlsOptions::new(TlsMode::Disable)).unwrap().apply(&full).unwrap();
        assert!(matches!(disabled.addr(), ConnectionAddr::Tcp(..)));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn the_rustls_error_is_found_behind_redis_rs_layers() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        assert_eq!(rustls_cause(&RedisError::from(io)), Some(tls.clone()));
        assert_eq!(rustls_cause(&RedisError::from(tls.clone())), Some(tls));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(rustls_cause(&RedisError::from(reset)), None);
    }

    #[test]
    fn a_plaintext_connection_closed_in_setup_says_the_port_may_be_tls_only() {
        let plain = ConnectionAddr::Tcp("h".into(), 1);
        let reset = || RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let explained = explain_setup_failure(&plain, reset());
        assert!(explained.to_string().contains("rediss://"), "{explained}");
        assert!(explained.is_connection_dropped(), "the meaning stays");
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!explain_setup_failure(&plain, refused).to_string().contains("rediss://"));
        let tls = ConnectionAddr::TcpTls { host: "h".into(), port: 1, insecure: false, tls_params: None };
        assert!(!explain_setup_failure(&tls, reset()).to_string().contains("rediss://"));
    }
}
