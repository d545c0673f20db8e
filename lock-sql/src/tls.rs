//! TLS settings of both databases: the URL's TLS parameters (libpq's or MySQL's names) taken
//! out of the URL before the driver sees it, merged with the builder's
//! [`tls`](crate::SqlLockBuilder::tls), and the PEM files read once.
//!
//! Precedence: the builder's [`TlsOptions`] decide the mode; their files replace the URL's where
//! they name any (a root certificate or client certificate only the URL names is kept). Without
//! the builder's options the URL decides; with neither, connections are plaintext.
//!
//! Where this differs from libpq, on purpose:
//! - A URL that names a root certificate (`sslrootcert`, `ssl-ca`) but no mode verifies the
//!   server against it with its host name (`verify-full`, `VERIFY_IDENTITY`). libpq would take
//!   `prefer` — verify nothing and fall back to plaintext in silence — but a user who names a CA
//!   expects it used. A mode in the URL or the builder still decides.
//! - `sslmode=allow` (plaintext first, TLS only if the server insists) is refused with
//!   [`Error::InvalidConfig`] rather than read as `prefer`, which would do the opposite.
//! - `prefer`'s plaintext fallback, when TLS was asked for, logs a warning.

use std::path::PathBuf;

use lock_core::{Error, Result, TlsMode, TlsOptions, TlsParameters, TlsVocabulary};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::builder::Settings;

/// One database's names for the TLS parameters, and its advice for a refused plaintext client.
#[derive(Debug)]
pub(crate) struct Vocabulary {
    names: &'static TlsVocabulary,
    /// What to tell a user whose plaintext connection a TLS-only server refused.
    pub(crate) require_hint: &'static str,
}

/// libpq's names: `sslmode`, `sslrootcert`, `sslcert`, `sslkey`.
#[cfg(feature = "postgres")]
pub(crate) const LIBPQ: Vocabulary =
    Vocabulary { names: &TlsVocabulary::LIBPQ, require_hint: "connect with sslmode=require or stronger" };

/// The MySQL client's names: `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL: Vocabulary =
    Vocabulary { names: &TlsVocabulary::MYSQL, require_hint: "connect with ssl-mode=REQUIRED or stronger" };

/// The URL without its TLS parameters (for the driver), and the TLS settings of the URL and
/// the builder together (`None`: neither says anything).
///
/// # Errors
/// [`Error::InvalidConfig`]: a malformed `key=value` string, an unknown mode, a client
/// certificate without its key (or the reverse), `sslrootcert=system` with a mode weaker than
/// `verify-full` (libpq refuses it too).
pub(crate) fn resolve(settings: &Settings, vocabulary: &Vocabulary) -> Result<(String, Option<TlsOptions>)> {
    let (url, from_url) = take_parameters(&settings.url, vocabulary)?;
    let tls = merge(from_url, settings.tls.as_ref(), vocabulary)?;
    Ok((url, tls))
}

/// Takes the TLS parameters out of `url`: a `scheme://…?query` URL or libpq `key=value` pairs.
fn take_parameters(url: &str, vocabulary: &Vocabulary) -> Result<(String, TlsParameters)> {
    if url.contains("://") {
        return TlsParameters::take_from_url(url, vocabulary.names);
    }
    let mut tls = TlsParameters::default();
    let mut kept = Vec::new();
    for pair in key_value_pairs(url)? {
        if !tls.set(vocabulary.names, &pair.key, pair.value)? {
            kept.push(pair.text);
        }
    }
    Ok((kept.join(" "), tls))
}

/// One `key=value` of a libpq connection string: its text as written, and the value unquoted.
pub(crate) struct KeyValue<'a> {
    pub(crate) text: &'a str,
    pub(crate) key: String,
    pub(crate) value: String,
}

/// libpq's `key = value key='quoted \' value'` pairs (ASCII whitespace separates; a backslash
/// escapes the next character, quoted or not).
pub(crate) fn key_value_pairs(text: &str) -> Result<Vec<KeyValue<'_>>> {
    let malformed = || {
        Error::invalid_config(format!(
            "malformed key=value connection string: {}",
            lock_core::redact_url(text)
        ))
    };
    let mut pairs = Vec::new();
    let mut rest = text.trim_start_matches(|c: char| c.is_ascii_whitespace());
    while !rest.is_empty() {
        let start = text.len() - rest.len();
        let eq = rest.find('=').ok_or_else(malformed)?;
        let key = rest[..eq].trim_end_matches(|c: char| c.is_ascii_whitespace());
        if key.is_empty() || key.contains(|c: char| c.is_ascii_whitespace()) {
            return Err(malformed());
        }
        let after = rest[eq + 1..].trim_start_matches(|c: char| c.is_ascii_whitespace());
        let mut value = String::new();
        let mut chars = after.char_indices();
        let quoted = after.starts_with('\'');
        if quoted {
            chars.next();
        }
        let mut end = after.len();
        let mut closed = !quoted;
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, escaped)| escaped)),
                '\'' if quoted => {
                    end = at + 1;
                    closed = true;
                    break;
                }
                c if !quoted && c.is_ascii_whitespace() => {
                    end = at;
                    break;
                }
                c => value.push(c),
            }
        }
        if !closed {
            return Err(malformed());
        }
        let consumed = rest.len() - after.len() + end;
        pairs.push(KeyValue { text: &text[start..start + consumed], key: key.to_owned(), value });
        rest = rest[consumed..].trim_start_matches(|c: char| c.is_ascii_whitespace());
    }
    Ok(pairs)
}

/// The URL's settings and the builder's together (see the module docs for precedence).
fn merge(
    url: TlsParameters,
    builder: Option<&TlsOptions>,
    vocabulary: &Vocabulary,
) -> Result<Option<TlsOptions>> {
    if url.is_empty() && builder.is_none() {
        return Ok(None);
    }
    let mode = match (builder, url.mode) {
        (Some(builder), _) => builder.mode(),
        (None, Some(mode)) => mode,
        // A named root certificate (or libpq 16's `sslrootcert=system`) and no mode: verify
        // against it, host name included (see the module docs).
        (None, None) if url.system_roots || url.root.is_some() => TlsMode::VerifyFull,
        // Only a client certificate: libpq's and MySQL's default mode.
        (None, None) => TlsMode::Prefer,
    };
    let mut tls = TlsOptions::new(mode);
    let names = vocabulary.names;
    let root = builder.and_then(TlsOptions::root_cert_path).map(PathBuf::from).or_else(|| url.root.clone());
    if let Some(root) = root {
        tls = tls.root_cert(root);
    } else if url.system_roots && mode != TlsMode::VerifyFull {
        return Err(Error::invalid_config(format!(
            "{}=system needs {}=verify-full (a weaker mode would trust any certificate)",
            names.root[0], names.mode[0]
        )));
    }
    let client = match builder.and_then(TlsOptions::client_cert_paths) {
        Some((cert, key)) => Some((cert.to_path_buf(), key.to_path_buf())),
        None => url.client_cert(names)?,
    };
    if let Some((cert, key)) = client {
        tls = tls.client_cert(cert, key);
    }
    Ok(Some(tls))
}

/// The PEM files of a [`TlsOptions`], read and parsed.
// MySQL only checks the files with this (its driver reads them itself); PostgreSQL uses them.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct Loaded {
    /// The root certificates, when a file names them.
    pub(crate) roots: Option<Vec<CertificateDer<'static>>>,
    /// The client's certificate chain and key.
    pub(crate) identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

/// Reads and parses the files `tls` names, so that a missing or malformed one is reported by
/// `build`, naming it, rather than by every connection attempt.
///
/// # Errors
/// [`Error::InvalidConfig`] naming the file that cannot be read or holds no certificate (or
/// key) in PEM.
pub(crate) fn load(tls: &TlsOptions) -> Result<Loaded> {
    let bad = |what: &str, path: Option<&std::path::Path>, error: &dyn std::fmt::Display| {
        let path = path.map_or_else(String::new, |path| format!(" {}", path.display()));
        Error::invalid_config(format!("the TLS {what}{path} holds no usable PEM: {error}"))
    };
    let certificates = |pem: &[u8], what: &str, path: Option<&std::path::Path>| {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|error| bad(what, path, &error))?;
        if certs.is_empty() {
            return Err(bad(what, path, &"no CERTIFICATE block"));
        }
        Ok(certs)
    };
    let roots = tls
        .read_root_cert()?
        .map(|pem| certificates(&pem, "root certificate file", tls.root_cert_path()))
        .transpose()?;
    let paths = tls.client_cert_paths();
    let identity = tls
        .read_client_cert()?
        .map(|(cert, key)| {
            let chain = certificates(&cert, "client certificate", paths.map(|(cert, _)| cert))?;
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|error| bad("client key", paths.map(|(_, key)| key), &error))?;
            Ok::<_, Error>((chain, key))
        })
        .transpose()?;
    Ok(Loaded { roots, identity })
}

/// A server's refusal of a plaintext connection (it accepts TLS only), kept with the driver's
/// error as its source: `Error::Tls`'s cause, telling the user what to change.
#[derive(Debug, thiserror::Error)]
#[error("the server accepts only encrypted (TLS) connections and this one was plaintext ({hint})")]
pub(crate) struct PlaintextRefused {
    pub(crate) hint: &'static str,
    #[source]
    pub(crate) source: lock_core::BoxError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "postgres")]
    #[test]
    fn libpq_parameters_leave_the_url_and_the_rest_stays_as_written() {
        let (url, tls) = take_parameters(
            "postgres://u:p@h:5/db?application_name=a%20b&sslmode=verify-ca&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3#f",
            &LIBPQ,
        )
        .unwrap();
        assert_eq!(url, "postgres://u:p@h:5/db?application_name=a%20b&connect_timeout=3#f");
        assert_eq!(tls.mode, Some(TlsMode::VerifyCa));
        assert_eq!(tls.root, Some(PathBuf::from("/tmp/ca.pem")));

        let (url, tls) = take_parameters("postgres://h/db?sslmode=require", &LIBPQ).unwrap();
        assert_eq!((url.as_str(), tls.mode), ("postgres://h/db", Some(TlsMode::Require)));
        let (url, tls) = take_parameters("postgres://h/db", &LIBPQ).unwrap();
        assert_eq!(url, "postgres://h/db");
        assert!(tls.is_empty());
        assert!(matches!(
            take_parameters("postgres://h/db?sslmode=on", &LIBPQ),
            Err(Error::InvalidConfig { .. })
        ));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn libpq_key_value_strings_lose_their_tls_pairs_only() {
        let (rest, tls) = take_parameters(
            "host=h  sslmode = verify-full password='a b\\' c' sslcert='/c d.pem' sslkey=/k\\ e.pem dbname=d",
            &LIBPQ,
        )
        .unwrap();
        assert_eq!(rest, "host=h password='a b\\' c' dbname=d");
        assert_eq!(tls.mode, Some(TlsMode::VerifyFull));
        assert_eq!(tls.cert, Some(PathBuf::from("/c d.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("/k e.pem")));
        for malformed in ["host=h sslmode", "host=h password='open", "=x"] {
            let error = take_parameters(malformed, &LIBPQ).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{malformed}: {error}");
        }
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_parameters_in_both_spellings() {
        let (url, tls) = take_parameters(
            "mysql://u:p@h/db?prefer_socket=false&ssl-mode=verify_identity&ssl_ca=/ca.pem&ssl-cert=/c.pem&ssl-key=/k.pem",
            &MYSQL,
        )
        .unwrap();
        assert_eq!(url, "mysql://u:p@h/db?prefer_socket=false");
        assert_eq!(tls.mode, Some(TlsMode::VerifyFull));
        assert_eq!(tls.root, Some(PathBuf::from("/ca.pem")));
        let merged = merge(tls, None, &MYSQL).unwrap().unwrap();
        assert_eq!(merged.client_cert_paths().map(|(c, _)| c.to_path_buf()), Some(PathBuf::from("/c.pem")));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_builder_decides_the_mode_and_its_files_replace_the_url_s() {
        let url = |text: &str| take_parameters(text, &LIBPQ).unwrap().1;
        assert_eq!(merge(TlsParameters::default(), None, &LIBPQ).unwrap(), None);
        // A root certificate without a mode: verified against it, host name included.
        let files = merge(url("postgres://h/d?sslrootcert=/ca.pem"), None, &LIBPQ).unwrap().unwrap();
        assert_eq!(files.mode(), TlsMode::VerifyFull);
        // A client certificate alone: libpq's default, prefer.
        let files = merge(url("postgres://h/d?sslcert=/c.pem&sslkey=/c.key"), None, &LIBPQ).unwrap().unwrap();
        assert_eq!(files.mode(), TlsMode::Prefer);
        let builder = TlsOptions::new(TlsMode::VerifyFull).client_cert("/b.pem", "/b.key");
        let merged = merge(
            url("postgres://h/d?sslmode=disable&sslrootcert=/ca.pem&sslcert=/u.pem&sslkey=/u.key"),
            Some(&builder),
            &LIBPQ,
        )
        .unwrap()
        .unwrap();
        assert_eq!(merged.mode(), TlsMode::VerifyFull);
        assert_eq!(merged.root_cert_path(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(merged.client_cert_paths().unwrap().0, std::path::Path::new("/b.pem"));
        let builder = TlsOptions::new(TlsMode::Disable);
        let merged = merge(url("postgres://h/d?sslmode=verify-full"), Some(&builder), &LIBPQ).unwrap();
        assert_eq!(merged.unwrap().mode(), TlsMode::Disable);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn system_roots_mean_verify_full_and_half_a_client_identity_is_refused() {
        let url = |text: &str| take_parameters(text, &LIBPQ).unwrap().1;
        let system = merge(url("postgres://h/d?sslrootcert=system"), None, &LIBPQ).unwrap().unwrap();
        assert_eq!((system.mode(), system.root_cert_path()), (TlsMode::VerifyFull, None));
        for weak in ["postgres://h/d?sslrootcert=system&sslmode=require", "postgres://h/d?sslcert=/c.pem"] {
            let error = merge(url(weak), None, &LIBPQ).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{weak}: {error}");
        }
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn a_named_ca_without_a_mode_is_verified_with_the_host_name() {
        for text in ["mysql://h/d?ssl-ca=/ca.pem", "mysql://h/d?ssl_ca=/ca.pem"] {
            let (_, tls) = take_parameters(text, &MYSQL).unwrap();
            let merged = merge(tls, None, &MYSQL).unwrap().unwrap();
            assert_eq!(merged.mode(), TlsMode::VerifyFull, "{text}");
            assert_eq!(merged.root_cert_path(), Some(std::path::Path::new("/ca.pem")));
        }
        // A mode named beside it decides.
        let (_, tls) = take_parameters("mysql://h/d?ssl-ca=/ca.pem&ssl-mode=PREFERRED", &MYSQL).unwrap();
        assert_eq!(merge(tls, None, &MYSQL).unwrap().unwrap().mode(), TlsMode::Prefer);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn sslmode_allow_is_refused_not_read_as_prefer() {
        for text in ["postgres://h/d?sslmode=allow", "host=h sslmode=allow"] {
            let error = take_parameters(text, &LIBPQ).unwrap_err();
            assert!(matches!(&error, Error::InvalidConfig { reason } if reason.contains("allow")), "{error}");
        }
        let (_, tls) = take_parameters("postgres://h/d?sslmode=prefer&sslrootcert=/ca.pem", &LIBPQ).unwrap();
        assert_eq!(merge(tls, None, &LIBPQ).unwrap().unwrap().mode(), TlsMode::Prefer);
    }

    #[test]
    fn unusable_files_are_config_errors_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("distlock-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        for tls in [
            TlsOptions::new(TlsMode::VerifyFull).root_cert(&not_pem),
            TlsOptions::new(TlsMode::VerifyFull).root_cert(dir.join("missing.pem")),
            TlsOptions::new(TlsMode::Require).client_cert(&not_pem, &not_pem),
        ] {
            let error = load(&tls).err().expect("refused");
            assert!(matches!(error, Error::InvalidConfig { .. }), "{error}");
            assert!(error.to_string().contains(dir.to_str().unwrap()), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
