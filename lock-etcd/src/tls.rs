//! TLS to etcd's client port: an `etcds://` URL's parameters, what tonic can do with them, and
//! [`TlsOptions`] made into etcd-client's (tonic's `ClientTlsConfig`, rustls with ring).
//!
//! tonic verifies the chain and the host name, always: there is no switch for `verify-ca`
//! (chain only) or `require` (nothing), so those modes are refused rather than silently
//! strengthened or weakened. Without a root certificate file the platform's roots are trusted.

use lock_core::{Error, Result, TlsMode, TlsOptions, TlsParameters, TlsVocabulary};

/// The TLS options of an `etcds://` URL's query pairs.
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
                "unknown parameter {name:?} in an etcds:// URL ({cacert}, {cert}, {key}, {sslmode})"
            )));
        }
    }
    taken.into_options(vocabulary, TlsMode::VerifyFull)
}

/// The options as the backend uses them: `None` for plaintext.
///
/// # Errors
/// [`Error::InvalidConfig`] for what tonic cannot do: any mode but `verify-full` (and
/// `disable`), certificate files with TLS disabled, TLS without the `tls` feature.
pub(crate) fn check(options: &TlsOptions) -> Result<Option<TlsOptions>> {
    let files = options.root_cert_path().is_some() || options.client_cert_paths().is_some();
    match options.mode() {
        TlsMode::Disable if files => {
            Err(Error::invalid_config("TLS is disabled, yet certificate files are given"))
        }
        TlsMode::Disable => Ok(None),
        TlsMode::VerifyFull if cfg!(feature = "tls") => Ok(Some(options.clone())),
        TlsMode::VerifyFull => Err(Error::invalid_config("etcd TLS needs lock-etcd's `tls` feature")),
        mode => Err(Error::invalid_config(format!(
            "sslmode={mode} is not available for etcd: its client (tonic) always checks the \
             certificate chain and host name; use verify-full (with cacert= for a private CA)"
        ))),
    }
}

/// etcd-client's TLS settings for `options` (checked by [`check`]), the files read now.
///
/// # Errors
/// [`Error::InvalidConfig`] naming a file that cannot be read.
#[cfg(feature = "tls")]
pub(crate) fn client_options(options: &TlsOptions) -> Result<etcd_client::TlsOptions> {
    use etcd_client::{Certificate, Identity};
    let mut tls = etcd_client::TlsOptions::new();
    tls = match options.read_root_cert()? {
        Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = options.read_client_cert()? {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for bad in [&[("cert", "c.pem")][..], &[("sslmode", "on")], &[("timeout", "1")]] {
            assert!(matches!(from_query(pairs(bad)), Err(Error::InvalidConfig { .. })), "{bad:?}");
        }
    }

    #[test]
    fn only_verify_full_is_offered() {
        let with_root = |mode| TlsOptions::new(mode).root_cert("ca.pem");
        for mode in [TlsMode::Prefer, TlsMode::Require, TlsMode::VerifyCa] {
            assert!(check(&with_root(mode)).is_err(), "{mode}");
        }
        assert!(check(&with_root(TlsMode::Disable)).is_err(), "files without TLS");
        assert_eq!(check(&TlsOptions::new(TlsMode::Disable)).unwrap(), None);
        assert_eq!(check(&with_root(TlsMode::VerifyFull)).is_ok(), cfg!(feature = "tls"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn unreadable_files_are_named() {
        let options = TlsOptions::new(TlsMode::VerifyFull).root_cert("/nonexistent/ca.pem");
        let error = client_options(&options).unwrap_err();
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
