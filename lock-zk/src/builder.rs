//! [`ZooKeeperLockBuilder`]: settings, defaults, validation, and the first connection.

use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

use crate::path::Root;
use crate::ZooKeeperBackend;

/// Builds a [`ZooKeeperBackend`]. Every setter has a default; [`build`](Self::build) validates
/// them, connects a session and creates the namespace, so an unreachable ensemble is reported
/// there.
///
/// The settings are those of every distlock builder (`connect_timeout`, `io_timeout`,
/// `namespace`) but `max_connections`: a backend has one ZooKeeper session, over which every
/// request is pipelined, so there is no pool to size.
#[derive(Clone)]
#[must_use]
pub struct ZooKeeperLockBuilder {
    pub(crate) settings: Settings,
    pub(crate) root: String,
    /// The digest user as given, checked by `build`.
    pub(crate) digest_user: Option<String>,
}

/// The longest timeout accepted: far beyond any sensible one, and no overflow of `Instant`.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// What a backend's sessions are made with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// `user:password` for the `digest` scheme.
    pub(crate) digest: Option<String>,
    /// TLS to every server (checked by `build`: `None` or a mode that verifies, with a root
    /// certificate).
    pub(crate) tls: Option<TlsOptions>,
    /// Whether the hosts and the namespace may hold part of a password: a URL with an `@` after
    /// its authority (`zk://u:pa/ss@h:2181/x` reads as host `u`, port `pa`, namespace
    /// `/ss@h:2181/x`), which `redact_url` hides up to that `@` too. They are then never shown,
    /// and the client's session logs nothing (zookeeper-client logs its hosts; `session.rs`).
    pub(crate) hidden: bool,
}

impl Settings {
    /// The connect string as errors and `Debug` may show it.
    pub(crate) fn shown_hosts(&self) -> &str {
        if self.hidden {
            "***"
        } else {
            &self.connect_string
        }
    }

    /// `root` as errors and `Debug` may show it (all before its last `@` hidden, if hidden).
    pub(crate) fn shown_root(&self, root: &str) -> String {
        match root.rfind('@') {
            Some(at) if self.hidden => format!("***{}", &root[at..]),
            _ => root.to_owned(),
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("connect_string", &self.shown_hosts())
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("digest_user", &self.digest.as_deref().and_then(|d| d.split(':').next()))
            .field("tls", &self.tls.as_ref().map(TlsOptions::mode))
            .finish()
    }
}

impl std::fmt::Debug for ZooKeeperLockBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperLockBuilder")
            .field("settings", &self.settings)
            .field("root", &self.settings.shown_root(&self.root))
            .field("digest_user", &self.digest_user)
            .finish()
    }
}

impl ZooKeeperLockBuilder {
    pub(crate) fn new(connect_string: impl Into<String>) -> Self {
        Self {
            settings: Settings {
                connect_string: connect_string.into(),
                session_timeout: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(5),
                io_timeout: Duration::from_secs(5),
                digest: None,
                tls: None,
                hidden: false,
            },
            root: "/distlock".into(),
            digest_user: None,
        }
    }

    /// A builder from a URL: `zk://[user:password@]host:port[,host:port…][/namespace]` (or
    /// `zookeeper://…`). The credentials (percent-decoded) become [`digest`](Self::digest)
    /// authentication, the path the [`namespace`](Self::namespace). The userinfo ends at the last
    /// `@` before the first `/`, so `zk://h:2181/a@b` is the namespace `/a@b` without credentials
    /// (a `zk+tls://` URL refuses an `@` after its hosts: percent-encode it, `%40`).
    ///
    /// `zk+tls://…` (or `zookeeper+tls://…`) connects to every server with TLS (feature `tls`;
    /// the servers' `secureClientPort`), and takes these parameters, the same as lock-redis's
    /// `rediss://` URLs (percent-encoded; [`tls`](Self::tls) sets the same):
    ///
    /// | parameter | meaning |
    /// | --- | --- |
    /// | `cacert=<PEM file>` | the CA certificates to trust: required (`zookeeper-client` does not read the platform's roots) |
    /// | `cert=<PEM file>&key=<PEM file>` | present this client certificate (for `ssl.clientAuth=need`) |
    /// | `sslmode=verify-full` | the default: the chain, and that the certificate names the host connected to |
    /// | `sslmode=verify-ca` (or `require`) | the chain only, any host name |
    ///
    /// `zk+tls://app:s3cret@zk1:2281,zk2:2281/locks?cacert=/etc/zk/ca.pem&cert=/etc/app/client.pem&key=/etc/app/client.key`
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, no host, a query on a `zk://` URL (no setting
    /// is read from one) or an unknown parameter on a `zk+tls://` one, a fragment, a `cert`
    /// without `key`, an `sslmode` that is not libpq's, an `@` after the hosts of a `zk+tls://`
    /// URL, or parts that are not UTF-8 once percent-decoded.
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = || lock_core::redact_url(url);
        let parts = lock_core::UrlParts::split(url)?;
        let tls = match parts.scheme {
            "zk" | "zookeeper" => false,
            "zk+tls" | "zookeeper+tls" => true,
            _ => return Err(Error::invalid_config(format!("not a zk:// URL: {}", shown()))),
        };
        if parts.hosts.is_empty() {
            return Err(Error::invalid_config(format!("no host in {}", shown())));
        }
        if parts.rest.contains('#') || (!tls && parts.rest.contains('?')) {
            let tls_hint = if tls { "" } else { " (TLS parameters need zk+tls://)" };
            return Err(Error::invalid_config(format!(
                "a zk:// URL takes no query or fragment{tls_hint}: {}",
                shown()
            )));
        }
        let mut builder = Self::new(parts.hosts);
        // As `redact_url` reads it: an `@` after the authority may end a password.
        builder.settings.hidden = parts.rest.contains('@');
        if tls {
            if builder.settings.hidden {
                // A password with a raw `?` would read as the query: its parts would become
                // parameter names or certificate paths, which errors and `Debug` show.
                return Err(Error::invalid_config(
                    "a zk+tls:// URL has a `@` after its hosts: percent-encode it (%40), and a \
                     password's `/`, `?` or `#` (%2F, %3F, %23)",
                ));
            }
            builder = builder.tls(crate::tls::from_query(parts.query())?);
        }
        let path = parts.path()?;
        // `zk://h:2181/` is the default namespace, as `zk://h:2181`.
        if !path.is_empty() && path != "/" {
            builder = builder.namespace(path);
        }
        if let Some(user) = parts.user()? {
            builder = builder.digest(user, parts.password()?.unwrap_or_default());
        }
        Ok(builder)
    }

    /// The node under which every lock lives (the root path; Curator's word for it too:
    /// `CuratorFrameworkFactory.builder().namespace(..)`), created as a persistent node on
    /// [`build`](Self::build) (with its ancestors); a lock named `orders` is the node
    /// `<namespace>/orders`, where Curator's `InterProcessMutex` on the same path finds it.
    /// Defaults to `"/distlock"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.root = namespace.into();
        self
    }

    /// The session timeout asked of the servers (they may negotiate it into their
    /// `minSessionTimeout..=maxSessionTimeout`). A hold is believed for at most the negotiated
    /// timeout after its last confirmed liveness check, whatever the lock's lease: after that the
    /// servers may have ended the session and handed the lock to someone else. Defaults to 10 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = timeout;
        self
    }

    /// How long connecting a session may take. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long one request (or one pipelined batch) may wait for its reply; a wait for the lock
    /// itself is bounded by the caller's deadline instead. Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.settings.io_timeout = timeout;
        self
    }

    /// Authenticates with the `digest` scheme as `user:password`; every node is then created
    /// with `CREATOR_ALL` (only this identity may touch it). Defaults to no authentication, with
    /// nodes open to anyone (`OPEN_ACL_UNSAFE`, as Curator's default).
    ///
    /// A wrong password does not fail the session in ZooKeeper: it authenticates another
    /// identity, and acquiring reports [`Error::Authentication`] when that identity may not
    /// create nodes under the root.
    pub fn digest(mut self, user: impl AsRef<str>, password: impl AsRef<str>) -> Self {
        self.settings.digest = Some(format!("{}:{}", user.as_ref(), password.as_ref()));
        self.digest_user = Some(user.as_ref().to_owned());
        self
    }

    /// TLS to every server of the connect string (ZooKeeper's `secureClientPort`), replacing a
    /// `zk+tls://` URL's settings; [`TlsMode::Disable`](lock_core::TlsMode::Disable) connects in
    /// plaintext. Needs the `tls` feature and a root certificate file
    /// ([`TlsOptions::root_cert`]): `zookeeper-client` does not read the platform's roots.
    /// [`VerifyFull`](lock_core::TlsMode::VerifyFull) checks the chain and that the certificate
    /// names the host connected to; [`VerifyCa`](lock_core::TlsMode::VerifyCa) and
    /// [`Require`](lock_core::TlsMode::Require) the chain only. The files are read at each
    /// session's connect, so a session after an expiry uses rotated certificates. Defaults to
    /// plaintext (or the URL's settings).
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.settings.tls = Some(options);
        self
    }

    /// Validates the settings, connects a session (within the connect timeout) and creates the
    /// namespace if absent.
    ///
    /// With TLS, installs ring as rustls's process-wide crypto provider unless the application
    /// installed one first: `zookeeper-client` builds its TLS config from the process default,
    /// and with both ring and aws-lc-rs compiled in (its `rustls` dependency brings aws-lc-rs)
    /// rustls will not pick one.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid namespace, an empty connect string, timeouts that are
    /// zero or over an hour, a digest user that is empty or has `:`, or TLS settings ZooKeeper
    /// cannot use (`prefer`, no root certificate file, TLS without the `tls` feature, a
    /// certificate file that cannot be read); [`Error::Tls`] when a TLS handshake fails (a
    /// certificate no trusted CA signed or that does not name the host, a refused client
    /// certificate, a port that does not speak TLS); [`Error::Connection`] or
    /// [`Error::Timeout`] when no server answers within the connect timeout (a plaintext
    /// connect to a TLS-only port is a connection the server closes: the error says so);
    /// [`Error::Authentication`] when the servers refuse the credentials or the namespace's parent.
    /// (A wrong digest password is only noticed by the first acquisition: see
    /// [`digest`](Self::digest).) [`Error::Unsupported`] when called from a tokio async task:
    /// building connects, and blocks until the servers answer; call it from
    /// `tokio::task::spawn_blocking`.
    pub fn build(self) -> Result<ZooKeeperBackend> {
        let settings = self.settings;
        let root = Root::new(&self.root).map_err(|error| match settings.hidden {
            // Its text names the namespace, which may hold part of a password.
            true => Error::invalid_config("the namespace of the zk:// URL is not a valid ZooKeeper path"),
            false => error,
        })?;
        if settings.connect_string.trim().is_empty() {
            return Err(Error::invalid_config("the ZooKeeper connect string is empty"));
        }
        let timeouts = [settings.session_timeout, settings.connect_timeout, settings.io_timeout];
        if timeouts.iter().any(|timeout| timeout.is_zero() || *timeout > MAX_TIMEOUT) {
            return Err(Error::invalid_config(
                "ZooKeeper timeouts must be greater than zero and at most an hour",
            ));
        }
        if let Some(user) = &self.digest_user {
            if user.is_empty() || user.contains(':') {
                return Err(Error::invalid_config("the digest user must not be empty or contain `:`"));
            }
        }
        let tls = settings.tls.as_ref().map(crate::tls::check).transpose()?.flatten();
        let settings = Settings { tls, ..settings };
        crate::blocking::refuse_async_context()?;
        ZooKeeperBackend::open(settings, root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password with a raw `/` ends the authority inside the password: the hosts and the
    /// namespace then hold its two parts, and neither `Debug` nor `build`'s error shows them.
    #[test]
    fn a_password_split_by_a_raw_slash_is_never_shown() {
        for url in ["zk://app:s3cr/et99@127.0.0.1:1/locks", "zk://app:4711/et99@127.0.0.1:1/lo//cks"] {
            let builder =
                ZooKeeperLockBuilder::from_url(url).unwrap().connect_timeout(Duration::from_millis(200));
            let shown = format!("{builder:?}");
            let error = builder.build().unwrap_err().to_string();
            for text in [shown, error] {
                for part in ["s3cr", "4711", "et99"] {
                    assert!(!text.contains(part), "{part} shown in {text}");
                }
            }
        }
    }

    /// A password with a raw `?` ends the authority too: the rest of the password then reads as a
    /// query parameter's name or a certificate path, which errors must not show: such a
    /// zk+tls:// URL is refused.
    #[test]
    fn a_password_split_by_a_raw_question_mark_is_never_shown() {
        for url in [
            "zk+tls://app:s3cr?et99@127.0.0.1:1/locks?cacert=/ca.pem",
            "zk+tls://app:s3cr?et99=1@h:1/",
            "zk+tls://app:s3cr?cacert=et99@127.0.0.1:1/",
        ] {
            let error = ZooKeeperLockBuilder::from_url(url).map(|_| ()).unwrap_err().to_string();
            for part in ["s3cr", "et99"] {
                assert!(!error.contains(part), "{part} shown in {error}");
            }
        }
    }

    #[test]
    fn urls_give_hosts_credentials_and_root() {
        let builder =
            ZooKeeperLockBuilder::from_url("zk://app:s3cr:et%40x%2F@h1:2181,h2:2182/apps/locks").unwrap();
        assert_eq!(builder.digest_user.as_deref(), Some("app"));
        assert_eq!(builder.settings.connect_string, "h1:2181,h2:2182");
        assert_eq!(builder.root, "/apps/locks");
        assert_eq!(builder.settings.digest.as_deref(), Some("app:s3cr:et@x/"));
        // An `@` in the path is not the end of a userinfo.
        let at = ZooKeeperLockBuilder::from_url("zk://h:2181/a@b").unwrap();
        assert_eq!((at.settings.connect_string.as_str(), at.root.as_str()), ("h:2181", "/a@b"));
        assert!(at.digest_user.is_none());
        let encoded = ZooKeeperLockBuilder::from_url("zookeeper://us%20er:p@h/r%20s").unwrap();
        assert_eq!(encoded.digest_user.as_deref(), Some("us er"));
        assert_eq!(encoded.root, "/r s");
        let plain = ZooKeeperLockBuilder::from_url("zk://127.0.0.1:2181").unwrap();
        assert_eq!(plain.root, "/distlock");
        assert!(plain.settings.digest.is_none());
        for bad in ["redis://h", "zk://", "zk:///root", "h:2181", "zk://h/r?x=1"] {
            assert!(matches!(ZooKeeperLockBuilder::from_url(bad), Err(Error::InvalidConfig { .. })), "{bad}");
        }
        assert!(!format!("{builder:?}").contains("s3cr"));
    }

    #[test]
    fn tls_urls_give_tls_options() {
        let url = "zk+tls://app:s3cret@h1:2281,h2/apps/locks?cacert=%2Fetc%2Fzk%20ca.pem&sslmode=verify-ca";
        let builder = ZooKeeperLockBuilder::from_url(url).unwrap();
        assert_eq!(builder.settings.connect_string, "h1:2281,h2");
        assert_eq!(builder.root, "/apps/locks");
        assert_eq!(builder.settings.digest.as_deref(), Some("app:s3cret"));
        let tls = builder.settings.tls.as_ref().expect("TLS");
        assert_eq!(tls.mode(), lock_core::TlsMode::VerifyCa);
        assert_eq!(tls.root_cert_path().unwrap(), std::path::Path::new("/etc/zk ca.pem"));
        let shown = format!("{builder:?}");
        assert!(!shown.contains("s3cret") && shown.contains("VerifyCa"), "{shown}");

        let default =
            ZooKeeperLockBuilder::from_url("zookeeper+tls://h:2281/?cacert=ca.pem&cert=c.pem&key=k.pem");
        let tls = default.unwrap().settings.tls.unwrap();
        assert_eq!(tls.mode(), lock_core::TlsMode::VerifyFull);
        assert_eq!(tls.client_cert_paths().unwrap().1, std::path::Path::new("k.pem"));
        assert!(ZooKeeperLockBuilder::from_url("zk://h:2181").unwrap().settings.tls.is_none());

        let plaintext = ZooKeeperLockBuilder::from_url("zk://:s3cret@h/?cacert=ca.pem").unwrap_err();
        assert!(plaintext.to_string().contains("zk+tls://"), "{plaintext}");
        for bad in [
            "zk+tls://:s3cret@h/?cert=c.pem",
            "zk+tls://:s3cret@h/?x=1",
            "zk+tls://:s3cret@h/#f",
            "zk+tls://:s3cret@h/?sslmode=on",
        ] {
            let error = ZooKeeperLockBuilder::from_url(bad).unwrap_err();
            assert!(matches!(error, Error::InvalidConfig { .. }), "{bad}");
            assert!(!format!("{error} {error:?}").contains("s3cret"), "{bad}: {error}");
        }
    }

    #[test]
    fn bad_settings_fail_before_connecting() {
        let base = || ZooKeeperLockBuilder::new("127.0.0.1:1");
        for builder in [
            base().namespace("relative"),
            base().namespace("/zookeeper/x"),
            base().session_timeout(Duration::ZERO),
            base().digest("", "pw"),
            base().digest("a:b", "pw"),
            base().io_timeout(Duration::MAX),
            ZooKeeperLockBuilder::new(" "),
        ] {
            assert!(matches!(builder.build(), Err(Error::InvalidConfig { .. })));
        }
    }
}
