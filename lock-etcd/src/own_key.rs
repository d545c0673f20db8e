//! Acquisitions with a key of their own — read-write locks and permits — written once: Go's
//! `newUniqueEphemeralKey` (the key `<dir>/<unix nanos>`, put only if it has never existed, on
//! the client's lease; a clash takes new nanos), a first look in the same transaction, then
//! holding, giving up (a try) or waiting, and the clean-up of a key that will not hold.
//!
//! Unlike the mutex's `<prefix>/<lease hex>`, such a key is never shared by two acquisitions, so
//! two threads of one client contend exactly as two clients do: no local slot is taken. Nanos
//! are made unique within the process, so a clash can only be with another process's key; an
//! unanswered creation is cleaned up only if the key found is on our lease.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::{Deadline, Error, LockName, Request, Result};

use crate::error::Failure;
use crate::keep_alive::ClientLease;
use crate::lease::{EtcdLease, Held};
use crate::mutex::{wait_left, Outage, ATTEMPTS};
use crate::read_write::SharedKey;
use crate::EtcdBackend;

/// What an acquisition with a key of its own contends for: where its key goes, how the first
/// look is judged, and how it waits.
pub(crate) trait Contention {
    /// The directory of the keys: ours is `<dir>/<unix nanos>`.
    fn dir(&self) -> &str;

    /// Our key's value.
    fn value(&self) -> &str;

    /// The read sent after the put, in the same transaction (so it sees our key).
    fn look(&self) -> TxnOp;

    /// Whether our `key`, just created, holds at once, by what [`look`](Self::look) found.
    fn holds_at_once(&self, key: &str, found: &[KeyValue]) -> Result<bool, Refused>;

    /// Waits for the turn of `key` (created at `revision`): when the read that showed it
    /// holding was sent, or `None` once `deadline` passed.
    fn wait(
        &self,
        backend: &EtcdBackend,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Refused>;

    /// The operation, in errors.
    fn operation(&self) -> &'static str;
}

/// Why a contender stops short of holding.
pub(crate) enum Refused {
    /// A final, typed refusal (another permit count): our key is deleted.
    Error(Error),
    /// A request failed (or the lease was lost).
    Failed(Failure),
}

impl From<Failure> for Refused {
    fn from(failure: Failure) -> Self {
        Refused::Failed(failure)
    }
}

/// A key that holds.
pub(crate) struct Turn {
    pub(crate) key: String,
    pub(crate) revision: i64,
    pub(crate) lease: Arc<ClientLease>,
    /// When the request that showed it holding was sent.
    pub(crate) confirmed_at: Instant,
    /// Whether it had to wait.
    pub(crate) waited: bool,
}

/// Our key, created, and what the look beside it found.
struct Created {
    key: String,
    revision: i64,
    found: Vec<KeyValue>,
    sent_at: Instant,
}

/// A creation that failed; `key` is set when its outcome is unknown (the key may exist).
struct NotCreated {
    failure: Failure,
    key: Option<String>,
}

impl EtcdBackend {
    /// One acquisition of `contention` for `request`: `None` if it did not hold by the request's
    /// deadline (a try: at once). Returns by the deadline plus one I/O timeout, plus one connect
    /// timeout if a lost lease must be replaced.
    pub(crate) fn contend(
        &self,
        request: &Request<'_>,
        contention: &impl Contention,
    ) -> Result<Option<Turn>> {
        let io_timeout = self.inner.session.settings().io_timeout;
        let operation = contention.operation();
        let deadline = request.deadline.instant();
        let mut attempt = 0;
        let mut outage = Outage::default();
        loop {
            attempt += 1;
            let lease = self.inner.session.lease()?;
            let try_deadline = Instant::now() + io_timeout;
            let Created { key, revision, found, sent_at } =
                match self.create_own_key(contention, &lease, try_deadline) {
                    Ok(created) => {
                        outage = Outage::default();
                        created
                    }
                    Err(NotCreated { failure, .. })
                        if failure.is_lease_gone()
                            && attempt < ATTEMPTS
                            && (request.deadline == Deadline::Now || wait_left(deadline)) =>
                    {
                        lease.mark_lost("etcd refused a put on it: requested lease not found");
                        continue;
                    }
                    // No answer while the caller may still wait: a new unique key (one the lost
                    // request did put goes in the background).
                    Err(NotCreated { failure, key })
                        if request.deadline != Deadline::Now
                            && outage.may_retry(&failure, deadline, self.session_ttl()) =>
                    {
                        if let Some(key) = key {
                            self.abandon_unknown(key, lease, (), true);
                        }
                        attempt -= 1;
                        continue;
                    }
                    Err(NotCreated { failure, key }) => {
                        if let Some(key) = key {
                            self.abandon_unknown(key, lease, (), true);
                        }
                        return Err(failure.into_error(operation));
                    }
                };
            // What bounds the clean-up of our key, past which it goes on in the background: the
            // step that refused or gave up returns by then (`None`: no deadline, one I/O timeout).
            let (outcome, cleanup_by) = match contention.holds_at_once(&key, &found) {
                Ok(true) => {
                    return Ok(Some(Turn { key, revision, lease, confirmed_at: sent_at, waited: false }))
                }
                Ok(false) if request.deadline == Deadline::Now => {
                    // Go's `TryLock` rule: not holding, so the key goes at once.
                    self.delete_or_abandon(key, revision, lease, (), try_deadline);
                    return Ok(None);
                }
                Ok(false) => (
                    contention.wait(self, &key, revision, &lease, deadline),
                    deadline.map(|deadline| deadline.checked_add(io_timeout).unwrap_or(deadline)),
                ),
                Err(refused) => (Err(refused), Some(try_deadline)),
            };
            let cleanup_deadline = || cleanup_by.unwrap_or_else(|| Instant::now() + io_timeout);
            match outcome {
                Ok(Some(confirmed_at)) => {
                    return Ok(Some(Turn { key, revision, lease, confirmed_at, waited: true }));
                }
                Ok(None) => {
                    self.delete_or_abandon(key, revision, lease, (), cleanup_deadline());
                    return Ok(None);
                }
                Err(Refused::Failed(failure))
                    if failure.is_lease_gone() && attempt < ATTEMPTS && wait_left(deadline) =>
                {
                    // The lease went while waiting (its keys with it): queue again on a new one.
                    lease.mark_lost("it ended while an acquisition waited");
                }
                Err(Refused::Failed(failure)) => {
                    if !failure.is_lease_gone() {
                        self.abandon(key, revision, lease, ());
                    }
                    return Err(failure.into_error(operation));
                }
                Err(Refused::Error(error)) => {
                    self.delete_or_abandon(key, revision, lease, (), cleanup_deadline());
                    return Err(error);
                }
            }
        }
    }

    /// Go's `newUniqueEphemeralKV`, with the contention's look in the same transaction, by
    /// `deadline`.
    fn create_own_key(
        &self,
        contention: &impl Contention,
        lease: &ClientLease,
        deadline: Instant,
    ) -> Result<Created, NotCreated> {
        let session = &self.inner.session;
        for _ in 0..ATTEMPTS {
            let key = format!("{}/{}", contention.dir(), unique_nanos());
            let txn =
                Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([
                    TxnOp::put(
                        key.as_str(),
                        contention.value(),
                        Some(PutOptions::new().with_lease(lease.id)),
                    ),
                    contention.look(),
                ]);
            let sent_at = Instant::now();
            let response = match session.txn(deadline, txn) {
                Ok(response) => response,
                Err(failure) => {
                    let key = (!failure.is_definite()).then_some(key);
                    return Err(NotCreated { failure, key });
                }
            };
            // Another process's key of the same nanosecond: take new nanos.
            if !response.succeeded() {
                continue;
            }
            let revision = response.header().map(|header| header.revision()).unwrap_or_default();
            let found = range_kvs(&response.op_responses(), 1).to_vec();
            return Ok(Created { key, revision, found, sent_at });
        }
        let failure = Failure::Unexpected("every unique key tried was already taken");
        Err(NotCreated { failure, key: None })
    }

    /// The lease of `turn` on `name`; `shared` for a write lock's key (see
    /// [`crate::read_write`]).
    pub(crate) fn own_key_lease(
        &self,
        name: &LockName,
        turn: Turn,
        exclusive: bool,
        shared: Option<Arc<SharedKey>>,
    ) -> EtcdLease {
        let backend = Arc::downgrade(&self.inner);
        EtcdLease {
            name: name.clone(),
            key: turn.key,
            create_revision: turn.revision,
            lease: turn.lease,
            exclusive,
            held: Some(Held { slot: None, backend, shared }),
        }
    }
}

/// The key-values of the `index`th response of a transaction, if it is a range.
pub(crate) fn range_kvs(responses: &[TxnOpResponse], index: usize) -> &[KeyValue] {
    match responses.get(index) {
        Some(TxnOpResponse::Get(range)) => range.kvs(),
        _ => &[],
    }
}

/// Unix time in nanoseconds (Go's `time.Now().UnixNano()`), above every value this process
/// returned before, so that two acquisitions of one process never try the same key.
pub(crate) fn unique_nanos() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX));
    let previous = LAST.fetch_max(now, Ordering::Relaxed);
    if previous < now {
        return now;
    }
    // Taken already (or the clock went back): one above the last, atomically.
    LAST.fetch_add(1, Ordering::Relaxed) + 1
}

#[cfg(test)]
mod tests {
    use super::unique_nanos;

    #[test]
    fn nanos_never_repeat_within_the_process() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..1000).map(|_| unique_nanos()).collect::<Vec<_>>()))
            .collect();
        let mut all: Vec<i64> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count);
    }
}
