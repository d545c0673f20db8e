//! [`RedlockBuilder`]: configuration of a [`RedlockBackend`], validated by `build`.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use lock_core::{Error, OwnerToken, Result};
use redis::{Client, ConnectionAddr};

use super::fanout::Node;
use super::{Inner, RedlockBackend};
use crate::builder::{check_prefix, check_timeout, install_tls_provider};
use crate::connection::{ConnectionPool, PoolSettings};
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
/// .node_timeout(Duration::from_millis(20))
/// .key_prefix("billing")
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
}

impl RedlockBuilder {
    /// A builder for the independent nodes at `urls` (each `redis://[[user]:password@]host[:port][/db]`
    /// or `rediss://…`), with every default.
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
        }
    }

    /// How long one round of requests waits for the nodes' replies (and, for a node without an
    /// idle connection, for a connection): a node that has not answered by then counts as
    /// failed for this operation. Keep it far below the lease — it bounds how much of the lease
    /// an acquisition can use up — and above the nodes' round trip. Defaults to 50 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
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

    /// The first part of every key, as for the single-node backend:
    /// `<prefix>:{<name>}:lock` (see [`RedisKeys`](crate::RedisKeys)). Must not contain `{`, `}`
    /// or control characters, and be 1 to 128 bytes. Defaults to `"distlock"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Validates the configuration and creates the backend. Connects lazily: the first lock
    /// operation opens the connections, and reports nodes that cannot be reached.
    ///
    /// Logs a warning (through `tracing`) for fewer than 3 nodes or an even number of nodes:
    /// allowed, but they tolerate no more failures than one node fewer.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty node list, a URL that does not parse (or
    /// `rediss://` without the `tls` feature), the same `host:port` listed twice, whatever the
    /// database (compared as written, see [`new`](Self::new)), a zero pool size, a
    /// zero or over-an-hour timeout, or a prefix that would break the key layout.
    pub fn build(self) -> Result<RedlockBackend> {
        if self.urls.is_empty() {
            return Err(Error::invalid_config("Redlock needs at least one node URL"));
        }
        if self.max_connections == 0 {
            return Err(Error::invalid_config("max_connections must be at least 1"));
        }
        check_timeout("node_timeout", self.node_timeout)?;
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_prefix(&self.key_prefix)?;
        let mut clients = Vec::with_capacity(self.urls.len());
        let mut seen = HashSet::new();
        for (index, url) in self.urls.iter().enumerate() {
            let client = Client::open(url.as_str())
                .map_err(|e| Error::invalid_config(format!("node {index}: invalid Redis URL: {e}")))?;
            let info = client.get_connection_info();
            let address = info.addr().to_string();
            // One server is one vote: another database on it shares its fate (a restart, a
            // pause), so it must not count twice towards the quorum.
            if !seen.insert(address.clone()) {
                return Err(Error::invalid_config(format!(
                    "node {index}: {address} is listed twice; Redlock needs independent nodes"
                )));
            }
            if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
                install_tls_provider();
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
                    hub: WaitHub::new(client.clone(), settings, control),
                    pool: ConnectionPool::new(client, settings),
                }
            })
            .collect();
        Ok(RedlockBackend::from_inner(Inner {
            nodes,
            quorum: count / 2 + 1,
            prefix: self.key_prefix,
            node_timeout: self.node_timeout,
        }))
    }
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry passwords: show only where they point.
        let addresses: Vec<String> = self
            .urls
            .iter()
            .map(|url| {
                Client::open(url.as_str())
                    .map(|client| client.get_connection_info().addr().to_string())
                    .unwrap_or_else(|_| "<invalid URL>".into())
            })
            .collect();
        f.debug_struct("RedlockBuilder")
            .field("nodes", &addresses)
            .field("key_prefix", &self.key_prefix)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_connections", &self.max_connections)
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

    #[test]
    fn defaults_build_without_touching_the_nodes() {
        let backend = RedlockBuilder::new(urls(&[1, 2, 3, 4, 5])).build().unwrap();
        assert_eq!(backend.quorum(), 3);
        assert_eq!(backend.node_timeout(), Duration::from_millis(50));
        assert_eq!(
            backend.nodes(),
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"]
        );
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        for (count, quorum) in [(1_u16, 1_u16), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            let ports: Vec<u16> = (1..=count).collect();
            assert_eq!(RedlockBuilder::new(urls(&ports)).build().unwrap().quorum(), usize::from(quorum));
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
        invalid(RedlockBuilder::new(&nodes).node_timeout(Duration::ZERO));
        invalid(RedlockBuilder::new(&nodes).node_timeout(Duration::MAX));
        invalid(RedlockBuilder::new(&nodes).connect_timeout(Duration::ZERO));
        invalid(RedlockBuilder::new(&nodes).max_connections(0));
        invalid(RedlockBuilder::new(&nodes).key_prefix("a{b"));
        invalid(RedlockBuilder::new(&nodes).key_prefix(""));
    }

    #[test]
    fn debug_hides_passwords() {
        let shown = format!("{:?}", RedlockBuilder::new(["redis://user:hunter2@127.0.0.1:1/"]));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
    }
}
