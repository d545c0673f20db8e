//! Finding the primary through Redis Sentinel, with every step bounded by the backend's
//! timeouts.
//!
//! redis-rs's `sentinel` module does the same lookup, but connects to sentinels without a
//! connect timeout and keeps one cached connection per sentinel behind `&mut self`: a silent
//! sentinel would hang the lookup, and every pool connection would queue on one mutex. The
//! protocol is two commands, so it is done here: `SENTINEL GET-MASTER-ADDR-BY-NAME` on the
//! sentinels in turn, then `ROLE` on the address named, which must answer `master` — a node
//! that a failover demoted a moment ago is never written to.

use std::sync::atomic::{AtomicUsize, Ordering};

use redis::{Client, Connection, ErrorKind, RedisError, RedisResult, Value};

use super::address::NodeTemplate;
use crate::connection::{ConnectionManager, PoolSettings};

/// The primary of one Sentinel-monitored master.
pub(crate) struct SentinelResolver {
    sentinels: Vec<Client>,
    master: String,
    nodes: NodeTemplate,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
}

impl SentinelResolver {
    pub(crate) fn new(sentinels: Vec<Client>, master: String, nodes: NodeTemplate) -> Self {
        Self { sentinels, master, nodes, preferred: AtomicUsize::new(0) }
    }

    /// A connection to the current primary: the first sentinel that answers names it, and the
    /// node confirms it is the primary. Each sentinel and the node get one connect timeout and
    /// one read timeout.
    ///
    /// # Errors
    /// The last failure: no sentinel answered, none knows the master, or the node named is not
    /// (or no longer) the primary.
    pub(crate) fn open(&self, settings: &PoolSettings) -> RedisResult<Connection> {
        let count = self.sentinels.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut last_error = None;
        for step in 0..count {
            let index = (first + step) % count;
            match self.primary_from(&self.sentinels[index], settings) {
                Ok(connection) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(connection);
                }
                Err(error) => {
                    tracing::debug!(%error, sentinel = index, "no redis primary from this sentinel");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no sentinels"))))
    }

    /// The address the first sentinel that answers names as the primary's.
    ///
    /// # Errors
    /// No sentinel answered, or none knows the master.
    #[cfg(feature = "testkit")]
    pub(crate) fn primary_address(&self, settings: &PoolSettings) -> RedisResult<(String, u16)> {
        let mut last_error = None;
        for sentinel in &self.sentinels {
            match self.ask(sentinel, settings) {
                Ok(address) => return Ok(address),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no sentinels"))))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` on `sentinel`.
    fn ask(&self, sentinel: &Client, settings: &PoolSettings) -> RedisResult<(String, u16)> {
        let mut connection = ConnectionManager::open(sentinel, settings)?;
        let reply: Option<(String, u16)> =
            redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master).query(&mut connection)?;
        reply.ok_or_else(|| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "the sentinel does not monitor this master",
                self.master.clone(),
            ))
        })
    }

    fn primary_from(&self, sentinel: &Client, settings: &PoolSettings) -> RedisResult<Connection> {
        let (host, port) = self.ask(sentinel, settings)?;
        let client = Client::open(self.nodes.at(&host, port))?;
        let mut connection = ConnectionManager::open(&client, settings)?;
        let role: Value = redis::cmd("ROLE").query(&mut connection)?;
        if is_master(&role) {
            Ok(connection)
        } else {
            // The sentinel's view lags a failover, or the node has not been reconfigured yet:
            // the next connection attempt asks again.
            Err(RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the node a sentinel named as primary is not the primary (a failover is under way)",
                format!("{host}:{port}"),
            )))
        }
    }
}

/// Whether a `ROLE` reply says `master`.
pub(super) fn is_master(role: &Value) -> bool {
    match role {
        Value::Array(items) => {
            matches!(
                items.first(),
                Some(Value::BulkString(role)) if role == b"master"
            ) || matches!(items.first(), Some(Value::SimpleString(role)) if role == "master")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_master_role_counts() {
        let role =
            |name: &str| Value::Array(vec![Value::BulkString(name.as_bytes().to_vec()), Value::Int(0)]);
        assert!(is_master(&role("master")));
        assert!(!is_master(&role("slave")));
        assert!(!is_master(&Value::Nil));
    }
}
