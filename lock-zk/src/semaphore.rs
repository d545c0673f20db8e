//! Counting semaphores in the layout of Apache Curator's `InterProcessSemaphoreV2`, node for
//! node, so that Curator clients and distlock clients of one path share one count of permits.
//!
//! The semaphore `N` lives at `<root>/%semaphore/N` (see [`crate::path`]): a Java service points
//! `new InterProcessSemaphoreV2(client, "<root>/%semaphore/N", permits)` at it. Under it:
//!
//! - `locks`: an `InterProcessMutex` that an acquisition holds while it takes its lease, so that
//!   one acquirer at a time waits for room (Curator's order of arrival);
//! - `leases`: one ephemeral-sequential node per permit, `_c_<uuid>-lease-<sequence>`.
//!
//! Curator's algorithm, followed here: take the `locks` mutex (within the deadline), create the
//! lease node, then list `leases` with a watch until there are no more than N children — ours
//! holds — or the deadline passes — ours is deleted; release the `locks` mutex. A permit is a
//! session hold like a mutex: its node lives as long as the session, so a crashed holder's
//! permit returns when its session ends; release deletes the node.
//!
//! A single attempt (`try_acquire`) skips the `locks` mutex: it creates its lease node, lists
//! `leases` in the same round trip and keeps the node only if there are at most N. That is safe
//! with any mix of acquirers, because every holder counted at most N nodes in a listing made
//! after its own node was created: of N + 1 simultaneous holders, the last created would have
//! counted all N + 1. The mutex only orders the waiters; a try does not wait, and would
//! otherwise fail whenever another acquirer is between its mutex and its lease.
//!
//! # One count per name
//! Curator keeps the count in each client's code, not on the servers. distlock writes it into
//! its lease nodes' data, as `distlock:permits=<N>`, and compares it with the data of the other
//! lease nodes once its own is created: a node of another count gives
//! [`Error::PermitsMismatch`](lock_core::Error::PermitsMismatch) (and ours is deleted). Nodes with
//! other data — Curator's hold the client's IP address by default — are not checked: a Curator
//! client with another count cannot be detected.
//!
//! The fencing token of a permit is its lease node's creation zxid, as for the mutex.

use std::time::Instant;

use lock_core::{check_lease, Acquired, Error, Permits, Request, Result};
use zookeeper_client as zk;

use crate::blocking::refuse_async_context;
use crate::error::Failure;
use crate::lease::ZooKeeperLease;
use crate::path::NodeKind;
use crate::recipe::{Listing, Queue, Wait, RECHECK};
use crate::session::is_terminal;
use crate::ZooKeeperBackend;

/// What a distlock lease node's data starts with; the count follows.
const PERMITS_DATA: &str = "distlock:permits=";

/// How a lease attempt ended short of a permit.
enum Refused {
    /// Another count is in use: the other holders' count.
    Mismatch(u32),
    Failed(Failure),
}

impl From<Failure> for Refused {
    fn from(failure: Failure) -> Self {
        Refused::Failed(failure)
    }
}

impl Permits for ZooKeeperBackend {
    fn acquire_permit(
        &self,
        request: &Request<'_>,
        permits: u32,
    ) -> Result<Option<Acquired<ZooKeeperLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        refuse_async_context()?;
        let client = self.inner.session.client()?;
        let path = self.inner.root.semaphore_path(request.name);
        let leases = format!("{path}/leases");
        let wait = Wait::from(request.deadline);
        if matches!(wait, Wait::No) {
            return self.take_lease(&client, request, &leases, permits, wait);
        }
        let locks = format!("{path}/locks");
        let Some(mutex) =
            self.take_turn(&client, &Queue::mutex(&locks), request.owner.to_hex().as_bytes(), wait)?
        else {
            return Ok(None);
        };
        // Past the deadline already (the mutex's last listing came late): no lease attempt,
        // which would take requests beyond the call's bound.
        let outcome = match wait.is_over() {
            true => Ok(None),
            false => self.take_lease(&client, request, &leases, permits, wait),
        };
        // Sent now, ahead of anything later on this session; retried in the background if its
        // answer is lost (the session's end deletes the node too).
        self.abandon(&client, mutex.node);
        outcome
    }
}

impl ZooKeeperBackend {
    /// Creates our lease node and waits until `leases` has at most `permits` children.
    fn take_lease(
        &self,
        client: &zk::Client,
        request: &Request<'_>,
        leases: &str,
        permits: u32,
        wait: Wait,
    ) -> Result<Option<Acquired<ZooKeeperLease>>> {
        let protection = uuid::Uuid::new_v4().to_string();
        let data = format!("{PERMITS_DATA}{permits}");
        // Creating the node and checking the others' counts end by the deadline plus one request
        // timeout, however late in the wait they start.
        let now = Instant::now();
        let io_timeout = self.inner.session.settings().io_timeout;
        let bound = wait.deadline().map_or(now, |deadline| now.min(deadline)) + io_timeout;
        let created =
            self.create_node(client, (leases, NodeKind::Lease), &protection, data.as_bytes(), bound);
        let (created, listing) = match created {
            Ok(created) => created,
            Err(failure) => {
                if !failure.session_ended() {
                    self.abandon_protected(client, leases.to_owned(), protection);
                }
                return Err(failure.into_error("acquire a permit"));
            }
        };
        let node = format!("{leases}/{}", created.child);
        let outcome = self
            .check_count(client, (leases, &created.child), &listing, permits, bound)
            .and_then(|()| Ok(self.wait_for_room(client, leases, &created.child, listing, permits, wait)?));
        match outcome {
            Ok(Some((sent_at, waited))) => {
                let lease = self.lease(request.name, client, node, created.czxid);
                Ok(Some(Acquired::new(lease, sent_at).contended_if(waited)))
            }
            Ok(None) => {
                self.abandon(client, node);
                Ok(None)
            }
            Err(refused) => {
                let error = match refused {
                    Refused::Mismatch(held_with) => {
                        Error::PermitsMismatch { name: request.name.clone(), asked: permits, held_with }
                    }
                    Refused::Failed(failure) if failure.session_ended() => {
                        return Err(failure.into_error("acquire a permit"));
                    }
                    Refused::Failed(failure) => failure.into_error("acquire a permit"),
                };
                self.abandon(client, node);
                Err(error)
            }
        }
    }

    /// The other lease nodes' counts, read in one request: `Mismatch` if a distlock node holds
    /// another count than `permits`. Nodes gone meanwhile, and nodes of other data, are skipped.
    fn check_count(
        &self,
        client: &zk::Client,
        (leases, ours): (&str, &str),
        listing: &Listing,
        permits: u32,
        bound: Instant,
    ) -> Result<(), Refused> {
        let others: Vec<&String> = listing.children.iter().filter(|child| *child != ours).collect();
        if others.is_empty() {
            return Ok(());
        }
        let mut reader = client.new_multi_reader();
        for child in &others {
            reader.add_get_data(&format!("{leases}/{child}")).map_err(Failure::Zk)?;
        }
        let session = &self.inner.session;
        let results = session.call_until(bound, reader.commit())?;
        for result in results {
            if let zk::MultiReadResult::Data { data, .. } = result {
                if let Some(count) = count_of(&data).filter(|count| *count != permits) {
                    return Err(Refused::Mismatch(count));
                }
            }
        }
        Ok(())
    }

    /// Curator's loop: lists `leases` with a watch until it has at most `permits` children, or
    /// the wait ends. Returns when the listing that showed room was sent, and whether it waited.
    fn wait_for_room(
        &self,
        client: &zk::Client,
        leases: &str,
        ours: &str,
        mut listing: Listing,
        permits: u32,
        wait: Wait,
    ) -> Result<Option<(Instant, bool)>, Failure> {
        let session = &self.inner.session;
        let io_timeout = session.settings().io_timeout;
        let deadline = wait.deadline();
        let bound = |now: Instant| deadline.map_or(now, |d| now.min(d)) + io_timeout;
        let mut watcher = None;
        loop {
            if !listing.children.iter().any(|child| child == ours) {
                // No path in the text: it carries the lock name, which spans may have to redact.
                return Err(Failure::Zk(zk::Error::UnexpectedError(
                    "the waiter's lease node vanished while waiting (deleted, or its session ended)".into(),
                )));
            }
            if listing.children.len() <= usize::try_from(permits).unwrap_or(usize::MAX) {
                return Ok(Some((listing.at, listing.after_wait)));
            }
            if wait.is_over() {
                return Ok(None);
            }
            if let Some(watcher) = watcher.take() {
                let now = Instant::now();
                let until = deadline.map_or(now + RECHECK, |deadline| deadline.min(now + RECHECK));
                let changed: zk::OneshotWatcher = watcher;
                if let Some(event) = session.wait_until(until, changed.changed()) {
                    if is_terminal(event.session_state) {
                        return Err(Failure::Zk(zk::Error::SessionExpired));
                    }
                }
                if wait.is_over() {
                    return Ok(None);
                }
            }
            let sent_at = Instant::now();
            match session.call_until(bound(sent_at), client.get_and_watch_children(leases)) {
                Ok((children, stat, set)) => {
                    listing = Listing { children, pzxid: stat.pzxid, at: sent_at, after_wait: true };
                    watcher = Some(set);
                }
                Err(failure) => self.pause_unless_final(failure, deadline)?,
            }
        }
    }
}

/// The count a distlock lease node's data records, if it is one.
fn count_of(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.strip_prefix(PERMITS_DATA)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::count_of;

    #[test]
    fn only_distlock_data_records_a_count() {
        assert_eq!(count_of(b"distlock:permits=3"), Some(3));
        assert_eq!(count_of(b"172.17.0.2"), None);
        assert_eq!(count_of(b"distlock:permits=x"), None);
        assert_eq!(count_of(b""), None);
    }
}
