//! Counting semaphores, in the spirit of etcd's recipes (which have none): one key per permit
//! request, queued by create revision.
//!
//! The semaphore `N` lives under `S = [ns/]%semaphore/N` (see [`crate::keys`]):
//!
//! - every request puts a key of its own, `S/<unix nanos>`, on its client's lease, only if it
//!   has never existed (Go's `newUniqueEphemeralKV`; see [`crate::own_key`]), whose value is
//!   the permit count, in decimal;
//! - a request **holds** a permit when fewer than `permits` keys under `S/` have a lower create
//!   revision: the first `permits` keys hold, the others wait in order of arrival (no barging:
//!   a try counts the waiters ahead of it too);
//! - it **reads** the oldest keys below its own, `permits` at most (sorted by create revision,
//!   ascending, max create revision ours − 1), with its own key in the same transaction; the
//!   first read goes in the creation's transaction;
//! - it **waits** by watching `S/` for deletions from the moment the watch is confirmed, then
//!   reading again, and again after each deletion of a key older than its own (the deleted key's
//!   previous value tells its revision): any such deletion may admit it. So a release wakes every
//!   waiter to read once — a herd, bounded by the number of waiters, where a single watched
//!   predecessor cannot say when `permits` keys are gone. It reads on its own every
//!   [`RECHECK`] as well, and stops at once when the client's lease is lost;
//! - a try that does not hold at once deletes its key, and so does a wait that times out (in the
//!   background if etcd does not answer); release deletes the key if its create revision is
//!   still ours. A crashed holder's key goes with its lease.
//!
//! # One count per name
//! Every read checks the counts of the keys it returns. A key with another count gives
//! [`Error::PermitsMismatch`] (and ours is deleted). A request is admitted only by a read that
//! returned *every* key below its own (fewer than `permits`), all with its count, and keys below
//! it cannot appear later — so every holder's count is the count of every holder below it, and
//! the newest holder counted all of them: never more than `permits` holders of one count, and
//! never two counts at once. Once every key of a count is gone, another count may be used.
//!
//! The fencing token of a permit is its key's create revision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use etcd_client::{
    Client, EventType, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, WatchFilterType, WatchOptions,
};
use lock_core::{check_lease, check_permits, Acquired, Error, LockName, Permits, Request, Result};

use crate::blocking::refuse_async_context;
use crate::error::{Failure, BACKEND};
use crate::keep_alive::ClientLease;
use crate::keys::contenders_range;
use crate::lease::EtcdLease;
use crate::own_key::{range_kvs, Contention, Refused};
use crate::session::Session;
use crate::wait::{Report, Watch, RECHECK};
use crate::EtcdBackend;

/// A permit request on the semaphore under `S`.
struct Permit<'a> {
    name: &'a LockName,
    /// `S`: our key goes under it.
    prefix: String,
    /// `S/`: every request's key.
    range: String,
    permits: u32,
    /// The count, as our key's value.
    value: String,
}

/// How a wait for room ended.
enum Room {
    /// Our key holds: the read that showed it was sent then.
    Free(Instant),
    /// Another count is in use, or a key is not a count.
    Refused(Error),
}

impl Permit<'_> {
    /// The oldest keys of the semaphore, `permits` at most (below `revision` if given).
    fn oldest(&self, below: Option<i64>) -> TxnOp {
        let limit = i64::from(self.permits);
        let mut options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(limit);
        if let Some(revision) = below {
            options = options.with_max_create_revision(revision - 1);
        }
        TxnOp::get(self.range.as_str(), Some(options))
    }

    /// [`Error::PermitsMismatch`] for a key other than ours with another count; a key whose
    /// value is not a count is an error too (something else writes under the prefix).
    fn check_counts(&self, key: &str, found: &[KeyValue]) -> Result<(), Error> {
        let others = found.iter().filter(|kv| kv.key() != key.as_bytes());
        for other in others {
            let count = std::str::from_utf8(other.value()).ok().and_then(|text| text.parse::<u32>().ok());
            let held_with = match count {
                Some(count) if count == self.permits => continue,
                Some(count) => count,
                None => {
                    let (key, value) =
                        (String::from_utf8_lossy(other.key()), String::from_utf8_lossy(other.value()));
                    let why =
                        format!("semaphore {}: the key {key} holds {value:?}, not a permit count", self.name);
                    return Err(Error::backend(BACKEND, why));
                }
            };
            return Err(Error::PermitsMismatch { name: self.name.clone(), asked: self.permits, held_with });
        }
        Ok(())
    }
}

impl Contention for Permit<'_> {
    fn dir(&self) -> &str {
        &self.prefix
    }

    fn value(&self) -> &str {
        &self.value
    }

    /// The `permits` oldest keys: ours is the newest of all, so it holds if it is among them.
    fn look(&self) -> TxnOp {
        self.oldest(None)
    }

    fn holds_at_once(&self, key: &str, found: &[KeyValue]) -> Result<bool, Refused> {
        self.check_counts(key, found).map_err(Refused::Error)?;
        Ok(found.iter().any(|kv| kv.key() == key.as_bytes()))
    }

    fn wait(
        &self,
        backend: &EtcdBackend,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Refused> {
        backend.wait_for_room(self, key, revision, lease, deadline)
    }

    fn operation(&self) -> &'static str {
        "acquire a permit"
    }
}

impl Permits for EtcdBackend {
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<EtcdLease>>> {
        check_lease(request.ttl)?;
        check_permits(permits)?;
        refuse_async_context()?;
        let prefix = self.inner.namespace.semaphore_prefix(request.name);
        let permit = Permit {
            name: request.name,
            range: contenders_range(&prefix),
            prefix,
            permits,
            value: permits.to_string(),
        };
        let Some(turn) = self.contend(request, &permit)? else { return Ok(None) };
        let (start, waited) = (Self::hold_start(&turn.lease, request.ttl, turn.confirmed_at), turn.waited);
        let lease = self.own_key_lease(request.name, turn, false, None);
        Ok(Some(Acquired::new(lease, start).contended_if(waited)))
    }
}

impl EtcdBackend {
    /// Waits until fewer than `permits` keys are below ours (created at `revision`): when the
    /// read that showed it was sent, or `None` once `deadline` passed. Each round is one watch
    /// and its reads, bounded by [`RECHECK`] and the deadline; a failed one is tried again,
    /// keeping our place, unless its failure is final.
    fn wait_for_room(
        &self,
        permit: &Permit<'_>,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Refused> {
        let session = &self.inner.session;
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let until = deadline.map_or(now + RECHECK, |deadline| deadline.min(now + RECHECK));
            let round =
                Round { session, permit, key, revision, lease, until, wake_ups: &self.inner.wake_ups };
            let watched = session.wait_until(until, async {
                tokio::select! {
                    room = round.watch() => Some(room),
                    () = lease.lost() => None,
                }
            });
            match watched {
                // Time to read again (a recheck), or the deadline.
                None => {}
                Some(None) => return Err(Failure::LeaseLost.into()),
                Some(Some(Ok(Room::Free(sent_at)))) => return Ok(Some(sent_at)),
                Some(Some(Ok(Room::Refused(error)))) => return Err(Refused::Error(error)),
                Some(Some(Err(failure))) => self.pause_unless_final(failure, lease, deadline)?,
            }
        }
    }
}

/// One round of a permit's wait: a watch on the semaphore, and a read after its creation and
/// after each deletion below our key.
struct Round<'a> {
    session: &'a Session,
    permit: &'a Permit<'a>,
    key: &'a str,
    revision: i64,
    lease: &'a ClientLease,
    /// Unsent requests are tried again until then.
    until: Instant,
    wake_ups: &'a AtomicU64,
}

impl Round<'_> {
    async fn watch(&self) -> Result<Room, Failure> {
        let client: &Client = self.session.client();
        let options =
            WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoPut]).with_prev_key();
        let range = self.permit.range.clone().into_bytes();
        let mut watch = Watch::open(client, range.clone(), options.clone()).await?;
        loop {
            if let Some(room) = self.read().await? {
                return Ok(room);
            }
            loop {
                let events = match watch.next().await? {
                    Report::Events(events) => events,
                    // etcd cancelled the watch (a slow watcher overtaken by a compaction):
                    // watch anew from now, then read again — the cancelled one would report
                    // the same at once, forever.
                    Report::Compacted => {
                        watch = Watch::open(client, range.clone(), options.clone()).await?;
                        break;
                    }
                };
                // A key below ours went (a deletion without its previous value may have been).
                let below = events.iter().any(|event| {
                    event.event_type() == EventType::Delete
                        && event.prev_kv().is_none_or(|previous| previous.create_revision() < self.revision)
                });
                if below {
                    self.wake_ups.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }

    /// The keys below ours and our own, in one read-only transaction: our room, or `None` to
    /// wait on.
    async fn read(&self) -> Result<Option<Room>, Failure> {
        let own = TxnOp::get(self.key, Some(GetOptions::new().with_keys_only()));
        let txn = Txn::new().and_then([self.permit.oldest(Some(self.revision)), own]);
        let sent_at = Instant::now();
        let response = self.session.txn_request(self.until, txn).await?;
        let responses = response.op_responses();
        // Go v3.5's `ErrSessionExpired`: our key must still be there.
        if range_kvs(&responses, 1).first().is_none_or(|ours| ours.create_revision() != self.revision) {
            return Err(match self.lease.is_lost() {
                true => Failure::LeaseLost,
                false => Failure::Unexpected(
                    "the waiter's permit key was deleted while it waited (by hand, or its lease ended)",
                ),
            });
        }
        let below = range_kvs(&responses, 0);
        if let Err(error) = self.permit.check_counts(self.key, below) {
            return Ok(Some(Room::Refused(error)));
        }
        let free = below.len() < usize::try_from(self.permit.permits).unwrap_or(usize::MAX);
        Ok(free.then_some(Room::Free(sent_at)))
    }
}
