//! The TLS parameters of a connection URL, in each client's own names: [`TlsVocabulary`] says
//! which query keys mean what, [`TlsParameters`] collects what a URL said, and
//! [`TlsParameters::take_from_url`] takes them out of the URL before the driver sees it (drivers
//! ignore or refuse parameters they do not know).
//!
//! Every backend reads its URLs through this, so a parameter means the same on all of them: the
//! mode in libpq's or MySQL's words, a root certificate file, and a client certificate that needs
//! its key.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::tls::{TlsMode, TlsOptions};

/// One client family's names for the TLS parameters, each with its accepted spellings (the
/// documented one first).
#[derive(Debug)]
#[non_exhaustive]
pub struct TlsVocabulary {
    /// The mode, e.g. `sslmode`.
    pub mode: &'static [&'static str],
    /// The root certificate file, e.g. `sslrootcert`.
    pub root: &'static [&'static str],
    /// The client certificate file.
    pub cert: &'static [&'static str],
    /// The client certificate's key file.
    pub key: &'static [&'static str],
    /// Reads the mode's value.
    pub parse_mode: fn(&str) -> Result<TlsMode>,
    /// The root value that means "the platform's roots" (libpq 16's `sslrootcert=system`).
    pub system_roots: Option<&'static str>,
}

impl TlsVocabulary {
    /// `redis-cli`'s flags as parameters, with libpq's modes: `cacert`, `cert`, `key`,
    /// `sslmode` (Redis and ZooKeeper URLs).
    pub const REDIS_CLI: TlsVocabulary = TlsVocabulary {
        mode: &["sslmode"],
        root: &["cacert"],
        cert: &["cert"],
        key: &["key"],
        parse_mode: TlsMode::from_libpq,
        system_roots: None,
    };

    /// libpq's names: `sslmode`, `sslrootcert` (`system`: the platform's roots), `sslcert`,
    /// `sslkey`.
    pub const LIBPQ: TlsVocabulary = TlsVocabulary {
        mode: &["sslmode"],
        root: &["sslrootcert"],
        cert: &["sslcert"],
        key: &["sslkey"],
        parse_mode: TlsMode::from_libpq,
        system_roots: Some("system"),
    };

    /// The MySQL client's names: `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` (MySQL takes `_`
    /// for `-` in option names; so does this).
    pub const MYSQL: TlsVocabulary = TlsVocabulary {
        mode: &["ssl-mode", "ssl_mode"],
        root: &["ssl-ca", "ssl_ca"],
        cert: &["ssl-cert", "ssl_cert"],
        key: &["ssl-key", "ssl_key"],
        parse_mode: TlsMode::from_mysql,
        system_roots: None,
    };

    /// The documented names of the parameters, for messages.
    pub fn names(&self) -> [&'static str; 4] {
        [self.root[0], self.cert[0], self.key[0], self.mode[0]]
    }
}

/// What a URL's TLS parameters said (nothing is checked against anything else yet).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsParameters {
    /// The mode.
    pub mode: Option<TlsMode>,
    /// The root certificate file.
    pub root: Option<PathBuf>,
    /// The platform's roots, asked for explicitly (`sslrootcert=system`).
    pub system_roots: bool,
    /// The client certificate file.
    pub cert: Option<PathBuf>,
    /// Its key file.
    pub key: Option<PathBuf>,
}

impl TlsParameters {
    /// Whether the URL named no TLS parameter.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Takes `key=value` if `key` is a TLS parameter of `vocabulary`; `false` if it is not.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a mode the vocabulary does not know.
    pub fn set(&mut self, vocabulary: &TlsVocabulary, key: &str, value: String) -> Result<bool> {
        if vocabulary.mode.contains(&key) {
            self.mode = Some((vocabulary.parse_mode)(&value)?);
        } else if vocabulary.root.contains(&key) {
            self.system_roots = vocabulary.system_roots == Some(value.as_str());
            self.root = (!self.system_roots).then(|| value.into());
        } else if vocabulary.cert.contains(&key) {
            self.cert = Some(value.into());
        } else if vocabulary.key.contains(&key) {
            self.key = Some(value.into());
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// `url` (`scheme://…?query#fragment`) without its TLS parameters, the rest of the query and
    /// the fragment kept as written, and the parameters taken. Values are form-decoded (`+` is
    /// a space), as drivers read the rest of the query.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an unknown mode or a value that is not UTF-8 once decoded
    /// (never showing the URL, which may hold a password).
    pub fn take_from_url(url: &str, vocabulary: &TlsVocabulary) -> Result<(String, Self)> {
        let (rest, pairs) = crate::url::take_query_parameters(url, |key| is_parameter(vocabulary, key))?;
        let mut taken = Self::default();
        for (key, value) in pairs {
            taken.set(vocabulary, &key, value)?;
        }
        Ok((rest, taken))
    }

    /// The client certificate and its key, which go together.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when only one of the two is named.
    pub fn client_cert(&self, vocabulary: &TlsVocabulary) -> Result<Option<(PathBuf, PathBuf)>> {
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Ok(Some((cert.clone(), key.clone()))),
            (None, None) => Ok(None),
            _ => Err(Error::invalid_config(format!(
                "{}= and {}= go together: the client certificate and its key",
                vocabulary.cert[0], vocabulary.key[0]
            ))),
        }
    }

    /// The options these parameters give, with `default_mode` where they name no mode.
    ///
    /// # Errors
    /// As [`client_cert`](Self::client_cert).
    pub fn into_options(self, vocabulary: &TlsVocabulary, default_mode: TlsMode) -> Result<TlsOptions> {
        let client = self.client_cert(vocabulary)?;
        let mut options = TlsOptions::new(self.mode.unwrap_or(default_mode));
        if let Some(root) = self.root {
            options = options.root_cert(root);
        }
        if let Some((cert, key)) = client {
            options = options.client_cert(cert, key);
        }
        Ok(options)
    }
}

fn is_parameter(vocabulary: &TlsVocabulary, key: &str) -> bool {
    [vocabulary.mode, vocabulary.root, vocabulary.cert, vocabulary.key]
        .iter()
        .any(|names| names.contains(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_pairs_leave_the_url_and_the_rest_stays_as_written() {
        let (rest, taken) = TlsParameters::take_from_url(
            "rediss://:pw@h:6380/2?cacert=%2Fetc%2Fmy+ca.pem&protocol=resp3&cert=c.pem&key=k.pem#frag",
            &TlsVocabulary::REDIS_CLI,
        )
        .unwrap();
        assert_eq!(rest, "rediss://:pw@h:6380/2?protocol=resp3#frag");
        assert_eq!(taken.root.as_deref(), Some("/etc/my ca.pem".as_ref()));
        assert_eq!(taken.client_cert(&TlsVocabulary::REDIS_CLI).unwrap().unwrap().1, PathBuf::from("k.pem"));
        let (rest, taken) = TlsParameters::take_from_url("postgres://h/db", &TlsVocabulary::LIBPQ).unwrap();
        assert_eq!((rest.as_str(), taken.is_empty()), ("postgres://h/db", true));
    }

    #[test]
    fn vocabularies_read_their_own_names_and_modes() {
        let mut taken = TlsParameters::default();
        assert!(taken.set(&TlsVocabulary::MYSQL, "ssl_mode", "verify_identity".into()).unwrap());
        assert!(!taken.set(&TlsVocabulary::MYSQL, "sslmode", "verify-full".into()).unwrap());
        assert!(taken.set(&TlsVocabulary::LIBPQ, "sslrootcert", "system".into()).unwrap());
        assert_eq!((taken.mode, taken.system_roots, &taken.root), (Some(TlsMode::VerifyFull), true, &None));
        assert!(taken.set(&TlsVocabulary::LIBPQ, "sslmode", "sideways".into()).is_err());
    }

    #[test]
    fn half_a_client_identity_and_undecodable_values_are_refused_without_the_url() {
        let (_, half) =
            TlsParameters::take_from_url("rediss://:hunter2@h/?cert=c.pem", &TlsVocabulary::REDIS_CLI)
                .unwrap();
        let error = half.into_options(&TlsVocabulary::REDIS_CLI, TlsMode::VerifyFull).unwrap_err();
        assert!(error.to_string().contains("cert= and key= go together"), "{error}");
        let error =
            TlsParameters::take_from_url("rediss://:hunter2@h/?cacert=%FF", &TlsVocabulary::REDIS_CLI)
                .unwrap_err();
        assert!(error.to_string().contains("cacert= is not UTF-8") && !error.to_string().contains("hunter2"));
    }
}
