//! The lock recipe of Curator's `InterProcessMutex`, on one session (its queue of nodes — the
//! [`Queue`] — also serves the read-write lock, with its own turn rule, the semaphore's `locks`
//! mutex, and elections, whose `LeaderLatch` is the same queue under another node name):
//!
//! 1. Create an ephemeral-sequential node `<lock path>/_c_<uuid>-lock-`, and list the lock path's
//!    children in the same round trip (a session's requests are answered in order, so the listing
//!    already shows the new node). Missing parents are created as container nodes, which the
//!    server removes once empty.
//! 2. The lowest sequence holds the lock. Any other node watches only its predecessor — a release
//!    wakes exactly one waiter, never the herd — and looks again when the watch fires.
//! 3. If the create's reply is lost with the connection, the node is found again by its `uuid`
//!    (Curator's protected mode) instead of creating a second one. A failed or abandoned
//!    acquisition deletes its node: at once when the server answers, else in the background
//!    until it does or the session ends (which deletes it too).
//!
//! The fencing token is the node's creation zxid: strictly increasing across holders, session
//! expiries, client restarts and leader changes, unlike the sequence number, which restarts when
//! a container parent is removed and created again.

use std::cmp::Ordering as NodeOrder;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::future::join;
use lock_core::{LockName, OwnerToken, Result};
use zookeeper_client as zk;

use crate::error::{is_definite, Failure};
use crate::lease::{zxid_token, NodeWatch, ZooKeeperLease};
use crate::path::{self, is_protected_by, latch_order, lock_order, NodeKind};
use crate::session::is_terminal;
use crate::ZooKeeperBackend;

/// A waiter looks at the lock again on its own this often, so that a lost watch (none is known
/// in ZooKeeper, but a wait must never depend on one message) delays it but never strands it.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// How long a request without an answer waits before it is sent again (a wait, a clean-up).
const RETRY: Duration = Duration::from_millis(200);

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all: `try_lock`.
    No,
    /// Until the deadline, or forever.
    Until(Option<Instant>),
}

impl Wait {
    /// The deadline, if any (`No` has none: it never waits).
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::No => None,
            Wait::Until(deadline) => deadline,
        }
    }

    /// Whether waiting is over: never begun (`No`), or past the deadline.
    pub(crate) fn is_over(self) -> bool {
        match self {
            Wait::No => true,
            Wait::Until(deadline) => deadline.is_some_and(|deadline| Instant::now() >= deadline),
        }
    }
}

impl From<lock_core::Deadline> for Wait {
    fn from(deadline: lock_core::Deadline) -> Self {
        match deadline {
            lock_core::Deadline::Now => Wait::No,
            lock_core::Deadline::At(at) => Wait::Until(Some(at)),
            lock_core::Deadline::Never => Wait::Until(None),
        }
    }
}

/// A queue of ephemeral-sequential nodes under one parent, in the way of one of Curator's
/// recipes: what our node is called, how the nodes sort, and when ours has its turn.
pub(crate) struct Queue<'a> {
    /// The parent of the nodes (Curator's recipe path).
    pub(crate) path: &'a str,
    /// Our node's kind.
    pub(crate) kind: NodeKind,
    /// The order of the nodes.
    pub(crate) order: fn(&str, &str) -> NodeOrder,
    /// Given the sorted children and our node's index among them: `None` when ours holds, else
    /// the index of the node to watch.
    pub(crate) turn: fn(&[String], usize) -> Option<usize>,
}

impl<'a> Queue<'a> {
    /// Curator's `InterProcessMutex` at `path`: the lowest sequence holds, each waiter watches
    /// its predecessor.
    pub(crate) fn mutex(path: &'a str) -> Self {
        Self { path, kind: NodeKind::Lock, order: lock_order, turn: first_holds }
    }

    /// Curator's `LeaderLatch` at `path`: the mutex's queue under the name `latch-` — the lowest
    /// sequence leads, each candidate watches its predecessor.
    pub(crate) fn latch(path: &'a str) -> Self {
        Self { path, kind: NodeKind::Latch, order: latch_order, turn: first_holds }
    }
}

/// The turn rule of a mutex (and of a read-write lock's writer): the first node holds, every
/// other watches the one just before it.
pub(crate) fn first_holds(_children: &[String], ours: usize) -> Option<usize> {
    ours.checked_sub(1)
}

/// Our node, once created: its name among the parent's children, and its creation zxid.
pub(crate) struct Created {
    pub(crate) child: String,
    pub(crate) czxid: i64,
}

/// The parent's children as one request saw them, and the parent's `pzxid` then: the zxid of
/// the last creation or deletion of a child, at least that of every child listed and of every
/// child deleted before.
pub(crate) struct Listing {
    pub(crate) children: Vec<String>,
    pub(crate) pzxid: i64,
    /// When the request was sent.
    pub(crate) at: Instant,
    /// Whether it was taken after waiting for a node before ours to go (a contended
    /// acquisition).
    pub(crate) after_wait: bool,
}

impl Listing {
    fn new((children, stat): (Vec<String>, zk::Stat), at: Instant) -> Self {
        Self { children, pzxid: stat.pzxid, at, after_wait: false }
    }
}

/// A node that has its turn: its full path, its creation zxid and the listing that showed it.
pub(crate) struct Turn {
    pub(crate) node: String,
    pub(crate) czxid: i64,
    pub(crate) listing: Listing,
}

impl ZooKeeperBackend {
    /// One acquisition: the lease, when the request that confirmed it was sent and whether it
    /// waited for others first; `None` if the lock stayed held by others for the whole wait.
    pub(crate) fn acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        wait: Wait,
    ) -> Result<Option<(ZooKeeperLease, (Instant, bool))>> {
        let client = self.inner.session.client()?;
        let lock_path = self.inner.root.lock_path(name);
        let turn = self.take_turn(&client, &Queue::mutex(&lock_path), owner.to_hex().as_bytes(), wait)?;
        Ok(turn.map(|turn| {
            let confirmed_at = (turn.listing.at, turn.listing.after_wait);
            (self.lease(name, &client, turn.node, turn.czxid), confirmed_at)
        }))
    }

    /// The lease on `node`, created by `client`'s session, with `fence` as its fencing token.
    pub(crate) fn lease(
        &self,
        name: &LockName,
        client: &zk::Client,
        node: String,
        fence: i64,
    ) -> ZooKeeperLease {
        ZooKeeperLease {
            name: name.clone(),
            node,
            session: client.session_id().0,
            fence: zxid_token(fence),
            watch: NodeWatch::Unset,
        }
    }

    /// Our node in `queue`, holding `data` (the owner token in hex for locks, as Curator's lock
    /// recipes hold their client's address; the candidate's value for elections), once it has
    /// its turn; `None` (and our node deleted) if the wait ended first.
    pub(crate) fn take_turn(
        &self,
        client: &zk::Client,
        queue: &Queue<'_>,
        data: &[u8],
        wait: Wait,
    ) -> Result<Option<Turn>> {
        let protection = uuid::Uuid::new_v4().to_string();
        let bound = Instant::now() + self.inner.session.settings().io_timeout;
        let created = self.create_node(client, (queue.path, queue.kind), &protection, data, bound);
        let (created, listing) = match created {
            Ok(created) => created,
            Err(failure) => {
                if !failure.session_ended() {
                    self.abandon_protected(client, queue.path.to_owned(), protection);
                }
                return Err(failure.into_error("acquire"));
            }
        };
        let node = format!("{}/{}", queue.path, created.child);
        match self.wait_for_turn(client, queue, &created.child, listing, wait) {
            Ok(Some(listing)) => Ok(Some(Turn { node, czxid: created.czxid, listing })),
            Ok(None) => {
                self.abandon(client, node);
                Ok(None)
            }
            Err(failure) => {
                if !failure.session_ended() {
                    self.abandon(client, node);
                }
                Err(failure.into_error("acquire"))
            }
        }
    }

    /// Step 1: our node (`<parent>/_c_<protection>-<kind>…`, holding `data`) and the parent's
    /// children, by `deadline` (one request timeout from now, or less).
    pub(crate) fn create_node(
        &self,
        client: &zk::Client,
        (parent, kind): (&str, NodeKind),
        protection: &str,
        data: &[u8],
        deadline: Instant,
    ) -> Result<(Created, Listing), Failure> {
        let session = &self.inner.session;
        let prefix = path::node_prefix(parent, protection, kind);
        let node_options = zk::CreateMode::EphemeralSequential.with_acls(self.inner.acls);
        loop {
            let sent_at = Instant::now();
            let created = session.call_until(deadline, async {
                // Both requests leave now, in this order: one round trip.
                let create = client.create(&prefix, data, &node_options);
                let list = client.get_children(parent);
                let (created, listed) = join(create, list).await;
                Ok::<_, zk::Error>((created, listed))
            })?;
            match created {
                (Ok((stat, sequence)), listed) => {
                    let child = format!("{}{sequence}", &prefix[parent.len() + 1..]);
                    let listing = match listed {
                        Ok(listed) => Listing::new(listed, sent_at),
                        Err(_) => {
                            let sent_at = Instant::now();
                            Listing::new(session.call_until(deadline, client.get_children(parent))?, sent_at)
                        }
                    };
                    return Ok((Created { child, czxid: stat.czxid }, listing));
                }
                (Err(zk::Error::NoNode), _) => {
                    let container = zk::CreateMode::Container.with_acls(self.inner.acls);
                    session.call_until(deadline, client.mkdir(parent, &container))?;
                }
                (Err(error), _) if is_definite(&error) => return Err(Failure::Zk(error)),
                // No answer: the create may have happened. Look for our node before creating
                // another (Curator's protected mode).
                (Err(_), _) => {
                    if let Some(found) = self.find_protected(client, parent, protection, deadline)? {
                        let sent_at = Instant::now();
                        let listed = session.call_until(deadline, client.get_children(parent))?;
                        return Ok((found, Listing::new(listed, sent_at)));
                    }
                }
            }
        }
    }

    /// Curator's protected mode: our node, found by its `uuid` after a create whose reply was
    /// lost. The `sync` first brings the server this session now talks to up to date with the
    /// leader, where the create (if it happened) was decided. Should a retried create have made a
    /// second node, the lowest is kept and the other deleted.
    fn find_protected(
        &self,
        client: &zk::Client,
        parent: &str,
        protection: &str,
        deadline: Instant,
    ) -> Result<Option<Created>, Failure> {
        let session = &self.inner.session;
        let listed = session.call_until(deadline, async {
            client.sync(parent).await?;
            client.list_children(parent).await
        });
        let mut ours: Vec<String> = match listed {
            Ok(children) => children.into_iter().filter(|child| is_protected_by(child, protection)).collect(),
            Err(Failure::Zk(zk::Error::NoNode)) => return Ok(None),
            Err(failure) => return Err(failure),
        };
        // One protection, one kind of node: the names differ only in the zero-padded sequence.
        ours.sort_unstable();
        let mut ours = ours.into_iter();
        let Some(child) = ours.next() else { return Ok(None) };
        for extra in ours {
            self.abandon(client, format!("{parent}/{extra}"));
        }
        match session.call_until(deadline, client.check_stat(&format!("{parent}/{child}")))? {
            Some(stat) => Ok(Some(Created { child, czxid: stat.czxid })),
            None => Ok(None),
        }
    }

    /// Step 2: waits until our node has its turn; returns the listing that showed it, or `None`
    /// when the wait ended first. Every request is bounded by the request timeout and by the
    /// deadline plus one request timeout; a request without an answer (a leader election, a
    /// reconnection) is tried again while the session lives, keeping our place in the queue.
    fn wait_for_turn(
        &self,
        client: &zk::Client,
        queue: &Queue<'_>,
        ours: &str,
        mut listing: Listing,
        wait: Wait,
    ) -> Result<Option<Listing>, Failure> {
        let session = &self.inner.session;
        let io_timeout = session.settings().io_timeout;
        let deadline = wait.deadline();
        // Past the deadline, one more request timeout at most.
        let bound = |now: Instant| deadline.map_or(now, |d| now.min(d)) + io_timeout;
        loop {
            listing.children.sort_unstable_by(|a, b| (queue.order)(a, b));
            let Some(position) = listing.children.iter().position(|child| child == ours) else {
                // No path in the text: it carries the lock name, which spans may have to redact.
                return Err(Failure::Zk(zk::Error::UnexpectedError(
                    "the waiter's lock node vanished while waiting (deleted, or its session ended)".into(),
                )));
            };
            let Some(watched) = (queue.turn)(&listing.children, position) else {
                return Ok(Some(listing));
            };
            if wait.is_over() {
                return Ok(None);
            }
            let watched = format!("{}/{}", queue.path, listing.children[watched]);
            match session.call_until(bound(Instant::now()), client.get_and_watch_data(&watched)) {
                Ok((_, _, watcher)) => {
                    let now = Instant::now();
                    let until = deadline.map_or(now + RECHECK, |deadline| deadline.min(now + RECHECK));
                    if let Some(event) = session.wait_until(until, watcher.changed()) {
                        self.inner.wake_ups.fetch_add(1, Ordering::Relaxed);
                        if is_terminal(event.session_state) {
                            return Err(Failure::Zk(zk::Error::SessionExpired));
                        }
                    }
                }
                // Gone between the listing and the watch: look again.
                Err(Failure::Zk(zk::Error::NoNode)) => {}
                Err(failure) => self.pause_unless_final(failure, deadline)?,
            }
            loop {
                let sent_at = Instant::now();
                match session.call_until(bound(sent_at), client.get_children(queue.path)) {
                    Ok(listed) => {
                        break listing = Listing { after_wait: true, ..Listing::new(listed, sent_at) }
                    }
                    Err(failure) => self.pause_unless_final(failure, deadline)?,
                }
                if wait.is_over() {
                    return Ok(None);
                }
            }
        }
    }

    /// A failed request in a wait: the failure if it is final (a definite answer, or the
    /// session's end), else a short pause before the wait goes on.
    pub(crate) fn pause_unless_final(
        &self,
        failure: Failure,
        deadline: Option<Instant>,
    ) -> Result<(), Failure> {
        if failure.is_definite() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(failure);
        }
        let pause =
            deadline.map_or(RETRY, |deadline| deadline.saturating_duration_since(Instant::now()).min(RETRY));
        std::thread::sleep(pause);
        Ok(())
    }

    /// Deletes `node`, whose acquisition failed or was given up, or whose release got no answer:
    /// the request leaves now, ahead of any later request of this session, and is sent again in
    /// the background until the server answers — or the session ends, which deletes the node too.
    pub(crate) fn abandon(&self, client: &zk::Client, node: String) {
        let first = client.delete(&node, None);
        let client = client.clone();
        self.inner.session.spawn(async move {
            let mut outcome = first.await;
            while outcome.as_ref().is_err_and(|error| !is_definite(error)) {
                tokio::time::sleep(RETRY).await;
                outcome = client.delete(&node, None).await;
            }
        });
    }

    /// Deletes, in the background, whatever node a create without an answer may have made, found
    /// by its `uuid` once the server answers (after a `sync`, so a create decided by the leader is
    /// seen).
    pub(crate) fn abandon_protected(&self, client: &zk::Client, lock_path: String, protection: String) {
        let client = client.clone();
        self.inner.session.spawn(async move {
            let listed = loop {
                let listed = async {
                    client.sync(&lock_path).await?;
                    client.list_children(&lock_path).await
                };
                match listed.await {
                    Ok(children) => break children,
                    // No lock path, or the session is over: no node of ours is left.
                    Err(error) if is_definite(&error) => return,
                    Err(_) => tokio::time::sleep(RETRY).await,
                }
            };
            for child in listed.iter().filter(|child| is_protected_by(child, &protection)) {
                let node = format!("{lock_path}/{child}");
                let mut outcome = client.delete(&node, None).await;
                while outcome.as_ref().is_err_and(|error| !is_definite(error)) {
                    tokio::time::sleep(RETRY).await;
                    outcome = client.delete(&node, None).await;
                }
            }
        });
    }

    /// The lock nodes under `name`, in lock order: the holder first, then the waiters.
    ///
    /// # Errors
    /// As any request.
    pub fn contenders(&self, name: &LockName) -> Result<Vec<String>> {
        let session = &self.inner.session;
        let client = session.client()?;
        let lock_path = self.inner.root.lock_path(name);
        match session.call(session.settings().io_timeout, client.list_children(&lock_path)) {
            Ok(mut children) => {
                children.sort_unstable_by(|a, b| lock_order(a, b));
                Ok(children)
            }
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(Vec::new()),
            Err(failure) => Err(failure.into_error("list the contenders")),
        }
    }

    /// The holder's node and its creation zxid — the holder's fencing token — if `name` is held.
    /// (A holder that releases between the listing and the read is looked up again.)
    ///
    /// # Errors
    /// As any request.
    pub fn holder(&self, name: &LockName) -> Result<Option<(String, u64)>> {
        let session = &self.inner.session;
        let client = session.client()?;
        // One request timeout for the call, however often holders vanish under it.
        let deadline = Instant::now() + session.settings().io_timeout;
        loop {
            if Instant::now() >= deadline {
                return Err(lock_core::Error::Timeout {
                    backend: crate::error::BACKEND,
                    operation: "read the holder",
                    source: None,
                });
            }
            let Some(holder) = self.contenders(name)?.into_iter().next() else { return Ok(None) };
            let node = format!("{}/{holder}", self.inner.root.lock_path(name));
            match session.call_until(deadline, client.check_stat(&node)) {
                Ok(Some(stat)) => return Ok(Some((holder, u64::try_from(stat.czxid).unwrap_or_default()))),
                Ok(None) => continue,
                Err(failure) => return Err(failure.into_error("read the holder")),
            }
        }
    }

    /// Takes `name` away from its holder, as an administrator would: deletes the holder's node
    /// (its guard learns at its next liveness check). For tests and emergencies.
    ///
    /// # Errors
    /// As any request.
    pub fn break_lock(&self, name: &LockName) -> Result<()> {
        let Some(holder) = self.contenders(name)?.into_iter().next() else { return Ok(()) };
        let session = &self.inner.session;
        let client = session.client()?;
        let node = format!("{}/{holder}", self.inner.root.lock_path(name));
        match session.call(session.settings().io_timeout, client.delete(&node, None)) {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) => Ok(()),
            Err(failure) => Err(failure.into_error("break the lock")),
        }
    }
}
