//! Waiting for a Redlock lock: retry on a release message from any node, or after at most a
//! second (or the remaining lease); back off at random after a split vote. No fair queue. The
//! loop itself is `wait_loop.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Acquired, LockName, NativeWait, OwnerToken, Result};
use rand::RngExt as _;

use super::acquire::Attempt;
use super::fanout::Fanout;
use super::{RedlockBackend, RedlockLease};
use crate::keys::RedisKeys;
use crate::wait_loop::{self, Refusal, Waiter};
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
}

/// One waiting Redlock acquisition: wake-ups from every node land in one slot.
struct NodesWaiter<'a> {
    backend: &'a RedlockBackend,
    name: &'a LockName,
    keys: RedisKeys,
    owner: &'a OwnerToken,
    ttl: Duration,
    slot: Arc<Slot>,
    registrations: Vec<Registration>,
}

impl Waiter for NodesWaiter<'_> {
    type Lease = RedlockLease;

    fn attempt(&mut self) -> Result<std::result::Result<RedlockLease, Refusal>> {
        Ok(match self.backend.attempt(self.name, &self.keys, self.owner, self.ttl)? {
            Attempt::Acquired(lease) => Ok(*lease),
            Attempt::Refused { retry_in, split, took } => Err(Refusal {
                retry_in,
                // Several clients split the votes: retry after a random moment, so that one of
                // them gets ahead of the others next time.
                back_off: split.then(|| {
                    let jitter = (took * 2).max(Duration::from_millis(1));
                    jitter.mul_f64(rand::rng().random_range(0.0..1.0))
                }),
            }),
        })
    }

    fn subscribe(&mut self, until: Instant) -> Result<()> {
        let nodes = &self.backend.inner.nodes;
        let mut pokes = Vec::with_capacity(nodes.len());
        for node in nodes {
            let (registration, poke) = node.hub.register_slot(self.keys.channel(), Arc::clone(&self.slot));
            self.registrations.push(registration);
            pokes.push(poke);
        }
        if pokes.contains(&true) {
            self.backend.poke_subscribers(&pokes);
        }
        self.slot.wait_subscribed(until);
        // A node that missed the poke is not an error: it answers for itself in the next vote,
        // and its subscriber gets there within its tick.
        Ok(())
    }

    fn clear(&self) {
        self.slot.clear();
    }

    fn wait(&self, until: Instant) {
        self.slot.wait(until);
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
        let mut waiter = NodesWaiter {
            backend: self,
            name,
            keys: self.keys(name),
            owner,
            ttl,
            slot: Slot::new(&owner.to_hex()),
            registrations: Vec::new(),
        };
        wait_loop::wait_until(&mut waiter, deadline)
    }
}
