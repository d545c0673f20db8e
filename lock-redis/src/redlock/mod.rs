//! Redlock (antirez's algorithm): one lock over N independent Redis nodes, with best-effort
//! fencing tokens and pub/sub wake-ups.
//!
//! # The algorithm
//! 1. Note the time, then send the acquisition (`SET NX PX` plus the node's next fencing
//!    number, one `MULTI`/`EXEC` transaction per node) to **every node at once**: the request is
//!    written to one connection per node, then every reply is read, all within one deadline (the
//!    [node timeout](RedlockBuilder::io_timeout), 50 ms by default) — no thread per call.
//!    That is one round; a whole operation can take several: checking out connections (up to
//!    one node timeout), the exchange (one), a retry on a fresh connection where an idle one
//!    turned out dead (one), a `SCRIPT LOAD` round on nodes that answered `NOSCRIPT` to a renewal
//!    or release script (one), and for a failed acquisition the undo (reconnect and exchange, up
//!    to two) — about six node timeouts at worst. Validity always counts the real elapsed time.
//! 2. The lock is acquired when a quorum (`N/2 + 1`) granted it **and** time is left:
//!    validity = lease − elapsed − drift, drift = 1 % of the lease + 2 ms
//!    ([`RedlockBackend::clock_drift`]; the guard's [`is_held`](lock_core::LockGuard::is_held)
//!    counts the same validity through the core's clock-drift margin,
//!    `LockOptions::clock_drift`, whose default is this one).
//! 3. Otherwise the attempt is undone on every node that may hold it: those that granted, and
//!    those that did not answer (their reply may have been lost). A node whose reply is late gets
//!    the release written behind the acquisition on the same connection, so it runs the two in
//!    order whenever it catches up.
//! 4. Extend and release go to every node the same way; an extension counts only if a quorum
//!    confirmed it. Renewal of many leases is one pipeline per node.
//!
//! Contention (a quorum answered, too few granted) is `Ok(None)`. Too few nodes reachable to
//! ever form a quorum is [`Error::Connection`] (or [`Error::Authentication`]), and fails fast:
//! nodes whose last connection attempt failed are not waited for, and when fewer than a quorum
//! can even be asked, nothing is sent. A quorum that granted too slowly to leave any validity is
//! [`Error::Timeout`].
//!
//! # Fencing (best effort)
//! Every node keeps a per-name counter, incremented by every vote, granted or refused (a
//! refusal's number is simply never used: tokens skip numbers, never repeat); the token is the
//! maximum over every answer. Extend and release
//! raise each node's counter to at least the holder's token (a monotonic step, run on every
//! node). So a later holder's token exceeds an earlier holder's whenever the later holder hears
//! from at least one node that saw the earlier token — which is how scenario R02's stale write
//! is caught. It is **not** a guarantee: see the crate's "What Redlock cannot guarantee".
//!
//! # Waiting
//! A release publishes on the lock's channel on every node; waiters subscribe through one
//! subscriber per node and retry on a message from any of them, re-checking on their own after
//! at most a second (or the remaining lease). There is no fair queue: every waiter retries, and
//! after a split vote (some grants, no quorum) a waiter backs off for a random moment.

mod acquire;
mod builder;
mod extend;
mod fanout;
mod lease;
mod scripts;
mod tally;
mod wait;

use acquire::Attempt;
pub use lease::RedlockLease;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    check_lease, DistributedLock, Error, Extension, Fencing, FencingToken, HoldKind, LockName, NativeWait,
    OwnerToken, Result,
};
use redis::Value;

use crate::lua::LuaScript;
pub use builder::RedlockBuilder;
use fanout::{Fanout, Node, NodeReplies};
use tally::{NodeError, Tally, BACKEND};

use crate::keys::RedisKeys;

/// The part of the lease allowed for clock drift, in percent.
const DRIFT_PERCENT: u32 = 1;

/// The fixed part of the clock-drift allowance.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Extra reply time allowed per command of a pipeline (renewing thousands of leases at once).
const PER_COMMAND: Duration = Duration::from_micros(25);

/// Distributed locks over N independent Redis nodes (Redlock).
///
/// Build it with [`RedlockBackend::builder`] and hand it to a
/// [`LockClient`](lock_core::LockClient). Cloning is cheap: clones share the connection pools
/// (one per node) and the subscribers that wake waiting threads (one per node, started by the
/// first wait).
///
/// Abilities: [`Fencing`] (best effort, see the module docs) and [`NativeWait`] (woken by a
/// release message from any node; no fair queue). Holds are leases ([`HoldKind::Lease`]). No
/// read-write locks, semaphores or [`Elections`](lock_core::Elections): a quorum of independent
/// nodes has no single place for a leader's value, so followers could not read one answer
/// (an [`Election`](lock_core::Election) of this backend fails with
/// [`Error::Unsupported`](lock_core::Error::Unsupported); elect on a [`RedisBackend`](crate::RedisBackend)).
#[derive(Clone)]
pub struct RedlockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    quorum: usize,
    prefix: String,
    node_timeout: Duration,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone is gone: the subscriber threads have no one left to wake.
        for node in &self.nodes {
            node.hub.close();
        }
    }
}

impl RedlockBackend {
    /// A builder for the independent nodes at `urls`; see [`RedlockBuilder`].
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockBuilder::new(urls)
    }

    /// A backend over the nodes at `urls` with every default (see [`RedlockBuilder`]).
    ///
    /// # Errors
    /// As [`RedlockBuilder::build`].
    pub fn new<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::builder(urls).build()
    }

    fn from_inner(inner: Inner) -> Self {
        Self { inner: Arc::new(inner) }
    }

    /// Redlock's allowance for clock drift between the client and the nodes on a lease of
    /// `lease`: 1 % of it plus 2 ms. A holder counts its lock valid for `lease − elapsed −
    /// drift`; a lease not longer than its drift can never be valid, and is rejected.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::RedlockBackend;
    ///
    /// assert_eq!(RedlockBackend::clock_drift(Duration::from_secs(10)), Duration::from_millis(102));
    /// ```
    pub fn clock_drift(lease: Duration) -> Duration {
        (lease / 100).saturating_mul(DRIFT_PERCENT).saturating_add(DRIFT_FLOOR)
    }

    /// The nodes' `host:port`, in the builder's order.
    pub fn nodes(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(|node| node.address.as_str()).collect()
    }

    /// How many nodes must agree: a strict majority, `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// How long one round of requests waits for the nodes.
    pub fn io_timeout(&self) -> Duration {
        self.inner.node_timeout
    }

    /// The Redis keys of the lock `name`, the same on every node.
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new(&self.inner.prefix, name)
    }

    fn tally(&self) -> Tally {
        Tally::new(self.inner.nodes.len(), self.inner.quorum)
    }

    fn failure(&self, tally: &Tally, operation: &'static str) -> Error {
        tally.failure(operation, &self.nodes())
    }

    fn fanout(&self) -> Fanout<'_> {
        Fanout::open(&self.inner.nodes, self.inner.node_timeout)
    }

    /// Checks a lease: whole milliseconds, and longer than its drift allowance.
    fn check_ttl(ttl: Duration) -> Result<()> {
        check_lease(ttl)?;
        let drift = Self::clock_drift(ttl);
        if ttl <= drift {
            return Err(Error::invalid_config(format!(
                "lease {ttl:?} is not longer than Redlock's clock-drift allowance {drift:?}"
            )));
        }
        Ok(())
    }

    /// Runs a script on every node with a connection: `EVALSHA`, and for nodes that answer
    /// `NOSCRIPT`, `SCRIPT LOAD` plus `EVALSHA` once more. One result per node.
    fn run_script(
        &self,
        fanout: &mut Fanout<'_>,
        script: &LuaScript,
        request: &[u8],
        operation: &'static str,
    ) -> Vec<std::result::Result<Value, NodeError>> {
        let everyone = vec![Some(request); self.inner.nodes.len()];
        let mut outcomes = fanout.exchange(&everyone, 1, Duration::ZERO, operation);
        let reload: Vec<bool> = outcomes
            .iter()
            .map(|outcome| matches!(outcome, Some(Ok(values)) if is_noscript(values)))
            .collect();
        if reload.contains(&true) {
            let mut again = script.load();
            again.extend_from_slice(request);
            let requests: Vec<Option<&[u8]>> =
                reload.iter().map(|&reload| reload.then_some(again.as_slice())).collect();
            let retried = fanout.exchange(&requests, 2, Duration::ZERO, operation);
            for (outcome, retry) in outcomes.iter_mut().zip(retried) {
                if retry.is_some() {
                    *outcome = retry;
                }
            }
        }
        outcomes.into_iter().map(|outcome| last_reply(outcome, operation)).collect()
    }
}

/// Whether a node's replies say the script is not in its cache.
fn is_noscript(values: &[Value]) -> bool {
    matches!(values.last(), Some(Value::ServerError(error)) if error.code() == "NOSCRIPT")
}

/// The last reply of a node's outcome (a script's result after an optional `SCRIPT LOAD`), with
/// an error reply turned into the node's failure.
fn last_reply(
    outcome: Option<NodeReplies>,
    operation: &'static str,
) -> std::result::Result<Value, NodeError> {
    let mut values = outcome.unwrap_or_else(|| Err(NodeError::unanswered()))?;
    let value = values.pop().ok_or_else(|| NodeError::reply(operation, "no reply"))?;
    value.extract_error().map_err(|error| NodeError::from_redis(operation, error))
}

impl DistributedLock for RedlockBackend {
    type Lease = RedlockLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn missing_abilities(&self) -> Option<&'static str> {
        Some(
            "no read-write locks or semaphores over a quorum of independent servers (Redisson \
             deprecated RedissonRedLock; use one primary, with WAIT, for those)",
        )
    }

    fn profile(&self) -> lock_core::BackendProfile {
        lock_core::BackendProfile::new(
            "best effort: the highest of the quorum's per-node counters, raised on every node after \
             a grant (not safe across node restarts without persistence)",
            "pub/sub message on release from any node",
            "a quorum of independent nodes: survives a minority down; a node restarting without \
             persistence can hand the lock out twice",
        )
        .with_guarded_writes(
            "none on the lock's nodes: they are independent, so no single one can check a write \
             atomically; fence the data's own store (a Redis or SQL fenced store)",
        )
        .with_elections(
            "no leader election: a quorum of independent nodes has no single place for the leader's value, so \
             followers could not read one answer (elect on RedisBackend, one primary)",
        )
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lease
    }

    fn try_acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<RedlockLease>> {
        Self::check_ttl(ttl)?;
        match self.attempt(name, &self.keys(name), owner, ttl)? {
            Attempt::Acquired(lease) => Ok(Some(*lease)),
            Attempt::Refused { .. } => Ok(None),
        }
    }

    /// Extends on every node; `Ok(true)` only if a quorum confirmed in time.
    fn extend(&self, lease: &mut RedlockLease, ttl: Duration) -> Result<bool> {
        self.extend_one(lease, ttl)
    }

    /// Extends every lease of the batch with ONE pipeline per node, all nodes at once.
    fn extend_many(&self, batch: &mut [Extension<'_, RedlockLease>]) -> Vec<Result<bool>> {
        self.extend_batch(batch)
    }

    /// Releases on every node; `Ok(true)` if a quorum still held the lock for this lease.
    fn release(&self, lease: RedlockLease) -> Result<bool> {
        self.release_lease(lease)
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = RedlockLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = RedlockLease>> {
        Some(self)
    }
}

impl Fencing for RedlockBackend {
    /// The acquisition's token: best effort, see the module docs.
    fn fencing_token(&self, lease: &RedlockLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("nodes", &self.nodes())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.node_timeout)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "testkit")]
impl RedlockBackend {
    /// Times one `PING` per call on a connection of node 1's pool (benchmarks' limit).
    pub(crate) fn ping_probe(&self) -> lock_testkit::workload::TimeOne {
        let backend = self.clone();
        Box::new(move || crate::testkit::time_ping(&backend.inner.nodes[0].pool))
    }
}

#[cfg(test)]
mod tests {
    use super::acquire::{attempt_value, parse_vote};
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_milliseconds() {
        assert_eq!(RedlockBackend::clock_drift(Duration::from_secs(1)), Duration::from_millis(12));
        assert_eq!(RedlockBackend::clock_drift(Duration::from_millis(100)), Duration::from_millis(3));
        assert!(RedlockBackend::clock_drift(Duration::MAX) > Duration::ZERO, "no overflow");
    }

    #[test]
    fn leases_no_longer_than_their_drift_are_rejected() {
        for lease in [Duration::ZERO, Duration::from_millis(1), Duration::from_millis(2), Duration::MAX] {
            assert!(
                matches!(RedlockBackend::check_ttl(lease), Err(Error::InvalidConfig { .. })),
                "{lease:?}"
            );
        }
        assert!(RedlockBackend::check_ttl(Duration::from_millis(3)).is_ok());
    }

    #[test]
    fn votes_parse_and_nonsense_is_a_node_failure() {
        let queued = || Value::SimpleString("QUEUED".into());
        let replies =
            |exec: Vec<Value>| vec![Value::Okay, queued(), queued(), queued(), queued(), Value::Array(exec)];
        let refused =
            replies(vec![Value::BulkString(b"other".to_vec()), Value::Nil, Value::Int(8), Value::Int(1500)]);
        let vote = parse_vote(refused, "mine").unwrap();
        assert!(!vote.granted);
        assert_eq!((vote.fence, vote.remaining_ms), (8, 1500));
        let granted = replies(vec![Value::Nil, Value::Okay, Value::Int(9), Value::Int(30_000)]);
        assert!(parse_vote(granted, "mine").unwrap().granted);
        let again = replies(vec![
            Value::BulkString(b"mine".to_vec()),
            Value::Nil,
            Value::Int(10),
            Value::Int(29_000),
        ]);
        assert!(parse_vote(again, "mine").unwrap().granted, "the same attempt's grant is kept");
        let noauth = redis::parse_redis_value(b"-NOAUTH Authentication required.\r\n").unwrap();
        assert!(parse_vote(vec![noauth.clone(), noauth], "mine").is_err());
        assert!(parse_vote(vec![Value::Okay], "mine").is_err());
    }

    #[test]
    fn every_attempt_stores_a_value_of_its_own() {
        let owner = OwnerToken::random();
        let (first, second) = (attempt_value(&owner), attempt_value(&owner));
        assert_ne!(first, second);
        assert!(first.starts_with(&format!("{}:", owner.to_hex())));
        assert_eq!(first.len(), 32 + 1 + 16);
    }

    #[test]
    fn noscript_replies_are_recognised() {
        let noscript = redis::parse_redis_value(b"-NOSCRIPT No matching script.\r\n").unwrap();
        assert!(is_noscript(&[Value::Okay, noscript]));
        let other = redis::parse_redis_value(b"-ERR something else\r\n").unwrap();
        assert!(!is_noscript(&[other]));
        assert!(!is_noscript(&[Value::Int(1)]));
    }
}
