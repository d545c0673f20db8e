//! [`RedisBackend`]: the [`DistributedLock`] implementation over one Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{
    check_lease, Acquired, DistributedLock, Error, Extension, Fencing, FencingToken, HoldKind, LockName,
    NativeWait, OwnerToken, Result,
};
use redis::RedisResult;

use crate::builder::RedisLockBuilder;
use crate::cleanup;
use crate::connection::{ConnectionPool, PooledConnection};
use crate::error::{self, error_chain, RedisFailure, BACKEND};
use crate::keys::RedisKeys;
use crate::lua::{self, LockScripts};
use crate::waiter::{Registration, WaitHub};
use crate::{millis, reentrant_hash, set_nx};

/// The longest a waiter waits for a release message before it re-checks on its own.
///
/// Release messages are fire-and-forget, so this bounds the delay a lost one can cause. It is
/// deliberately not shorter: a hand-off must come from the message, and polling faster would only
/// load the server (conformance scenario S11 checks hand-offs are faster than this).
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// How long a waiter's place in the queue lasts without a refresh. Live waiters refresh it on
/// every re-check (at least every [`FALLBACK_RECHECK`]), so only a dead waiter's entry lapses,
/// and a dead waiter at the head holds up a free lock for at most this long.
pub(crate) const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(3);

/// How long the head of the wait queue has to take a free lock before its entry lapses (the
/// scripts' `TURN_MS`): a waiter that died holds a free lock up for at most this long. The
/// scripts keep their own copy; a test checks that the two agree.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const TURN: Duration = Duration::from_millis(250);

/// Which data layout, and so which scripts, a [`RedisBackend`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RedisLockKind {
    /// A string key holding the owner token: `SET NX PX` acquire, compare-and-delete release.
    /// Not reentrant on the server (the generic [`Lock`](lock_core::Lock) is, per thread).
    #[default]
    SetNx,
    /// A hash from owner token to hold count (Redisson's layout): the same owner token may
    /// acquire again, and must release as often.
    ReentrantHash,
}

impl RedisLockKind {
    fn scripts(self) -> &'static LockScripts {
        match self {
            RedisLockKind::SetNx => set_nx::scripts(),
            RedisLockKind::ReentrantHash => reentrant_hash::scripts(),
        }
    }
}

/// `WAIT` after acquiring: how many replicas must acknowledge, within how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// Distributed locks on one Redis server.
///
/// Every key of one lock shares a Redis Cluster hash tag ([`RedisKeys`]), so the layout is ready
/// for a cluster; this client itself talks to the one node its URL names.
///
/// Build it with [`RedisBackend::builder`] and hand it to a [`LockClient`](lock_core::LockClient).
/// Cloning is cheap: clones share the connection pool and the subscriber connection that wakes
/// waiting threads.
///
/// Abilities: [`Fencing`] (every acquisition carries a fencing token from a per-name counter)
/// and [`NativeWait`] (waiters are woken by the release's pub/sub message and served in arrival
/// order). Holds are leases ([`HoldKind::Lease`]).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: ConnectionPool,
    pub(crate) prefix: String,
    pub(crate) kind: RedisLockKind,
    pub(crate) replicas: Option<ReplicaWait>,
    pub(crate) hub: WaitHub,
    /// `host:port`, without credentials, for `Debug`.
    pub(crate) address: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone is gone: the subscriber thread has no one left to wake.
        self.hub.close();
    }
}

/// One acquisition of a [`RedisBackend`] lock.
#[derive(Debug)]
pub struct RedisLease {
    name: LockName,
    keys: RedisKeys,
    token: String,
    fence: FencingToken,
    lease: Duration,
}

impl RedisLease {
    /// A grant that may exist under `token` (its fencing token unknown), for clean-up.
    fn in_doubt(name: &LockName, keys: &RedisKeys, token: String, lease: Duration) -> Self {
        Self { name: name.clone(), keys: keys.clone(), token, fence: FencingToken::new(0), lease }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The lock's Redis keys.
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// The owner token stored with the lock, as 32 hex digits.
    pub fn owner_token(&self) -> &str {
        &self.token
    }

    /// The fencing token issued with this acquisition.
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }
}

/// The outcome of one acquisition attempt.
enum Attempt {
    Acquired(RedisLease),
    /// Someone else holds the lock (or it is another waiter's turn); retry within this long at
    /// the latest (`None`: no bound known).
    Held {
        retry_in: Option<Duration>,
    },
}

impl RedisBackend {
    /// A builder for a backend on the server at `url` (`redis://[user][:password@]host[:port][/db]`
    /// or `rediss://…` for TLS).
    pub fn builder(url: impl Into<String>) -> RedisLockBuilder {
        RedisLockBuilder::new(url)
    }

    /// A backend on the server at `url` with every default (see [`RedisLockBuilder`]).
    ///
    /// Connects lazily: an unreachable server is reported by the first lock operation.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a URL that does not parse.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::builder(url).build()
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        Self { inner: Arc::new(inner) }
    }

    /// The data layout this backend uses.
    pub fn kind(&self) -> RedisLockKind {
        self.inner.kind
    }

    /// The Redis keys of the lock `name` (for operators and tests: inspecting `PTTL`, the hold
    /// count or the wait queue).
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new(&self.inner.prefix, name)
    }

    fn scripts(&self) -> &'static LockScripts {
        self.inner.kind.scripts()
    }

    fn connection(&self) -> Result<PooledConnection> {
        Ok(self.inner.pool.get()?)
    }

    /// One acquisition attempt. A `waiting` caller joins (or stays in) the wait queue when it does
    /// not get the lock; a non-waiting one never touches the queue.
    fn attempt(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        waiting: bool,
    ) -> Result<Attempt> {
        let token = owner.to_hex();
        let mut connection = self.connection()?;
        let reply = connection
            .run(|c| {
                self.scripts()
                    .acquire
                    .key(keys.lock())
                    .key(keys.fence())
                    .key(keys.queue())
                    .key(keys.queue_timeouts())
                    .arg(&token)
                    .arg(millis(ttl))
                    .arg(if waiting { "1" } else { "0" })
                    .arg(millis(QUEUE_ENTRY_TTL))
                    .invoke::<Vec<i64>>(c)
            })
            .map_err(|e| error::map("acquire", e));
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                if error.is_retryable() {
                    // The request may have reached the server and granted the lock to `token`.
                    let lease = RedisLease::in_doubt(name, keys, token, ttl);
                    cleanup::release_in_background(self, lease, "the acquisition's reply did not come");
                }
                return Err(error);
            }
        };
        match reply.as_slice() {
            [1, fence] => {
                let lease = RedisLease {
                    name: name.clone(),
                    keys: keys.clone(),
                    token,
                    fence: FencingToken::new(u64::try_from(*fence).unwrap_or(0)),
                    lease: ttl,
                };
                if let Some(wait) = self.inner.replicas {
                    self.confirm_replicated(&mut connection, &lease, wait)?;
                }
                Ok(Attempt::Acquired(lease))
            }
            [0, hint] => {
                let retry_in = u64::try_from(*hint).ok().map(|ms| Duration::from_millis(ms.max(1)));
                Ok(Attempt::Held { retry_in })
            }
            other => Err(RedisFailure::Reply { operation: "acquire", detail: format!("{other:?}") }.into()),
        }
    }

    /// `WAIT`s for the acquisition to reach `wait.replicas` replicas; releases it and reports
    /// [`Error::NotReplicated`] if fewer acknowledged in time, since a failover could otherwise
    /// hand the lock to a second holder (seed 003's WAIT recipe).
    fn confirm_replicated(
        &self,
        connection: &mut PooledConnection,
        lease: &RedisLease,
        wait: ReplicaWait,
    ) -> Result<()> {
        // The server answers WAIT only after its timeout, so the socket must wait that long too.
        let read_timeout = self.inner.pool.read_timeout() + wait.timeout;
        let acknowledged = connection.run_with_read_timeout(read_timeout, |c| {
            redis::cmd("WAIT").arg(wait.replicas).arg(millis(wait.timeout)).query::<i64>(c)
        });
        let acknowledged = match acknowledged {
            Ok(count) => u32::try_from(count).unwrap_or(0),
            Err(e) => {
                // Not known to be replicated: give it back, on another connection (this one may
                // still owe the WAIT reply) and another thread — this one holds a pooled
                // connection, and with a pool of one a second checkout here would wait in vain.
                let copy = RedisLease::in_doubt(&lease.name, &lease.keys, lease.token.clone(), lease.lease);
                cleanup::release_in_background(self, copy, "WAIT failed");
                return Err(error::map("wait for replicas", e));
            }
        };
        if acknowledged >= wait.replicas {
            return Ok(());
        }
        if let Err(error) = self.release_on(connection, lease) {
            tracing::warn!(lock = %lease.name, %error, "releasing an unreplicated lock failed; it will expire");
        }
        Err(Error::NotReplicated { name: lease.name.clone(), acknowledged, required: wait.replicas })
    }

    fn release_on(&self, connection: &mut PooledConnection, lease: &RedisLease) -> RedisResult<i64> {
        connection.run(|c| {
            self.scripts()
                .release
                .key(lease.keys.lock())
                .key(lease.keys.queue())
                .key(lease.keys.queue_timeouts())
                .arg(&lease.token)
                .arg(lease.keys.channel())
                .arg(millis(lease.lease))
                .invoke(c)
        })
    }

    /// Takes a waiter that gives up out of the queue (best effort: its entry lapses anyway).
    fn leave_queue(&self, keys: &RedisKeys, owner: &OwnerToken) {
        let result = self.connection().and_then(|mut connection| {
            connection
                .run(|c| {
                    lua::dequeue()
                        .key(keys.lock())
                        .key(keys.queue())
                        .key(keys.queue_timeouts())
                        .arg(owner.to_hex())
                        .arg(keys.channel())
                        .invoke::<i64>(c)
                })
                .map_err(|e| error::map("leave the wait queue", e))
        });
        if let Err(error) = result {
            tracing::debug!(%error, "leaving the redis wait queue failed; the entry will lapse");
        }
    }

    /// Pokes the subscriber thread so it subscribes to a newly waited channel at once.
    fn poke_subscriber(&self) {
        let result = self.connection().and_then(|mut connection| {
            connection
                .run(|c| redis::cmd("PUBLISH").arg(self.inner.hub.control_channel()).arg("").query::<i64>(c))
                .map_err(|e| error::map("wake the subscriber", e))
        });
        if let Err(error) = result {
            // The subscriber still gets there within its tick; waiters re-check meanwhile.
            tracing::debug!(%error, "poking the redis subscriber failed");
        }
    }

    /// The waiting loop of [`NativeWait::acquire_until`]; leaves the queue to the caller.
    fn wait_loop(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        let mut registration: Option<Registration<'_>> = None;
        loop {
            if let Some(waiting) = &registration {
                // Wake-ups so far are answered by what this attempt sees.
                waiting.clear();
            }
            let sent_at = Instant::now();
            let retry_in = match self.attempt(name, keys, owner, ttl, true)? {
                Attempt::Acquired(lease) => return Ok(Some(Acquired::new(lease, sent_at))),
                Attempt::Held { retry_in } => retry_in,
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let bound = |wait: Duration| deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
            match &registration {
                None => {
                    // Subscribe first, then re-check: a release between the failed attempt and
                    // the subscription would otherwise be missed.
                    let (joined, poke) = self.inner.hub.register(keys.channel(), &owner.to_hex());
                    if poke {
                        self.poke_subscriber();
                    }
                    joined.wait_subscribed(bound(FALLBACK_RECHECK));
                    registration = Some(joined);
                }
                Some(waiting) => {
                    let wait = retry_in.map_or(FALLBACK_RECHECK, |hint| hint.min(FALLBACK_RECHECK));
                    waiting.wait(bound(wait));
                }
            }
        }
    }
}

impl DistributedLock for RedisBackend {
    type Lease = RedisLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lease
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<RedisLease>> {
        check_lease(ttl)?;
        match self.attempt(name, &self.keys(name), owner, ttl, false)? {
            Attempt::Acquired(lease) => Ok(Some(lease)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    fn extend(&self, lease: &mut RedisLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        let mut connection = self.connection()?;
        let extended: i64 = connection
            .run(|c| {
                self.scripts().extend.key(lease.keys.lock()).arg(&lease.token).arg(millis(ttl)).invoke(c)
            })
            .map_err(|e| error::map("extend", e))?;
        if extended == 1 {
            lease.lease = ttl;
        }
        Ok(extended == 1)
    }

    /// Extends every lease of the batch in ONE pipeline on one connection: 10,000 leases cost
    /// one round trip, not 10,000.
    fn extend_many(&self, batch: &mut [Extension<'_, RedisLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| check_lease(item.ttl).err().map(Err)).collect();
        let valid: Vec<usize> = (0..batch.len()).filter(|&index| outcomes[index].is_none()).collect();
        if !valid.is_empty() {
            let scripts = self.scripts();
            let mut pipe = redis::pipe();
            // EVALSHA in a pipeline is not retried on NOSCRIPT (a restarted server, SCRIPT FLUSH):
            // load the script first, in the same round trip.
            pipe.cmd("SCRIPT").arg("LOAD").arg(scripts.extend_source);
            for &index in &valid {
                let item = &batch[index];
                pipe.invoke_script(
                    scripts.extend.key(item.lease.keys.lock()).arg(&item.lease.token).arg(millis(item.ttl)),
                );
            }
            // One connect and one read timeout for the whole batch (the trait's no-hang rule).
            let request = pipe.get_packed_pipeline();
            let replies = self.connection().and_then(|mut connection| {
                connection.exchange(&request, 1 + valid.len()).map_err(|e| error::map("extend", e))
            });
            match replies {
                Ok(values) => {
                    let replies = values.into_iter().skip(1).map(|value| {
                        redis::from_redis_value::<RedisResult<i64>>(value).unwrap_or_else(|e| Err(e.into()))
                    });
                    for (&index, reply) in valid.iter().zip(replies) {
                        outcomes[index] = Some(match reply {
                            Ok(extended) => {
                                if extended == 1 {
                                    batch[index].lease.lease = batch[index].ttl;
                                }
                                Ok(extended == 1)
                            }
                            Err(e) => Err(error::map("extend", e)),
                        });
                    }
                }
                Err(error) => {
                    // One failure for the whole batch; each lease gets it (the error is not
                    // Clone, so each gets the same description and meaning).
                    for &index in &valid {
                        outcomes[index] = Some(Err(same_error(&error)));
                    }
                }
            }
        }
        outcomes.into_iter().map(|outcome| outcome.unwrap_or_else(|| Ok(false))).collect()
    }

    fn release(&self, lease: RedisLease) -> Result<bool> {
        let mut connection = self.connection()?;
        let released = self.release_on(&mut connection, &lease).map_err(|e| error::map("release", e))?;
        Ok(released == 1)
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = RedisLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = RedisLease>> {
        Some(self)
    }
}

/// A copy of `error` for another item of the same failed batch: same variant (so the same
/// meaning and `is_retryable`), with the original's message as the source.
fn same_error(error: &Error) -> Error {
    let source = || -> lock_core::BoxError { error_chain(error).into() };
    match error {
        Error::Connection { backend, .. } => Error::Connection { backend, source: source() },
        Error::Authentication { backend, .. } => Error::Authentication { backend, source: source() },
        Error::Timeout { backend, operation, .. } => {
            Error::Timeout { backend, operation, source: Some(source()) }
        }
        Error::InvalidConfig { reason } => Error::InvalidConfig { reason: reason.clone() },
        _ => Error::Backend { backend: BACKEND, source: source() },
    }
}

impl NativeWait for RedisBackend {
    /// Waits in the lock's queue: woken by the release message meant for this waiter, re-checking
    /// on its own after at most the lock's remaining lease or one second.
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        check_lease(ttl)?;
        let keys = self.keys(name);
        let outcome = self.wait_loop(name, &keys, owner, ttl, deadline);
        match &outcome {
            Ok(Some(_)) => {}
            // The server just failed to answer: asking it again would cost the caller another
            // timeout. The queue entry lapses on its own (QUEUE_ENTRY_TTL).
            Err(error) if error.is_retryable() => {}
            // Gave up, or a non-I/O error: do not keep a place in the queue that holds up
            // everyone behind (one call to a server that just answered).
            _ => self.leave_queue(&keys, owner),
        }
        outcome
    }
}

impl Fencing for RedisBackend {
    fn fencing_token(&self, lease: &RedisLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("address", &self.inner.address)
            .field("kind", &self.inner.kind)
            .field("prefix", &self.inner.prefix)
            .field("wait_for_replicas", &self.inner.replicas)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_error_is_copied_with_its_meaning() {
        let timeout = Error::Timeout { backend: BACKEND, operation: "extend", source: None };
        assert!(matches!(same_error(&timeout), Error::Timeout { operation: "extend", .. }));
        let refused = Error::Connection { backend: BACKEND, source: "refused".into() };
        let copy = same_error(&refused);
        assert!(copy.is_retryable());
        assert!(std::error::Error::source(&copy).unwrap().to_string().contains("refused"));
    }

    #[test]
    fn the_fallback_is_not_shorter_than_a_second_and_entries_outlive_it() {
        assert!(FALLBACK_RECHECK >= Duration::from_secs(1));
        assert!(QUEUE_ENTRY_TTL >= 2 * FALLBACK_RECHECK);
    }
}
