//! The lock recipe of Curator's `InterProcessMutex`, on one session:
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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join;
use lock_core::{FencingToken, LockName, OwnerToken, Result};
use zookeeper_client as zk;

use crate::error::Failure;
use crate::lease::{NodeWatch, ZooKeeperLease};
use crate::path::{self, is_protected_by, lock_order};
use crate::ZooKeeperBackend;

/// A waiter looks at the lock again on its own this often, so that a lost watch (none is known
/// in ZooKeeper, but a wait must never depend on one message) delays it but never strands it.
const RECHECK: Duration = Duration::from_secs(5);

/// How long the background clean-up waits before retrying a request lost with the connection.
const CLEANUP_RETRY: Duration = Duration::from_millis(200);

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all: `try_lock`.
    No,
    /// Until the deadline, or forever.
    Until(Option<Instant>),
}

/// Our node, once created: its name among the lock path's children, and its creation zxid.
struct Created {
    child: String,
    czxid: i64,
}

impl ZooKeeperBackend {
    /// One acquisition: the lease and when the request that confirmed it was sent, or `None` if
    /// the lock stayed held by others for the whole wait.
    pub(crate) fn acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        wait: Wait,
    ) -> Result<Option<(ZooKeeperLease, Instant)>> {
        let session = &self.inner.session;
        let client = session.client()?;
        let lock_path = self.inner.root.lock_path(name);
        let protection = uuid::Uuid::new_v4().to_string();
        let sent_at = Instant::now();
        let created = match self.create_node(&client, &lock_path, &protection, owner) {
            Ok(created) => created,
            Err(failure) => {
                if !failure.session_ended() {
                    self.abandon_protected(&client, lock_path, protection);
                }
                return Err(failure.into_error("acquire"));
            }
        };
        let (created, children) = created;
        let node = format!("{lock_path}/{}", created.child);
        let outcome = self.wait_for_turn(&client, &lock_path, &created.child, children, sent_at, wait);
        match outcome {
            Ok(Some(confirmed_at)) => {
                let lease = ZooKeeperLease {
                    name: name.clone(),
                    node,
                    session: client.session_id().0,
                    fence: FencingToken::new(u64::try_from(created.czxid).unwrap_or_default()),
                    watch: Arc::default(),
                };
                Ok(Some((lease, confirmed_at)))
            }
            Ok(None) => {
                self.abandon(&client, node);
                Ok(None)
            }
            Err(failure) => {
                if !failure.session_ended() {
                    self.abandon(&client, node);
                }
                Err(failure.into_error("acquire"))
            }
        }
    }

    /// Step 1: our node and the lock path's children, within one request timeout.
    fn create_node(
        &self,
        client: &zk::Client,
        lock_path: &str,
        protection: &str,
        owner: &OwnerToken,
    ) -> Result<(Created, Vec<String>), Failure> {
        let session = &self.inner.session;
        let deadline = Instant::now() + session.settings().request_timeout;
        let prefix = path::node_prefix(lock_path, protection);
        let data = owner.to_hex();
        let node_options = zk::CreateMode::EphemeralSequential.with_acls(self.inner.acls);
        loop {
            let created = session.call_until(deadline, async {
                // Both requests leave now, in this order: one round trip.
                let create = client.create(&prefix, data.as_bytes(), &node_options);
                let list = client.list_children(lock_path);
                let (created, listed) = join(create, list).await;
                Ok::<_, zk::Error>((created, listed))
            })?;
            match created {
                (Ok((stat, sequence)), listed) => {
                    let child = format!("{}{sequence}", &prefix[lock_path.len() + 1..]);
                    let children = match listed {
                        Ok(children) => children,
                        Err(_) => session.call_until(deadline, client.list_children(lock_path))?,
                    };
                    return Ok((Created { child, czxid: stat.czxid }, children));
                }
                (Err(zk::Error::NoNode), _) => {
                    let parent = zk::CreateMode::Container.with_acls(self.inner.acls);
                    session.call_until(deadline, client.mkdir(lock_path, &parent))?;
                }
                // The create may have succeeded: look for our node before creating another.
                (Err(zk::Error::ConnectionLoss), _) => {
                    if let Some(found) = self.find_protected(client, lock_path, protection, deadline)? {
                        let children = session.call_until(deadline, client.list_children(lock_path))?;
                        return Ok((found, children));
                    }
                }
                (Err(error), _) => return Err(Failure::Zk(error)),
            }
        }
    }

    /// Curator's protected mode: our node, found by its `uuid` after a lost create reply.
    fn find_protected(
        &self,
        client: &zk::Client,
        lock_path: &str,
        protection: &str,
        deadline: Instant,
    ) -> Result<Option<Created>, Failure> {
        let session = &self.inner.session;
        let children = match session.call_until(deadline, client.list_children(lock_path)) {
            Ok(children) => children,
            Err(Failure::Zk(zk::Error::NoNode)) => return Ok(None),
            Err(failure) => return Err(failure),
        };
        let Some(child) = children.into_iter().find(|child| is_protected_by(child, protection)) else {
            return Ok(None);
        };
        match session.call_until(deadline, client.check_stat(&format!("{lock_path}/{child}")))? {
            Some(stat) => Ok(Some(Created { child, czxid: stat.czxid })),
            None => Ok(None),
        }
    }

    /// Step 2: waits until our node is the lowest; returns when the listing that showed it was
    /// requested, or `None` when the wait ended first.
    fn wait_for_turn(
        &self,
        client: &zk::Client,
        lock_path: &str,
        ours: &str,
        mut children: Vec<String>,
        mut listed_at: Instant,
        wait: Wait,
    ) -> Result<Option<Instant>, Failure> {
        let session = &self.inner.session;
        let request_timeout = session.settings().request_timeout;
        loop {
            children.sort_unstable_by(|a, b| lock_order(a, b));
            let Some(position) = children.iter().position(|child| child == ours) else {
                return Err(Failure::Zk(zk::Error::UnexpectedError(format!(
                    "the lock node {lock_path}/{ours} vanished while waiting"
                ))));
            };
            if position == 0 {
                return Ok(Some(listed_at));
            }
            let deadline = match wait {
                Wait::No => return Ok(None),
                Wait::Until(deadline) => deadline,
            };
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
            let predecessor = format!("{lock_path}/{}", children[position - 1]);
            let watched = session.call(request_timeout, client.get_and_watch_data(&predecessor));
            match watched {
                Ok((_, _, watcher)) => {
                    let now = Instant::now();
                    let until = deadline.map_or(now + RECHECK, |deadline| deadline.min(now + RECHECK));
                    if let Some(event) = session.wait_until(until, watcher.changed()) {
                        self.inner.wake_ups.fetch_add(1, Ordering::Relaxed);
                        if crate::session::is_terminal(event.session_state) {
                            return Err(Failure::Zk(zk::Error::SessionExpired));
                        }
                    }
                }
                // Gone between the listing and the watch: look again.
                Err(Failure::Zk(zk::Error::NoNode)) => {}
                Err(failure) => return Err(failure),
            }
            listed_at = Instant::now();
            children = session.call(request_timeout, client.list_children(lock_path))?;
        }
    }

    /// Waits in the background for the event of the watch just set on a held node: a deletion
    /// (by an administrator, S10, or this holder's release) is recorded for the next liveness
    /// check; any other node event spends the watch, and the next check sets it again. A session
    /// that ends ends the watch too: the liveness check sees the session.
    pub(crate) fn follow_watch(&self, watcher: zk::OneshotWatcher, watch: Arc<NodeWatch>) {
        watch.watched();
        self.inner.session.spawn(async move {
            let event = watcher.changed().await;
            match event.event_type {
                zk::EventType::NodeDeleted => watch.deleted(),
                zk::EventType::Session => {}
                _ => watch.spent(),
            }
        });
    }

    /// Deletes `node`, whose acquisition failed or was given up: the request leaves now, ahead of
    /// any later request of this session, and is retried in the background if its reply is lost.
    pub(crate) fn abandon(&self, client: &zk::Client, node: String) {
        let first = client.delete(&node, None);
        let client = client.clone();
        self.inner.session.spawn(async move {
            let mut outcome = first.await;
            while outcome == Err(zk::Error::ConnectionLoss) {
                tokio::time::sleep(CLEANUP_RETRY).await;
                outcome = client.delete(&node, None).await;
            }
            if let Err(error) = outcome.or_else(|error| if error == zk::Error::NoNode { Ok(()) } else { Err(error) }) {
                tracing::debug!(node, %error, "abandoned ZooKeeper lock node not deleted; its session will end it");
            }
        });
    }

    /// Deletes the node a failed create may have left, found by its `uuid`, in the background.
    fn abandon_protected(&self, client: &zk::Client, lock_path: String, protection: String) {
        let client = client.clone();
        self.inner.session.spawn(async move {
            loop {
                match client.list_children(&lock_path).await {
                    Ok(children) => {
                        for child in children.iter().filter(|child| is_protected_by(child, &protection)) {
                            let _ = client.delete(&format!("{lock_path}/{child}"), None).await;
                        }
                        return;
                    }
                    Err(zk::Error::ConnectionLoss) => tokio::time::sleep(CLEANUP_RETRY).await,
                    // No lock path, or the session is over: no node of ours is left.
                    Err(_) => return,
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
        match session.call(session.settings().request_timeout, client.list_children(&lock_path)) {
            Ok(mut children) => {
                children.sort_unstable_by(|a, b| lock_order(a, b));
                Ok(children)
            }
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(Vec::new()),
            Err(failure) => Err(failure.into_error("list the contenders")),
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
        match session.call(session.settings().request_timeout, client.delete(&node, None)) {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) => Ok(()),
            Err(failure) => Err(failure.into_error("break the lock")),
        }
    }
}
