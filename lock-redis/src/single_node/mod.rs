//! [`RedisBackend`]: the [`DistributedLock`] implementation over one Redis server. Its lease
//! type lives in `lease.rs`, the wait loop in `wait.rs`, `WAIT` for replicas in `replication.rs`.

mod lease;
mod renewal;
mod replication;
mod shared_modes;
mod uncontended;
mod wait;

use lease::LeaseWatch;
pub use lease::RedisLease;
pub(crate) use lease::Shape;
pub(crate) use replication::ReplicaWait;
pub(crate) use wait::QUEUE_ENTRY_TTL;

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{
    check_lease, DistributedLock, Error, Extension, Fencing, FencingToken, HoldKind, LockName, NativeWait,
    OwnerToken, Result,
};
use redis::RedisResult;

use crate::builder::RedisLockBuilder;
use crate::cleanup::{self, Undo};
use crate::connection::PooledConnection;
use crate::error::{self, BACKEND};
use crate::keys::RedisKeys;
use crate::lua::{LockScripts, LuaScript};
use crate::topology::{Heartbeat, Hop, Next, Nodes};
use crate::{millis, reentrant_hash, set_nx};
use uncontended::Uncontended;

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
    /// The kind's scripts; with `sharded`, those that wake waiters by sharded pub/sub (a
    /// cluster's).
    fn scripts(self, sharded: bool) -> &'static LockScripts {
        match (self, sharded) {
            (RedisLockKind::SetNx, false) => set_nx::scripts(),
            (RedisLockKind::SetNx, true) => set_nx::sharded_scripts(),
            (RedisLockKind::ReentrantHash, false) => reentrant_hash::scripts(),
            (RedisLockKind::ReentrantHash, true) => reentrant_hash::sharded_scripts(),
        }
    }
}

/// Distributed locks on one Redis server, a Sentinel-managed primary, or a Redis Cluster (by
/// URL: see the crate docs, *Redis Cluster and Sentinel*).
///
/// Every key of one lock shares a Redis Cluster hash tag ([`RedisKeys`]), so in a cluster one
/// lock is always one primary's business.
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
    /// Where each lock's keys live: one server, Sentinel's primary, or a cluster's primaries.
    pub(crate) nodes: Nodes,
    /// The read timeout of every connection, and the time a call may spend following the
    /// deployment's redirects.
    pub(crate) io_timeout: Duration,
    pub(crate) prefix: String,
    pub(crate) kind: RedisLockKind,
    /// Waiters queue and are served in arrival order (`RedisLockBuilder::fair`).
    pub(crate) fair: bool,
    pub(crate) replicas: Option<ReplicaWait>,
    /// Watches the primaries of leases on a replicated deployment (`topology/heartbeat.rs`).
    pub(crate) heartbeat: Arc<Heartbeat>,
    /// Undos of failed calls still to be sent (`cleanup.rs`).
    pub(crate) cleanup: cleanup::Cleanup,
    /// Where the URL points, without credentials, for `Debug`.
    pub(crate) address: String,
}

/// The pause before the second retry of a redirected request (see [`RedisBackend::routed`]).
const FIRST_REDIRECT_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between retries of a redirected request: a cluster failover takes about a
/// second, a Sentinel failover a few.
const MAX_REDIRECT_PAUSE: Duration = Duration::from_millis(200);

/// Which request an acquisition attempt sends ([`RedisBackend::attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// A first attempt: a transaction of plain commands where the kind allows (`SetNx`).
    /// `waiting`: whether the caller queues if the queue turns out to decide.
    Uncontended { waiting: bool, until: Option<Instant> },
    /// The acquire script, which consults the wait queue; `waiting` joins it on a refusal.
    Queued { waiting: bool, until: Option<Instant> },
}

impl Route {
    /// The caller's deadline, if it has one: redirects are not retried past it (see
    /// [`RedisBackend::routed_until`]).
    fn until(self) -> Option<Instant> {
        match self {
            Route::Uncontended { until, .. } | Route::Queued { until, .. } => until,
        }
    }
}

/// The outcome of one acquisition attempt.
// Unboxed: an attempt lives for one call, and boxing the lease would add an allocation to every
// acquisition.
#[allow(clippy::large_enum_variant)]
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
    /// or `rediss://…` for TLS), the primary Sentinel names (`redis+sentinel://s1,s2,…/<master>`)
    /// or a Redis Cluster (`redis+cluster://n1,n2,…/`).
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

    /// Whether waiters are served in arrival order (see [`RedisLockBuilder::fair`]).
    pub fn is_fair(&self) -> bool {
        self.inner.fair
    }

    /// The Redis keys of the lock `name` (for operators and tests: inspecting `PTTL`, the hold
    /// count or the wait queue).
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new(&self.inner.prefix, name)
    }

    /// A new plain connection (outside the pool, with the backend's timeouts) to the node that
    /// serves the keys of `name`: the one server, Sentinel's current primary, or the primary of
    /// the name's slot in a cluster. For operators and tools that read a lock's keys
    /// (`distlock inspect`).
    ///
    /// # Errors
    /// [`Error::Connection`] and the like when the node cannot be reached; a cluster whose slot
    /// map cannot be read.
    pub fn node_connection(&self, name: &LockName) -> Result<redis::Connection> {
        let hop = self.inner.nodes.hop(&self.keys(name))?;
        hop.node.pool.open_unpooled().map_err(|e| error::map("connect", e))
    }

    pub(crate) fn scripts(&self) -> &'static LockScripts {
        self.inner.kind.scripts(self.inner.nodes.cluster().is_some())
    }

    /// Where this backend's locks live.
    pub(crate) fn nodes(&self) -> &Nodes {
        &self.inner.nodes
    }

    /// The undos of failed calls this backend still has to send.
    pub(crate) fn cleanup(&self) -> &cleanup::Cleanup {
        &self.inner.cleanup
    }

    /// Runs `request` against the node serving `keys`, following what the deployment answers
    /// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`: see [`Nodes::after_failure`]) for
    /// one I/O timeout: no retry starts after that (one already under way runs to its own
    /// connect and I/O timeouts). The first redirect is followed at once; later ones after a
    /// pause that doubles up to [`MAX_REDIRECT_PAUSE`].
    pub(crate) fn routed<T>(&self, keys: &RedisKeys, request: impl FnMut(&Hop) -> Result<T>) -> Result<T> {
        self.routed_until(keys, None, request)
    }

    /// [`routed`](Self::routed), starting no retry after `until` either: a waiting acquisition
    /// retries in its wait loop, which keeps to the caller's deadline (a slot that migrates
    /// for longer than the I/O timeout refuses its attempts all that time).
    pub(crate) fn routed_until<T>(
        &self,
        keys: &RedisKeys,
        until: Option<Instant>,
        mut request: impl FnMut(&Hop) -> Result<T>,
    ) -> Result<T> {
        let io_deadline = Instant::now() + self.inner.io_timeout;
        let deadline = until.map_or(io_deadline, |until| until.min(io_deadline));
        let mut pause = FIRST_REDIRECT_PAUSE;
        let mut retries = 0_u32;
        let mut hop = self.inner.nodes.hop(keys)?;
        loop {
            let failure = match request(&hop) {
                Err(failure) => failure,
                done => return done,
            };
            let Next::Retry { pause: wait, ask } = self.inner.nodes.after_failure(&hop, &failure, pause)
            else {
                return Err(failure);
            };
            // Only the first retry may go at once: two redirects in a row mean the deployment
            // is changing, and a burst of requests would not help it.
            let wait = if retries == 0 { wait } else { Some(wait.unwrap_or(pause)) };
            if Instant::now() + wait.unwrap_or_default() >= deadline {
                return Err(failure);
            }
            if let Some(wait) = wait {
                thread::sleep(wait);
                pause = (pause * 2).min(MAX_REDIRECT_PAUSE);
            }
            retries += 1;
            hop = match ask {
                Some(node) => Nodes::asking(node),
                None => self.inner.nodes.hop(keys)?,
            };
        }
    }

    /// One acquisition attempt, one round trip when uncontended.
    ///
    /// How it goes to the server:
    /// - [`Route::Uncontended`] (`SetNx` only; every other case is [`Route::Queued`]): the plain
    ///   commands `EXISTS queue`, `SET lock <token> NX PX <lease>`, `INCR fence` in one
    ///   `MULTI`/`EXEC` transaction, which costs the server a fraction of a script. A refusal
    ///   costs a fencing number, which is harmless: tokens still increase with every grant.
    ///   Only an uncontended attempt is one round trip; the rest follow the queue:
    ///   - refused, a waiter makes the queued attempt next, which joins the queue: right after
    ///     it subscribed to wake-ups if that is immediate (another waiter of this backend
    ///     already did), else at once, before subscribing, so its place never waits for the
    ///     subscription's round trips;
    ///   - granted while waiters were queued (the lock was free but not the newcomer's: a
    ///     holder's lease ran out under the queue, or a dead head's turn ended), the lock is
    ///     handed back at once, as a release does, and the queued attempt follows: three round
    ///     trips, on a path that needs a holder to have died or lost its lease.
    /// - [`Route::Queued`]: the kind's acquire script. A `waiting` caller joins (or stays in) the
    ///   wait queue when it does not get the lock; a non-waiting one never touches the queue.
    fn attempt(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        route: Route,
    ) -> Result<Attempt> {
        self.routed_until(keys, route.until(), |hop| self.attempt_on(hop, name, keys, owner, ttl, route))
    }

    /// [`attempt`](Self::attempt) on one node.
    fn attempt_on(
        &self,
        hop: &Hop,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        route: Route,
    ) -> Result<Attempt> {
        let token = owner.to_hex();
        let mut connection = hop.connection()?;
        let fence = match route {
            Route::Uncontended { waiting, until } if self.kind() == RedisLockKind::SetNx => {
                let reply = uncontended::acquire(&mut connection, keys, &token, ttl).map_err(|e| {
                    self.undo_failed_attempt(&mut connection, name, keys, &token, ttl, false, e)
                })?;
                match reply {
                    // A waiter whose wake-ups are already subscribed makes its queued attempt
                    // right after subscribing, which is immediate; one that must subscribe first
                    // (round trips) queues now, so its place does not wait for them.
                    Uncontended::Refused
                        if !waiting
                            || self
                                .inner
                                .nodes
                                .hub(hop, &self.inner.prefix)
                                .is_subscribed(keys.channel()) =>
                    {
                        return Ok(Attempt::Held { retry_in: None });
                    }
                    Uncontended::Refused => {}
                    Uncontended::Acquired(fence) => {
                        return self.granted(
                            hop,
                            &mut connection,
                            name,
                            keys,
                            token,
                            fence,
                            (ttl, Shape::Mutex),
                        )
                    }
                    Uncontended::OutOfTurn(fence) => {
                        let lease = RedisLease::granted(name, keys, token.clone(), fence, ttl);
                        if let Err(e) = self.release_on(&mut connection, &lease) {
                            // The grant is certain: whatever the error, the hold must not stay
                            // in the queue's way for a whole lease.
                            cleanup::release_in_background(
                                self,
                                lease,
                                "handing a lock taken out of turn back failed",
                            );
                            // Detached: a redirect here must not send the attempt again under
                            // the same token, which the clean-up above would then release.
                            let error = error::map("hand a lock taken out of turn to the queue", e);
                            return Err(error::detached(&error));
                        }
                    }
                }
                drop(connection);
                return self.attempt(name, keys, owner, ttl, Route::Queued { waiting, until });
            }
            Route::Uncontended { waiting, .. } | Route::Queued { waiting, .. } => {
                let script = &self.scripts().acquire;
                let command = script
                    .invoke(&[keys.lock(), keys.fence(), keys.queue(), keys.queue_timeouts()])
                    .arg(&token)
                    .arg(millis(ttl))
                    .arg(if waiting { millis(QUEUE_ENTRY_TTL) } else { 0 })
                    .arg(keys.channel())
                    .to_owned();
                let reply = script.exchange::<i64>(&mut connection, &command).map_err(|e| {
                    self.undo_failed_attempt(&mut connection, name, keys, &token, ttl, waiting, e)
                })?;
                match reply {
                    fence if fence >= 0 => fence,
                    -1 => return Ok(Attempt::Held { retry_in: None }),
                    refusal => {
                        let ms = refusal.unsigned_abs() - 1;
                        return Ok(Attempt::Held { retry_in: Some(Duration::from_millis(ms.max(1))) });
                    }
                }
            }
        };
        self.granted(hop, &mut connection, name, keys, token, fence, (ttl, Shape::Mutex))
    }

    /// An acquisition request under `token` failed with `failure`: undoes what the server may
    /// still do with it — grant the lock (kept for a whole lease by nobody) and, when `joined`,
    /// queue the caller (an entry nobody refreshes, whose turn would hold the lock up) — and
    /// returns the caller's error at once.
    ///
    /// A request that went out and timed out is followed on its own connection by the undo,
    /// which the server runs right after it whenever it catches up (a stalled server runs both
    /// on resuming: the lock is usable again at once, not after the orphan's lease and a turn
    /// per abandoned waiter). Any other failure that may have reached the server leaves the undo
    /// to the clean-up thread (`cleanup.rs`).
    #[allow(clippy::too_many_arguments)]
    fn undo_failed_attempt(
        &self,
        connection: &mut PooledConnection,
        name: &LockName,
        keys: &RedisKeys,
        token: &str,
        ttl: Duration,
        joined: bool,
        failure: redis::RedisError,
    ) -> Error {
        let error = error::map("acquire", failure);
        let mut undos = vec![(Undo::Release, keys, token)];
        if joined {
            undos.push((Undo::LeaveQueue, keys, token));
        }
        let (request, _) = cleanup::undo_request(self.scripts(), &undos);
        if connection.follow_unanswered(&request) || !error.is_retryable() {
            return error;
        }
        // The request may have reached the server, and nothing can follow it there.
        let why = "the acquisition's reply did not come";
        cleanup::release_in_background(
            self,
            RedisLease::possible_grant(name, keys, token.to_owned(), ttl),
            why,
        );
        if joined {
            cleanup::leave_queue_in_background(self, keys, token.to_owned(), why);
        }
        error
    }

    /// The lease of a grant, once the replicas have it if the backend waits for them.
    #[allow(clippy::too_many_arguments)]
    fn granted(
        &self,
        hop: &Hop,
        connection: &mut PooledConnection,
        name: &LockName,
        keys: &RedisKeys,
        token: String,
        fence: i64,
        (ttl, shape): (Duration, Shape),
    ) -> Result<Attempt> {
        let mut lease = RedisLease::granted(name, keys, token, fence, ttl).with_shape(shape);
        if let Some(wait) = self.inner.replicas {
            self.confirm_replicated(connection, &lease, wait)?;
        }
        if self.inner.nodes.replicated() {
            let signal = self.inner.heartbeat.watch(&hop.node);
            lease.watch = Some(LeaseWatch { signal, node: Arc::clone(&hop.node) });
        }
        Ok(Attempt::Acquired(lease))
    }

    fn release_on(&self, connection: &mut PooledConnection, lease: &RedisLease) -> RedisResult<i64> {
        connection.run(|c| {
            let (script, command) = self.release_command(lease);
            script.query(c, &command)
        })
    }

    /// Releases `lease` on the node serving it, following the deployment's redirects. A mutex
    /// release that a slot migration refuses (`TRYAGAIN`: the queue's keys are absent on the
    /// node asked) is sent again at once by the lock key alone (a lone release, see
    /// `set_nx_release.lua`), which a migration never refuses (one key: `ASK` at worst, which
    /// is followed): a holder's unlock does not wait for the migration to end.
    fn release_routed(&self, lease: &RedisLease) -> Result<i64> {
        let split = redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain);
        self.routed(&lease.keys, |hop| {
            match self.release_on(&mut hop.connection()?, lease) {
                Err(e) if lease.shape == Shape::Mutex && e.kind() == split => {
                    // A new connection from the hop: `ASKING` again where the hop needs it.
                    hop.connection()?.run(|c| {
                        let (script, command) = self.mutex_release_command(lease, true);
                        script.query(c, &command)
                    })
                }
                other => other,
            }
            .map_err(|e| error::map("release", e))
        })
    }

    /// Releases `lease` without consuming it (the clean-up thread's retries).
    ///
    /// # Errors
    /// As [`DistributedLock::release`].
    pub(crate) fn release_in_place(&self, lease: &RedisLease) -> Result<()> {
        self.release_routed(lease).map(drop)
    }

    /// The script and command that release `lease`, whatever it holds.
    fn release_command(&self, lease: &RedisLease) -> (&'static LuaScript, redis::Cmd) {
        if lease.shape != Shape::Mutex {
            return shared_modes::release_command(lease, self.inner.nodes.cluster().is_some());
        }
        self.mutex_release_command(lease, false)
    }

    /// The script and command that release a mutex `lease`; `lone`: by the lock key alone (see
    /// [`release_routed`](Self::release_routed)).
    fn mutex_release_command(&self, lease: &RedisLease, lone: bool) -> (&'static LuaScript, redis::Cmd) {
        let script = &self.scripts().release;
        let all = [lease.keys.lock(), lease.keys.queue(), lease.keys.queue_timeouts()];
        let keys = if lone { &all[..1] } else { &all[..] };
        // Non-fair waiters do not queue: with no queue, a non-fair client's release still tells
        // them (`1`), where a fair one's has nobody to tell.
        let command = script
            .invoke(keys)
            .arg(&lease.token)
            .arg(lease.keys.channel())
            .arg(if self.inner.fair { 0 } else { 1 })
            .to_owned();
        (script, command)
    }

    /// The script and command that extend `lease` to `ttl`, whatever it holds.
    fn extend_command(&self, lease: &RedisLease, ttl: Duration) -> (&'static LuaScript, redis::Cmd) {
        if lease.shape != Shape::Mutex {
            return shared_modes::extend_command(lease, ttl);
        }
        let script = &self.scripts().extend;
        let command = script.invoke(&[lease.keys.lock()]).arg(&lease.token).arg(millis(ttl)).to_owned();
        (script, command)
    }
}

impl DistributedLock for RedisBackend {
    type Lease = RedisLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn kind_name(&self) -> &'static str {
        match self.inner.kind {
            RedisLockKind::SetNx => "redis-set-nx",
            RedisLockKind::ReentrantHash => "redis-hash",
        }
    }

    fn profile(&self) -> lock_core::BackendProfile {
        let wake_up = if self.inner.fair {
            "pub/sub message on release, to the head of a fair wait queue"
        } else {
            "pub/sub message on every release, to every waiter: non-fair, whoever asks first gets it"
        };
        let profile = lock_core::BackendProfile::new(
            "INCR of a per-name counter, atomic with the acquisition (one round trip)",
            wake_up,
            "the counter and the lock replicate asynchronously: a failover may lose the lock \
             (WAIT option: acquire returns only once replicas have it)",
        );
        match self.kind() {
            RedisLockKind::ReentrantHash => {
                profile.with_server_reentrancy("a hash of owner token to hold count")
            }
            _ => profile,
        }
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lease
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<RedisLease>> {
        check_lease(ttl)?;
        match self.attempt(
            name,
            &self.keys(name),
            owner,
            ttl,
            Route::Uncontended { waiting: false, until: None },
        )? {
            Attempt::Acquired(lease) => Ok(Some(lease)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    fn extend(&self, lease: &mut RedisLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        let mark = lease.doubt_mark();
        let extended = self.routed(&lease.keys, |hop| {
            let extended: i64 = hop
                .connection()?
                .run(|c| {
                    let (script, command) = self.extend_command(lease, ttl);
                    script.query(c, &command)
                })
                .map_err(|e| error::map("extend", e))?;
            Ok((extended, Arc::clone(&hop.node)))
        });
        match extended {
            Ok((1, node)) => {
                lease.confirmed(ttl, mark, &node, &self.inner.heartbeat);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(error) => {
                if error.is_retryable() {
                    lease.unconfirmed();
                }
                Err(error)
            }
        }
    }

    /// Extends the leases of the batch in ONE pipeline per node: 10,000 leases on one server
    /// cost one round trip, not 10,000 (see `renewal.rs`).
    fn extend_many(&self, batch: &mut [Extension<'_, RedisLease>]) -> Vec<Result<bool>> {
        self.extend_batch(batch)
    }

    fn release(&self, lease: RedisLease) -> Result<bool> {
        let released = self.release_routed(&lease)?;
        Ok(released == 1)
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = RedisLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = RedisLease>> {
        Some(self)
    }

    fn doubt_signal(&self, lease: &RedisLease) -> Option<lock_core::DoubtSignal> {
        lease.watch.as_ref().map(|watch| watch.signal.clone())
    }

    fn read_write(&self) -> Option<&dyn lock_core::ReadWrite<Lease = RedisLease>> {
        Some(self)
    }

    fn permits(&self) -> Option<&dyn lock_core::Permits<Lease = RedisLease>> {
        Some(self)
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

#[cfg(feature = "testkit")]
impl RedisBackend {
    /// Times one `PING` per call on a connection of this backend's pool (benchmarks' limit);
    /// in a cluster, on the primary of the name `ping`.
    pub(crate) fn ping_probe(&self) -> lock_testkit::workload::TimeOne {
        let backend = self.clone();
        let keys = self.keys(&LockName::new("ping").expect("a valid name"));
        Box::new(move || {
            let hop = backend.inner.nodes.hop(&keys).map_err(|e| e.to_string())?;
            crate::testkit::time_ping(&hop.node.pool)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait_loop::FALLBACK_RECHECK;

    #[test]
    fn the_fallback_is_not_shorter_than_a_second_and_entries_outlive_it() {
        assert!(FALLBACK_RECHECK >= Duration::from_secs(1));
        assert!(QUEUE_ENTRY_TTL >= 2 * FALLBACK_RECHECK);
    }
}
