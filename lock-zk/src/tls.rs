//! TLS to ZooKeeper's `secureClientPort`: the URL's TLS parameters, [`TlsOptions`] made into
//! `zookeeper-client`'s, and what a failed handshake — or a plaintext client at a TLS-only port
//! — is reported as.
//!
//! `zookeeper-client` (feature `tls`) does the handshake with rustls, but drops its error: a
//! refused certificate is only a lost connection to it (logged at debug level), and with
//! `fail_eagerly` the connect ends with "no available hosts". So after a connect that failed
//! that way, [`diagnose`] repeats the handshake itself — same roots, client certificate and
//! verification, rustls with the ring provider — and reports rustls's error as
//! [`Error::Tls`]. A plaintext connect that failed so is checked for a server that accepts TCP
//! connections ([`closed_before_session`]): one that closes them before a session is what a
//! TLS-only port does to a plaintext client, and the error says so.
//!
//! What `zookeeper-client` cannot do, and so the modes refused here: trust the platform's roots
//! (it takes the CA as PEM, so a root certificate file is required) and skip the chain check
//! (`require` without a root certificate).

use std::fmt;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

use lock_core::{Error, Result, TlsMode, TlsOptions};

use crate::error::BACKEND;

/// The URL query parameters that are TLS settings (`redis-cli`'s names, as lock-redis's).
const CACERT: &str = "cacert";
const CERT: &str = "cert";
const KEY: &str = "key";
const SSLMODE: &str = "sslmode";

/// The TLS options of a `zk+tls://` URL's query pairs.
///
/// # Errors
/// [`Error::InvalidConfig`] for an unknown parameter, a `cert` without `key` (or the reverse),
/// or an `sslmode` that is not libpq's.
pub(crate) fn from_query(pairs: Vec<(String, String)>) -> Result<TlsOptions> {
    let (mut root, mut cert, mut key, mut mode) = (None, None, None, None);
    for (name, value) in pairs {
        let slot = match name.as_str() {
            CACERT => &mut root,
            CERT => &mut cert,
            KEY => &mut key,
            SSLMODE => &mut mode,
            other => {
                return Err(Error::invalid_config(format!(
                    "unknown parameter {other:?} in a zk+tls:// URL (cacert, cert, key, sslmode)"
                )))
            }
        };
        *slot = Some(value);
    }
    let mode = mode.as_deref().map_or(Ok(TlsMode::VerifyFull), TlsMode::from_libpq)?;
    let mut options = TlsOptions::new(mode);
    if let Some(root) = root {
        options = options.root_cert(root);
    }
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(options.client_cert(cert, key)),
        (None, None) => Ok(options),
        _ => Err(Error::invalid_config("a client certificate needs both cert= and key=")),
    }
}

/// The options as the backend uses them: `None` for plaintext.
///
/// # Errors
/// [`Error::InvalidConfig`] for what ZooKeeper (or `zookeeper-client`) cannot do: `prefer`, no
/// root certificate file, certificate files with TLS disabled, TLS without the `tls` feature.
pub(crate) fn check(options: &TlsOptions) -> Result<Option<TlsOptions>> {
    let files = options.root_cert_path().is_some() || options.client_cert_paths().is_some();
    match options.mode() {
        TlsMode::Disable if files => {
            Err(Error::invalid_config("TLS is disabled, yet certificate files are given"))
        }
        TlsMode::Disable => Ok(None),
        TlsMode::Prefer => Err(Error::invalid_config(
            "sslmode=prefer needs a server that negotiates TLS; ZooKeeper serves TLS on its own port: \
             use verify-full or verify-ca",
        )),
        _ if options.root_cert_path().is_none() => Err(Error::invalid_config(
            "ZooKeeper TLS needs the CA certificate file (cacert=, TlsOptions::root_cert): \
             zookeeper-client neither reads the platform's roots nor skips the chain check",
        )),
        _ if cfg!(not(feature = "tls")) => {
            Err(Error::invalid_config("ZooKeeper TLS needs lock-zk's `tls` feature"))
        }
        _ => Ok(Some(options.clone())),
    }
}

/// The `host:port` pairs of a connect string (`host[:port][,…]`, with `tcp://`/`tcp+tls://`
/// prefixes and a chroot suffix allowed; 2181 by default).
fn endpoints(connect_string: &str) -> Vec<(String, u16)> {
    connect_string
        .split(',')
        .map(|host| host.trim().trim_start_matches("tcp+tls://").trim_start_matches("tcp://"))
        .map(|host| host.split('/').next().unwrap_or_default())
        .filter(|host| !host.is_empty())
        .filter_map(|host| {
            let (name, port) = match host.rsplit_once(':') {
                Some((name, port)) if !name.ends_with(':') => (name, port.parse().ok()?),
                _ => (host, 2181),
            };
            Some((name.trim_start_matches('[').trim_end_matches(']').to_owned(), port))
        })
        .collect()
}

/// A TCP connection to `host:port`, within `timeout`.
fn tcp(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let address: SocketAddr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// A plaintext connect that found no server to establish a session with, although one accepts
/// TCP connections: it closed them before a session (what a TLS-only port does).
#[derive(Debug)]
struct ClosedBeforeSession {
    endpoint: String,
    source: zookeeper_client::Error,
}

impl fmt::Display for ClosedBeforeSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} accepts connections but closed them before a session was established (a TLS-only \
             port, ZooKeeper's secureClientPort, does that to plaintext clients: use zk+tls://)",
            self.endpoint
        )
    }
}

impl std::error::Error for ClosedBeforeSession {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// After a plaintext connect failed with `error` (no session, quickly: the servers refused or
/// closed the connections): [`Error::Connection`] that says a TLS-only port may be the cause, if
/// a server of `connect_string` accepts TCP connections, checked until `deadline`.
pub(crate) fn closed_before_session(
    connect_string: &str,
    error: &zookeeper_client::Error,
    deadline: Instant,
) -> Option<Error> {
    endpoints(connect_string).into_iter().find_map(|(host, port)| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        tcp(&host, port, left).ok()?;
        let source = ClosedBeforeSession { endpoint: format!("{host}:{port}"), source: error.clone() };
        Some(Error::Connection { backend: BACKEND, source: Box::new(source) })
    })
}

#[cfg(feature = "tls")]
pub(crate) use with_rustls::{client_options, diagnose};

#[cfg(feature = "tls")]
mod with_rustls {
    use std::io::Read as _;
    use std::sync::{Arc, Once};
    use std::time::{Duration, Instant};

    use lock_core::{Error, Result, TlsOptions, Verification};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};
    use zookeeper_client as zk;

    use super::{endpoints, tcp};
    use crate::error::BACKEND;

    /// How long the diagnosis waits, after its handshake, for the server to refuse it (TLS 1.3
    /// servers refuse a client certificate after the client's side of the handshake is done).
    const REFUSAL_WAIT: Duration = Duration::from_millis(300);

    /// `zookeeper-client`'s options for `options` (checked by [`super::check`]), the files read
    /// now, so that a new session picks up rotated certificates.
    ///
    /// Installs ring as rustls's process-wide crypto provider first, unless the application
    /// installed one: `zookeeper-client` builds its config with `ClientConfig::builder()`,
    /// which panics when no default is installed and both ring and aws-lc-rs are compiled in
    /// (its `rustls` dependency brings aws-lc-rs).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming a file that cannot be read or holds no usable PEM.
    pub(crate) fn client_options(options: &TlsOptions) -> Result<zk::TlsOptions> {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let text = |pem: Vec<u8>, what: &str| {
            String::from_utf8(pem)
                .map_err(|_| Error::invalid_config(format!("the TLS {what} file is not PEM text")))
        };
        let bad = |what: &'static str| {
            move |error: zk::Error| Error::invalid_config(format!("the TLS {what} file: {error}"))
        };
        let root =
            options.read_root_cert()?.ok_or_else(|| Error::invalid_config("no CA certificate file"))?;
        let mut client = zk::TlsOptions::new()
            .with_pem_ca(&text(root, "CA certificate")?)
            .map_err(bad("CA certificate"))?;
        if let Some((cert, key)) = options.read_client_cert()? {
            let (cert, key) = (text(cert, "client certificate")?, text(key, "client key")?);
            client = client.with_pem_identity(&cert, &key).map_err(bad("client certificate or key"))?;
        }
        Ok(match options.verification() {
            Verification::ChainAndHost => client,
            Verification::Chain => skip_host_name(client),
            Verification::None => unreachable!("checked: ZooKeeper TLS always has a root certificate"),
        })
    }

    /// `verify-ca`: the chain is checked, the host name is not — what the user asked for.
    #[allow(unsafe_code)]
    fn skip_host_name(options: zk::TlsOptions) -> zk::TlsOptions {
        // SAFETY: not a memory-safety contract: `zookeeper-client` marks this `unsafe` to flag
        // the weaker check (a certificate of the trusted CA for any host is accepted), which
        // is what `TlsMode::VerifyCa` means and the caller chose.
        unsafe { options.with_no_hostname_verification() }
    }

    /// What a failed handshake is reported as: rustls's error, or the server closing the
    /// connection during the handshake, with the endpoint.
    #[derive(Debug, thiserror::Error)]
    enum TlsFailure {
        #[error("connect to {endpoint}: {source}")]
        Handshake {
            endpoint: String,
            #[source]
            source: rustls::Error,
        },
        #[error("connect to {endpoint}: the server closed the connection during the TLS handshake (is its port a TLS one, ZooKeeper's secureClientPort?)")]
        Closed {
            endpoint: String,
            #[source]
            source: std::io::Error,
        },
    }

    /// After a TLS connect failed without a session: the handshake with each server of
    /// `connect_string` in turn, done here as `zookeeper-client` does it, until `deadline`;
    /// [`Error::Tls`] for the first that fails. `None` when every handshake succeeds (or the
    /// servers cannot be reached): the failure was something else.
    pub(crate) fn diagnose(connect_string: &str, options: &TlsOptions, deadline: Instant) -> Option<Error> {
        let config = Arc::new(config(options).ok()?);
        endpoints(connect_string).into_iter().find_map(|(host, port)| {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let endpoint = format!("{host}:{port}");
            let failure = match handshake(&config, &host, port, (left, deadline)) {
                Ok(()) | Err(Outcome::Unreachable) => return None,
                Err(Outcome::Refused(source)) => TlsFailure::Handshake { endpoint, source },
                Err(Outcome::Closed(source)) => TlsFailure::Closed { endpoint, source },
            };
            Some(Error::Tls { backend: BACKEND, source: Box::new(failure) })
        })
    }

    enum Outcome {
        Unreachable,
        Refused(rustls::Error),
        Closed(std::io::Error),
    }

    /// One handshake, every step of it bounded by what is left until `deadline` (`timeout`
    /// at the start).
    fn handshake(
        config: &Arc<ClientConfig>,
        host: &str,
        port: u16,
        (timeout, deadline): (Duration, Instant),
    ) -> Result<(), Outcome> {
        let mut socket = tcp(host, port, timeout).map_err(|_| Outcome::Unreachable)?;
        // Each read and write may take what is left, no more.
        let bound = |socket: &std::net::TcpStream, cap: Duration| {
            let left = deadline.saturating_duration_since(Instant::now()).min(cap);
            if left.is_zero() {
                return Err(Outcome::Unreachable);
            }
            socket
                .set_read_timeout(Some(left))
                .and_then(|()| socket.set_write_timeout(Some(left)))
                .map_err(|_| Outcome::Unreachable)
        };
        let name = ServerName::try_from(host.to_owned()).map_err(|_| Outcome::Unreachable)?;
        let mut connection = ClientConnection::new(Arc::clone(config), name).map_err(Outcome::Refused)?;
        let failed =
            |error: std::io::Error| match error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                Some(tls) => Outcome::Refused(tls.clone()),
                None if matches!(
                    error.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                ) =>
                {
                    Outcome::Closed(error)
                }
                None => Outcome::Unreachable,
            };
        while connection.is_handshaking() {
            bound(&socket, timeout)?;
            connection.complete_io(&mut socket).map_err(failed)?;
        }
        // A refusal of the client's certificate comes after the client's side is done.
        bound(&socket, REFUSAL_WAIT)?;
        let mut stream = rustls::Stream::new(&mut connection, &mut socket);
        match stream.read(&mut [0; 1]) {
            Err(error) if error.get_ref().is_some_and(|e| e.is::<rustls::Error>()) => Err(failed(error)),
            // Data, a timeout (the server waits for the ZooKeeper handshake): accepted.
            _ => Ok(()),
        }
    }

    /// A rustls config that checks what `zookeeper-client`'s does for `options`.
    fn config(options: &TlsOptions) -> Result<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bad = |error: rustls::Error| Error::invalid_config(format!("TLS settings: {error}"));
        let pem = |error: rustls::pki_types::pem::Error| Error::invalid_config(format!("TLS files: {error}"));
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&options.read_root_cert()?.unwrap_or_default()) {
            roots.add(cert.map_err(pem)?).map_err(bad)?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(|error| Error::invalid_config(format!("TLS roots: {error}")))?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(bad)?;
        let builder = match options.verification() {
            Verification::Chain => {
                builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
            }
            _ => builder.with_webpki_verifier(verifier),
        };
        match options.read_client_cert()? {
            Some((cert, key)) => {
                let chain =
                    CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>().map_err(pem)?;
                builder
                    .with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(&key).map_err(pem)?)
                    .map_err(bad)
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }

    /// Checks the chain and accepts any host name (`verify-ca`), as `zookeeper-client`'s
    /// verifier without host-name verification does.
    #[derive(Debug)]
    struct ChainOnly(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::Verification;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn url_parameters_become_options() {
        let options =
            from_query(pairs(&[("cacert", "/ca.pem"), ("cert", "c.pem"), ("key", "k.pem")])).unwrap();
        let expected =
            TlsOptions::new(TlsMode::VerifyFull).root_cert("/ca.pem").client_cert("c.pem", "k.pem");
        assert_eq!(options, expected);
        let chain = from_query(pairs(&[("cacert", "ca.pem"), ("sslmode", "verify-ca")])).unwrap();
        assert_eq!(chain.verification(), Verification::Chain);
        for bad in [&[("cert", "c.pem")][..], &[("key", "k.pem")], &[("sslmode", "on")], &[("timeout", "1")]]
        {
            assert!(matches!(from_query(pairs(bad)), Err(Error::InvalidConfig { .. })), "{bad:?}");
        }
    }

    #[test]
    fn modes_zookeeper_cannot_do_are_refused() {
        let with_root = |mode| TlsOptions::new(mode).root_cert("ca.pem");
        assert!(check(&with_root(TlsMode::Prefer)).is_err());
        assert!(check(&TlsOptions::new(TlsMode::VerifyFull)).is_err(), "no root certificate");
        assert!(check(&TlsOptions::new(TlsMode::Require)).is_err(), "no check at all");
        assert!(check(&with_root(TlsMode::Disable)).is_err(), "files without TLS");
        assert_eq!(check(&TlsOptions::new(TlsMode::Disable)).unwrap(), None);
        for mode in [TlsMode::Require, TlsMode::VerifyCa, TlsMode::VerifyFull] {
            assert_eq!(check(&with_root(mode)).is_ok(), cfg!(feature = "tls"), "{mode}");
        }
    }

    /// With ring and aws-lc-rs both compiled in (zookeeper-client's rustls brings aws-lc-rs),
    /// rustls's `ClientConfig::builder()` has no provider to pick unless one is installed.
    #[cfg(feature = "tls")]
    #[test]
    fn client_options_install_ring_as_the_process_default() {
        let ca = lock_testkit::harness::TestCa::shared().unwrap();
        let options = TlsOptions::new(TlsMode::VerifyCa)
            .root_cert(ca.ca_cert())
            .client_cert(ca.client_cert(), ca.client_key());
        client_options(&options).unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        let unreadable = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca.client_key());
        assert!(matches!(client_options(&unreadable), Err(Error::InvalidConfig { .. })), "a key is no CA");
    }

    #[test]
    fn connect_strings_give_endpoints() {
        assert_eq!(
            endpoints("h1:2182, tcp+tls://h2,[::1]:7000/chroot"),
            [("h1".to_owned(), 2182), ("h2".to_owned(), 2181), ("::1".to_owned(), 7000)]
        );
    }
}
