//! Read-write locks in the layout of Apache Curator's `InterProcessReadWriteLock`, node for node,
//! so that Curator clients and distlock clients of one path exclude each other.
//!
//! The lock `N` lives at `<root>/%read-write/N` (see [`crate::path`]): a Java service points
//! `new InterProcessReadWriteLock(client, "<root>/%read-write/N")` at it. Under it:
//!
//! - every reader and writer has an ephemeral-sequential node, `_c_<uuid>-__READ__<sequence>` or
//!   `_c_<uuid>-__WRIT__<sequence>` (Curator's protected names), all sorted together by sequence;
//! - a **writer** holds when its node is the first child, and otherwise watches the node just
//!   before it (Curator's write mutex);
//! - a **reader** holds when no writer's node comes before its own, and otherwise watches the
//!   last writer before it. (Curator's reader watches the *first* writer before it; the rule for
//!   holding is the same, so both sides agree on who holds. Watching the last writer means a
//!   release wakes only the readers queued right behind that writer.)
//!
//! Writers are not starved: a reader that comes after a waiting writer's node waits behind it.
//! A `try_write` that fails deletes its node at once; readers that saw it are woken by that.
//!
//! # Downgrade: a writer's own read lock
//! Curator lets the thread that owns the write lock take the read lock, whatever comes before
//! it. distlock's core asks that read under the write lease's owner token, which this backend
//! recognises from the write leases it holds. The downgraded reader's node is not a sequential
//! one: it is created, in one transaction with a check that the write node still exists, as
//! `_c_<uuid>-__READ__<the writer's sequence>-downgrade`, which sorts right after the writer's
//! node and before every node created after it — for Curator's clients too, which sort by the
//! same key. So when the writer releases, the downgraded reader is still ahead of every waiting
//! writer, and keeps them out until it is released. (Curator's own downgrade creates an ordinary
//! sequential reader, which a writer already waiting would overtake.)
//!
//! # Fencing
//! A hold's token is the `pzxid` of the parent seen by the listing that showed the hold — the
//! zxid of the last creation or deletion of a child. Every earlier holder came before this
//! node in the queue and was deleted before that listing, so its deletion, and with it its token,
//! is below a writer's token. (The creation zxid, the mutex's token, would not do: a downgraded
//! reader is created after writers that are already waiting and gets a higher creation zxid than
//! theirs, though they hold after it.)

use std::time::Instant;

use lock_core::{check_lease, Access, Acquired, LockName, ReadWrite, Request, Result};
use zookeeper_client as zk;

use crate::blocking::refuse_async_context;
use crate::error::Failure;
use crate::lease::ZooKeeperLease;
use crate::path::{downgrade_child, is_writer, read_write_order, NodeKind};
use crate::recipe::{first_holds, Queue};
use crate::ZooKeeperBackend;

impl ReadWrite for ZooKeeperBackend {
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<ZooKeeperLease>>> {
        check_lease(request.ttl)?;
        refuse_async_context()?;
        let client = self.inner.session.client()?;
        let path = self.inner.root.read_write_path(request.name);
        if access == Access::Read {
            if let Some(writer) =
                self.inner.writers.find(request.name, request.owner, |node| Some(node.clone()))
            {
                if let Some(acquired) = self.downgrade(&client, request, &path, &writer)? {
                    return Ok(Some(acquired));
                }
                // The write node is gone (the write lease was lost): an ordinary reader.
            }
        }
        let queue = match access {
            Access::Read => {
                Queue { path: &path, kind: NodeKind::Read, order: read_write_order, turn: reader_turn }
            }
            Access::Write => {
                Queue { path: &path, kind: NodeKind::Write, order: read_write_order, turn: first_holds }
            }
        };
        let Some(turn) =
            self.take_turn(&client, &queue, request.owner.to_hex().as_bytes(), request.deadline.into())?
        else {
            return Ok(None);
        };
        let lease = self.lease(request.name, &client, turn.node, turn.listing.pzxid);
        if access == Access::Write {
            self.inner.writers.insert(request.name, request.owner, lease.node.clone(), |_| false);
        }
        Ok(Some(Acquired::new(lease, turn.listing.at).contended_if(turn.listing.after_wait)))
    }
}

/// Curator's reader rule: ours holds when no writer's node comes before it; else it watches the
/// last writer before it.
fn reader_turn(children: &[String], ours: usize) -> Option<usize> {
    children[..ours].iter().rposition(|child| is_writer(child))
}

impl ZooKeeperBackend {
    /// Forgets `node` of `name` if it is a write lease's (it is being released).
    pub(crate) fn forget_write(&self, name: &LockName, node: &str) {
        self.inner.writers.remove_where(name, |held| held == node);
    }

    /// The downgraded reader of the held write node `writer`: created only if `writer` still
    /// exists (one transaction), sorted right after it. `None` if the write node is gone.
    fn downgrade(
        &self,
        client: &zk::Client,
        request: &Request<'_>,
        path: &str,
        writer: &str,
    ) -> Result<Option<Acquired<ZooKeeperLease>>> {
        let session = &self.inner.session;
        let writer_child = writer.rsplit('/').next().unwrap_or(writer);
        let protection = uuid::Uuid::new_v4().to_string();
        let node = format!("{path}/{}", downgrade_child(writer_child, &protection));
        let options = zk::CreateMode::Ephemeral.with_acls(self.inner.acls);
        let data = request.owner.to_hex();
        let transaction = client
            .new_check_writer(writer, None)
            .and_then(|mut transaction| {
                transaction.add_create(&node, data.as_bytes(), &options).map(|()| transaction)
            })
            .map_err(|error| Failure::Zk(error).into_error("downgrade"))?;
        let sent_at = Instant::now();
        let outcome = session.call(session.settings().io_timeout, async {
            // The listing leaves after the transaction: its pzxid covers the new node.
            let (committed, listed) =
                futures::future::join(transaction.commit(), client.get_children(path)).await;
            Ok::<_, zk::Error>((committed, listed))
        });
        let (committed, listed) = match outcome {
            Ok(answers) => answers,
            Err(failure) => {
                // No answer: the node may exist. Delete it (or learn it never was) in the
                // background.
                if !failure.session_ended() {
                    self.abandon(client, node);
                }
                return Err(failure.into_error("downgrade"));
            }
        };
        match committed {
            Ok(_) => {}
            Err(zk::CheckWriteError::CheckFailed { .. }) => return Ok(None),
            Err(error) => {
                // Without a definite answer the node may exist: delete it (a node that was never
                // made answers `NoNode`, which ends the clean-up).
                self.abandon(client, node);
                return Err(Failure::Zk(error.into()).into_error("downgrade"));
            }
        }
        let pzxid = match listed {
            Ok((_, stat)) => stat.pzxid,
            Err(_) => match session.call(session.settings().io_timeout, client.get_children(path)) {
                Ok((_, stat)) => stat.pzxid,
                Err(failure) => {
                    self.abandon(client, node);
                    return Err(failure.into_error("downgrade"));
                }
            },
        };
        Ok(Some(Acquired::new(self.lease(request.name, client, node, pzxid), sent_at)))
    }
}

#[cfg(test)]
mod tests {
    use super::reader_turn;

    #[test]
    fn readers_wait_for_the_last_writer_before_them() {
        let children: Vec<String> =
            ["_c_a-__READ__1", "_c_b-__WRIT__2", "_c_c-__READ__3", "_c_d-__WRIT__4", "_c_e-__READ__5"]
                .map(String::from)
                .to_vec();
        assert_eq!(reader_turn(&children, 0), None);
        assert_eq!(reader_turn(&children, 2), Some(1));
        assert_eq!(reader_turn(&children, 4), Some(3));
    }
}
