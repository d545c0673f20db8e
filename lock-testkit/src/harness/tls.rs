//! A throwaway certificate authority per test binary, for TLS-only servers and their clients.
//!
//! [`TestCa::shared`] makes one CA, a server certificate and a client certificate signed by
//! it, and a second, unrelated CA — all fresh ECDSA P-256 keys, written as PEM files into a
//! private temp dir. The server certificate names only the IP address `127.0.0.1`
//! ([`TestCa::SERVER_HOST`]), so connecting by the name `localhost`
//! ([`TestCa::UNLISTED_HOST`]) is the "wrong host name" case of `verify-full`, and trusting
//! only [`other_ca_cert`](TestCa::other_ca_cert) is the "wrong CA" case.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tempfile::TempDir;

use super::command::RunAs;
use super::{dirs, HarnessError};

/// A CA with a server and a client certificate, as PEM files, and a second, unrelated CA: fresh
/// ECDSA P-256 keys in a private temp dir. The server certificate names only `127.0.0.1`
/// ([`SERVER_HOST`](Self::SERVER_HOST)), so `localhost` ([`UNLISTED_HOST`](Self::UNLISTED_HOST))
/// is a wrong host name for `verify-full`, and trusting only
/// [`other_ca_cert`](Self::other_ca_cert) is a wrong CA.
#[derive(Debug)]
pub struct TestCa {
    // Holds the files for as long as the CA lives (the shared one: the whole test binary).
    dir: TempDir,
}

/// The server's certificate files, copied into a server's own dir (see
/// [`TestCa::install_server_files`]).
#[derive(Debug, Clone)]
pub(crate) struct ServerTlsFiles {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PKCS#8 PEM), readable by the server's account only.
    pub key: PathBuf,
    /// The CA certificate, for servers that also check client certificates.
    pub ca: PathBuf,
}

const CA_CERT: &str = "ca.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server.key";
const CLIENT_CERT: &str = "client.pem";
const CLIENT_KEY: &str = "client.key";
const OTHER_CA_CERT: &str = "other-ca.pem";

impl TestCa {
    /// The only name in the server certificate: the address every harness server listens on.
    pub const SERVER_HOST: &'static str = "127.0.0.1";
    /// A name of the same server that its certificate does not list.
    pub const UNLISTED_HOST: &'static str = "localhost";
    /// The client certificate's common name: the user a TLS-only server lets in by that
    /// certificate alone.
    pub const CLIENT_NAME: &'static str = "distlock-client";

    /// The CA shared by every TLS server and client of this test binary, made on first use.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the certificates cannot be made or written.
    pub fn shared() -> Result<&'static TestCa, HarnessError> {
        static SHARED: OnceLock<TestCa> = OnceLock::new();
        if let Some(ca) = SHARED.get() {
            return Ok(ca);
        }
        let ca = TestCa::generate()?;
        Ok(SHARED.get_or_init(|| ca))
    }

    /// A new CA and certificates in a new private dir, removed when the value drops.
    ///
    /// # Errors
    /// As [`shared`](Self::shared).
    pub fn generate() -> Result<TestCa, HarnessError> {
        let dir = dirs::create_named(dirs::TLS_SLUG)?;
        let setup = |step: &str, error: rcgen::Error| {
            HarnessError::io(format!("making the test CA's {step}"), std::io::Error::other(error))
        };

        let (ca_cert, ca_key) = certificate_authority("distlock test CA").map_err(|e| setup("root", e))?;
        let issuer = Issuer::new(ca_params("distlock test CA"), ca_key);
        let mut server = CertificateParams::new(Vec::<String>::new()).map_err(|e| setup("server", e))?;
        server.distinguished_name.push(DnType::CommonName, Self::SERVER_HOST);
        server.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(|e| setup("server key", e))?;
        let server_cert = server.signed_by(&server_key, &issuer).map_err(|e| setup("server", e))?;

        let mut client =
            CertificateParams::new(vec![Self::CLIENT_NAME.to_owned()]).map_err(|e| setup("client", e))?;
        client.distinguished_name.push(DnType::CommonName, Self::CLIENT_NAME);
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(|e| setup("client key", e))?;
        let client_cert = client.signed_by(&client_key, &issuer).map_err(|e| setup("client", e))?;

        let (other_ca, _) = certificate_authority("unrelated test CA").map_err(|e| setup("other root", e))?;

        let write = |name: &str, contents: &str| {
            let path = dir.path().join(name);
            fs::write(&path, contents).map_err(|source| HarnessError::io(format!("writing {path:?}"), source))
        };
        write(CA_CERT, &ca_cert)?;
        write(SERVER_CERT, &server_cert.pem())?;
        write(SERVER_KEY, &server_key.serialize_pem())?;
        write(CLIENT_CERT, &client_cert.pem())?;
        write(CLIENT_KEY, &client_key.serialize_pem())?;
        write(OTHER_CA_CERT, &other_ca)?;
        Ok(TestCa { dir })
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join(CA_CERT)
    }

    /// The server certificate (PEM), for [`SERVER_HOST`](Self::SERVER_HOST) only.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join(SERVER_CERT)
    }

    /// The server certificate's private key (PKCS#8 PEM).
    pub fn server_key(&self) -> PathBuf {
        self.dir.path().join(SERVER_KEY)
    }

    /// A client certificate (PEM) signed by the CA, for servers that require one.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join(CLIENT_CERT)
    }

    /// The client certificate's private key (PKCS#8 PEM).
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join(CLIENT_KEY)
    }

    /// A CA certificate (PEM) that signed nothing the servers present: trusting it alone must
    /// fail every handshake.
    pub fn other_ca_cert(&self) -> PathBuf {
        self.dir.path().join(OTHER_CA_CERT)
    }

    /// Client options that verify the server fully against this CA and present the client
    /// certificate.
    pub fn client_options(&self) -> lock_core::TlsOptions {
        lock_core::TlsOptions::new(lock_core::TlsMode::VerifyFull)
            .root_cert(self.ca_cert())
            .client_cert(self.client_cert(), self.client_key())
    }

    /// A rustls client configuration (ring provider, TLS 1.2 and 1.3) that trusts this CA only
    /// and checks the server's name: what a `verify-full` client does.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the CA certificate cannot be read or used.
    #[cfg(feature = "postgres-server")]
    pub fn rustls_client_config(&self) -> Result<rustls::ClientConfig, HarnessError> {
        use rustls::pki_types::pem::PemObject as _;

        let unusable = |error: &dyn std::fmt::Display| {
            HarnessError::io("using the test CA", std::io::Error::other(error.to_string()))
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in
            rustls::pki_types::CertificateDer::pem_file_iter(self.ca_cert()).map_err(|e| unusable(&e))?
        {
            roots.add(cert.map_err(|e| unusable(&e))?).map_err(|e| unusable(&e))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| unusable(&e))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    /// `cacert=<the CA certificate's path>`, percent-encoded for a URL's query: how the URLs of
    /// the harness's TLS servers (`rediss://…`, `zk+tls://…`) name the root to trust.
    pub fn cacert_query(&self) -> String {
        let path = self.ca_cert().display().to_string();
        let escaped: String = path
            .bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                    (byte as char).to_string()
                }
                _ => format!("%{byte:02X}"),
            })
            .collect();
        format!("cacert={escaped}")
    }

    /// Copies the server's files into `dir` (a server's own dir), owned by `account` when the
    /// server runs as one, the key readable by its owner only (PostgreSQL insists).
    pub(crate) fn install_server_files(
        &self,
        dir: &Path,
        account: Option<RunAs>,
    ) -> Result<ServerTlsFiles, HarnessError> {
        let files =
            ServerTlsFiles { cert: dir.join(SERVER_CERT), key: dir.join(SERVER_KEY), ca: dir.join(CA_CERT) };
        for (from, to, mode) in [
            (self.server_cert(), &files.cert, 0o644),
            (self.server_key(), &files.key, 0o600),
            (self.ca_cert(), &files.ca, 0o644),
        ] {
            fs::copy(&from, to)
                .map_err(|source| HarnessError::io(format!("copying {from:?} to {to:?}"), source))?;
            fs::set_permissions(to, fs::Permissions::from_mode(mode))
                .map_err(|source| HarnessError::io(format!("setting the mode of {to:?}"), source))?;
            if let Some(account) = account {
                nix::unistd::chown(to, Some(account.uid), Some(account.gid)).map_err(|errno| {
                    HarnessError::io(format!("handing {to:?} to uid {}", account.uid), errno.into())
                })?;
            }
        }
        Ok(files)
    }
}

/// `path` as a URL query value: percent-encoded but for `/` and the unreserved characters.
pub(crate) fn url_path(path: &Path) -> String {
    let mut encoded = String::new();
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                encoded.push(char::from(*byte));
            }
            other => encoded.push_str(&format!("%{other:02X}")),
        }
    }
    encoded
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A self-signed CA: its certificate's PEM and its key.
fn certificate_authority(name: &str) -> Result<(String, KeyPair), rcgen::Error> {
    let key = KeyPair::generate()?;
    let cert = ca_params(name).self_signed(&key)?;
    Ok((cert.pem(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_as_pem() {
        let ca = TestCa::generate().unwrap();
        for path in [ca.ca_cert(), ca.server_cert(), ca.client_cert(), ca.other_ca_cert()] {
            assert!(
                fs::read_to_string(&path).unwrap().starts_with("-----BEGIN CERTIFICATE-----"),
                "{path:?}"
            );
        }
        for path in [ca.server_key(), ca.client_key()] {
            assert!(
                fs::read_to_string(&path).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"),
                "{path:?}"
            );
        }
        assert_ne!(fs::read(ca.ca_cert()).unwrap(), fs::read(ca.other_ca_cert()).unwrap());
    }

    #[test]
    fn paths_are_percent_encoded_for_urls() {
        assert_eq!(url_path(Path::new("/tmp/a b/ca&1.pem")), "/tmp/a%20b/ca%261.pem");
    }
}
