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
//!
//! Here: the URL's parameters and what ZooKeeper can do with them; [`probe`] finds a TLS-only
//! port behind a failed plaintext connect; [`diagnose`] (feature `tls`) repeats a failed
//! handshake with rustls to name its cause.

#[cfg(feature = "tls")]
mod diagnose;
mod probe;

#[cfg(feature = "tls")]
pub(crate) use diagnose::{client_options, diagnose};
pub(crate) use probe::closed_before_session;

use lock_core::{Error, Result, TlsMode, TlsOptions, TlsParameters, TlsVocabulary};

/// The TLS options of a `zk+tls://` URL's query pairs.
///
/// # Errors
/// [`Error::InvalidConfig`] for an unknown parameter, a `cert` without `key` (or the reverse),
/// or an `sslmode` that is not libpq's.
pub(crate) fn from_query(pairs: Vec<(String, String)>) -> Result<TlsOptions> {
    let vocabulary = &TlsVocabulary::REDIS_CLI;
    let mut taken = TlsParameters::default();
    for (name, value) in pairs {
        if !taken.set(vocabulary, &name, value)? {
            let [cacert, cert, key, sslmode] = vocabulary.names();
            return Err(Error::invalid_config(format!(
                "unknown parameter {name:?} in a zk+tls:// URL ({cacert}, {cert}, {key}, {sslmode})"
            )));
        }
    }
    taken.into_options(vocabulary, TlsMode::VerifyFull)
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

#[cfg(test)]
mod tests {
    #[cfg(feature = "tls")]
    use super::diagnose::client_options;
    use super::probe::endpoints;
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
