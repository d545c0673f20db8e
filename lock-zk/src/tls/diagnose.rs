//! A failed TLS handshake, named: `zookeeper-client` drops rustls's error (a refused certificate
//! is only a lost connection to it), so [`diagnose`] repeats the handshake with the same roots,
//! client certificate and verification, and reports rustls's error; [`client_options`] turns
//! [`TlsOptions`] into `zookeeper-client`'s.

use std::io::Read as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, Result, TlsOptions, Verification};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};
use zookeeper_client as zk;

use super::probe::{endpoints, tcp};
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
    lock_core::install_ring_provider();
    let text = |pem: Vec<u8>, what: &str| {
        String::from_utf8(pem)
            .map_err(|_| Error::invalid_config(format!("the TLS {what} file is not PEM text")))
    };
    let bad = |what: &'static str| {
        move |error: zk::Error| Error::invalid_config(format!("the TLS {what} file: {error}"))
    };
    let root = options.read_root_cert()?.ok_or_else(|| Error::invalid_config("no CA certificate file"))?;
    let mut client =
        zk::TlsOptions::new().with_pem_ca(&text(root, "CA certificate")?).map_err(bad("CA certificate"))?;
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
    let failed = |error: std::io::Error| match error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
    {
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
    let builder =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions().map_err(bad)?;
    let builder = match options.verification() {
        Verification::Chain => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
        }
        _ => builder.with_webpki_verifier(verifier),
    };
    match options.read_client_cert()? {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>().map_err(pem)?;
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
