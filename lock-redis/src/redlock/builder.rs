//! [`RedlockBuilder`]: configuration of a [`RedlockBackend`], validated by `build`.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use lock_core::{Error, OwnerToken, Result, TlsOptions};

use super::fanout::Node;
use super::{Inner, RedlockBackend};
use crate::builder::{check_prefix, check_timeout};
use crate::connection::{ConnectionPool, PoolSettings};
use crate::topology::{Connector, Target};
use crate::waiter::WaitHub;

/// Builds a [`RedlockBackend`] by value; [`build`](Self::build) validates.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::RedlockBackend;
///
/// let backend = RedlockBackend::builder([
///     "redis://10.0.0.1:6379/",
///     "redis://10.0.0.2:6379/",
///     "redis://10.0.0.3:6379/",
///     "redis://10.0.0.4:6379/",
///     "redis://10.0.0.5:6379/",
/// ])
/// .io_timeout(Duration::from_millis(20))
/// .namespace("billing")
/// .build()?;
/// # let _ = backend;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedlockBuilder {
    urls: Vec<String>,
    key_prefix: String,
    node_timeout: Duration,
    connect_timeout: Duration,
    max_connections: u32,
    tls: Option<TlsOptions>,
}

impl RedlockBuilder {
    /// A builder for the independent nodes at `urls` (each `redis://[[user]:password@]host[:port][/db]`
    /// or `rediss://…`, with the TLS parameters of the single-node backend's URLs: see
    /// [`RedisLockBuilder::new`](crate::RedisLockBuilder::new)), with every default.
    ///
    /// The nodes must be independent masters — not replicas of one another, not one server
    /// listed twice. [`build`](Self::build) catches the same `host:port` written twice, but the
    /// check is lexical: two spellings of one server (`localhost` and `127.0.0.1`, a name and its
    /// address) are not detected, and that server would count twice towards the quorum.
    ///
    /// Use an odd number, at least 3 (5 is usual): `n` nodes survive `(n - 1) / 2` failures, and
    /// an even count buys no more tolerance than one node fewer.
    pub fn new<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            urls: urls.into_iter().map(Into::into).collect(),
            key_prefix: "distlock".into(),
            node_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            max_connections: 16,
            tls: None,
        }
    }

    /// The I/O timeout — Redlock's *node timeout*: how long one round of requests waits for the
    /// nodes' replies (and, for a node without an idle connection, for a connection); a node
    /// that has not answered by then counts as failed for this operation. Keep it far below the
    /// lease — it bounds how much of the lease an acquisition can use up — and above the nodes'
    /// round trip. Defaults to 50 ms.
    #[doc(alias = "node_timeout")]
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How long opening one connection (TCP, TLS, `AUTH`) may take. Connections are opened in
    /// the background; an operation never waits for one longer than the node timeout. Defaults
    /// to 1 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The most connections kept open to each node (opened on demand). Defaults to 16.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// TLS settings for every node, replacing what each URL says about TLS (its scheme
    /// included), as [`RedisLockBuilder::tls`](crate::RedisLockBuilder::tls) does for one
    /// server. Defaults to what each URL says.
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.tls = Some(options);
        self
    }

    /// The namespace: the first part of every key, as for the single-node backend:
    /// `<namespace>:{<name>}:lock` (see [`RedisKeys`](crate::RedisKeys)). Must not contain `{`,
    /// `}` or control characters, and be 1 to 128 bytes. Defaults to `"distlock"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.key_prefix = namespace.into();
        self
    }

    /// Validates the configuration and opens a first connection to every node at once, within
    /// the connect timeout: fails unless a quorum of nodes answers (a minority down is what
    /// Redlock tolerates, and is no error).
    ///
    /// Logs a warning (through `tracing`) for fewer than 3 nodes or an even number of nodes:
    /// allowed, but they tolerate no more failures than one node fewer.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty node list, a URL that does not parse or is not a
    /// single server's (or TLS without the `tls` feature, or TLS settings Redis cannot use), the
    /// same `host:port` listed twice, whatever the database (compared as written, see
    /// [`new`](Self::new)), a zero pool size, a zero or over-an-hour timeout, or a namespace
    /// that would break the key layout; [`Error::Tls`], [`Error::Connection`],
    /// [`Error::Timeout`] or [`Error::Authentication`] (the first failed node's) when fewer than
    /// a quorum of nodes can be reached in time.
    pub fn build(self) -> Result<RedlockBackend> {
        if self.urls.is_empty() {
            return Err(Error::invalid_config("Redlock needs at least one node URL"));
        }
        if self.max_connections == 0 {
            return Err(Error::invalid_config("max_connections must be at least 1"));
        }
        check_timeout("io_timeout", self.node_timeout)?;
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_prefix(&self.key_prefix)?;
        let mut clients = Vec::with_capacity(self.urls.len());
        let mut seen = HashSet::new();
        for (index, url) in self.urls.iter().enumerate() {
            let invalid = |reason: String| Error::invalid_config(format!("node {index}: {reason}"));
            let client = match Target::parse(url, self.tls.as_ref()).map_err(invalid)? {
                Target::Single(client) => client,
                _ => return Err(invalid("a Redlock node is one server: redis:// or rediss://".into())),
            };
            let info = client.get_connection_info();
            let address = info.addr().to_string();
            // One server is one vote: another database on it shares its fate (a restart, a
            // pause), so it must not count twice towards the quorum.
            if !seen.insert(address.clone()) {
                return Err(Error::invalid_config(format!(
                    "node {index}: {address} is listed twice; Redlock needs independent nodes"
                )));
            }
            if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
                crate::tls::install_provider();
            }
            clients.push((client, address));
        }
        let count = clients.len();
        if count < 3 || count % 2 == 0 {
            tracing::warn!(
                nodes = count,
                "Redlock over {count} node(s) tolerates {} failure(s); use an odd number, at least 3",
                (count - 1) / 2
            );
        }
        let settings = PoolSettings {
            max_size: self.max_connections,
            connect_timeout: self.connect_timeout,
            // Each read is bounded by the round's deadline; this is only the ceiling.
            read_timeout: self.node_timeout,
            write_timeout: self.node_timeout,
        };
        let nodes = clients
            .into_iter()
            .map(|(client, address)| {
                let control = format!("{}:subscriber:{}", self.key_prefix, OwnerToken::random());
                Node {
                    address,
                    hub: WaitHub::new(Connector::Direct(Box::new(client.clone())), settings, control),
                    pool: ConnectionPool::new(Connector::Direct(Box::new(client)), settings),
                }
            })
            .collect();
        let nodes: Vec<Node> = nodes;
        let quorum = count / 2 + 1;
        connect_quorum(&nodes, quorum)?;
        Ok(RedlockBackend::from_inner(Inner {
            nodes,
            quorum,
            prefix: self.key_prefix,
            node_timeout: self.node_timeout,
        }))
    }
}

/// Opens a first connection to every node at once (r2d2's rule, as the single-node builder):
/// fails, with the first node's error, unless a quorum answers within the connect timeout — a
/// backend that could never take a lock is reported at `build`, while a minority of nodes down
/// (which Redlock tolerates) is not an error.
fn connect_quorum(nodes: &[Node], quorum: usize) -> Result<()> {
    let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
        let attempts: Vec<_> = nodes.iter().map(|node| scope.spawn(|| node.pool.check_server())).collect();
        attempts
            .into_iter()
            .map(|attempt| {
                attempt.join().unwrap_or_else(|_| Err(Error::backend("redis", "a connect attempt panicked")))
            })
            .collect()
    });
    let reached = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
    if reached >= quorum {
        return Ok(());
    }
    tracing::warn!(reached, quorum, "Redlock: fewer nodes than a quorum answered at build");
    outcomes.into_iter().find_map(Result::err).map_or(Ok(()), Err)
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry passwords: show only where they point.
        let addresses: Vec<String> = self
            .urls
            .iter()
            .map(|url| Target::address_of(url).unwrap_or_else(|_| "<invalid URL>".into()))
            .collect();
        f.debug_struct("RedlockBuilder")
            .field("nodes", &addresses)
            .field("namespace", &self.key_prefix)
            .field("io_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_connections", &self.max_connections)
            .field("tls", &self.tls.as_ref().map(TlsOptions::mode))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(ports: &[u16]) -> Vec<String> {
        ports.iter().map(|port| format!("redis://127.0.0.1:{port}/")).collect()
    }

    fn invalid(builder: RedlockBuilder) -> String {
        match builder.build() {
            Err(Error::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    /// URLs of `count` harness nodes (started on first use).
    fn live(count: usize) -> Vec<String> {
        let nodes = lock_testkit::harness::shared::redis_nodes(count).expect("harness redis nodes");
        nodes.iter().map(|node| node.address().to_owned()).collect()
    }

    #[test]
    fn defaults_and_quorum_of_a_built_backend() {
        let nodes = live(5);
        let backend = RedlockBuilder::new(&nodes).build().unwrap();
        assert_eq!(backend.quorum(), 3);
        assert_eq!(backend.io_timeout(), Duration::from_millis(50));
        assert_eq!(backend.nodes().len(), 5);
        // A minority down is tolerated at build; a majority down is the first node's error.
        let mut minority = nodes[..3].to_vec();
        minority.extend(urls(&[1, 2]));
        assert_eq!(RedlockBuilder::new(&minority).build().unwrap().quorum(), 3);
        let mut majority = nodes[..2].to_vec();
        majority.extend(urls(&[1, 2, 3]));
        let built = RedlockBuilder::new(&majority).build();
        assert!(matches!(built, Err(Error::Connection { .. } | Error::Timeout { .. })), "{built:?}");
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let nodes = live(7);
        for (count, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            assert_eq!(RedlockBuilder::new(&nodes[..count]).build().unwrap().quorum(), quorum);
        }
    }

    #[test]
    fn bad_node_lists_are_invalid_config_without_panicking() {
        assert!(invalid(RedlockBuilder::new(Vec::<String>::new())).contains("at least one"));
        assert!(invalid(RedlockBuilder::new(["redis://127.0.0.1:1/", "not a url"])).starts_with("node 1"));
        let twice = invalid(RedlockBuilder::new(["redis://127.0.0.1:1/", "redis://:pw@127.0.0.1:1/"]));
        assert!(twice.contains("listed twice"), "{twice}");
        // Another database on the same server is the same server: one vote, not two.
        let databases = invalid(RedlockBuilder::new([
            "redis://127.0.0.1:1/0",
            "redis://127.0.0.1:1/1",
            "redis://127.0.0.1:2/",
        ]));
        assert!(databases.contains("listed twice"), "{databases}");
    }

    #[test]
    fn limits_are_validated() {
        let nodes = urls(&[1, 2, 3]);
        invalid(RedlockBuilder::new(&nodes).io_timeout(Duration::ZERO));
        invalid(RedlockBuilder::new(&nodes).io_timeout(Duration::MAX));
        invalid(RedlockBuilder::new(&nodes).connect_timeout(Duration::ZERO));
        invalid(RedlockBuilder::new(&nodes).max_connections(0));
        invalid(RedlockBuilder::new(&nodes).namespace("a{b"));
        invalid(RedlockBuilder::new(&nodes).namespace(""));
    }

    #[test]
    fn debug_hides_passwords() {
        let shown = format!("{:?}", RedlockBuilder::new(["redis://user:hunter2@127.0.0.1:1/"]));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
    }
}
