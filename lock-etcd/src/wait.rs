//! Waiting for the turn: Go's `waitDeletes` (the mutex) and `waitOnLastRev` (the read-write
//! lock), one watch on one key at a time.
//!
//! The waiter reads the newest key of its range ordered before its own (revision below ours,
//! sorted by that revision, descending, limit 1: the mutex orders by create revision, Go's
//! `RWMutex` by mod revision) and watches only that key's deletion (from the moment the watch
//! begins, then reading the key once more) — so one release wakes one waiter, never the herd —
//! and reads again when it comes, until no older key is left. Then it checks that its own key
//! still exists (Go v3.5's `ErrSessionExpired`): a lease that ended meanwhile took it.
//!
//! Unlike Go's `waitDelete`, a watch is never trusted alone: the waiter reads again on its own
//! every [`RECHECK`] (a lost event delays it, never strands it), a watch whose start revision
//! was compacted away is answered by reading again (Go aborts the lock), and the wait ends at
//! once when the client's lease is lost.
//!
//! [`Watch`] (a watch confirmed by etcd, its token renewed once if refused) serves the
//! semaphore's wait on a whole prefix too ([`crate::semaphore`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Event, EventType, GetOptions, SortOrder, SortTarget, WatchFilterType, WatchOptions, WatchStream,
};
use tonic::{Code, Status};

use crate::error::Failure;
use crate::keep_alive::ClientLease;
use crate::keys::contenders_range;
use crate::mutex::RETRY;
use crate::EtcdBackend;

/// A waiter reads the queue again on its own this often.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// How a watch on a predecessor ended.
enum Watched {
    /// It was deleted.
    Deleted,
    /// Its start revision was compacted: read again.
    Compacted,
}

/// Which revision orders a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The create revision: Go's `Mutex` (`WithFirstCreate`, `WithMaxCreateRev`).
    Created,
    /// The mod revision: Go's `RWMutex` (`WithLastRev`, `WithMaxModRev`). The same as the create
    /// revision for keys written once, as every contender's is.
    Modified,
}

impl Order {
    /// The newest key of a prefix ordered below `revision`.
    fn newest_below(self, revision: i64) -> GetOptions {
        let options = GetOptions::new().with_prefix().with_limit(1);
        match self {
            Order::Created => options
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_max_create_revision(revision - 1),
            Order::Modified => {
                options.with_sort(SortTarget::Mod, SortOrder::Descend).with_max_mod_revision(revision - 1)
            }
        }
    }
}

impl EtcdBackend {
    /// Step 3 of the mutex recipe: waits until no key under `<prefix>/` older than ours
    /// (created at `revision`) is left; see [`wait_for_none_below`](Self::wait_for_none_below).
    pub(crate) fn wait_for_turn(
        &self,
        prefix: &str,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Failure> {
        self.wait_for_none_below(&contenders_range(prefix), Order::Created, key, revision, lease, deadline)
    }

    /// Waits until no key under the prefix `range` that `order` puts below `revision` (our
    /// key's) is left; returns when the read that showed our key still there was sent, or
    /// `None` when `deadline` passed first. Every request is bounded by the I/O timeout and by
    /// the deadline plus one I/O timeout; one without an answer is tried again, keeping our
    /// place.
    pub(crate) fn wait_for_none_below(
        &self,
        range: &str,
        order: Order,
        key: &str,
        revision: i64,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Instant>, Failure> {
        let session = &self.inner.session;
        let io_timeout = session.settings().io_timeout;
        // A caller's deadline may sit at the edge of what an `Instant` holds (the backend's own
        // API takes any): past it, only the I/O timeout bounds a request.
        let bound = |now: Instant| {
            let late = deadline.and_then(|d| d.checked_add(io_timeout));
            late.map_or(now + io_timeout, |late| (now + io_timeout).min(late))
        };
        loop {
            let older = order.newest_below(revision);
            let found = match session.get(bound(Instant::now()), range, Some(older)) {
                Ok(found) => found,
                Err(failure) => {
                    self.pause_unless_final(failure, lease, deadline)?;
                    continue;
                }
            };
            let Some(predecessor) = found.kvs().first() else { break };
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
            let now = Instant::now();
            let until = deadline.map_or(now + RECHECK, |deadline| deadline.min(now + RECHECK));
            let watch = watch_deletion(
                session.client().clone(),
                predecessor.key().to_vec(),
                Start::Now { created: predecessor.create_revision() },
            );
            let watched = session.wait_until(until, async {
                tokio::select! {
                    watched = watch => Some(watched),
                    () = lease.lost() => None,
                }
            });
            match watched {
                // Time to read again (a recheck, or the deadline).
                None => {}
                Some(None) => return Err(Failure::LeaseLost),
                Some(Some(Ok(Watched::Deleted))) => {
                    self.inner.wake_ups.fetch_add(1, Ordering::Relaxed);
                }
                Some(Some(Ok(Watched::Compacted))) => {}
                Some(Some(Err(failure))) => self.pause_unless_final(failure, lease, deadline)?,
            }
        }
        // Go v3.5: our key must still be there (a lease that ended took it).
        loop {
            let sent_at = Instant::now();
            match session.get(bound(sent_at), key, None) {
                Ok(found) => {
                    return match found.kvs().first() {
                        Some(ours) if ours.create_revision() == revision => Ok(Some(sent_at)),
                        _ if lease.is_lost() => Err(Failure::LeaseLost),
                        _ => Err(Failure::Unexpected(
                            "the waiter's lock key was deleted while it waited (by hand, or its lease ended)",
                        )),
                    };
                }
                Err(failure) => self.pause_unless_final(failure, lease, deadline)?,
            }
        }
    }

    /// A failed request in a wait: the failure if it is final (a definite answer, or past the
    /// deadline), the lease's loss once the keep-alive has given it up (a wait without a
    /// deadline must not retry into an outage forever: the caller then queues on a new lease,
    /// which fails within the connect timeout if etcd stays away), else a short pause before
    /// the wait goes on.
    pub(crate) fn pause_unless_final(
        &self,
        failure: Failure,
        lease: &ClientLease,
        deadline: Option<Instant>,
    ) -> Result<(), Failure> {
        if lease.is_lost() {
            return Err(Failure::LeaseLost);
        }
        if failure.is_definite() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(failure);
        }
        let pause =
            deadline.map_or(RETRY, |deadline| deadline.saturating_duration_since(Instant::now()).min(RETRY));
        std::thread::sleep(pause);
        Ok(())
    }
}

/// Where a watch starts.
#[derive(Clone, Copy)]
enum Start {
    /// From revision `from` (inclusive).
    #[cfg_attr(not(test), allow(dead_code))]
    At(i64),
    /// From now, and then the key is read once the watch is in place: gone, or re-created (the
    /// same client's key comes back with a new create revision after a release and a new lock),
    /// counts as deleted. What waiters do, rather than Go's `waitDelete` from the waiter's read
    /// revision: a watch starting at a revision the store already has is "unsynced" on the
    /// server and caught up by a loop every 100 ms.
    Now {
        /// The create revision of the key as the waiter read it.
        created: i64,
    },
}

/// Watches `key` until it is deleted (see [`Start`]).
async fn watch_deletion(client: Client, key: Vec<u8>, start: Start) -> Result<Watched, Failure> {
    let mut options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
    if let Start::At(from) = start {
        options = options.with_start_revision(from);
    }
    let mut watch = Watch::open(&client, key.clone(), options).await?;
    if let Start::Now { created } = start {
        let read = client.kv_client().get(key, Some(GetOptions::new().with_keys_only())).await?;
        if read.kvs().first().is_none_or(|kv| kv.create_revision() != created) {
            return Ok(Watched::Deleted);
        }
    }
    loop {
        match watch.next().await? {
            Report::Compacted => return Ok(Watched::Compacted),
            Report::Events(events) if events.iter().any(|event| event.event_type() == EventType::Delete) => {
                return Ok(Watched::Deleted);
            }
            Report::Events(_) => {}
        }
    }
}

/// A watch etcd has confirmed: the events from then on (or from its start revision) come
/// through [`Watch::next`].
pub(crate) struct Watch {
    stream: WatchStream,
    /// Cancelled at creation for a compacted start revision.
    compacted: bool,
}

/// What a watch reported.
pub(crate) enum Report {
    /// Events, in order.
    Events(Vec<Event>),
    /// Its start revision was compacted away: read again.
    Compacted,
}

impl Watch {
    /// Opens a watch on `key` with `options` and waits until etcd confirms it. A watch refused
    /// at creation with "permission denied" — what etcd 3.4 says for an expired auth token too —
    /// is tried once more after renewing the token.
    pub(crate) async fn open(client: &Client, key: Vec<u8>, options: WatchOptions) -> Result<Self, Failure> {
        let mut renewed = false;
        let mut watches = client.watch_client();
        'create: loop {
            let mut stream = watches.watch(key.clone(), Some(options.clone())).await?;
            loop {
                let response = next_message(&mut stream).await?;
                if response.canceled() {
                    if response.compact_revision() > 0 {
                        return Ok(Self { stream, compacted: true });
                    }
                    let reason = response.cancel_reason().to_owned();
                    if reason.contains("permission denied") && !renewed {
                        renewed = true;
                        // etcd-client renews the token when a unary call is refused, not when a
                        // watch is. Best effort: the next creation says whether it helped.
                        let _ = client.refresh_token().await;
                        continue 'create;
                    }
                    return Err(canceled(reason));
                }
                if response.created() {
                    return Ok(Self { stream, compacted: false });
                }
            }
        }
    }

    /// The next events (or the watch's end).
    pub(crate) async fn next(&mut self) -> Result<Report, Failure> {
        if self.compacted {
            return Ok(Report::Compacted);
        }
        let response = next_message(&mut self.stream).await?;
        if response.canceled() {
            if response.compact_revision() > 0 {
                self.compacted = true;
                return Ok(Report::Compacted);
            }
            return Err(canceled(response.cancel_reason().to_owned()));
        }
        Ok(Report::Events(response.events().to_vec()))
    }
}

/// The next message of a watch stream; its end is an error.
async fn next_message(stream: &mut WatchStream) -> Result<etcd_client::WatchResponse, Failure> {
    match stream.message().await? {
        Some(response) => Ok(response),
        None => Err(Failure::Etcd(etcd_client::Error::WatchError("the watch stream ended".into()))),
    }
}

/// A watch cancelled by etcd for `reason`, as an error.
fn canceled(reason: String) -> Failure {
    let code = if reason.contains("permission denied") { Code::PermissionDenied } else { Code::Aborted };
    Failure::Etcd(etcd_client::Error::GRpcStatus(Status::new(code, reason)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_testkit::harness::EtcdServer;

    #[test]
    fn a_watch_from_a_compacted_revision_asks_for_a_new_read() {
        let server = EtcdServer::start().unwrap();
        let backend = EtcdBackend::from_url(&server.url()).unwrap();
        let session = &backend.inner.session;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut kv = session.client().kv_client();
        let revision = |put: etcd_client::PutResponse| put.header().map(|header| header.revision()).unwrap();
        let first = revision(session.call_until(deadline, kv.put("k", "1", None)).unwrap());
        let last = revision(session.call_until(deadline, kv.put("k", "2", None)).unwrap());
        session.call_until(deadline, kv.compact(last, None)).unwrap();
        let watch = watch_deletion(session.client().clone(), b"k".to_vec(), Start::At(first));
        assert!(matches!(session.wait_until(deadline, watch), Some(Ok(Watched::Compacted))));

        let watch = watch_deletion(session.client().clone(), b"k".to_vec(), Start::At(last));
        let deleted = session.wait_until(deadline, async {
            let mut kv = kv.clone();
            let (watched, _) = tokio::join!(watch, async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                kv.delete("k", None).await
            });
            watched
        });
        assert!(matches!(deleted, Some(Ok(Watched::Deleted))));
    }
}
