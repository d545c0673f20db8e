//! Leader election in the layout of Apache Curator's `LeaderLatch`, node for node, so that
//! Curator latches and distlock candidates of one path elect one leader between them.
//!
//! The election `N` lives at `<root>/%election/N` (see [`crate::path`]): a Java service points
//! `new LeaderLatch(client, "<root>/%election/N", id)` at it. Under it:
//!
//! - every candidate has an ephemeral-sequential node `_c_<uuid>-latch-<sequence>` (Curator's
//!   protected name with its `LOCK_NAME`), holding the candidate's value — where a `LeaderLatch`
//!   keeps its participant id (UTF-8), so Java's `getLeader().getId()` shows the value a distlock
//!   leader campaigned with, and distlock's [`leader`](lock_core::Elections::leader) shows a Java
//!   leader's id;
//! - the candidate whose node has the lowest sequence leads (Curator sorts by what follows
//!   `latch-`); every other watches only the node just before its own, as the mutex's waiters do
//!   — it is the mutex's queue ([`Queue::latch`]), so a leadership is an ordinary
//!   [`ZooKeeperLease`], checked and released like a lock's;
//! - the fencing token is the leader node's creation zxid, as the mutex's: a later leader's node
//!   was created after every earlier leader's.
//!
//! # Proclaim: the election node's data, never the leader's node
//! A candidate's node is never written after its creation: a `LeaderLatch` waiting behind the
//! leader watches the leader's node with `getData` and acts only on `NodeDeleted` — a data change
//! would spend its one-shot watch without setting another, and it would never see the leader go
//! (measured: LE05's Curator latch stayed a follower of a resigned distlock leader). So
//! [`proclaim`](lock_core::Elections::proclaim) writes the election node (`<root>/%election/N`,
//! whose data no Curator recipe reads or watches) in one transaction with a check that the
//! leader's own node still exists: the node is ephemeral and the lowest one stays lowest until
//! it is deleted, so "our node exists" is "we lead", and a deposed leader writes nothing. The
//! record names the node it was proclaimed by (`distlock-leader:<czxid>:<node>`, a newline, the
//! value), so a record left by an earlier leader is ignored: a new leader's value is its node's
//! until it proclaims. A Java follower sees a distlock leader's campaign value, not its proclaims.
//!
//! # Watching
//! A follower watches the election node's data (proclaims) and the leader's node (its deletion
//! makes the next candidate leader, or nobody), or, with no candidate, the election's children
//! (a first candidate) — or, with no election node either, its creation. Joining and leaving
//! candidates behind the leader wake nobody.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use futures::future::{join, select, Either};
use lock_core::{check_lease, Acquired, Elections, Error, Leader, LeaderWatch, LockName, Request, Result};
use zookeeper_client as zk;

use crate::blocking::refuse_async_context;
use crate::error::{Failure, BACKEND};
use crate::lease::{zxid_token, ZooKeeperLease};
use crate::path::latch_order;
use crate::recipe::Queue;
use crate::session::is_terminal;
use crate::ZooKeeperBackend;

/// The largest value a candidate may publish: ZooKeeper refuses a request past its
/// `jute.maxbuffer` (1 MiB by default) by closing the connection, which would cost the session
/// its other requests; this leaves room for the path, the record's header and the framing.
const MAX_VALUE_LEN: usize = 1_000_000;

/// The start of a proclaimed record in the election node's data.
const RECORD_PREFIX: &[u8] = b"distlock-leader:";

/// A pending watch event.
type Notice = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

impl Elections for ZooKeeperBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<ZooKeeperLease>>> {
        check_lease(request.ttl)?;
        check_value(value)?;
        refuse_async_context()?;
        let client = self.inner.session.client()?;
        let path = self.inner.root.election_path(request.name);
        let Some(turn) = self.take_turn(&client, &Queue::latch(&path), value, request.deadline.into())?
        else {
            return Ok(None);
        };
        let (sent_at, waited) = (turn.listing.at, turn.listing.after_wait);
        let lease = self.lease(request.name, &client, turn.node, turn.czxid);
        Ok(Some(Acquired::new(lease, sent_at).contended_if(waited)))
    }

    fn proclaim(&self, lease: &mut ZooKeeperLease, value: &[u8]) -> Result<()> {
        check_value(value)?;
        refuse_async_context()?;
        let not_held = || Error::NotHeld { name: lease.name.clone() };
        let session = &self.inner.session;
        // The session that owned the node has ended, and the node with it.
        let Some(client) = session.client_of(lease.session).filter(|client| !is_terminal(client.state()))
        else {
            return Err(not_held());
        };
        let Some((election, child)) = lease.node.rsplit_once('/') else { return Err(not_held()) };
        let record = encode_record(lease.fence.get(), child, value);
        let failed = |error: zk::Error| Failure::Zk(error).into_error("proclaim");
        let mut transaction = client.new_check_writer(&lease.node, None).map_err(failed)?;
        transaction.add_set_data(election, &record, None).map_err(failed)?;
        let outcome = session
            .call(session.settings().io_timeout, async { Ok::<_, zk::Error>(transaction.commit().await) })
            .map_err(|failure| match failure.session_ended() {
                true => not_held(),
                false => failure.into_error("proclaim"),
            })?;
        match outcome {
            Ok(_) => Ok(()),
            // Our node is gone (or, with it, the election node): nothing was written.
            Err(zk::CheckWriteError::CheckFailed { .. })
            | Err(zk::CheckWriteError::OperationFailed { source: zk::Error::NoNode, .. }) => Err(not_held()),
            Err(zk::CheckWriteError::RequestFailed { source }) if crate::error::session_ended(&source) => {
                Err(not_held())
            }
            Err(
                zk::CheckWriteError::OperationFailed { source, .. }
                | zk::CheckWriteError::RequestFailed { source },
            ) => Err(failed(source)),
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        refuse_async_context()?;
        let session = &self.inner.session;
        let client = session.client()?;
        let path = self.inner.root.election_path(name);
        let deadline = Instant::now() + session.settings().io_timeout;
        let failed = |failure: Failure| failure.into_error("read the leader");
        loop {
            // One round trip: the proclaimed record and the candidates.
            let (record, children) = session
                .call_until(deadline, async {
                    let (record, children) = join(client.get_data(&path), client.list_children(&path)).await;
                    Ok::<_, zk::Error>((record, children))
                })
                .map_err(failed)?;
            let (record, children) = match (record, children) {
                (Ok((record, _)), Ok(children)) => (record, children),
                (Err(zk::Error::NoNode), _) | (_, Err(zk::Error::NoNode)) => return Ok(None),
                (Err(error), _) | (_, Err(error)) => return Err(failed(Failure::Zk(error))),
            };
            let Some(first) = children.into_iter().min_by(|a, b| latch_order(a, b)) else { return Ok(None) };
            if let Some((czxid, _, value)) = decode_record(&record).filter(|(_, by, _)| *by == first) {
                return Ok(Some(Leader::new(value, Some(zxid_token(czxid)))));
            }
            // Not proclaimed this term: the value the leader campaigned with.
            match session.call_until(deadline, client.get_data(&format!("{path}/{first}"))) {
                Ok((value, stat)) => return Ok(Some(Leader::new(value, Some(zxid_token(stat.czxid))))),
                // The leader left between the two reads: the next one leads now.
                Err(Failure::Zk(zk::Error::NoNode)) => {}
                Err(failure) => return Err(failed(failure)),
            }
        }
    }

    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        refuse_async_context()?;
        let path = self.inner.root.election_path(name);
        let notice = self.watch_election(&path)?;
        Ok(Box::new(ZooKeeperLeaderWatch { backend: self, path, notice: Some(notice) }))
    }
}

impl ZooKeeperBackend {
    /// The candidates' nodes of the election `name`, leader first, then the candidates in the
    /// order they will lead (Curator's `LeaderLatch.getParticipants()` order).
    ///
    /// # Errors
    /// As any request.
    pub fn candidates(&self, name: &LockName) -> Result<Vec<String>> {
        refuse_async_context()?;
        let session = &self.inner.session;
        let client = session.client()?;
        let path = self.inner.root.election_path(name);
        match session.call(session.settings().io_timeout, client.list_children(&path)) {
            Ok(mut children) => {
                children.sort_unstable_by(|a, b| latch_order(a, b));
                Ok(children)
            }
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(Vec::new()),
            Err(failure) => Err(failure.into_error("list the candidates")),
        }
    }

    /// A watch, set now, that fires at the election's next change: the election node's data
    /// (a proclaim) and the leader's node (its deletion) if there is a leader, else the
    /// election's children (a first candidate), else the election node's creation. Within one
    /// request timeout.
    fn watch_election(&self, path: &str) -> Result<Notice> {
        let session = &self.inner.session;
        let client = session.client()?;
        let deadline = Instant::now() + session.settings().io_timeout;
        let failed = |failure: Failure| failure.into_error("watch the leader");
        loop {
            let (record, children) = session
                .call_until(deadline, async {
                    let both =
                        join(client.get_and_watch_data(path), client.get_and_watch_children(path)).await;
                    Ok::<_, zk::Error>(both)
                })
                .map_err(failed)?;
            let (on_record, children, on_children) = match (record, children) {
                (Ok((_, _, on_record)), Ok((children, _, on_children))) => (on_record, children, on_children),
                (Err(zk::Error::NoNode), _) | (_, Err(zk::Error::NoNode)) => {
                    match session.call_until(deadline, client.check_and_watch_stat(path)) {
                        Ok((None, on_creation)) => return Ok(Box::pin(on_creation.changed())),
                        // Created in between: look again.
                        Ok((Some(_), _)) => continue,
                        Err(failure) => return Err(failed(failure)),
                    }
                }
                (Err(error), _) | (_, Err(error)) => return Err(failed(Failure::Zk(error))),
            };
            let Some(first) = children.into_iter().min_by(|a, b| latch_order(a, b)) else {
                return Ok(either(on_record, on_children));
            };
            // Behind a leader, only its node's deletion changes who leads: later candidates
            // coming and going are no news.
            drop(on_children);
            match session.call_until(deadline, client.check_and_watch_stat(&format!("{path}/{first}"))) {
                Ok((Some(_), on_leader)) => return Ok(either(on_record, on_leader)),
                // The leader left in between: look again.
                Ok((None, _)) => {}
                Err(failure) => return Err(failed(failure)),
            }
        }
    }
}

/// The first event of two watches.
fn either(a: zk::OneshotWatcher, b: zk::OneshotWatcher) -> Notice {
    Box::pin(async move {
        match select(Box::pin(a.changed()), Box::pin(b.changed())).await {
            Either::Left((event, _)) | Either::Right((event, _)) => event,
        }
    })
}

/// A follower's watch on one election: one ZooKeeper watch at a time, set again as soon as it
/// fires, so that the caller's next read of the leader comes after the next watch is set.
struct ZooKeeperLeaderWatch<'a> {
    backend: &'a ZooKeeperBackend,
    path: String,
    /// `None` when setting it again after an event failed: the next wait sets it.
    notice: Option<Notice>,
}

impl LeaderWatch for ZooKeeperLeaderWatch<'_> {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        refuse_async_context()?;
        let Some(notice) = self.notice.as_mut() else {
            // Changes before this watch was set are for the caller's next read to see.
            self.notice = Some(self.backend.watch_election(&self.path)?);
            return Ok(true);
        };
        let Some(event) = self.backend.inner.session.wait_until(until, notice) else { return Ok(false) };
        // Also after the session's end (the event a watch gets then): a new session is watched.
        self.notice = match self.backend.watch_election(&self.path) {
            Ok(notice) => Some(notice),
            Err(error) => {
                tracing::debug!(%error, ?event, "setting the leader watch again failed; the next wait tries");
                None
            }
        };
        Ok(true)
    }
}

/// The election node's data for `value` proclaimed by the leader `child` whose node was created
/// at `czxid`: `distlock-leader:<czxid>:<child>`, a newline, the value.
fn encode_record(czxid: u64, child: &str, value: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD_PREFIX.len() + 32 + child.len() + value.len());
    record.extend_from_slice(RECORD_PREFIX);
    record.extend_from_slice(format!("{czxid}:{child}\n").as_bytes());
    record.extend_from_slice(value);
    record
}

/// The creation zxid, node and value of a proclaimed record; `None` for anything else (no
/// record yet, or data some other client left on the election node).
fn decode_record(record: &[u8]) -> Option<(i64, &str, &[u8])> {
    let rest = record.strip_prefix(RECORD_PREFIX)?;
    let newline = rest.iter().position(|&byte| byte == b'\n')?;
    let (header, value) = (std::str::from_utf8(&rest[..newline]).ok()?, &rest[newline + 1..]);
    let (czxid, child) = header.split_once(':')?;
    Some((czxid.parse().ok()?, child, value))
}

/// A value the servers accept.
fn check_value(value: &[u8]) -> Result<()> {
    match value.len() {
        len if len > MAX_VALUE_LEN => Err(Error::invalid_config(format!(
            "a {BACKEND} election value of {len} bytes: at most {MAX_VALUE_LEN} fit in one request"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_their_leader_and_keep_any_value() {
        for value in [&b""[..], b"host-1:7000", b"two\nlines", &[0xff, 0x00, b'\n']] {
            let record = encode_record(42, "_c_u-latch-0000000007", value);
            assert_eq!(decode_record(&record), Some((42, "_c_u-latch-0000000007", value)));
        }
        for foreign in
            [&b""[..], b"curator", b"distlock-leader:", b"distlock-leader:x:y\nv", b"distlock-leader:1\nv"]
        {
            assert_eq!(decode_record(foreign), None, "{foreign:?}");
        }
        assert!(check_value(&vec![0; MAX_VALUE_LEN]).is_ok());
        assert!(matches!(check_value(&vec![0; MAX_VALUE_LEN + 1]), Err(Error::InvalidConfig { .. })));
    }
}
