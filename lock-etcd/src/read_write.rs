//! Read-write locks in the layout of etcd's `recipe.RWMutex`
//! (`go.etcd.io/etcd/client/v3/experimental/recipes`), key for key, so that a Go service using
//! it and distlock clients exclude each other.
//!
//! The lock `N` lives under `P = [ns/]%read-write/N` (see [`crate::keys`]): a Go service calls
//! `recipe.NewRWMutex(session, "P")`. Every acquisition puts a key of its own, value `""`, on its
//! client's lease, only if it has never existed (Go's `newUniqueEphemeralKey`; see
//! [`crate::own_key`]):
//!
//! | | reader (`RLock`) | writer (`Lock`) |
//! | --- | --- | --- |
//! | key | `P/read/<unix nanos>` | `P/write/<unix nanos>` |
//! | holds when no key is left … | under `P/write` with a lower mod revision | under `P/` with a lower mod revision |
//! | waits on | the newest such key's deletion ([`crate::wait`]) | the same |
//!
//! The first look goes in the creation's transaction; a waiter then reads the newest key below
//! its own (sorted by mod revision, descending, limit 1, max mod revision ours − 1), watches its
//! deletion and reads again until none is left — then checks that its own key still exists, as
//! the mutex does. Writers are not starved: a reader whose key comes after a waiting writer's
//! waits behind it. A try that does not hold at once deletes its key; a wait that times out
//! deletes it too (in the background if etcd does not answer). Release deletes the key if its
//! create revision is still ours (Go's `RUnlock`/`Unlock` delete it unguarded).
//!
//! The fencing token is the key's create revision: one counter (etcd's revision) for both
//! modes, and a writer holds only once every key below its own is gone, so its token is above
//! every earlier holder's.
//!
//! # Downgrade: a writer's own read lock
//! lock-core asks a writer's read lock under the write lease's owner; this backend finds the
//! write lock among those it holds ([`WriteHolds`](lock_core::WriteHolds)) and grants the read
//! past it, in one of two ways, chosen by one transaction:
//!
//! - **No writer waits behind ours** (no key under `P/write` has a mod revision above our write
//!   key's): a new read key `P/read/<unix nanos>`, put only if our write key is still there.
//!   Every writer that comes later is newer than it and waits for it; readers queued behind our
//!   write key hold once it goes. The read is shared, as a Go reader's is, and its token is its
//!   own key's create revision.
//! - **A writer already waits behind ours**: a new read key would be newer than that writer's
//!   key, and a writer waits only for keys older than its own: it would get in once our write
//!   key went, while the read still held (a key's revision cannot be chosen). So the read keeps
//!   the writer's key: both leases share it ([`SharedKey`]), and it is deleted when the last of
//!   them is released (or the client's lease ends). Until then it is a write key: the waiting
//!   writer waits for the read's release — as it must — and so do the readers queued between
//!   our write key and it, which a shared read would have let in (readers behind the waiting
//!   writer wait for it anyway). Never two holders; only those readers wait longer. The read's
//!   token is then the write's.
//!
//! So [`shares_downgraded_reads`](ReadWrite::shares_downgraded_reads) keeps its default, `true`.

use std::sync::{Arc, Weak};
use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::{check_lease, Access, Acquired, ReadWrite, Request, Result};

use crate::blocking::refuse_async_context;
use crate::keep_alive::ClientLease;
use crate::lease::{EtcdLease, Held};
use crate::own_key::{range_kvs, unique_nanos, Contention, Refused, Turn};
use crate::wait::Order;
use crate::EtcdBackend;

/// A write lock's key, shared by the write lease and the reads its owner took under it: deleted
/// by the last of them to be released (a lease's [`Held::shared`]).
pub(crate) struct SharedKey {
    key: String,
    revision: i64,
    lease: Arc<ClientLease>,
}

/// One side of the read-write lock under the prefix `P`.
struct Side {
    /// `P/read` or `P/write`: where our key goes.
    dir: String,
    /// What must be gone before ours holds: every key under `P/write` (a reader), or under `P/`
    /// (a writer) — prefixes, as Go reads them.
    ahead: String,
}

impl Side {
    fn new(prefix: &str, access: Access) -> Self {
        match access {
            Access::Read => Self { dir: format!("{prefix}/read"), ahead: format!("{prefix}/write") },
            Access::Write => Self { dir: format!("{prefix}/write"), ahead: format!("{prefix}/") },
        }
    }
}

impl Contention for Side {
    fn dir(&self) -> &str {
        &self.dir
    }

    fn value(&self) -> &str {
        ""
    }

    /// The oldest key ahead (by mod revision): ours is the newest of all, so none but ours (a
    /// writer's range holds its own key) means no key below ours.
    fn look(&self) -> TxnOp {
        let oldest =
            GetOptions::new().with_prefix().with_sort(SortTarget::Mod, SortOrder::Ascend).with_limit(1);
        TxnOp::get(self.ahead.as_str(), Some(oldest.with_keys_only()))
    }

    fn holds_at_once(&self, key: &str, found: &[KeyValue]) -> Result<bool, Refused> {
        Ok(found.first().is_none_or(|oldest| oldest.key() == key.as_bytes()))
    }

    fn wait(
        &self,
        backend: &EtcdBackend,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Refused> {
        Ok(backend.wait_for_none_below(&self.ahead, Order::Modified, key, revision, lease, deadline)?)
    }

    fn operation(&self) -> &'static str {
        "acquire a read-write lock"
    }
}

impl ReadWrite for EtcdBackend {
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<EtcdLease>>> {
        check_lease(request.ttl)?;
        refuse_async_context()?;
        if access == Access::Read {
            if let Some(shared) = self.inner.writers.find(request.name, request.owner, Weak::upgrade) {
                if let Some(acquired) = self.downgrade(request, shared)? {
                    return Ok(Some(acquired));
                }
                // The write key is gone (the write lease was lost): an ordinary reader.
            }
        }
        let prefix = self.inner.namespace.read_write_prefix(request.name);
        let Some(turn) = self.contend(request, &Side::new(&prefix, access))? else { return Ok(None) };
        let (confirmed_at, waited) = (turn.confirmed_at, turn.waited);
        let start = Self::hold_start(&turn.lease, request.ttl, confirmed_at);
        let lease = match access {
            Access::Read => self.own_key_lease(request.name, turn, false, None),
            Access::Write => {
                let shared = Arc::new(SharedKey {
                    key: turn.key.clone(),
                    revision: turn.revision,
                    lease: Arc::clone(&turn.lease),
                });
                let stale = |held: &Weak<SharedKey>| held.strong_count() == 0;
                self.inner.writers.insert(request.name, request.owner, Arc::downgrade(&shared), stale);
                self.own_key_lease(request.name, turn, true, Some(shared))
            }
        };
        Ok(Some(Acquired::new(lease, start).contended_if(waited)))
    }
}

impl EtcdBackend {
    /// The read lease of the owner of the write key `shared` (see the module docs): a key of its
    /// own if no writer waits behind the write key, else the write key itself; `None` if the
    /// write key is gone.
    fn downgrade(
        &self,
        request: &Request<'_>,
        shared: Arc<SharedKey>,
    ) -> Result<Option<Acquired<EtcdLease>>> {
        // The read on the writer's key. Dropped unused, it lets go of the key (deleting it if the
        // write lease was released meanwhile).
        let on_write_key = EtcdLease {
            name: request.name.clone(),
            key: shared.key.clone(),
            create_revision: shared.revision,
            lease: Arc::clone(&shared.lease),
            exclusive: false,
            held: Some(Held { slot: None, backend: Arc::downgrade(&self.inner), shared: Some(shared) }),
        };
        let client_lease = Arc::clone(&on_write_key.lease);
        if client_lease.is_lost() {
            return Ok(None);
        }
        let prefix = self.inner.namespace.read_write_prefix(request.name);
        let Side { dir, ahead: _ } = Side::new(&prefix, Access::Read);
        let read_key = format!("{dir}/{}", unique_nanos());
        let (write_key, write_revision) = (on_write_key.key.as_str(), on_write_key.create_revision);
        let txn = Txn::new()
            .when([
                Compare::create_revision(write_key, CompareOp::Equal, write_revision),
                // No writer queued behind ours (Go's readers' range: the prefix `P/write`).
                Compare::mod_revision(format!("{prefix}/write"), CompareOp::Less, write_revision + 1)
                    .with_prefix(),
                Compare::create_revision(read_key.as_str(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(
                read_key.as_str(),
                "",
                Some(PutOptions::new().with_lease(client_lease.id)),
            )])
            .or_else([TxnOp::get(write_key, Some(GetOptions::new().with_keys_only()))]);
        let sent_at = Instant::now();
        let response = match self.inner.session.txn(self.io_deadline(), txn) {
            Ok(response) => response,
            Err(failure) => {
                if !failure.is_definite() {
                    self.abandon_unknown(read_key, client_lease, (), true);
                }
                return Err(failure.into_error("downgrade"));
            }
        };
        let start = Self::hold_start(&client_lease, request.ttl, sent_at);
        if response.succeeded() {
            let revision = response.header().map(|header| header.revision()).unwrap_or_default();
            let turn =
                Turn { key: read_key, revision, lease: client_lease, confirmed_at: sent_at, waited: false };
            drop(on_write_key);
            return Ok(Some(Acquired::new(self.own_key_lease(request.name, turn, false, None), start)));
        }
        // A writer waits behind ours (or, rarely, the read key's nanos were taken): keep the
        // writer's key, if it is still there.
        let write_key_there = range_kvs(&response.op_responses(), 0)
            .first()
            .is_some_and(|kv| kv.create_revision() == write_revision);
        Ok(write_key_there.then(|| Acquired::new(on_write_key, start)))
    }

    /// Gives up `lease`'s part in its key, shared or not (`shared`, taken from its [`Held`]): a
    /// write lease is forgotten by later downgrades. `false` when another lease of this client
    /// still holds the key, which must then stay.
    pub(crate) fn leave_key(&self, lease: &EtcdLease, shared: Option<Arc<SharedKey>>) -> bool {
        let Some(shared) = shared else { return true };
        if lease.exclusive {
            let ours = Arc::as_ptr(&shared);
            self.inner.writers.remove_where(&lease.name, |held| std::ptr::eq(held.as_ptr(), ours));
        }
        // Atomic: of two leases let go at once, exactly one is the last.
        Arc::into_inner(shared).is_some()
    }

    /// Whether `lease`'s key is still there (a release that leaves the key to another lease of
    /// this client).
    ///
    /// # Errors
    /// As any request; [`Error::Unsupported`](lock_core::Error::Unsupported) from a tokio async
    /// task.
    pub(crate) fn key_still_there(&self, lease: &EtcdLease) -> Result<bool> {
        if lease.lease.is_lost() {
            return Ok(false);
        }
        refuse_async_context()?;
        let found = self
            .inner
            .session
            .get(self.io_deadline(), lease.key.as_str(), Some(GetOptions::new().with_keys_only()))
            .map_err(|failure| failure.into_error("release"))?;
        Ok(found.kvs().first().is_some_and(|kv| kv.create_revision() == lease.create_revision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_wait_for_writers_and_writers_for_everyone_in_go_s_layout() {
        let read = Side::new("%read-write/n", Access::Read);
        assert_eq!((read.dir.as_str(), read.ahead.as_str()), ("%read-write/n/read", "%read-write/n/write"));
        let write = Side::new("ns/%read-write/n", Access::Write);
        assert_eq!(
            (write.dir.as_str(), write.ahead.as_str()),
            ("ns/%read-write/n/write", "ns/%read-write/n/")
        );
    }
}
