//! [`RedisBackend`]: the [`DistributedLock`] implementation over Redis, one primary per name —
//! a single server, a Sentinel-managed primary, or the primary of the name's slot in a Cluster
//! (`topology/` says which node serves a name and follows its redirects). Here: the lock's
//! commands. `attempt.rs` makes one acquisition attempt, `wait.rs` waits for a release,
//! `renewal.rs` extends leases in batches, `replication.rs` waits for replicas (`WAIT`),
//! `read_write_and_semaphores.rs` holds the shared modes, `election.rs` leader election,
//! `lease.rs` the lease type.

mod attempt;
mod election;
mod lease;
mod read_write_and_semaphores;
mod renewal;
mod replication;
mod uncontended;
mod wait;

use attempt::{Attempt, Route};
pub use lease::RedisLease;
pub(crate) use replication::ReplicaWait;
pub(crate) use wait::QUEUE_ENTRY_TTL;

use std::fmt;
use std::sync::Arc;

use std::time::{Duration, Instant};

use lock_core::{
    check_lease, DistributedLock, Extension, Fencing, FencingToken, HoldKind, LockName, NativeWait,
    OwnerToken, Primitive, Result,
};
use redis::RedisResult;

use crate::builder::RedisLockBuilder;
use crate::cleanup;
use crate::connection::PooledConnection;
use crate::error::{self, BACKEND};
use crate::keys::RedisKeys;
use crate::lua::{LockScripts, LuaScript};
use crate::topology::{Heartbeat, Hop, Nodes};
use crate::transaction::Packed;
use crate::{millis, reentrant_hash, set_nx};

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
/// Abilities: [`Fencing`] (every acquisition carries a fencing token from a per-name counter),
/// [`NativeWait`] (waiters are woken by the release's pub/sub message and served in arrival
/// order), read-write locks, semaphores and [`Elections`](lock_core::Elections) (an election
/// is a mutex on keys of its own: see `backend/election.rs`). Holds are leases
/// ([`HoldKind::Lease`]).
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
    /// [`Error::InvalidConfig`](lock_core::Error::InvalidConfig) for a URL that does not parse.
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
    /// [`Error::Connection`](lock_core::Error::Connection) and the like when the node cannot be reached; a cluster whose slot
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
    /// for one I/O timeout ([`Nodes::routed_until`]).
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
        request: impl FnMut(&Hop) -> Result<T>,
    ) -> Result<T> {
        self.inner.nodes.routed_until(keys, self.inner.io_timeout, until, request)
    }

    fn release_on(&self, connection: &mut PooledConnection, lease: &RedisLease) -> RedisResult<i64> {
        if lease.on_mutex_keys() {
            let (script, request) = self.mutex_release_request(lease, false);
            return script.exchange_packed(connection, request.as_bytes());
        }
        let (script, command) = self.release_command(lease);
        script.exchange(connection, &command)
    }

    /// Releases `lease` on the node serving it, following the deployment's redirects. A mutex
    /// release that a slot migration refuses (`TRYAGAIN`: the queue's keys are absent on the
    /// node asked) is sent again at once by the lock key alone (a lone release, see
    /// `set_nx_release.lua`), which a migration never refuses (one key: `ASK` at worst, which
    /// is followed): a holder's unlock does not wait for the migration to end.
    fn release_routed(&self, lease: &RedisLease) -> Result<i64> {
        let split = redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain);
        self.routed(&lease.keys, |hop| {
            // Bound first: the connection goes back to the pool before a lone release takes one
            // (a pool of one would otherwise wait its whole connect timeout).
            let released = self.release_on(&mut hop.connection()?, lease);
            match released {
                Err(e) if lease.on_mutex_keys() && e.kind() == split => {
                    // A new connection from the hop: `ASKING` again where the hop needs it.
                    let (script, request) = self.mutex_release_request(lease, true);
                    script.exchange_packed(&mut *hop.connection()?, request.as_bytes())
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

    /// The script and command that release a read-write or permit `lease` (a mutex's:
    /// [`mutex_release_request`](Self::mutex_release_request)).
    fn release_command(&self, lease: &RedisLease) -> (&'static LuaScript, redis::Cmd) {
        read_write_and_semaphores::release_command(lease, self.inner.nodes.cluster().is_some())
    }

    /// The script and packed request that release a mutex `lease`; `lone`: by the lock key
    /// alone (see [`release_routed`](Self::release_routed)).
    fn mutex_release_request(&self, lease: &RedisLease, lone: bool) -> (&'static LuaScript, Packed) {
        let script = &self.scripts().release;
        let all = [lease.keys.lock(), lease.keys.queue(), lease.keys.queue_timeouts()];
        let keys = if lone { &all[..1] } else { &all[..] };
        // Non-fair waiters do not queue: with no queue, a non-fair client's release still tells
        // them (`1`), where a fair one's has nobody to tell. An election's release always tells:
        // its leader watches hear every release, and never queue.
        let tell_all = !self.inner.fair || lease.primitive == Primitive::Leader;
        let tell: &[u8] = if tell_all { b"1" } else { b"0" };
        let request = script.packed(keys, &[lease.token.as_bytes(), lease.keys.channel().as_bytes(), tell]);
        (script, request)
    }

    /// The script and command that extend `lease` to `ttl`, whatever it holds.
    fn extend_command(&self, lease: &RedisLease, ttl: Duration) -> (&'static LuaScript, redis::Cmd) {
        if !lease.on_mutex_keys() {
            return read_write_and_semaphores::extend_command(lease, ttl);
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
        )
        .with_guarded_writes(
            "RedisFencedStore: one script compares the token with the key's fence and writes; \
             set_if_held: one script checks the lock's owner and writes a key of its slot",
        )
        .with_elections(
            "a mutex on keys of its own per election name (same waits, fencing, WAIT and cluster \
             routing); the winning script writes the leader record (owner, token, value), \
             proclaim checks the owner and writes in one script, followers read lock and record \
             in one script and are woken by pub/sub on the election's channel (win, proclaim, \
             release); a leader's expiry sends no message (followers re-check)",
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

    fn elections(&self) -> Option<&dyn lock_core::Elections<Lease = RedisLease>> {
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
        self.ping_probe_for(&LockName::new("ping").expect("a valid name"))
    }

    /// [`ping_probe`](Self::ping_probe) on the primary that serves `name` (in a cluster).
    pub(crate) fn ping_probe_for(&self, name: &LockName) -> lock_testkit::workload::TimeOne {
        let backend = self.clone();
        let keys = self.keys(name);
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
