//! Where a ZooKeeper lock pair's time goes (`distlock bench zookeeper`): the write limit a pair is
//! measured against is an ephemeral create + delete; the lock's own requests are three — an
//! ephemeral-sequential create with the parent's listing pipelined behind it (the holder must
//! learn whether its node is the lowest), then the delete. ZooKeeper answers a session's read
//! only once its earlier writes have committed, so the listing adds server time even though it
//! costs no extra round trip. Timing both on one session, alternated, with no lock logic shows
//! the most a lock pair can reach against the limit.

use std::fmt;
use std::time::{Duration, Instant};

use futures::future::join;
use zookeeper_client as zk;

use crate::error::Failure;
use crate::ZooKeeperBackend;

use super::TIMEOUT;

/// The mean time of the two kinds of pair, over the same number of each.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RequestFloor {
    /// Pairs of each kind timed (after as many to warm up).
    pub pairs: usize,
    /// An ephemeral create + delete: the write limit's pair.
    pub write_pair: Duration,
    /// The lock's requests without lock logic: an ephemeral-sequential create with the listing
    /// of its parent pipelined, then the delete.
    pub lock_requests_pair: Duration,
}

impl RequestFloor {
    /// The most a lock pair can reach against the create + delete limit: write pair ÷ lock
    /// requests pair.
    pub fn ceiling(&self) -> f64 {
        self.write_pair.as_secs_f64() / self.lock_requests_pair.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

impl fmt::Display for RequestFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request floor ({} pairs each, alternated on one session): create + delete {:.0} µs; the \
             lock's requests (sequential create + pipelined listing, then delete) {:.0} µs; a lock pair \
             can reach at most {:.2} × the create + delete limit",
            self.pairs,
            self.write_pair.as_secs_f64() * 1e6,
            self.lock_requests_pair.as_secs_f64() * 1e6,
            self.ceiling()
        )
    }
}

impl ZooKeeperBackend {
    /// Times `pairs` pairs of each kind ([`RequestFloor`]) on this backend's session, under a
    /// parent node of its own (removed afterwards).
    ///
    /// # Errors
    /// As any request.
    pub fn request_floor(&self, pairs: usize) -> lock_core::Result<RequestFloor> {
        let session = &self.inner.session;
        let client = session.client()?;
        let acls = self.inner.acls;
        let parent = format!("{}/request-floor-{}", self.namespace(), uuid::Uuid::new_v4());
        let fail = |what: &'static str| move |failure: Failure| failure.into_error(what);
        session
            .call(TIMEOUT, client.create(&parent, b"", &zk::CreateMode::Persistent.with_acls(acls)))
            .map_err(fail("create the request floor's parent"))?;
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
        let sequential = zk::CreateMode::EphemeralSequential.with_acls(acls);
        let write_node = format!("{parent}/write");
        let lock_prefix = format!("{parent}/lock-");
        let (mut write_total, mut lock_total) = (Duration::ZERO, Duration::ZERO);
        let measured = (|| {
            for round in 0..2 * pairs {
                let started = Instant::now();
                let write_pair = async {
                    client.create(&write_node, b"", &ephemeral).await?;
                    client.delete(&write_node, None).await
                };
                session.call(TIMEOUT, write_pair).map_err(fail("time a create + delete pair"))?;
                let write = started.elapsed();
                let started = Instant::now();
                let lock_requests = async {
                    // Both leave now, in this order, as the lock's acquisition sends them.
                    let (created, listed) =
                        join(client.create(&lock_prefix, b"", &sequential), client.list_children(&parent))
                            .await;
                    let (_, sequence) = created?;
                    listed?;
                    client.delete(&format!("{lock_prefix}{sequence}"), None).await
                };
                session.call(TIMEOUT, lock_requests).map_err(fail("time the lock's requests"))?;
                // The first half warms the connection and the server up.
                if round >= pairs {
                    (write_total, lock_total) = (write_total + write, lock_total + started.elapsed());
                }
            }
            Ok::<_, lock_core::Error>(())
        })();
        let removed = session
            .call(TIMEOUT, client.delete(&parent, None))
            .map_err(fail("remove the request floor's parent"));
        measured?;
        removed?;
        let count = u32::try_from(pairs.max(1)).unwrap_or(u32::MAX);
        Ok(RequestFloor { pairs, write_pair: write_total / count, lock_requests_pair: lock_total / count })
    }
}
