//! Redlock (antirez's algorithm): one lock over N independent Redis nodes, with best-effort
//! fencing tokens and pub/sub wake-ups.
//!
//! # The algorithm
//! 1. Note the time, then send the acquire script (`SET NX PX` plus the node's next fencing
//!    number, one atomic step per node) to **every node at once**: the request is written to one
//!    connection per node, then every reply is read, all within one deadline (the
//!    [node timeout](RedlockBuilder::node_timeout), 50 ms by default) — no thread per call.
//!    That is one round; a whole operation can take several: checking out connections (up to
//!    one node timeout), the exchange (one), a retry on a fresh connection where an idle one
//!    turned out dead (one), a `SCRIPT LOAD` round on nodes that answered `NOSCRIPT` (one), and
//!    for a failed acquisition the undo (reconnect and exchange, up to two) — about six node
//!    timeouts at worst. Validity always counts the real elapsed time.
//! 2. The lock is acquired when a quorum (`N/2 + 1`) granted it **and** time is left:
//!    validity = lease − elapsed − drift, drift = 1 % of the lease + 2 ms
//!    ([`RedlockBackend::clock_drift`], also the backend's
//!    [`lease_margin`](lock_core::DistributedLock::lease_margin), so the guard's
//!    [`is_held`](lock_core::LockGuard::is_held) counts the same validity).
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
//! Every node keeps a per-name counter. A grant increments it; a refusal reports the counter
//! plus one; the token is the maximum over every answer, granted or refused. Extend and release
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

mod builder;
mod fanout;
mod scripts;
mod tally;

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{
    check_lease, Acquired, DistributedLock, Error, Extension, Fencing, FencingToken, HoldKind, LockName,
    NativeWait, OwnerToken, Result,
};
use rand::RngExt as _;
use redis::Value;

pub use builder::RedlockBuilder;
use fanout::{Fanout, Node, NodeReplies};
use scripts::RedlockScript;
use tally::{NodeError, Tally, BACKEND};

use crate::keys::RedisKeys;
use crate::millis;
use crate::single_node::FALLBACK_RECHECK;
use crate::waiter::{Registration, Slot};

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
/// release message from any node; no fair queue). Holds are leases ([`HoldKind::Lease`]).
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

/// One acquisition of a [`RedlockBackend`] lock, with the validity Redlock computed for it.
#[derive(Debug)]
pub struct RedlockLease {
    name: LockName,
    keys: RedisKeys,
    token: String,
    fence: FencingToken,
    lease: Duration,
    elapsed: Duration,
    validity: Duration,
    valid_until: Instant,
    granted: Vec<usize>,
}

impl RedlockLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The lock's Redis keys (the same on every node).
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// The value stored with the lock on each node: the owner token (32 hex digits), a colon and
    /// 16 hex digits unique to the acquisition attempt that took it, so that undoing one attempt
    /// can never delete another's grant. Extend and release compare against it.
    pub fn owner_token(&self) -> &str {
        &self.token
    }

    /// The fencing token issued with this acquisition (best effort: see the module docs).
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }

    /// The lease requested from the nodes by the acquisition or the latest extension.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How long the acquisition (or the latest extension) took, from before the first request
    /// to after the last reply.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// How long the lock was valid for when the acquisition (or the latest extension) returned:
    /// `lease − elapsed − drift` ([`RedlockBackend::clock_drift`]). Always above zero.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// Until when, by this process's clock, the lock is valid: the start of the acquisition (or
    /// the latest extension) plus `lease − drift`.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Which nodes granted the acquisition (indexes into the builder's URL list).
    pub fn granted_nodes(&self) -> &[usize] {
        &self.granted
    }
}

/// The outcome of one acquisition attempt that reached a quorum.
enum Attempt {
    Acquired(Box<RedlockLease>),
    /// A quorum answered and too few granted.
    Refused {
        /// Retry within this long at the latest (the soonest a refusing node's lease ends).
        retry_in: Option<Duration>,
        /// Some nodes granted: other clients are contending right now (a split vote).
        split: bool,
        /// How long the attempt took.
        took: Duration,
    },
}

/// One node's answer to the acquire script.
struct Vote {
    granted: bool,
    fence: u64,
    /// The remaining lease on a refusing node, in ms; negative when unknown.
    remaining_ms: i64,
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
    pub fn node_timeout(&self) -> Duration {
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
        script: &RedlockScript,
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

    /// One acquisition attempt. `Err` when too few nodes answered (or the quorum was too slow).
    fn attempt(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Attempt> {
        let started = Instant::now();
        // A fresh value per attempt: the undo of a failed attempt (which may run late, behind the
        // acquisition on a connection whose reply did not come in time) deletes only that
        // attempt's grants, never a grant of the same owner's next attempt.
        let token = attempt_value(owner);
        let mut fanout = self.fanout();
        if fanout.ready() < self.inner.quorum {
            // Too few nodes can even be asked: fail before holding anything anywhere.
            let mut tally = self.tally();
            for (index, error) in fanout.failures() {
                tally.fail(index, error.clone());
            }
            return Err(self.failure(&tally, "acquire"));
        }
        let script = scripts::acquire();
        let request =
            script.invoke(&[keys.lock(), keys.fence()]).arg(&token).arg(millis(ttl)).get_packed_command();
        let replies = self.run_script(&mut fanout, script, &request, "acquire");

        let mut tally = self.tally();
        let mut granted = Vec::new();
        let mut may_hold = vec![false; replies.len()];
        let mut fence = 0;
        // Each answering node's counter after this attempt (a refusal reports counter + 1).
        let mut counters: Vec<Option<u64>> = vec![None; replies.len()];
        let mut retry_in: Option<Duration> = None;
        for (index, reply) in replies.into_iter().enumerate() {
            match reply.and_then(parse_vote) {
                Ok(vote) => {
                    fence = fence.max(vote.fence);
                    counters[index] =
                        Some(if vote.granted { vote.fence } else { vote.fence.saturating_sub(1) });
                    if vote.granted {
                        tally.confirm();
                        granted.push(index);
                        may_hold[index] = true;
                    } else {
                        tally.deny();
                        if let Ok(ms) = u64::try_from(vote.remaining_ms) {
                            let remaining = Duration::from_millis(ms.max(1));
                            retry_in = Some(retry_in.map_or(remaining, |soonest| soonest.min(remaining)));
                        }
                    }
                }
                Err(error) => {
                    tally.fail(index, error);
                    may_hold[index] = true; // Its reply may have been lost.
                }
            }
        }
        let elapsed = started.elapsed();
        let drift = Self::clock_drift(ttl);
        let validity = ttl.checked_sub(elapsed + drift).filter(|validity| !validity.is_zero());
        if let (true, Some(validity)) = (tally.confirmed_by_quorum(), validity) {
            self.raise_lagging_counters(&mut fanout, keys, fence, &counters);
            return Ok(Attempt::Acquired(Box::new(RedlockLease {
                name: name.clone(),
                keys: keys.clone(),
                token,
                fence: FencingToken::new(fence),
                lease: ttl,
                elapsed,
                validity,
                valid_until: started + (ttl - drift),
                granted,
            })));
        }
        self.undo_attempt(&mut fanout, keys, &token, fence, &may_hold);
        if tally.confirmed_by_quorum() {
            return Err(Error::Timeout {
                backend: BACKEND,
                operation: "acquire",
                source: Some(
                    format!("a quorum granted after {elapsed:?}, leaving nothing of a {ttl:?} lease after the {drift:?} drift allowance").into(),
                ),
            });
        }
        if tally.answered_by_quorum() {
            return Ok(Attempt::Refused { retry_in, split: !granted.is_empty(), took: elapsed });
        }
        Err(self.failure(&tally, "acquire"))
    }

    /// Raises every answering node whose counter is below the issued `fence` to it, before the
    /// holder can use the token. Without this a node learns the token only at the holder's first
    /// renewal: counters `[5, 1, 1, 1, 1]` issue 6 while four nodes stay at 2, and a holder that
    /// pauses before renewing loses its lease to one whose quorum of those four issues 3 — and
    /// the stale holder's 6 then beats the new holder at the resource. In the steady state every
    /// node saw every acquisition and the counters agree: no extra round. Best effort within one
    /// node timeout; a node that misses it still learns the token at the renewal or release.
    fn raise_lagging_counters(
        &self,
        fanout: &mut Fanout<'_>,
        keys: &RedisKeys,
        fence: u64,
        counters: &[Option<u64>],
    ) {
        let lagging: Vec<bool> =
            counters.iter().map(|counter| counter.is_some_and(|seen| seen < fence)).collect();
        if !lagging.contains(&true) {
            return;
        }
        let script = scripts::raise();
        // A rare path: load the script in the same write rather than risk a NOSCRIPT round.
        let mut request = script.load();
        request.extend(script.invoke(&[keys.fence()]).arg(fence).get_packed_command());
        let requests: Vec<Option<&[u8]>> = lagging
            .iter()
            .enumerate()
            .map(|(index, &lags)| (lags && fanout.is_ready(index)).then_some(request.as_slice()))
            .collect();
        for (index, outcome) in
            fanout.exchange(&requests, 2, Duration::ZERO, "raise the fencing counter").into_iter().enumerate()
        {
            if let Some(Err(error)) = outcome {
                tracing::debug!(node = index, %error, "raising a redlock fencing counter failed; the renewal will");
            }
        }
    }

    /// Releases a failed attempt on every node `may_hold` marks: those that granted it, and
    /// those that did not answer. `token` is that attempt's own value, so the undo cannot touch
    /// another attempt's grant.
    fn undo_attempt(
        &self,
        fanout: &mut Fanout<'_>,
        keys: &RedisKeys,
        token: &str,
        fence: u64,
        may_hold: &[bool],
    ) {
        if !may_hold.contains(&true) {
            return;
        }
        let script = scripts::release();
        // A rare path: load the script in the same write rather than risk a NOSCRIPT round.
        let mut request = script.load();
        request.extend(
            script
                .invoke(&[keys.lock(), keys.fence()])
                .arg(token)
                .arg(fence)
                .arg(keys.channel())
                .get_packed_command(),
        );
        // Late nodes run the release right after the acquisition, on the same connection.
        fanout.follow_unanswered(may_hold, &request);
        // Nodes whose connection broke under the acquisition: a fresh one, if it comes in time.
        fanout.reconnect(may_hold);
        let requests: Vec<Option<&[u8]>> = may_hold
            .iter()
            .enumerate()
            .map(|(index, &may)| (may && fanout.is_ready(index)).then_some(request.as_slice()))
            .collect();
        for (index, outcome) in
            fanout.exchange(&requests, 2, Duration::ZERO, "release").into_iter().enumerate()
        {
            if let Some(Err(error)) = outcome {
                // The attempt's hold there, if any, expires with its lease.
                tracing::debug!(node = index, %error, "undoing a failed redlock attempt on a node failed");
            }
        }
    }

    /// Concludes an extension from the nodes' answers.
    fn conclude_extension(
        lease: &mut RedlockLease,
        ttl: Duration,
        started: Instant,
        tally: &Tally,
    ) -> Outcome {
        let elapsed = started.elapsed();
        let drift = Self::clock_drift(ttl);
        let validity = ttl.checked_sub(elapsed + drift).filter(|validity| !validity.is_zero());
        match (tally.confirmed_by_quorum(), validity) {
            (true, Some(validity)) => {
                lease.lease = ttl;
                lease.elapsed = elapsed;
                lease.validity = validity;
                lease.valid_until = started + (ttl - drift);
                Outcome::Confirmed
            }
            (true, None) => Outcome::TooSlow { elapsed, ttl, drift },
            (false, _) if tally.answered_by_quorum() => Outcome::Denied,
            (false, _) => Outcome::NoQuorum,
        }
    }

    fn extension_result(&self, outcome: Outcome, tally: &Tally) -> Result<bool> {
        match outcome {
            Outcome::Confirmed => Ok(true),
            Outcome::Denied => Ok(false),
            Outcome::TooSlow { elapsed, ttl, drift } => Err(Error::Timeout {
                backend: BACKEND,
                operation: "extend",
                source: Some(
                    format!("a quorum confirmed after {elapsed:?}, leaving nothing of a {ttl:?} lease after the {drift:?} drift allowance").into(),
                ),
            }),
            Outcome::NoQuorum => Err(self.failure(tally, "extend")),
        }
    }

    /// Pokes the subscriber threads of the nodes `which` marks, so they subscribe at once.
    fn poke_subscribers(&self, which: &[bool]) {
        let requests: Vec<Option<Vec<u8>>> = self
            .inner
            .nodes
            .iter()
            .zip(which)
            .map(|(node, &poke)| {
                poke.then(|| {
                    redis::cmd("PUBLISH").arg(node.hub.control_channel()).arg("").get_packed_command()
                })
            })
            .collect();
        let mut fanout = Fanout::open_only(&self.inner.nodes, self.inner.node_timeout, which);
        let requests: Vec<Option<&[u8]>> = requests.iter().map(Option::as_deref).collect();
        for outcome in
            fanout.exchange(&requests, 1, Duration::ZERO, "wake the subscriber").into_iter().flatten()
        {
            if let Err(error) = outcome {
                // That node's subscriber still gets there within its tick.
                tracing::debug!(%error, "poking a redlock subscriber failed");
            }
        }
    }

    /// The waiting loop of [`NativeWait::acquire_until`].
    fn wait_loop(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedlockLease>>> {
        let keys = self.keys(name);
        let slot = Slot::new(&owner.to_hex());
        let mut registrations: Vec<Registration<'_>> = Vec::new();
        loop {
            // Wake-ups so far are answered by what this attempt sees.
            slot.clear();
            let sent_at = Instant::now();
            let (retry_in, split, took) = match self.attempt(name, &keys, owner, ttl)? {
                Attempt::Acquired(lease) => return Ok(Some(Acquired::new(*lease, sent_at))),
                Attempt::Refused { retry_in, split, took } => (retry_in, split, took),
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let bound = |wait: Duration| deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
            if registrations.is_empty() {
                // Subscribe on every node first, then re-check: a release between the failed
                // attempt and the subscriptions would otherwise be missed.
                let mut pokes = Vec::with_capacity(self.inner.nodes.len());
                for node in &self.inner.nodes {
                    let (registration, poke) = node.hub.register_slot(keys.channel(), Arc::clone(&slot));
                    registrations.push(registration);
                    pokes.push(poke);
                }
                if pokes.contains(&true) {
                    self.poke_subscribers(&pokes);
                }
                slot.wait_subscribed(bound(FALLBACK_RECHECK));
                continue;
            }
            if split {
                // Several clients split the votes: retry after a random moment, so that one of
                // them gets ahead of the others next time.
                let jitter = (took * 2).max(Duration::from_millis(1));
                let pause = jitter.mul_f64(rand::rng().random_range(0.0..1.0));
                thread::sleep(bound(pause).saturating_duration_since(now));
                continue;
            }
            let wait = retry_in.map_or(FALLBACK_RECHECK, |hint| hint.min(FALLBACK_RECHECK));
            slot.wait(bound(wait));
        }
    }
}

/// How an extension ended, before it is turned into the caller's result.
enum Outcome {
    Confirmed,
    Denied,
    TooSlow { elapsed: Duration, ttl: Duration, drift: Duration },
    NoQuorum,
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

fn parse_vote(value: Value) -> std::result::Result<Vote, NodeError> {
    match redis::from_redis_value::<Vec<i64>>(value) {
        Ok(reply) => match reply.as_slice() {
            &[granted @ (0 | 1), fence, remaining_ms] => {
                Ok(Vote { granted: granted == 1, fence: u64::try_from(fence).unwrap_or(0), remaining_ms })
            }
            other => Err(NodeError::reply("acquire", other)),
        },
        Err(error) => Err(NodeError::reply("acquire", error)),
    }
}

/// The value one acquisition attempt stores on the nodes: the owner token, a colon, and 64 random
/// bits (16 hex digits) of this attempt.
///
/// Redlock's owner value must be unique per acquisition, not just per owner: a failed attempt is
/// undone by compare-and-delete, and that undo can reach a node late (it is written behind the
/// unanswered acquisition on the same connection). Were the value the same for the owner's next
/// attempt, the late undo would delete that attempt's grant, and the owner would count a quorum
/// it does not have.
fn attempt_value(owner: &OwnerToken) -> String {
    format!("{}:{:016x}", owner.to_hex(), rand::rng().random::<u64>())
}

impl DistributedLock for RedlockBackend {
    type Lease = RedlockLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lease
    }

    /// Redlock's drift allowance, [`RedlockBackend::clock_drift`].
    fn lease_margin(&self, ttl: Duration) -> Duration {
        Self::clock_drift(ttl)
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
        Self::check_ttl(ttl)?;
        let started = Instant::now();
        let mut fanout = self.fanout();
        let script = scripts::extend();
        let request = script
            .invoke(&[lease.keys.lock(), lease.keys.fence()])
            .arg(&lease.token)
            .arg(millis(ttl))
            .arg(lease.fence.get())
            .get_packed_command();
        let mut tally = self.tally();
        for (index, reply) in self.run_script(&mut fanout, script, &request, "extend").into_iter().enumerate()
        {
            count_flag(&mut tally, index, reply, "extend");
        }
        let outcome = Self::conclude_extension(lease, ttl, started, &tally);
        self.extension_result(outcome, &tally)
    }

    /// Extends every lease of the batch with ONE pipeline per node (`SCRIPT LOAD` first, so a
    /// node that forgot the script mid-way cannot fail the batch), all nodes at once.
    fn extend_many(&self, batch: &mut [Extension<'_, RedlockLease>]) -> Vec<Result<bool>> {
        let mut results: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| Self::check_ttl(item.ttl).err().map(Err)).collect();
        let valid: Vec<usize> = (0..batch.len()).filter(|&index| results[index].is_none()).collect();
        if valid.is_empty() {
            return results.into_iter().map(|result| result.unwrap_or(Ok(false))).collect();
        }
        let started = Instant::now();
        let script = scripts::extend();
        let mut request = script.load();
        for &index in &valid {
            let item = &batch[index];
            request.extend(
                script
                    .invoke(&[item.lease.keys.lock(), item.lease.keys.fence()])
                    .arg(&item.lease.token)
                    .arg(millis(item.ttl))
                    .arg(item.lease.fence.get())
                    .get_packed_command(),
            );
        }
        let mut fanout = self.fanout();
        let everyone = vec![Some(request.as_slice()); self.inner.nodes.len()];
        let extra = PER_COMMAND * u32::try_from(valid.len()).unwrap_or(u32::MAX);
        let replies = fanout.exchange(&everyone, 1 + valid.len(), extra, "extend");
        drop(fanout);
        let mut tallies: Vec<Tally> = valid.iter().map(|_| self.tally()).collect();
        for (node, reply) in replies.into_iter().enumerate() {
            match reply.unwrap_or_else(|| Err(NodeError::unanswered())) {
                Ok(values) => {
                    // The first reply is SCRIPT LOAD's.
                    for (tally, value) in tallies.iter_mut().zip(values.into_iter().skip(1)) {
                        let value =
                            value.extract_error().map_err(|error| NodeError::from_redis("extend", error));
                        count_flag(tally, node, value, "extend");
                    }
                }
                Err(error) => tallies.iter_mut().for_each(|tally| tally.fail(node, error.clone())),
            }
        }
        for (&index, tally) in valid.iter().zip(&tallies) {
            let ttl = batch[index].ttl;
            let outcome = Self::conclude_extension(batch[index].lease, ttl, started, tally);
            results[index] = Some(self.extension_result(outcome, tally));
        }
        results.into_iter().map(|result| result.unwrap_or(Ok(false))).collect()
    }

    /// Releases on every node; `Ok(true)` if a quorum still held the lock for this lease.
    fn release(&self, lease: RedlockLease) -> Result<bool> {
        let mut fanout = self.fanout();
        let script = scripts::release();
        let request = script
            .invoke(&[lease.keys.lock(), lease.keys.fence()])
            .arg(&lease.token)
            .arg(lease.fence.get())
            .arg(lease.keys.channel())
            .get_packed_command();
        let mut tally = self.tally();
        for (index, reply) in
            self.run_script(&mut fanout, script, &request, "release").into_iter().enumerate()
        {
            count_flag(&mut tally, index, reply, "release");
        }
        if tally.confirmed_by_quorum() {
            Ok(true)
        } else if tally.answered_by_quorum() {
            Ok(false)
        } else {
            // The holds the unreachable nodes may still have expire with their lease.
            Err(self.failure(&tally, "release"))
        }
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = RedlockLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = RedlockLease>> {
        Some(self)
    }
}

/// Counts a 1/0 script reply (extended or not, released or not) into `tally`.
fn count_flag(
    tally: &mut Tally,
    node: usize,
    reply: std::result::Result<Value, NodeError>,
    operation: &'static str,
) {
    match reply {
        Ok(Value::Int(1)) => tally.confirm(),
        Ok(Value::Int(0)) => tally.deny(),
        Ok(other) => tally.fail(node, NodeError::reply(operation, other)),
        Err(error) => tally.fail(node, error),
    }
}

impl NativeWait for RedlockBackend {
    /// Retries whenever any node announces a release, and on its own after at most a second
    /// (or the soonest end of a refusing node's lease). No fair queue: every waiter retries.
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedlockLease>>> {
        Self::check_ttl(ttl)?;
        self.wait_loop(name, owner, ttl, deadline)
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

#[cfg(test)]
mod tests {
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
        let vote = parse_vote(Value::Array(vec![Value::Int(0), Value::Int(8), Value::Int(1500)])).unwrap();
        assert!(!vote.granted);
        assert_eq!((vote.fence, vote.remaining_ms), (8, 1500));
        assert!(parse_vote(Value::Array(vec![Value::Int(2), Value::Int(1), Value::Int(0)])).is_err());
        assert!(parse_vote(Value::Okay).is_err());
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
