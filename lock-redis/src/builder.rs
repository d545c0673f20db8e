//! [`RedisLockBuilder`]: configuration of a [`RedisBackend`], validated by `build`.

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use lock_core::{Error, Result, TlsOptions};

use crate::backend::{Inner, RedisBackend, RedisLockKind, ReplicaWait};
use crate::connection::PoolSettings;
use crate::error;
use crate::topology::{
    AddressMap, ClusterNodes, Connector, Heartbeat, Node, Nodes, SentinelResolver, Target,
};

/// The longest connect, I/O or `WAIT` timeout accepted: longer is a mistake, not a limit.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The longest key prefix accepted, in bytes.
const MAX_PREFIX_LEN: usize = 128;

/// Builds a [`RedisBackend`] by value; [`build`](Self::build) validates.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::{RedisBackend, RedisLockKind};
///
/// let backend = RedisBackend::builder("redis://locks.internal:6379/")
///     .kind(RedisLockKind::ReentrantHash)
///     .namespace("billing")
///     .max_connections(32)
///     .connect_timeout(Duration::from_secs(2))
///     .wait_for_replicas(1, Duration::from_millis(200))
///     .build()?;
/// # let _ = backend;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisLockBuilder {
    url: String,
    kind: RedisLockKind,
    key_prefix: String,
    max_connections: u32,
    connect_timeout: Duration,
    io_timeout: Duration,
    wait_for_replicas: Option<(u32, Duration)>,
    fair: bool,
    address_map: Option<AddressMap>,
    tls: Option<TlsOptions>,
}

impl RedisLockBuilder {
    /// A builder for the server at `url`, with every default.
    ///
    /// `url` is `redis://[[user]:password@]host[:port][/db]` (`user:password` for an ACL user,
    /// `:password` for `requirepass`), or `rediss://…` for TLS; for a Sentinel-managed primary
    /// `redis+sentinel://[[user]:password@]s1[:port],…/<master-name>[/db]`, for a Redis Cluster
    /// `redis+cluster://[[user]:password@]n1[:port],…/` (`rediss+…` with TLS; see the crate
    /// docs, *Redis Cluster and Sentinel*). A TLS URL takes `?cacert=<PEM file>`,
    /// `&cert=<PEM file>&key=<PEM file>`, `&sslmode=verify-full|verify-ca|require` and
    /// `#insecure` (see the crate docs, *TLS*), or [`tls`](Self::tls) sets the same.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            kind: RedisLockKind::SetNx,
            key_prefix: "distlock".into(),
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            wait_for_replicas: None,
            fair: true,
            address_map: None,
            tls: None,
        }
    }

    /// The data layout: a plain owner-token key or a reentrant hash.
    ///
    /// Clients contending for one lock must use the same kind (a lock of the other kind is a
    /// type error on the server, reported as [`Error::Backend`]). Defaults to
    /// [`RedisLockKind::SetNx`].
    pub fn kind(mut self, kind: RedisLockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The namespace: the first part of every key, `<namespace>:{<name>}:lock`. Use different
    /// namespaces to keep applications sharing a server apart. Must not contain `{`, `}` or
    /// control characters, and be 1 to 128 bytes. Defaults to `"distlock"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.key_prefix = namespace.into();
        self
    }

    /// The most connections the backend keeps open (they are opened on demand), per primary in
    /// a cluster. A caller that finds them all busy waits up to the connect timeout. Defaults
    /// to 16.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// How long opening a connection (TCP, TLS, `AUTH`) may take, and how long a caller waits
    /// for a pooled connection. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long sending a command may block, and its reply may take, before the call fails
    /// with [`Error::Timeout`] (and the connection is discarded). Defaults to 5 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Whether waiters are served in arrival order (Redisson's `RFairLock`) or a released lock goes
    /// to whoever asks first (its `RLock`).
    ///
    /// Fair: waiters queue in Redis; a release reserves the lock for the longest-waiting one and
    /// wakes only it, so nobody starves, and a holder that re-locks at once waits its turn.
    /// Non-fair: waiters do not queue; every release wakes this lock's waiters and they race
    /// (the releaser itself often wins again), which gives more acquisitions per second under
    /// contention but no order. Both wake waiters by pub/sub, not by polling. Clients of one lock
    /// should use one mode: a fair client's waiters still get their turns, but a fair client's
    /// release does not wake non-fair waiters (they re-check at the holder's expiry, or within a
    /// second). Defaults to `true`.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// Rewrites the address of every server the backend connects to — the URL's hosts, and the
    /// primaries and nodes that the sentinels or the cluster announce — before connecting, as
    /// Redisson's `NatMapper` and Lettuce's `MappingSocketAddressResolver` do: for deployments
    /// that announce addresses the client cannot reach (NAT, containers, a proxy in between).
    /// `map` gets a host and port as announced and returns where to connect instead. Defaults to
    /// none.
    pub fn map_addresses(mut self, map: impl Fn(&str, u16) -> (String, u16) + Send + Sync + 'static) -> Self {
        self.address_map = Some(Arc::new(map));
        self
    }

    /// TLS settings for every server the URL leads to (the node; the sentinels and the primary
    /// they name; every cluster node), replacing what the URL says about TLS — its scheme
    /// included: [`TlsMode::Disable`](lock_core::TlsMode::Disable) connects in plaintext even to
    /// a `rediss://` URL, any other mode uses TLS even for `redis://`.
    ///
    /// [`VerifyFull`](lock_core::TlsMode::VerifyFull) checks the certificate's chain and that
    /// it names the host connected to; [`VerifyCa`](lock_core::TlsMode::VerifyCa) (and
    /// [`Require`](lock_core::TlsMode::Require) with a root certificate) the chain only;
    /// `Require` without one checks nothing (redis-rs's `#insecure`). Without a root
    /// certificate file the platform's roots are trusted. The files are read by
    /// [`build`](Self::build): a rotated certificate takes a new backend. Needs the `tls`
    /// feature (a default one). Defaults to what the URL says.
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.tls = Some(options);
        self
    }

    /// After each acquisition, `WAIT replicas timeout` on the same connection; if fewer replicas
    /// acknowledge in time, the lock is released and the acquisition fails with
    /// [`Error::NotReplicated`].
    ///
    /// This narrows (it does not close) the window in which a failover to a replica that never
    /// saw the lock hands it to a second holder (source 003). Defaults to no `WAIT`.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = Some((replicas, timeout));
        self
    }

    /// Validates the configuration and opens the first connection (TCP, TLS, `AUTH`), within the
    /// connect timeout, so that an unreachable server, a failed TLS handshake or a wrong
    /// password is reported here.
    ///
    /// With TLS, installs ring as rustls's process-wide crypto provider unless the application
    /// installed one (redis-rs builds its TLS configs from the process default).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a URL that does not parse (or TLS without the `tls`
    /// feature), TLS settings Redis cannot use (`sslmode=prefer`, `cert` without `key`, a
    /// certificate file that cannot be read or parsed), a zero pool size, a zero or
    /// over-an-hour timeout, a namespace that would break the key layout, or a `WAIT` of zero
    /// replicas or zero time; [`Error::Tls`] when the TLS handshake fails (a certificate not
    /// signed by a trusted CA or not naming the host, a server that does not speak TLS on that
    /// port, a refused client certificate); [`Error::Connection`], [`Error::Timeout`] or
    /// [`Error::Authentication`] when the server cannot be reached in time (a plaintext URL for
    /// a TLS-only port is a connection the server closes: the error says so) or refuses the
    /// credentials.
    pub fn build(self) -> Result<RedisBackend> {
        let mut target = Target::parse(&self.url, self.tls.as_ref()).map_err(Error::invalid_config)?;
        if let Some(map) = &self.address_map {
            target = target.with_address_map(Arc::clone(map));
        }
        if target.is_tls() {
            crate::tls::install_provider();
        }
        if self.max_connections == 0 {
            return Err(Error::invalid_config("max_connections must be at least 1"));
        }
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("io_timeout", self.io_timeout)?;
        check_prefix(&self.key_prefix)?;
        let replicas = match self.wait_for_replicas {
            None => None,
            Some((0, _)) => return Err(Error::invalid_config("wait_for_replicas needs at least 1 replica")),
            Some((replicas, timeout)) => {
                // WAIT with timeout 0 blocks forever: never a limit a lock should have.
                check_timeout("wait_for_replicas timeout", timeout)?;
                Some(ReplicaWait { replicas, timeout })
            }
        };
        let settings = PoolSettings {
            max_size: self.max_connections,
            connect_timeout: self.connect_timeout,
            read_timeout: self.io_timeout,
            write_timeout: self.io_timeout,
        };
        let address = target.display();
        let nodes = match target {
            Target::Single(client) => {
                let node = Node::new(address.clone(), Connector::Direct(Box::new(client)), settings);
                Nodes::One { node: Arc::new(node), sentinel: false }
            }
            Target::Sentinel { sentinels, master, nodes } => {
                let resolver = Arc::new(SentinelResolver::new(sentinels, master, nodes));
                let node = Node::new(address.clone(), Connector::Sentinel(resolver), settings);
                Nodes::One { node: Arc::new(node), sentinel: true }
            }
            Target::Cluster { seeds, nodes } => {
                Nodes::Cluster(Arc::new(ClusterNodes::new(seeds, nodes, settings)))
            }
        };
        check_deployment(&nodes)?;
        let heartbeat = Arc::new(Heartbeat::new(nodes.cluster().cloned(), self.io_timeout));
        Ok(RedisBackend::from_inner(Inner {
            nodes,
            io_timeout: self.io_timeout,
            prefix: self.key_prefix,
            kind: self.kind,
            fair: self.fair,
            replicas,
            cleanup: crate::cleanup::Cleanup::default(),
            heartbeat,
            address,
        }))
    }
}

/// `build()`'s check: the server (Sentinel's primary; every primary of a cluster) answers, so
/// that an unreachable deployment or a wrong password is reported there.
fn check_deployment(nodes: &Nodes) -> Result<()> {
    if let Some(cluster) = nodes.cluster() {
        cluster.refresh().map_err(|e| error::map("read the cluster's slot map", e))?;
    }
    for node in nodes.all() {
        node.pool.check_server()?;
    }
    Ok(())
}

pub(crate) fn check_timeout(what: &str, timeout: Duration) -> Result<()> {
    if timeout < Duration::from_millis(1) {
        return Err(Error::invalid_config(format!("{what} {timeout:?} is under 1 ms")));
    }
    if timeout > MAX_TIMEOUT {
        return Err(Error::invalid_config(format!("{what} {timeout:?} is over the {MAX_TIMEOUT:?} maximum")));
    }
    Ok(())
}

pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid_config(format!("the namespace must be 1 to {MAX_PREFIX_LEN} bytes")));
    }
    if let Some(c) = prefix.chars().find(|c| matches!(c, '{' | '}') || c.is_control()) {
        // A brace would move the Cluster hash tag off the lock name.
        return Err(Error::invalid_config(format!("the namespace must not contain {c:?}")));
    }
    Ok(())
}

impl fmt::Debug for RedisLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: show only where it points, and the TLS mode.
        let address = Target::address_of(&self.url).unwrap_or_else(|_| "<invalid URL>".into());
        let tls = match &self.tls {
            Some(tls) => Some(tls.mode()),
            None => crate::tls::split_url(&self.url).ok().and_then(|(_, tls)| tls).map(|tls| tls.mode()),
        };
        f.debug_struct("RedisLockBuilder")
            .field("address", &address)
            .field("tls", &tls)
            .field("kind", &self.kind)
            .field("fair", &self.fair)
            .field("namespace", &self.key_prefix)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("wait_for_replicas", &self.wait_for_replicas)
            .field("map_addresses", &self.address_map.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "redis://127.0.0.1:1/";

    fn invalid(builder: RedisLockBuilder) -> String {
        match builder.build() {
            Err(Error::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn build_connects_and_reports_a_closed_port() {
        let built = RedisLockBuilder::new("redis://:hunter2@127.0.0.1:1/").build();
        assert!(matches!(built, Err(Error::Connection { .. } | Error::Timeout { .. })), "{built:?}");
        assert!(!format!("{built:?}").contains("hunter2"));
    }

    #[test]
    fn bad_urls_are_invalid_config_without_panicking() {
        for url in
            ["", "not a url", "http://127.0.0.1/", "redis://", "redis://host:notaport/", "redis://[::1"]
        {
            invalid(RedisLockBuilder::new(url));
        }
    }

    #[test]
    fn acl_and_password_urls_parse() {
        for url in
            ["redis://user:secret@127.0.0.1:1/2", "redis://:secret@127.0.0.1:1/", "redis://u:a%40b@h:1/"]
        {
            let built = RedisLockBuilder::new(url).connect_timeout(Duration::from_millis(200)).build();
            assert!(!matches!(built, Err(Error::InvalidConfig { .. })), "{url}: {built:?}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_urls_install_the_crypto_provider() {
        let _ = RedisLockBuilder::new("rediss://127.0.0.1:1/").build();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[test]
    fn limits_are_validated() {
        invalid(RedisLockBuilder::new(URL).max_connections(0));
        invalid(RedisLockBuilder::new(URL).connect_timeout(Duration::ZERO));
        invalid(RedisLockBuilder::new(URL).io_timeout(Duration::from_secs(365 * 24 * 3600)));
        invalid(RedisLockBuilder::new(URL).io_timeout(Duration::MAX));
        invalid(RedisLockBuilder::new(URL).wait_for_replicas(0, Duration::from_secs(1)));
        invalid(RedisLockBuilder::new(URL).wait_for_replicas(1, Duration::ZERO));
    }

    #[test]
    fn prefixes_that_break_the_hash_tag_are_rejected() {
        for prefix in ["", "a{b", "a}b", "a\nb", &"x".repeat(129)] {
            invalid(RedisLockBuilder::new(URL).namespace(prefix));
        }
        let built = RedisLockBuilder::new(URL).namespace("app:locks").build();
        assert!(!matches!(built, Err(Error::InvalidConfig { .. })), "{built:?}");
    }

    #[test]
    fn debug_hides_the_password() {
        let shown = format!("{:?}", RedisLockBuilder::new("redis://user:hunter2@127.0.0.1:1/"));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
    }
}
