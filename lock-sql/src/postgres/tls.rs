//! TLS for PostgreSQL connections: a rustls client config (ring provider, built explicitly so
//! that no process-wide provider is needed) behind `tokio-postgres-rustls`'s connector, which
//! also gives SCRAM its channel binding (`SCRAM-SHA-256-PLUS`).
//!
//! libpq's modes, as [`TlsOptions::verification`] says: `disable` never asks for TLS; `prefer`
//! asks and goes on in plaintext when the server declines (a server that accepts and then fails
//! the handshake is an error, as in tokio-postgres; libpq would retry in plaintext), checking
//! nothing; `require` checks nothing without `sslrootcert` and the chain with it; `verify-ca`
//! the chain only; `verify-full` the chain and that the certificate names the host (or IP
//! address) of the URL. Without `sslrootcert` the checking modes trust the platform's roots
//! (`rustls-native-certs`: the system store that the OS's packages and administrators keep, so
//! a company CA installed there works, as with libpq's `sslrootcert=system`).

use std::sync::Arc;

use lock_core::{Error, Result, TlsMode, TlsOptions, Verification};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What tokio-postgres is told: it knows `disable`, `prefer` and `require` only; the checks of
/// `verify-ca` and `verify-full` are the connector's.
pub(crate) fn ssl_mode(mode: TlsMode) -> SslMode {
    match mode {
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        _ => SslMode::Require,
    }
}

/// The connector for `tls` (with [`TlsMode::Disable`] it is never used, and checks nothing).
///
/// # Errors
/// [`Error::InvalidConfig`] for unreadable or malformed files, or when a checking mode has
/// no root certificate file and the platform's store yields no certificate.
pub(crate) fn connector(tls: &TlsOptions) -> Result<MakeRustlsConnect> {
    let invalid = |error: rustls::Error| Error::invalid_config(format!("TLS client setup: {error}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let loaded = crate::tls::load(tls)?;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(invalid)?;
    let builder = match tls.verification() {
        Verification::ChainAndHost => builder.with_root_certificates(roots(loaded.roots)?),
        Verification::Chain => {
            let chain = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(loaded.roots)?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|error| Error::invalid_config(format!("TLS client setup: {error}")))?;
            let verifier = Verifier { chain: Some(chain), provider };
            builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
        }
        Verification::None => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(Verifier { chain: None, provider }))
        }
    };
    let config = match loaded.identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(invalid)?,
        None => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The roots of the file, or else the platform's.
fn roots(file: Option<Vec<CertificateDer<'static>>>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    let (added, _) = match file {
        Some(certs) => store.add_parsable_certificates(certs),
        None => {
            let platform = rustls_native_certs::load_native_certs();
            if platform.certs.is_empty() {
                let errors: Vec<String> = platform.errors.iter().map(ToString::to_string).collect();
                return Err(Error::invalid_config(format!(
                    "no sslrootcert given and no platform root certificate found ({}): name a root \
                     certificate file",
                    if errors.is_empty() { "the store is empty".to_owned() } else { errors.join("; ") }
                )));
            }
            store.add_parsable_certificates(platform.certs)
        }
    };
    if added == 0 {
        return Err(Error::invalid_config("no usable root certificate in sslrootcert"));
    }
    Ok(store)
}

/// The server-certificate check of `prefer`, `require` (without roots) and `verify-ca`: the
/// handshake's signatures always (the server must own the key it shows), and with `chain` the
/// certificate's chain to a trusted root but not its name.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl Verifier {
    fn algorithms(&self) -> &WebPkiSupportedAlgorithms {
        &self.provider.signature_verification_algorithms
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        // webpki checks the name only once the chain is good: a name error means the chain is.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, self.algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, self.algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms().supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_modes_tokio_postgres_knows_reach_it() {
        assert_eq!(ssl_mode(TlsMode::Disable), SslMode::Disable);
        assert_eq!(ssl_mode(TlsMode::Prefer), SslMode::Prefer);
        for mode in [TlsMode::Require, TlsMode::VerifyCa, TlsMode::VerifyFull] {
            assert_eq!(ssl_mode(mode), SslMode::Require);
        }
    }

    #[test]
    fn modes_that_check_nothing_need_no_roots() {
        for mode in [TlsMode::Disable, TlsMode::Prefer, TlsMode::Require] {
            assert!(connector(&TlsOptions::new(mode)).is_ok(), "{mode}");
        }
    }
}
