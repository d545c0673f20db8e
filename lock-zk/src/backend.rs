//! [`ZooKeeperBackend`]: the [`DistributedLock`] over one session, its liveness checks and
//! release.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{join, join_all};
use lock_core::{
    check_lease, Acquired, DistributedLock, Elections, Error, Extension, Fencing, FencingToken, HoldKind,
    LockName, NativeWait, OwnerToken, Permits, ReadWrite, Result, WriteHolds,
};
use zookeeper_client as zk;

use crate::blocking::{async_context_error, in_async_context, refuse_async_context};
use crate::builder::{Settings, ZooKeeperLockBuilder};
use crate::error::{session_ended, Failure, BACKEND};
use crate::lease::{NodeWatch, ZooKeeperLease};
use crate::path::Root;
use crate::recipe::Wait;
use crate::session::{is_terminal, Session};

/// Locks on a ZooKeeper ensemble, in the layout of Apache Curator's `InterProcessMutex`.
///
/// Build it with [`ZooKeeperBackend::builder`] and hand it to a
/// [`LockClient`](lock_core::LockClient). Clones share one session and its runtime thread.
///
/// Holds are [`HoldKind::Session`]: a lock is held as long as its ephemeral node, which lives as
/// long as the session. Renewal is a liveness check (one round trip per batch, however many
/// locks: the session, and a watch on each node); a disconnected session or a check without an
/// answer puts the hold in doubt, and a hold is lost once no check succeeded for the negotiated
/// session timeout (or the lease, if shorter) less a clock-drift margin — before the servers can
/// have expired the session. A session that expired is replaced by a new one for later
/// acquisitions.
///
/// Calls block; from a tokio async task they return [`Error::Unsupported`] (use
/// `tokio::task::spawn_blocking`). A release refused there is still sent, in the background.
///
/// Abilities: [`NativeWait`] (each waiter watches its predecessor's node), [`Fencing`] (the
/// lock node's creation zxid), [`ReadWrite`] (Curator's `InterProcessReadWriteLock` at
/// `<root>/%read-write/<name>`), [`Permits`] (Curator's `InterProcessSemaphoreV2` at
/// `<root>/%semaphore/<name>`) and [`Elections`](lock_core::Elections) (Curator's `LeaderLatch`
/// at `<root>/%election/<name>`).
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_zk::ZooKeeperBackend;
///
/// let backend = ZooKeeperBackend::builder("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181")
///     .namespace("/locks")
///     .build()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("orders")?.lock()?; // the node /locks/orders/_c_…-lock-…
/// guard.unlock()?;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct ZooKeeperBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) root: Root,
    /// `CREATOR_ALL` with digest authentication, else open to anyone.
    pub(crate) acls: zk::Acls<'static>,
    /// How many times a waiter of this backend was woken by a watch.
    pub(crate) wake_ups: AtomicU64,
    /// The read-write locks' write nodes held through this backend, by name and the owner they
    /// were taken with: a read of that name asked with that owner is the writer's own (a
    /// downgrade).
    pub(crate) writers: WriteHolds<String>,
}

impl ZooKeeperBackend {
    /// Starts building a backend for the ensemble at `connect_string` (`host:port[,host:port…]`,
    /// every member listed).
    pub fn builder(connect_string: impl Into<String>) -> ZooKeeperLockBuilder {
        ZooKeeperLockBuilder::new(connect_string)
    }

    pub(crate) fn open(settings: Settings, root: Root) -> Result<Self> {
        let acls = if settings.digest.is_some() { zk::Acls::creator_all() } else { zk::Acls::anyone_all() };
        let session = Session::open(settings)?;
        let backend = Self {
            inner: Arc::new(Inner {
                session,
                root,
                acls,
                wake_ups: AtomicU64::new(0),
                writers: WriteHolds::default(),
            }),
        };
        backend.create_root()?;
        Ok(backend)
    }

    fn create_root(&self) -> Result<()> {
        let session = &self.inner.session;
        let client = session.client()?;
        let options = zk::CreateMode::Persistent.with_acls(self.inner.acls);
        session
            .call(session.settings().io_timeout, client.mkdir(self.inner.root.as_str(), &options))
            .map_err(|failure| failure.into_error("create the root"))
    }

    /// The namespace (root path) under which this backend's locks live.
    pub fn namespace(&self) -> &str {
        self.inner.root.as_str()
    }

    /// The negotiated timeout of the current session.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session.negotiated_timeout()
    }

    /// The state of the current session (`SyncConnected`, `Disconnected`, `Expired`, …).
    ///
    /// # Errors
    /// As connecting, when the session had ended and a new one cannot be had.
    pub fn session_state(&self) -> Result<zk::SessionState> {
        refuse_async_context()?;
        Ok(self.inner.session.client()?.state())
    }

    /// How many times a waiter of this backend (and its clones) was woken by a watch on its
    /// predecessor: one release wakes one waiter.
    pub fn wake_ups(&self) -> u64 {
        self.inner.wake_ups.load(Ordering::Relaxed)
    }

    /// Liveness of the holds in `leases`, in one round trip: a `sync` (answered through the
    /// leader, so a follower cut off from the quorum cannot vouch for a session the leader may
    /// have expired) confirms the session, which owns every node of it; the watch on each node
    /// says whether it was deleted. A node not watched yet (its first check) gets an `exists`
    /// that sets the watch, in the same round trip.
    fn check_holds(&self, leases: &mut [&mut ZooKeeperLease]) -> Vec<Result<bool>> {
        let session = &self.inner.session;
        let Some(client) = session.current() else { return leases.iter().map(|_| Ok(false)).collect() };
        let id = client.session_id().0;
        let unwatched: Vec<usize> = (0..leases.len())
            .filter(|&i| leases[i].session == id && matches!(leases[i].watch, NodeWatch::Unset))
            .collect();
        let confirmed = match client.state() {
            state if is_terminal(state) => Err(Failure::Zk(zk::Error::SessionExpired)),
            // Requests would queue until the connection is back: in doubt now, not in a timeout.
            zk::SessionState::Disconnected => Err(Failure::Zk(zk::Error::ConnectionLoss)),
            _ => {
                let nodes: Vec<&str> = unwatched.iter().map(|&i| leases[i].node.as_str()).collect();
                session.call(session.settings().io_timeout, async {
                    let synced = client.sync(self.inner.root.as_str());
                    let watches: Vec<_> =
                        nodes.iter().map(|node| client.check_and_watch_stat(node)).collect();
                    let (synced, watches) = join(synced, join_all(watches)).await;
                    synced.map(|()| watches)
                })
            }
        };
        let mut watches = match confirmed {
            Ok(watches) => unwatched.into_iter().zip(watches).peekable(),
            Err(failure) => {
                let ended = failure.session_ended();
                let outcome = |lease: &&mut ZooKeeperLease| match lease.session == id && !ended {
                    true => Err(failure.clone().into_error("check the session")),
                    false => Ok(false),
                };
                return leases.iter().map(outcome).collect();
            }
        };
        let mut outcomes = Vec::with_capacity(leases.len());
        for (index, lease) in leases.iter_mut().enumerate() {
            if lease.session != id {
                outcomes.push(Ok(false));
                continue;
            }
            if let Some((_, watched)) = watches.next_if(|(at, _)| *at == index) {
                match watched {
                    Ok((Some(_), watcher)) => lease.watch = NodeWatch::Set(Box::pin(watcher.changed())),
                    Ok((None, _)) => lease.watch = NodeWatch::Deleted,
                    Err(error) if session_ended(&error) => lease.watch = NodeWatch::Deleted,
                    Err(error) => {
                        outcomes.push(Err(Failure::Zk(error).into_error("check the session")));
                        continue;
                    }
                }
            }
            lease.watch.poll_event();
            outcomes.push(Ok(!matches!(lease.watch, NodeWatch::Deleted)));
        }
        outcomes
    }
}

impl DistributedLock for ZooKeeperBackend {
    type Lease = ZooKeeperLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn profile(&self) -> lock_core::BackendProfile {
        lock_core::BackendProfile::new(
            "the lock node's creation zxid (czxid)",
            "a watch on the predecessor's node: one release wakes one waiter",
            "a leader change is a short in-doubt blip; the ensemble keeps the nodes; a session the \
             ensemble expires loses its locks",
        )
        .with_guarded_writes(
            "ZooKeeperFencedStore: setData at the version read (compare-and-set); set_data_if_held: \
             a multi of a check of the lock node and the write",
        )
        .with_elections(
            "Curator's LeaderLatch: ephemeral-sequential `_c_<uuid>-latch-<seq>` nodes under \
             `<root>/%election/<name>`, the lowest leads; watches wake followers",
        )
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Session
    }

    /// A hold is believed for at most the negotiated session timeout after its last confirmed
    /// check (the core takes the clock-drift margin off that): the servers expire a session one
    /// timeout, by their clock, after they last heard from it — at the earliest when they
    /// received that check — and may then grant the lock to another.
    fn lease_margin(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.session_timeout())
    }

    /// Not connected (`Disconnected`: the servers may be electing a leader, or this client may be
    /// cut off; or the session is over and not replaced yet): its holds are in doubt until the
    /// session is back, or lost when its timeout passes.
    fn session_suspended(&self) -> bool {
        self.inner.session.is_suspended()
    }

    /// Raised for good once the hold's session has ended and the client has connected a new
    /// one ([`session_suspended`](Self::session_suspended) then speaks of the new session): the
    /// hold stays in doubt until its own check finds it lost.
    fn doubt_signal(&self, lease: &ZooKeeperLease) -> Option<lock_core::DoubtSignal> {
        Some(self.inner.session.doubt_of(lease.session))
    }

    fn try_acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<ZooKeeperLease>> {
        check_lease(ttl)?;
        refuse_async_context()?;
        Ok(self.acquire(name, owner, Wait::No)?.map(|(lease, _)| lease))
    }

    fn extend(&self, lease: &mut ZooKeeperLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        refuse_async_context()?;
        self.check_holds(&mut [lease]).pop().unwrap_or(Ok(false))
    }

    fn extend_many(&self, batch: &mut [Extension<'_, ZooKeeperLease>]) -> Vec<Result<bool>> {
        if let Err(error) = batch.iter().try_for_each(|item| check_lease(item.ttl)) {
            return batch.iter().map(|_| Err(Error::invalid_config(error.to_string()))).collect();
        }
        if in_async_context() {
            return batch.iter().map(|_| Err(async_context_error())).collect();
        }
        let mut leases: Vec<&mut ZooKeeperLease> = batch.iter_mut().map(|item| &mut *item.lease).collect();
        self.check_holds(&mut leases)
    }

    fn release(&self, lease: ZooKeeperLease) -> Result<bool> {
        self.forget_write(&lease.name, &lease.node);
        let session = &self.inner.session;
        // The session that owned the node has ended, and the node with it.
        let Some(client) = session.client_of(lease.session) else { return Ok(false) };
        if let Err(error) = refuse_async_context() {
            // Not waited for here, but sent: the node goes as soon as the servers can delete it
            // (or with the session), not a whole session later.
            self.abandon(&client, lease.node);
            return Err(error);
        }
        match session.call(session.settings().io_timeout, client.delete(&lease.node, None)) {
            Ok(()) => Ok(true),
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(false),
            Err(failure) if failure.session_ended() => Ok(false),
            Err(failure) => {
                // The reply is lost: the node may still be there. Delete it in the background
                // until the server answers (or the session ends, which deletes it too).
                self.abandon(&client, lease.node);
                Err(failure.into_error("release"))
            }
        }
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = ZooKeeperLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = ZooKeeperLease>> {
        Some(self)
    }

    fn read_write(&self) -> Option<&dyn ReadWrite<Lease = ZooKeeperLease>> {
        Some(self)
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = ZooKeeperLease>> {
        Some(self)
    }

    fn elections(&self) -> Option<&dyn Elections<Lease = ZooKeeperLease>> {
        Some(self)
    }
}

impl NativeWait for ZooKeeperBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<ZooKeeperLease>>> {
        check_lease(ttl)?;
        refuse_async_context()?;
        let acquired = self.acquire(name, owner, Wait::Until(deadline))?;
        Ok(acquired.map(|(lease, (sent_at, waited))| Acquired::new(lease, sent_at).contended_if(waited)))
    }
}

impl Fencing for ZooKeeperBackend {
    fn fencing_token(&self, lease: &ZooKeeperLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("connect_string", &self.inner.session.settings().shown_hosts())
            .field("root", &self.inner.session.settings().shown_root(self.inner.root.as_str()))
            .finish_non_exhaustive()
    }
}
