//! etcd's `concurrency.Mutex`, transaction for transaction (Go's v3.5 `Lock`/`TryLock`/`Unlock`),
//! on the client's one lease:
//!
//! 1. **Enqueue** in one transaction: if the key `<prefix>/<lease hex>` has never been created
//!    (`create_revision == 0`), put it (value `""` for a lock; for an election, the campaign's
//!    value, as Go's `Election.Campaign` puts it — see [`crate::election`]) attached to the
//!    lease, and get the oldest key under `<prefix>/`; else get the key and the oldest. The
//!    holder is the key with the lowest create revision: ours, if the oldest is ours.
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
use crate::slots::SlotWait;
use crate::EtcdBackend;

/// How long a request without an answer waits before it is sent again (a clean-up, a wait).
pub(crate) const RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// How long a unique key whose put got no answer is looked for
/// ([`EtcdBackend::abandon_unknown`]).
const LATE_PUT_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);

/// The longest pause between two attempts of a background clean-up.
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// How many times an acquisition deletes a leftover key of its own, or replaces a lease lost
/// under it, before it gives up.
pub(crate) const ATTEMPTS: usize = 3;

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all: `try_lock`.
    No,
    /// Until the deadline, or forever.
    Until(Option<Instant>),
}

impl Wait {
    /// The deadline of a wait (`Some(now)` for none at all).
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::No => Some(Instant::now()),
            Wait::Until(deadline) => deadline,
        }
    }

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

/// The enqueue transaction of Go's `Mutex.tryAcquire` (and `Election.Campaign`, which puts
/// `value` and reads the oldest key in a wait of its own).
fn enqueue_txn(key: &str, range: &str, lease: i64, value: &[u8]) -> Txn {
    let oldest = || {
        Some(GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1))
    };
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
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
        self.acquire_on(name, &self.inner.namespace.lock_prefix(name), b"", wait, ttl)
    }

    /// [`acquire`](Self::acquire) on the queue `prefix` of the primitive `name` (the mutex's, or
    /// an election's), whose key is put with `value`.
    pub(crate) fn acquire_on(
        &self,
        name: &LockName,
        prefix: &str,
        value: &[u8],
        wait: Wait,
        ttl: std::time::Duration,
    ) -> Result<Option<Won>> {
        let asked_at = Instant::now();
        // Another thread of this client holding the name is contention too.
        let (slot, slot_waited) = match self.inner.slots.take(prefix, SlotWait::No) {
            Some(slot) => (slot, false),
            None => match self.inner.slots.take(prefix, wait.slot_wait()) {
                Some(slot) => (slot, true),
                None => return Ok(None),
            },
        };
        let mut attempt = 0;
        let mut outage = Outage::default();
        loop {
            attempt += 1;
            let lease = self.inner.session.lease()?;
            let key = contender_key(prefix, lease.id);
            let held =
                |slot| Some(Held { slot: Some(slot), backend: Arc::downgrade(&self.inner), shared: None });
            let lease_of = |revision, slot, lease| EtcdLease {
                name: name.clone(),
                key: key.clone(),
                create_revision: revision,
                lease,
                exclusive: true,
                held: held(slot),
            };
            let try_deadline = Instant::now() + self.inner.session.settings().io_timeout;
            let fresh = matches!(wait, Wait::No) && Self::hold_start(&lease, ttl, asked_at) < asked_at;
            let confirm_since = fresh.then_some(asked_at);
            let queued = match self.enqueue(prefix, &key, value, &lease, try_deadline, confirm_since) {
                Ok(queued) => {
                    outage = Outage::default();
                    queued
                }
                Err(failure)
                    if failure.is_lease_gone()
                        && attempt < ATTEMPTS
                        && (matches!(wait, Wait::No) || wait_left(wait.deadline())) =>
                {
                    lease.mark_lost("etcd refused a put on it: requested lease not found");
                    continue;
                }
                // No answer (a member killed, a leader being elected) while the caller may still
                // wait: queue again (a key the lost request did put is a leftover of ours then).
                Err(failure) if outage.may_retry(&failure, wait.deadline(), self.session_ttl()) => {
                    attempt -= 1;
                    continue;
                }
                Err(failure) => {
                    // Even a definite failure may come after the key was put (the keep-alive
                    // sent beside the enqueue failed): look, and delete it if it is there.
                    if !failure.is_lease_gone() {
                        self.abandon_unknown(key, lease, slot, false);
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
            match self.wait_for_turn(prefix, &key, queued.revision, &lease, deadline) {
                Ok(Some(confirmed_at)) => {
                    let lease = lease_of(queued.revision, slot, lease);
                    return Ok(Some(Won { lease, confirmed_at, waited: true }));
                }
                Ok(None) => {
                    // The whole call returns by its deadline plus one I/O timeout: what the
                    // wait's last request left of that bounds the delete, and past it the
                    // delete goes on in the background.
                    let io_timeout = self.inner.session.settings().io_timeout;
                    let base = deadline.unwrap_or_else(Instant::now);
                    let cleanup_deadline = base.checked_add(io_timeout).unwrap_or(base);
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

    /// Step 1: our key (with its value) in the queue, by `deadline` — with a keep-alive sent
    /// after `confirm_since` confirmed too, if given.
    fn enqueue(
        &self,
        prefix: &str,
        key: &str,
        value: &[u8],
        lease: &ClientLease,
        deadline: Instant,
        confirm_since: Option<Instant>,
    ) -> Result<Queued, Failure> {
        let session = &self.inner.session;
        let range = contenders_range(prefix);
        for _ in 0..ATTEMPTS {
            let sent_at = Instant::now();
            let txn = session.txn_request(deadline, enqueue_txn(key, &range, lease.id, value));
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

    /// Deletes our key (created at `revision`) by `deadline`; if that fails or gets no answer,
    /// in the background until it is done. The slot (the mutex's; `()` for a key of its own) is
    /// freed once the key is known gone.
    pub(crate) fn delete_or_abandon(
        &self,
        key: String,
        revision: i64,
        lease: Arc<ClientLease>,
        slot: impl Send + 'static,
        deadline: Instant,
    ) {
        if Instant::now() >= deadline {
            return self.abandon(key, revision, lease, slot);
        }
        match self.inner.session.txn(deadline, delete_if_revision(&key, revision)) {
            Ok(_) => drop(slot),
            Err(failure) if failure.is_lease_gone() => drop(slot),
            Err(_) => self.abandon(key, revision, lease, slot),
        }
    }

    /// Deletes `key` (created at `revision`) in the background, again until etcd confirms it or
    /// the lease is lost (which deletes it too) — a key left on a live lease would hold the
    /// lock, or a place in its queue, for as long as the client lives. `slot` is held until
    /// then, so no other thread of this client queues on the name while the key may be there.
    pub(crate) fn abandon(
        &self,
        key: String,
        revision: i64,
        lease: Arc<ClientLease>,
        slot: impl Send + 'static,
    ) {
        let kv = self.inner.session.client().kv_client();
        let io_timeout = self.inner.session.settings().io_timeout;
        self.inner.session.spawn(async move {
            let _slot = slot;
            retry_until_done(&lease, io_timeout, &key, || {
                let (mut kv, txn) = (kv.clone(), delete_if_revision(&key, revision));
                async move { kv.txn(txn).await.map(drop) }
            })
            .await;
        });
    }

    /// After an enqueue without an answer (or with an error after it was sent): our key may or
    /// may not exist, at a revision we do not know. Deleted in the background once etcd answers
    /// what it is — if it is on our lease (a key of its own whose creation failed may be
    /// another client's).
    ///
    /// A request whose answer was lost may still be applied after a look found nothing: looked
    /// for again an I/O timeout later, by when etcd has usually applied or dropped it — and a
    /// `unique` key (a name this client never puts again: read-write locks, semaphores) at
    /// doubling pauses for [`LATE_PUT_WINDOW`], since etcd may apply a proposal later still (a
    /// leader's disk stalled for seconds). The mutex's key is the client's next key of that name
    /// too, so a late look could delete a hold: its next enqueue deletes such a leftover instead.
    pub(crate) fn abandon_unknown(
        &self,
        key: String,
        lease: Arc<ClientLease>,
        slot: impl Send + 'static,
        unique: bool,
    ) {
        let kv = self.inner.session.client().kv_client();
        let io_timeout = self.inner.session.settings().io_timeout;
        let lease_id = lease.id;
        let window = if unique { LATE_PUT_WINDOW } else { io_timeout };
        self.inner.session.spawn(async move {
            let _slot = slot;
            let until = tokio::time::Instant::now() + window;
            let mut pause = io_timeout;
            for look in 0.. {
                if look > 0 {
                    if tokio::time::Instant::now() >= until {
                        return;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = lease.lost() => return,
                    }
                    pause *= 2;
                }
                retry_until_done(&lease, io_timeout, &key, || {
                    let (mut kv, key) = (kv.clone(), key.clone());
                    async move {
                        let found = kv.get(key.as_str(), None).await?;
                        match found.kvs().first() {
                            Some(ours) if ours.lease() == lease_id => {
                                kv.txn(delete_if_revision(&key, ours.create_revision())).await.map(drop)
                            }
                            _ => Ok(()),
                        }
                    }
                })
                .await;
            }
        });
    }
}

/// Runs the clean-up `attempt` until it succeeds or `lease` is lost, each attempt bounded by
/// `io_timeout`, pausing [`RETRY`] and doubling up to [`RETRY_MAX`] between failures; the first
/// definite failure is logged (a permanent one, such as a revoked permission, retries at the
/// slowest pace until the lease ends).
async fn retry_until_done<Fut>(
    lease: &ClientLease,
    io_timeout: std::time::Duration,
    key: &str,
    mut attempt: impl FnMut() -> Fut,
) where
    Fut: std::future::Future<Output = Result<(), etcd_client::Error>>,
{
    let mut pause = RETRY;
    let mut logged = false;
    loop {
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(io_timeout, attempt()) => outcome,
            () = lease.lost() => return,
        };
        match outcome.map(|done| done.map_err(Failure::from)) {
            Ok(Ok(())) => return,
            Ok(Err(failure)) if failure.is_lease_gone() => return,
            Ok(Err(failure)) if failure.is_definite() && !logged => {
                logged = true;
                tracing::warn!(
                    key,
                    ?failure,
                    "deleting an etcd lock key failed; trying again until it goes or the client's lease ends"
                );
            }
            _ => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Requests without an answer in a row while an acquisition may still wait: it queues again,
/// pausing [`RETRY`] and doubling up to a second, until its deadline — or, waiting without one,
/// until they have lasted one session TTL (a failover takes a few seconds; longer is an outage
/// the caller hears of).
#[derive(Debug, Default)]
pub(crate) struct Outage {
    since: Option<Instant>,
    pause: std::time::Duration,
}

impl Outage {
    /// Whether to try again after `failure`, pausing first if so.
    pub(crate) fn may_retry(
        &mut self,
        failure: &Failure,
        deadline: Option<Instant>,
        session_ttl: std::time::Duration,
    ) -> bool {
        if failure.is_definite() {
            return false;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        self.pause = (self.pause * 2).clamp(RETRY, std::time::Duration::from_secs(1));
        let resume = now + self.pause;
        let allowed = match deadline {
            Some(deadline) => resume < deadline,
            None => resume < since + session_ttl,
        };
        if allowed {
            std::thread::sleep(self.pause);
        }
        allowed
    }
}

/// Whether a wait until `deadline` has time left.
pub(crate) fn wait_left(deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|deadline| Instant::now() < deadline)
}

#[cfg(test)]
mod server_tests {
    use std::time::Duration;

    use etcd_client::PutOptions;
    use lock_testkit::harness::EtcdServer;

    use super::*;

    /// A put of a unique key that etcd applies after the two looks a reused key gets (its answer
    /// lost, a leader's disk stalled) is still found and deleted: it would hold a place in a
    /// queue on the client's live lease.
    #[test]
    fn a_unique_key_put_after_the_second_look_is_still_deleted() {
        let server = EtcdServer::start().unwrap();
        let io = Duration::from_millis(300);
        let backend = EtcdBackend::builder(server.endpoint()).io_timeout(io).build().unwrap();
        let session = &backend.inner.session;
        let lease = session.lease().unwrap();
        let key = format!("%semaphore/late/{}", crate::own_key::unique_nanos());
        backend.abandon_unknown(key.clone(), Arc::clone(&lease), (), true);
        // Looks at 0 and one I/O timeout (all a reused key gets), then 3, 7, … I/O timeouts.
        std::thread::sleep(io * 2 + io / 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut kv = session.client().kv_client();
        let on_lease = Some(PutOptions::new().with_lease(lease.id));
        session.call_until(deadline, kv.put(key.as_str(), "", on_lease)).unwrap();
        let gone_by = Instant::now() + io * 8;
        loop {
            let found = session.call_until(deadline, kv.get(key.as_str(), None)).unwrap();
            if found.kvs().is_empty() {
                break;
            }
            assert!(Instant::now() < gone_by, "a late put of an abandoned unique key stayed on the lease");
            std::thread::sleep(io / 4);
        }
    }
}
