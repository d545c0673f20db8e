//! [`EtcdLockBuilder`]: settings, defaults, the `etcd://` URL, validation, and the first
//! connection.

use std::fmt;
use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

use crate::keys::Namespace;
use crate::EtcdBackend;

/// The longest timeout or TTL accepted: far beyond any sensible one, and no overflow of
/// `Instant`.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// etcd's client port, for endpoints given without one.
const DEFAULT_PORT: u16 = 2379;

/// Builds an [`EtcdBackend`]. Every setter has a default; [`build`](Self::build) validates
/// them, connects, and grants the client's lease, so an unreachable cluster or refused
/// credentials are reported there.
///
/// The settings are those of every distlock builder (`connect_timeout`, `io_timeout`,
/// `namespace`) but `max_connections`: every request of a backend is multiplexed over one
/// HTTP/2 connection per endpoint, so there is no pool to size.
#[derive(Clone)]
#[must_use]
pub struct EtcdLockBuilder {
    pub(crate) settings: Settings,
    pub(crate) namespace: String,
}

/// What a backend connects with.
#[derive(Clone)]
pub(crate) struct Settings {
    /// `host:port` of each member, as given (checked by `build`).
    pub(crate) endpoints: String,
    /// The user and password; the password is never shown.
    pub(crate) credentials: Option<(String, String)>,
    pub(crate) session_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// TLS to every endpoint (checked by `build`: `None`, or a mode tonic can do).
    pub(crate) tls: Option<TlsOptions>,
}

impl Settings {
    /// The endpoints as a list, each with a port.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty list, an empty entry, or an entry with a scheme,
    /// a path, credentials or white space.
    pub(crate) fn endpoint_list(&self) -> Result<Vec<String>> {
        let list = self.endpoints.trim();
        if list.is_empty() {
            return Err(Error::invalid_config("the etcd endpoint list is empty"));
        }
        if list.contains('@') {
            // Refused whole, before splitting: a password may hold a `,` too, and its first part
            // would be echoed as an endpoint.
            return Err(credentials_in_endpoints());
        }
        list.split(',').map(|entry| endpoint(entry.trim())).collect()
    }

    /// The lease TTL etcd is asked for (whole seconds, rounded up; at least one), not a
    /// sub-second `session_ttl` as given: what timeouts derived from the TTL count against.
    pub(crate) fn asked_ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.ttl_secs()).unwrap_or(1).max(1))
    }

    /// The lease TTL to ask for, in whole seconds (etcd's unit), rounded up.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let ttl = self.session_ttl;
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }
}

/// One endpoint, `host[:port]`, with etcd's port if it has none.
fn endpoint(entry: &str) -> Result<String> {
    let invalid = |why: &str| Err(Error::invalid_config(format!("etcd endpoint {entry:?}: {why}")));
    if entry.is_empty() {
        return invalid("is empty");
    }
    if entry.contains("://") {
        return invalid("takes no scheme: list `host:port` (TLS is the builder's `tls`, or an etcds:// URL)");
    }
    if entry.contains('@') {
        // Not echoed: what precedes the `@` may be a password.
        return Err(credentials_in_endpoints());
    }
    if entry.contains(['/', '?', '#']) || entry.chars().any(char::is_whitespace) {
        return invalid("must be `host:port`");
    }
    // `[v6]` or `[v6]:port`; otherwise a `:` starts the port.
    let has_port = match entry.rfind(']') {
        Some(bracket) => entry[bracket..].contains(':'),
        None => entry.contains(':'),
    };
    if !has_port {
        return Ok(format!("{entry}:{DEFAULT_PORT}"));
    }
    let port = entry.rsplit(':').next().unwrap_or_default();
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(entry.to_owned()),
        _ => invalid("has no valid port"),
    }
}

/// The error for credentials in the endpoint list; never echoes the list.
fn credentials_in_endpoints() -> Error {
    Error::invalid_config(
        "an etcd endpoint holds a `@`: credentials go to `credentials(user, password)` or an \
         etcd://user:password@host URL, never the endpoint list",
    )
}

/// `endpoints` for `Debug`: a list with a `@` (credentials put where they do not belong, which
/// `build` refuses) shows only what follows its last `@` — a password may hold a `,`.
fn shown_endpoints(endpoints: &str) -> String {
    match endpoints.rsplit_once('@') {
        Some((_, hosts)) => format!("<redacted>@{hosts}"),
        None => endpoints.to_owned(),
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("endpoints", &shown_endpoints(&self.endpoints))
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("session_ttl", &self.session_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("tls", &self.tls.as_ref().map(TlsOptions::mode))
            .finish()
    }
}

impl fmt::Debug for EtcdLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockBuilder")
            .field("settings", &self.settings)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl EtcdLockBuilder {
    pub(crate) fn new(endpoints: impl Into<String>) -> Self {
        Self {
            settings: Settings {
                endpoints: endpoints.into(),
                credentials: None,
                session_ttl: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(5),
                io_timeout: Duration::from_secs(5),
                tls: None,
            },
            namespace: String::new(),
        }
    }

    /// A builder from a URL: `etcd://[user:password@]host:port[,host:port…][/namespace]`. The
    /// credentials (percent-decoded) become [`credentials`](Self::credentials), the path the
    /// [`namespace`](Self::namespace); a host without a port gets etcd's 2379. The userinfo ends
    /// at the last `@` before the first `/`.
    ///
    /// `etcds://…` connects to every member with TLS and takes these parameters, the TLS
    /// vocabulary of every distlock URL (percent-encoded; [`tls`](Self::tls) sets the same):
    ///
    /// | parameter | meaning |
    /// | --- | --- |
    /// | `cacert=<PEM file>` | the CA certificates to trust (default: the platform's roots) |
    /// | `cert=<PEM file>&key=<PEM file>` | present this client certificate (etcd's `--client-cert-auth`) |
    /// | `sslmode=verify-full` | the default and the only mode: the chain, and that the certificate names the host connected to |
    ///
    /// `etcds://app:s3cret@etcd1:2379,etcd2:2379/locks?cacert=/etc/etcd/ca.pem`
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, no host, a query on an `etcd://` URL (TLS
    /// parameters need `etcds://`) or an unknown parameter on an `etcds://` one, a fragment, a
    /// `cert` without `key`, an `sslmode` that is not libpq's, or parts that are not UTF-8 once
    /// percent-decoded, or an `@` after the hosts (a password with a raw `/`, `?` or `#` would end
    /// the hosts early: percent-encode them). The errors never show the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = || lock_core::redact_url(url);
        let parts = lock_core::UrlParts::split(url)?;
        let tls = match parts.scheme {
            "etcd" => false,
            "etcds" => true,
            _ => return Err(Error::invalid_config(format!("not an etcd:// URL: {}", shown()))),
        };
        if parts.hosts.is_empty() {
            return Err(Error::invalid_config(format!("no host in {}", shown())));
        }
        if parts.rest.contains('#') || (!tls && parts.rest.contains('?')) {
            let tls_hint = if tls { "" } else { " (TLS parameters need etcds://)" };
            return Err(Error::invalid_config(format!(
                "an etcd:// URL takes no query or fragment{tls_hint}: {}",
                shown()
            )));
        }
        if parts.rest.contains('@') {
            // As `redact_url` reads it, an `@` after the hosts may end a password with a raw `/`,
            // `?` or `#`: its parts would read as hosts, a namespace or a parameter, and show in
            // errors. Nothing of the URL is shown.
            return Err(Error::invalid_config(
                "an etcd:// URL has a `@` after its hosts: percent-encode it (%40), and a \
                 password's `/`, `?` or `#` (%2F, %3F, %23)",
            ));
        }
        let mut builder = Self::new(parts.hosts);
        if tls {
            builder = builder.tls(crate::tls::from_query(parts.query())?);
        }
        builder = builder.namespace(parts.path()?);
        if let Some(user) = parts.user()? {
            builder = builder.credentials(user, parts.password()?.unwrap_or_default());
        }
        Ok(builder)
    }

    /// The key prefix under which every lock lives: the lock `N` is the prefix `<namespace>/N`
    /// (its contenders' keys are `<namespace>/N/<lease hex>`), which `etcdctl lock
    /// <namespace>/N` shares. A leading `/` is dropped. Defaults to none: the lock `N` is the
    /// prefix `N`, the same as `etcdctl lock N`.
    ///
    /// Namespaces must not extend one another (`locks` and `locks/a`): etcd's Mutex scans a
    /// prefix, so a lock of one could see the keys of a lock of the other.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The TTL of the client's lease, which every lock key of the client is attached to: how
    /// long a crashed or cut-off client keeps its locks, and how long a hold is believed without
    /// a confirmed keep-alive (less the clock-drift margin), whatever the lock's lease option.
    /// etcd counts in whole seconds (this is rounded up) and raises TTLs below its minimum
    /// (1.5 election timeouts: 2 s with etcd's defaults). The lease is kept alive every third
    /// of its TTL, as Go's `clientv3` does. Defaults to 10 s (`etcdctl lock`'s `--ttl`).
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.settings.session_ttl = ttl;
        self
    }

    /// How long connecting (and granting a new lease after one was lost) may take. Defaults to
    /// 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long one request may wait for its reply; a wait for the lock itself is bounded by
    /// the caller's deadline instead. Capped at half the session TTL: a request must not
    /// outlive every hold it serves (a hold is believed for one TTL after its last confirmed
    /// keep-alive). Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.settings.io_timeout = timeout;
        self
    }

    /// Authenticates as `user` with `password` (etcd's `--user user:password`). The token etcd
    /// returns is renewed once when etcd calls it invalid (an idle `simple` token expires after
    /// `--auth-token-ttl`), and the request retried. The password is never shown (`Debug`,
    /// errors, logs). Defaults to no authentication.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.settings.credentials = Some((user.into(), password.into()));
        self
    }

    /// TLS to every endpoint, replacing an `etcds://` URL's settings;
    /// [`TlsMode::Disable`](lock_core::TlsMode::Disable) connects in plaintext. Only
    /// [`VerifyFull`](lock_core::TlsMode::VerifyFull) can be had (tonic always checks the host
    /// name); without [`TlsOptions::root_cert`] the platform's roots are trusted. Needs the
    /// `tls` feature (on by default). Defaults to plaintext (or the URL's settings).
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.settings.tls = Some(options);
        self
    }

    /// Validates the settings, connects (within the connect timeout), and grants the client's
    /// lease with its keep-alive stream.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad endpoint list or namespace, timeouts or a TTL that are
    /// zero or over an hour, an empty user, TLS settings tonic cannot do (`require`,
    /// `verify-ca`, `prefer`, TLS without the `tls` feature, unreadable certificate files);
    /// [`Error::Connection`] when every endpoint refuses connections; [`Error::Timeout`] when
    /// none answers within the connect timeout (a server that accepts connections but never
    /// answers, or a failed TLS handshake, which tonic only retries); [`Error::Authentication`]
    /// when etcd refuses the credentials; [`Error::Unsupported`] when called from a tokio async
    /// task: building connects, and blocks until the servers answer; call it from
    /// `tokio::task::spawn_blocking`.
    pub fn build(self) -> Result<EtcdBackend> {
        let mut settings = self.settings;
        let namespace = Namespace::new(&self.namespace)?;
        settings.endpoint_list()?;
        let limits = [settings.session_ttl, settings.connect_timeout, settings.io_timeout];
        if limits.iter().any(|limit| limit.is_zero() || *limit > MAX_TIMEOUT) {
            return Err(Error::invalid_config(
                "etcd timeouts and the session TTL must be greater than zero and at most an hour",
            ));
        }
        if settings.credentials.as_ref().is_some_and(|(user, _)| user.is_empty()) {
            return Err(Error::invalid_config("the etcd user must not be empty"));
        }
        settings.io_timeout = settings.io_timeout.min(settings.asked_ttl() / 2);
        let tls = settings.tls.as_ref().map(crate::tls::check).transpose()?.flatten();
        let settings = Settings { tls, ..settings };
        crate::blocking::refuse_async_context()?;
        EtcdBackend::open(settings, namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_endpoints_credentials_and_namespace() {
        let builder = EtcdLockBuilder::from_url("etcd://app:s3cr:et%40x%2F@h1:2379,h2/apps/locks").unwrap();
        assert_eq!(builder.settings.endpoints, "h1:2379,h2");
        assert_eq!(builder.settings.endpoint_list().unwrap(), ["h1:2379", "h2:2379"]);
        assert_eq!(builder.namespace, "/apps/locks");
        let (user, password) = builder.settings.credentials.clone().unwrap();
        assert_eq!((user.as_str(), password.as_str()), ("app", "s3cr:et@x/"));
        assert!(!format!("{builder:?}").contains("s3cr"));
        let plain = EtcdLockBuilder::from_url("etcd://127.0.0.1:2379").unwrap();
        assert_eq!((plain.namespace.as_str(), plain.settings.credentials.is_none()), ("", true));
        assert!(plain.settings.tls.is_none());
        for bad in ["redis://h", "etcd://", "etcd:///ns", "h:2379", "etcd://h/ns?x=1", "etcd://h/#f"] {
            let error = EtcdLockBuilder::from_url(bad).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{bad}");
        }
        let hint = EtcdLockBuilder::from_url("etcd://:pw@h/?cacert=ca.pem").unwrap_err();
        assert!(hint.to_string().contains("etcds://") && !hint.to_string().contains("pw@"), "{hint}");
    }

    /// A password with a raw `/` or `?` ends the hosts inside it: its parts would read as
    /// endpoints, a namespace or a TLS parameter; the URL is refused without showing them.
    #[test]
    fn a_password_split_by_a_raw_slash_or_question_mark_is_never_shown() {
        for url in [
            "etcd://app:s3cr/et99@127.0.0.1:1/locks",
            "etcd://app:4711/et99@127.0.0.1:1/locks",
            "etcds://app:s3cr?et99=1@127.0.0.1:1/?cacert=ca.pem",
            "etcd://app:s3cr@4711/et99@127.0.0.1:1/",
        ] {
            let error = EtcdLockBuilder::from_url(url).map(|_| ()).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{url}");
            for part in ["s3cr", "4711", "et99"] {
                assert!(!error.to_string().contains(part), "{part} shown in {error}");
            }
        }
        let encoded = EtcdLockBuilder::from_url("etcd://app:s3cr%2Fet99@127.0.0.1:1/a%40b").unwrap();
        assert_eq!(encoded.namespace, "/a@b");
    }

    #[test]
    fn endpoints_are_host_and_port() {
        let list = |text: &str| Settings { endpoints: text.into(), ..EtcdLockBuilder::new("").settings };
        assert_eq!(list("[::1],[::1]:23").endpoint_list().unwrap(), ["[::1]:2379", "[::1]:23"]);
        for bad in ["", " ", "h,", "http://h:1", "h:x", "h:0", "u@h:1", "h:1/p", "h 1"] {
            assert!(list(bad).endpoint_list().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ttls_are_whole_seconds_rounded_up() {
        let ttl = |ttl| EtcdLockBuilder::new("h").session_ttl(ttl).settings.ttl_secs();
        assert_eq!(ttl(Duration::from_millis(1500)), 2);
        assert_eq!(ttl(Duration::from_secs(10)), 10);
        assert_eq!(ttl(Duration::from_millis(1)), 1);
    }

    #[test]
    fn bad_settings_fail_before_connecting() {
        let base = || EtcdLockBuilder::new("127.0.0.1:1");
        for builder in [
            base().namespace("a//b"),
            base().session_ttl(Duration::ZERO),
            base().io_timeout(Duration::MAX),
            base().connect_timeout(Duration::ZERO),
            base().credentials("", "pw"),
            EtcdLockBuilder::new("user:s3cret@h:2379"),
            // A `,` in the password: no part of it is shown as an endpoint.
            EtcdLockBuilder::new("user:s3c,ret@h:2379"),
            EtcdLockBuilder::new("h0:2379,user:s3c,ret@h:2379"),
            EtcdLockBuilder::new(" "),
            EtcdLockBuilder::new("http://h:2379"),
        ] {
            let shown = format!("{builder:?}");
            assert!(!shown.contains("s3c") && !shown.contains("ret@"), "{shown}");
            let error = builder.build().unwrap_err().to_string();
            assert!(!error.contains("s3c") && !error.contains("ret@"), "{error}");
        }
    }
}
