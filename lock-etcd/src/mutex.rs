//! etcd's `concurrency.Mutex`, transaction for transaction (Go's v3.5 `Lock`/`TryLock`/`Unlock`),
//! on the client's one lease:
//!
//! 1. **Enqueue** in one transaction: if the key `<prefix>/<lease hex>` has never been created
//!    (`create_revision == 0`), put it (value `""`, attached to the lease) and get the oldest
//!    key under `<prefix>/`; else get the key and the oldest. The holder is the key with the
//!    lowest create revision: ours, if the oldest is ours.
//! 2. **Try**: not the holder — delete our key (v3.5 `TryLock`) and report contention.
//! 3. **Wait** ([`crate::wait`]): for the newest key older than ours to be deleted, again until
//!    none is left; then check that our key still exists (v3.5's `ErrSessionExpired`).
//! 4. **Release**: delete our key if its create revision is still ours (a transaction guarded by
//!    Go's `IsOwner()` comparison), so a stale release never deletes a later key.
//!
//! Go's Mutex treats an existing key of its own lease as its own hold (the transaction's else
//! branch). Here a client's threads never share a key (each name has a local slot, see
//! [`crate::slots`]), so an existing key can only be a leftover of an acquisition or release
//! whose clean-up gave up: it is deleted and the transaction run again, so that every hold has
//! a key of its own and a fencing token above every earlier one.

use std::sync::Arc;
use std::time::Instant;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lock_core::{LockName, Result};

use crate::error::Failure;
use crate::keep_alive::ClientLease;
use crate::keys::{contender_key, contenders_range};
use crate::lease::{EtcdLease, Held};
use crate::slots::{SlotGuard, SlotWait};
use crate::EtcdBackend;

/// How long a request without an answer waits before it is sent again (a clean-up, a wait).
pub(crate) const RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// How many times an acquisition deletes a leftover key of its own, or replaces a lease lost
/// under it, before it gives up.
const ATTEMPTS: usize = 3;

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all: `try_lock`.
    No,
    /// Until the deadline, or forever.
    Until(Option<Instant>),
}

impl Wait {
    fn slot_wait(self) -> SlotWait {
        match self {
            Wait::No => SlotWait::No,
            Wait::Until(deadline) => SlotWait::Until(deadline),
        }
    }
}

/// Our key, once in the queue.
struct Queued {
    /// Its create revision.
    revision: i64,
    /// Whether it holds the lock.
    holds: bool,
    /// When the transaction that showed it was sent.
    sent_at: Instant,
}

/// A lock won: the lease, when the request that confirmed it was sent, and whether it waited.
pub(crate) struct Won {
    pub(crate) lease: EtcdLease,
    pub(crate) confirmed_at: Instant,
    pub(crate) waited: bool,
}

/// The enqueue transaction of Go's `Mutex.tryAcquire`.
fn enqueue_txn(key: &str, range: &str, lease: i64) -> Txn {
    let oldest = || {
        Some(GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1))
    };
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key, "", Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(range, oldest()),
        ])
        .or_else([TxnOp::get(key, None), TxnOp::get(range, oldest())])
}

/// Deletes `key` if its create revision is `revision` (Go's `IsOwner()` guard).
pub(crate) fn delete_if_revision(key: &str, revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
}

/// The first key-value of the `index`th response of a transaction, if it is a range with one.
fn first_kv(responses: &[TxnOpResponse], index: usize) -> Option<&etcd_client::KeyValue> {
    match responses.get(index) {
        Some(TxnOpResponse::Get(range)) => range.kvs().first(),
        _ => None,
    }
}

impl EtcdBackend {
    /// One acquisition of the mutex `name` for a lock lease of `ttl`; `None` if it stayed held
    /// by others (or by another thread of this client) for the whole wait.
    ///
    /// A `try_lock` hold counts from the moment it was asked for (lock-core's rule), which the
    /// client lease's last keep-alive may not vouch for (see [`EtcdBackend::hold_start`]): then a
    /// fresh keep-alive goes with the enqueue transaction, in parallel.
    pub(crate) fn acquire(
        &self,
        name: &LockName,
        wait: Wait,
        ttl: std::time::Duration,
    ) -> Result<Option<Won>> {
        let asked_at = Instant::now();
        let prefix = self.inner.namespace.lock_prefix(name);
        // Another thread of this client holding the name is contention too.
        let (slot, slot_waited) = match self.inner.slots.take(&prefix, SlotWait::No) {
            Some(slot) => (slot, false),
            None => match self.inner.slots.take(&prefix, wait.slot_wait()) {
                Some(slot) => (slot, true),
                None => return Ok(None),
            },
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let lease = self.inner.session.lease()?;
            let key = contender_key(&prefix, lease.id);
            let held = |slot| Some(Held { slot, backend: Arc::downgrade(&self.inner) });
            let lease_of = |revision, slot, lease| EtcdLease {
                name: name.clone(),
                key: key.clone(),
                create_revision: revision,
                lease,
                held: held(slot),
            };
            let try_deadline = Instant::now() + self.inner.session.settings().io_timeout;
            let fresh = matches!(wait, Wait::No) && Self::hold_start(&lease, ttl, asked_at) < asked_at;
            let queued = match self.enqueue(&prefix, &key, &lease, try_deadline, fresh.then_some(asked_at)) {
                Ok(queued) => queued,
                Err(failure) if failure.is_lease_gone() && attempt < ATTEMPTS => {
                    lease.mark_lost("etcd refused a put on it: requested lease not found");
                    continue;
                }
                Err(failure) => {
                    if !failure.is_definite() {
                        self.abandon_unknown(key, lease, slot);
                    }
                    return Err(failure.into_error("acquire"));
                }
            };
            if queued.holds {
                let lease = lease_of(queued.revision, slot, lease);
                return Ok(Some(Won { lease, confirmed_at: queued.sent_at, waited: slot_waited }));
            }
            let deadline = match wait {
                Wait::No => {
                    // Go's v3.5 `TryLock`: not the holder, so delete the key at once.
                    self.delete_or_abandon(key.clone(), queued.revision, lease, slot, try_deadline);
                    return Ok(None);
                }
                Wait::Until(deadline) => deadline,
            };
            match self.wait_for_turn(&prefix, &key, queued.revision, &lease, deadline) {
                Ok(Some(confirmed_at)) => {
                    let lease = lease_of(queued.revision, slot, lease);
                    return Ok(Some(Won { lease, confirmed_at, waited: true }));
                }
                Ok(None) => {
                    let io_timeout = self.inner.session.settings().io_timeout;
                    let cleanup_deadline =
                        deadline.map_or(Instant::now(), |d| d.max(Instant::now())) + io_timeout;
                    self.delete_or_abandon(key.clone(), queued.revision, lease, slot, cleanup_deadline);
                    return Ok(None);
                }
                Err(failure) if failure.is_lease_gone() && attempt < ATTEMPTS && wait_left(deadline) => {
                    // The lease went while waiting (its keys with it): queue again on a new one.
                    lease.mark_lost("it ended while an acquisition waited");
                    continue;
                }
                Err(failure) => {
                    if !failure.is_lease_gone() {
                        self.abandon(key.clone(), queued.revision, lease, slot);
                    }
                    return Err(failure.into_error("acquire"));
                }
            }
        }
    }

    /// Step 1: our key in the queue, by `deadline` — with a keep-alive sent after `confirm_since`
    /// confirmed too, if given.
    fn enqueue(
        &self,
        prefix: &str,
        key: &str,
        lease: &ClientLease,
        deadline: Instant,
        confirm_since: Option<Instant>,
    ) -> Result<Queued, Failure> {
        let session = &self.inner.session;
        let range = contenders_range(prefix);
        for _ in 0..ATTEMPTS {
            let sent_at = Instant::now();
            let txn = session.txn_request(deadline, enqueue_txn(key, &range, lease.id));
            let response = match confirm_since {
                None => session.call_until(deadline, txn)?,
                Some(since) => session.call_until(deadline, async {
                    let (response, confirmed) = tokio::join!(txn, lease.confirmed_since(since));
                    confirmed?;
                    response.map_err(Failure::from)
                })?,
            };
            let responses = response.op_responses();
            let revision = match response.succeeded() {
                true => response.header().map(|header| header.revision()).unwrap_or_default(),
                false => {
                    // A leftover key of ours (see the module docs): delete it, and queue anew.
                    if let Some(leftover) = first_kv(&responses, 0) {
                        let revision = leftover.create_revision();
                        tracing::debug!(revision, "deleting a leftover etcd lock key of this client");
                        session.txn(deadline, delete_if_revision(key, revision))?;
                    }
                    continue;
                }
            };
            let holds = first_kv(&responses, 1).is_none_or(|oldest| oldest.create_revision() == revision);
            return Ok(Queued { revision, holds, sent_at });
        }
        Err(Failure::Unexpected("the client's own lock key kept reappearing"))
    }

    /// Deletes our key (created at `revision`) by `deadline`; if that gets no answer, in the
    /// background until it does. The slot is freed once the key is known gone.
    fn delete_or_abandon(
        &self,
        key: String,
        revision: i64,
        lease: Arc<ClientLease>,
        slot: SlotGuard,
        deadline: Instant,
    ) {
        match self.inner.session.txn(deadline, delete_if_revision(&key, revision)) {
            Ok(_) => drop(slot),
            Err(failure) if failure.is_definite() => {
                tracing::warn!(?failure, "deleting an etcd lock key failed; it goes with the client's lease");
            }
            Err(_) => self.abandon(key, revision, lease, slot),
        }
    }

    /// Deletes `key` (created at `revision`) in the background, again until etcd answers or the
    /// lease is lost (which deletes it too); `slot` is held until then, so no other thread of
    /// this client queues on the name while the key may still be there.
    pub(crate) fn abandon(&self, key: String, revision: i64, lease: Arc<ClientLease>, slot: SlotGuard) {
        let mut kv = self.inner.session.client().kv_client();
        self.inner.session.spawn(async move {
            let _slot = slot;
            loop {
                let attempt = tokio::select! {
                    outcome = kv.txn(delete_if_revision(&key, revision)) => outcome.map_err(Failure::from),
                    () = lease.lost() => return,
                };
                match attempt {
                    Err(failure) if !failure.is_definite() => tokio::time::sleep(RETRY).await,
                    _ => return,
                }
            }
        });
    }

    /// After an enqueue without an answer: our key may or may not exist, at a revision we do
    /// not know. Deleted in the background once etcd answers what it is.
    fn abandon_unknown(&self, key: String, lease: Arc<ClientLease>, slot: SlotGuard) {
        let mut kv = self.inner.session.client().kv_client();
        self.inner.session.spawn(async move {
            let _slot = slot;
            loop {
                let found = tokio::select! {
                    found = kv.get(key.as_str(), None) => found.map_err(Failure::from),
                    () = lease.lost() => return,
                };
                let revision = match found {
                    Ok(found) => match found.kvs().first() {
                        Some(ours) => ours.create_revision(),
                        None => return,
                    },
                    Err(failure) if !failure.is_definite() => {
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                    Err(_) => return,
                };
                let deleted = kv.txn(delete_if_revision(&key, revision)).await.map_err(Failure::from);
                if !matches!(deleted, Err(failure) if !failure.is_definite()) {
                    return;
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
}

/// Whether a wait until `deadline` has time left.
fn wait_left(deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|deadline| Instant::now() < deadline)
}
