//! Waiting for a Redlock lock: retry on a release message from any node, or after at most a
//! second (or the remaining lease); back off at random after a split vote. No fair queue.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Acquired, LockName, NativeWait, OwnerToken, Result};
use rand::RngExt as _;

use super::acquire::Attempt;
use super::fanout::Fanout;
use super::{RedlockBackend, RedlockLease};
use crate::single_node::FALLBACK_RECHECK;
use crate::waiter::{Registration, Slot};

impl RedlockBackend {
    /// Pokes the subscriber threads of the nodes `which` marks, so they subscribe at once.
    fn poke_subscribers(&self, which: &[bool]) {
        let requests: Vec<Option<Vec<u8>>> = self
            .inner
            .nodes
            .iter()
            .zip(which)
            .map(|(node, &poke)| {
                poke.then(|| {
                    redis::cmd("PUBLISH").arg(node.hub.control_channel()).arg("").get_packed_command()
                })
            })
            .collect();
        let mut fanout = Fanout::open_only(&self.inner.nodes, self.inner.node_timeout, which);
        let requests: Vec<Option<&[u8]>> = requests.iter().map(Option::as_deref).collect();
        for outcome in
            fanout.exchange(&requests, 1, Duration::ZERO, "wake the subscriber").into_iter().flatten()
        {
            if let Err(error) = outcome {
                // That node's subscriber still gets there within its tick.
                tracing::debug!(%error, "poking a redlock subscriber failed");
            }
        }
    }

    /// The waiting loop of [`NativeWait::acquire_until`].
    fn wait_loop(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedlockLease>>> {
        let keys = self.keys(name);
        let slot = Slot::new(&owner.to_hex());
        let mut registrations: Vec<Registration<'_>> = Vec::new();
        loop {
            // Wake-ups so far are answered by what this attempt sees.
            slot.clear();
            let sent_at = Instant::now();
            let (retry_in, split, took) = match self.attempt(name, &keys, owner, ttl)? {
                Attempt::Acquired(lease) => return Ok(Some(Acquired::new(*lease, sent_at))),
                Attempt::Refused { retry_in, split, took } => (retry_in, split, took),
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let bound = |wait: Duration| deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
            if registrations.is_empty() {
                // Subscribe on every node first, then re-check: a release between the failed
                // attempt and the subscriptions would otherwise be missed.
                let mut pokes = Vec::with_capacity(self.inner.nodes.len());
                for node in &self.inner.nodes {
                    let (registration, poke) = node.hub.register_slot(keys.channel(), Arc::clone(&slot));
                    registrations.push(registration);
                    pokes.push(poke);
                }
                if pokes.contains(&true) {
                    self.poke_subscribers(&pokes);
                }
                slot.wait_subscribed(bound(FALLBACK_RECHECK));
                continue;
            }
            if split {
                // Several clients split the votes: retry after a random moment, so that one of
                // them gets ahead of the others next time.
                let jitter = (took * 2).max(Duration::from_millis(1));
                let pause = jitter.mul_f64(rand::rng().random_range(0.0..1.0));
                thread::sleep(bound(pause).saturating_duration_since(now));
                continue;
            }
            let wait = retry_in.map_or(FALLBACK_RECHECK, |hint| hint.min(FALLBACK_RECHECK));
            slot.wait(bound(wait));
        }
    }
}

impl NativeWait for RedlockBackend {
    /// Retries whenever any node announces a release, and on its own after at most a second
    /// (or the soonest end of a refusing node's lease). No fair queue: every waiter retries.
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedlockLease>>> {
        Self::check_ttl(ttl)?;
        self.wait_loop(name, owner, ttl, deadline)
    }
}
