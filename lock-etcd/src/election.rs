//! Leader election in the layout of etcd's `concurrency.Election` (Go's
//! `client/v3/concurrency/election.go`), key for key, so that distlock candidates, Go services
//! using `concurrency.NewElection` and `etcdctl elect` elect one leader between them.
//!
//! The election `N` lives under the prefix `E = [ns/]%election/<encoded N>` (see
//! [`crate::keys`]; [`EtcdBackend::election_prefix`]): `etcdctl elect E <proposal>` and Go's
//! `NewElection(session, E)` campaign on it.
//!
//! - **Campaign** is the mutex's acquisition ([`crate::mutex`]) on `E` with the campaign's value:
//!   the key `E/<lease id in lower-case hex>`, attached to the client's lease, holds the value
//!   (Go's transaction `if create_revision(key) == 0 then put(key, value, lease)`), and the
//!   candidate leads once no key under `E/` has a lower create revision (Go's `waitDeletes`). A
//!   leadership is therefore an ordinary [`EtcdLease`]: alive with the client's lease, resigned
//!   by the mutex's release (a delete guarded by its create revision), fenced by that revision.
//!   Two differences from Go, both the mutex's: a client's threads queue in-process for one
//!   election (they share the lease, so they would share the key), and an existing key of our
//!   lease is a leftover, deleted before queueing again — where Go adopts it and proclaims over
//!   it. `try_campaign` that does not lead deletes its key at once.
//! - **Proclaim** is Go's `Proclaim`: put the value on our key if its create revision is still
//!   ours, in one transaction; a failed compare is [`Error::NotHeld`].
//! - **Leader** is Go's `Leader` (`WithFirstCreate`): the key under `E/` with the lowest create
//!   revision, its value, and its create revision as the token. A new leader's value is there
//!   from its first transaction: the key is put with it.
//! - **Watching**: one watch on the range `E/` from the revision after a read made when it is
//!   armed, so no change after that read is missed; every event wakes the follower — candidates
//!   joining or leaving behind the leader too (a spurious wake-up costs the observer one read
//!   of one key, and spares a second watch on the leader's key, which Go's `Observe` keeps).

use std::time::Instant;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, WatchOptions, WatchStream,
};
use lock_core::{
    check_lease, Acquired, Deadline, Elections, Error, Leader, LeaderWatch, LockName, Request, Result,
};

use crate::blocking::refuse_async_context;
use crate::error::Failure;
use crate::keys::contenders_range;
use crate::lease::{revision_token, EtcdLease};
use crate::mutex::{Wait, Won};
use crate::requests::retry_unsent;
use crate::EtcdBackend;

impl Elections for EtcdBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<EtcdLease>>> {
        check_lease(request.ttl)?;
        refuse_async_context()?;
        let wait = match request.deadline {
            Deadline::Now => Wait::No,
            Deadline::At(deadline) => Wait::Until(Some(deadline)),
            Deadline::Never => Wait::Until(None),
        };
        let prefix = self.election_prefix(request.name);
        let Some(Won { lease, confirmed_at, waited }) =
            self.acquire_on(request.name, &prefix, value, wait, request.ttl)?
        else {
            return Ok(None);
        };
        let start = Self::hold_start(&lease.lease, request.ttl, confirmed_at);
        Ok(Some(Acquired::new(lease, start).contended_if(waited)))
    }

    fn proclaim(&self, lease: &mut EtcdLease, value: &[u8]) -> Result<()> {
        refuse_async_context()?;
        let not_held = || Error::NotHeld { name: lease.name.clone() };
        // Resigned, or lost by this client's clock: etcd may not have dropped the key yet, but
        // the leadership must not act after the moment it was reported lost.
        if lease.held.is_none() || lease.lease.is_lost() {
            return Err(not_held());
        }
        let key = lease.key.as_str();
        let proclaim = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, lease.create_revision)])
            .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease.lease.id)))]);
        match self.inner.session.txn(self.io_deadline(), proclaim) {
            Ok(response) if response.succeeded() => Ok(()),
            // Our key is gone (resigned, deleted by hand, or its lease ended): nothing written.
            Ok(_) => Err(not_held()),
            Err(failure) if failure.is_lease_gone() => Err(not_held()),
            Err(failure) => Err(failure.into_error("proclaim")),
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        refuse_async_context()?;
        let range = contenders_range(&self.election_prefix(name));
        let first =
            GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let found = self
            .inner
            .session
            .get(self.io_deadline(), range, Some(first))
            .map_err(|failure| failure.into_error("read the leader"))?;
        let leader = found.kvs().first();
        Ok(leader.map(|kv| Leader::new(kv.value(), Some(revision_token(kv.create_revision())))))
    }

    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        refuse_async_context()?;
        let range = contenders_range(&self.election_prefix(name));
        let stream =
            self.watch_candidates(&range).map_err(|failure| failure.into_error("watch the leader"))?;
        Ok(Box::new(EtcdLeaderWatch { backend: self, range, stream: Some(stream) }))
    }
}

impl EtcdBackend {
    /// A watch on every key under `range`, from the revision after a read made now: every
    /// change since that read comes as an event. Within one I/O timeout.
    fn watch_candidates(&self, range: &str) -> Result<WatchStream, Failure> {
        let session = &self.inner.session;
        let deadline = self.io_deadline();
        let read = session.get(deadline, range, Some(GetOptions::new().with_prefix().with_count_only()))?;
        let Some(revision) = read.header().map(etcd_client::ResponseHeader::revision) else {
            return Err(Failure::Unexpected("etcd answered a read without its revision"));
        };
        let watches = session.client().watch_client();
        let watch = retry_unsent(deadline, || {
            let mut watches = watches.clone();
            let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
            let range = range.to_owned();
            async move { watches.watch(range, Some(options)).await }
        });
        session.call_until(deadline, watch)
    }
}

/// A follower's watch on one election: one watch stream on the candidates' range, kept while it
/// delivers, made anew (from a fresh read) when etcd cancels it or the stream breaks.
struct EtcdLeaderWatch<'a> {
    backend: &'a EtcdBackend,
    range: String,
    /// `None` when making it anew failed: the next wait makes it.
    stream: Option<WatchStream>,
}

/// What one wait on the stream came to.
enum Woken {
    /// Events: the election may have changed.
    Event,
    /// `until` passed first.
    TimedOut,
    /// The watch is over (cancelled — a compacted start revision, a refusal — or its stream
    /// ended or broke): what happened since is for a fresh read to say.
    Ended(String),
}

impl LeaderWatch for EtcdLeaderWatch<'_> {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        refuse_async_context()?;
        let session = &self.backend.inner.session;
        let Some(stream) = self.stream.as_mut() else {
            // Changes before this watch was armed are for the caller's next read to see.
            let stream = self.backend.watch_candidates(&self.range);
            self.stream = Some(stream.map_err(|failure| failure.into_error("watch the leader"))?);
            return Ok(true);
        };
        let woken = loop {
            match session.wait_until(until, stream.message()) {
                None => break Woken::TimedOut,
                Some(Ok(Some(response))) if response.canceled() => {
                    let why = match response.compact_revision() {
                        0 => response.cancel_reason().to_owned(),
                        compacted => format!("its start revision was compacted (to {compacted})"),
                    };
                    break Woken::Ended(why);
                }
                Some(Ok(Some(response))) if !response.events().is_empty() => break Woken::Event,
                // The watch's creation, or a progress notice: no news.
                Some(Ok(Some(_))) => {}
                Some(Ok(None)) => break Woken::Ended("the stream ended".into()),
                Some(Err(error)) => break Woken::Ended(error.to_string()),
            }
        };
        match woken {
            Woken::Event => Ok(true),
            Woken::TimedOut => Ok(false),
            Woken::Ended(why) => {
                tracing::debug!(%why, "an etcd election watch ended; watching again");
                // Armed again before returning, so the caller's next read comes after it.
                let again = self.backend.watch_candidates(&self.range);
                if let Err(failure) = &again {
                    tracing::debug!(?failure, "watching the etcd election again failed; the next wait tries");
                }
                self.stream = again.ok();
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lock_testkit::harness::EtcdServer;

    use super::*;

    #[test]
    fn a_watch_cancelled_for_compaction_wakes_and_is_made_anew() {
        // A server of its own: the compaction would cancel other tests' watches.
        let server = EtcdServer::start().unwrap();
        let backend = EtcdBackend::from_url(&server.url()).unwrap();
        let session = &backend.inner.session;
        let deadline = Instant::now() + Duration::from_secs(10);
        let (range, key) = ("%election/e/", "%election/e/1");
        let mut kv = session.client().kv_client();
        let put = session.call_until(deadline, kv.put(key, "v-1", None)).unwrap();
        let first = put.header().unwrap().revision();
        session.call_until(deadline, kv.put(key, "v-2", None)).unwrap();
        session.call_until(deadline, kv.compact(first + 1, None)).unwrap();
        let mut watches = session.client().watch_client();
        let options = WatchOptions::new().with_prefix().with_start_revision(first);
        let mut probe = session.call_until(deadline, watches.watch(range, Some(options.clone()))).unwrap();
        let cancelled = loop {
            let response = session.call_until(deadline, probe.message()).unwrap().unwrap();
            if response.canceled() || !response.events().is_empty() {
                break response;
            }
        };
        assert!(cancelled.canceled() && cancelled.compact_revision() > 0, "the premise: {cancelled:?}");
        let stale = session.call_until(deadline, watches.watch(range, Some(options))).unwrap();
        let mut watch = EtcdLeaderWatch { backend: &backend, range: range.to_owned(), stream: Some(stale) };

        assert!(watch.wait(deadline).unwrap(), "a cancelled watch asks for a new read");
        let quiet = Instant::now() + Duration::from_millis(200);
        assert!(!watch.wait(quiet).unwrap(), "made anew from the present: nothing to report");
        session.call_until(deadline, kv.delete(key, None)).unwrap();
        let started = Instant::now();
        assert!(watch.wait(deadline).unwrap(), "the new watch sees the next change");
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
