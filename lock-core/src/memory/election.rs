//! Elections of the [`MemoryBackend`]: the leader and its value in the lock table, followers
//! woken by the table's condition variable.

use std::time::Instant;

use super::{LeaseKind, MemoryBackend, MemoryLease};
use crate::abilities::Request;
use crate::backend::{Acquired, FencingToken};
use crate::election::{Elections, Leader, LeaderWatch};
use crate::error::{Error, Result};
use crate::name::LockName;

impl Elections for MemoryBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<MemoryLease>>> {
        super::check(request)?;
        let (name, ttl) = (request.name, request.ttl);
        let acquired = self.wait_for(
            request.deadline.instant(),
            |locks, now| Ok(locks.campaign(name, (request.owner, value), ttl, now)),
            |locks, now| locks.leader(name, now).map(|(entry, _)| entry.expires_at),
        )?;
        if acquired.is_some() {
            self.state.released.notify_all();
        }
        Ok(acquired)
    }

    fn proclaim(&self, lease: &mut MemoryLease, value: &[u8]) -> Result<()> {
        debug_assert_eq!(lease.kind, LeaseKind::Leader);
        let mut locks = self.state.locks.lock();
        match locks.leader(&lease.name, Instant::now()) {
            Some((entry, current)) if entry.owner == lease.owner => {
                *current = value.to_vec();
                locks.election_changes += 1;
                drop(locks);
                self.state.released.notify_all();
                Ok(())
            }
            _ => Err(Error::NotHeld { name: lease.name.clone() }),
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let mut locks = self.state.locks.lock();
        let Some((_, value)) = locks.leader(name, Instant::now()) else {
            return Ok(None);
        };
        let value = value.clone();
        // Tokens are issued only on a win, so the name's last one is the current term's.
        let token = locks.last_fence_of_election(name);
        Ok(Some(Leader::new(value, token.map(FencingToken::new))))
    }

    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        let seen = self.state.locks.lock().election_changes;
        Ok(Box::new(MemoryWatch { backend: self, name: name.clone(), seen }))
    }
}

/// Wakes on any change of the lock table's elections, and when the watched leader's lease runs
/// out (which no release announces).
struct MemoryWatch<'a> {
    backend: &'a MemoryBackend,
    name: LockName,
    seen: u64,
}

impl LeaderWatch for MemoryWatch<'_> {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        let mut locks = self.backend.state.locks.lock();
        loop {
            if locks.election_changes != self.seen {
                self.seen = locks.election_changes;
                return Ok(true);
            }
            let now = Instant::now();
            let expiry = locks.leader(&self.name, now).map(|(entry, _)| entry.expires_at);
            if now >= until || expiry.is_some_and(|expiry| expiry <= now) {
                return Ok(false);
            }
            let wake = expiry.map_or(until, |expiry| expiry.min(until));
            self.backend.state.released.wait_until(&mut locks, wake);
            if expiry.is_some_and(|expiry| Instant::now() >= expiry) {
                return Ok(true);
            }
        }
    }
}
