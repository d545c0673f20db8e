//! A blocking TLS client connection to a harness server, for the readiness probes and requests
//! of TLS-only servers: rustls with the ring provider (passed explicitly, so the process-wide
//! default provider is neither needed nor touched), trusting only the test CA, checking that
//! the certificate names `127.0.0.1`, and presenting the test client certificate (servers that
//! require one accept it, the others ignore it).

use std::fs;
use std::io::{self, Read as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::TestCa;

/// A TLS connection over TCP, handshake done.
pub(crate) type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects to `port` on 127.0.0.1 and completes the handshake; `timeout` bounds the connect
/// and every later read and write.
///
/// # Errors
/// The connect's or the handshake's failure, as text (a probe's "not ready yet" reason).
pub(crate) fn connect(port: u16, timeout: Duration, ca: &TestCa) -> Result<TlsStream, String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let tcp = TcpStream::connect_timeout(&address, timeout).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let connection = ClientConnection::new(Arc::new(config(ca)?), name).map_err(|e| e.to_string())?;
    let mut stream = StreamOwned::new(connection, tcp);
    // Handshake now, so that a refused certificate reads as such, not as a failed request.
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).map_err(|e| format!("TLS handshake: {e}"))?;
    }
    Ok(stream)
}

/// Reads until the server closes the connection; a close without TLS's `close_notify` (which
/// some servers skip after a one-shot answer) ends the answer too.
pub(crate) fn read_to_close(stream: &mut TlsStream) -> io::Result<Vec<u8>> {
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Ok(answer),
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(answer),
            Err(error) => return Err(error),
        }
    }
}

fn config(ca: &TestCa) -> Result<ClientConfig, String> {
    let pem = |path: &Path| fs::read(path).map_err(|e| format!("reading {path:?}: {e}"));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem(&ca.ca_cert())?) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let chain = CertificateDer::pem_slice_iter(&pem(&ca.client_cert())?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(&pem(&ca.client_key())?).map_err(|e| e.to_string())?;
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())
}
