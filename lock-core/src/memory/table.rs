//! The memory backend's lock table: who holds what until when, per primitive.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{LeaseKind, MemoryLease};
use crate::abilities::Access;
use crate::backend::FencingToken;
use crate::name::LockName;
use crate::owner::OwnerToken;

#[derive(Default)]
pub(super) struct Locks {
    pub(super) mutexes: HashMap<LockName, Entry>,
    pub(super) read_write: HashMap<LockName, RwEntry>,
    pub(super) semaphores: HashMap<LockName, SemaphoreEntry>,
    /// Each election's leader and its proclaimed value.
    pub(super) leaders: HashMap<LockName, (Entry, Vec<u8>)>,
    /// Counts changes of any election (a win, a proclaim, a release), for leader watches.
    pub(super) election_changes: u64,
    /// The last fencing token issued per primitive and name; kept after release so tokens never
    /// repeat.
    fences: HashMap<(Space, LockName), u64>,
}

/// The name spaces: a name's mutex, read-write lock, semaphore and election are separate locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Space {
    Mutex,
    ReadWrite,
    Semaphore,
    Election,
}

pub(super) struct Entry {
    pub(super) owner: OwnerToken,
    pub(super) expires_at: Instant,
}

/// A read-write lock: its writer, its readers and the writers waiting for it.
#[derive(Default)]
pub(super) struct RwEntry {
    pub(super) writer: Option<Entry>,
    pub(super) readers: HashMap<OwnerToken, Instant>,
    /// Waiting writers, each until when its place in line lasts (`None`: while it waits here).
    pub(super) waiting_writers: HashMap<OwnerToken, Option<Instant>>,
}

/// A semaphore: its count and the expiry of each permit held.
pub(super) struct SemaphoreEntry {
    pub(super) permits: u32,
    pub(super) holders: HashMap<OwnerToken, Instant>,
}

impl RwEntry {
    /// Drops expired holds and places in line.
    pub(super) fn prune(&mut self, now: Instant) {
        if self.writer.as_ref().is_some_and(|writer| writer.expires_at <= now) {
            self.writer = None;
        }
        self.readers.retain(|_, expires_at| *expires_at > now);
        self.waiting_writers.retain(|_, until| until.is_none_or(|until| until > now));
    }

    /// The earliest instant a hold or a place in line runs out.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        let writer = self.writer.as_ref().map(|writer| writer.expires_at);
        let readers = self.readers.values().copied();
        let waiting = self.waiting_writers.values().copied().flatten();
        writer.into_iter().chain(readers).chain(waiting).min()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.waiting_writers.is_empty()
    }
}

impl SemaphoreEntry {
    pub(super) fn prune(&mut self, now: Instant) {
        self.holders.retain(|_, expires_at| *expires_at > now);
    }
}

impl Locks {
    /// The current holder of `name`'s mutex, after dropping an expired one.
    pub(super) fn mutex_holder(&mut self, name: &LockName, now: Instant) -> Option<&mut Entry> {
        if self.mutexes.get(name).is_some_and(|entry| entry.expires_at <= now) {
            self.mutexes.remove(name);
        }
        self.mutexes.get_mut(name)
    }

    pub(super) fn acquire_mutex(
        &mut self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        now: Instant,
    ) -> Option<MemoryLease> {
        if self.mutex_holder(name, now).is_some() {
            return None;
        }
        self.mutexes.insert(name.clone(), Entry { owner: *owner, expires_at: now + ttl });
        Some(self.lease(name, owner, LeaseKind::Mutex))
    }

    /// The current leader of the election `name` and its value, after dropping an expired one.
    pub(super) fn leader(&mut self, name: &LockName, now: Instant) -> Option<&mut (Entry, Vec<u8>)> {
        if self.leaders.get(name).is_some_and(|(entry, _)| entry.expires_at <= now) {
            self.leaders.remove(name);
        }
        self.leaders.get_mut(name)
    }

    /// The last fencing token issued for the election `name`.
    pub(super) fn last_fence_of_election(&self, name: &LockName) -> Option<u64> {
        self.fences.get(&(Space::Election, name.clone())).copied()
    }

    /// Makes `owner` leader of `name` with `value` if nobody leads.
    pub(super) fn campaign(
        &mut self,
        name: &LockName,
        (owner, value): (&OwnerToken, &[u8]),
        ttl: Duration,
        now: Instant,
    ) -> Option<MemoryLease> {
        if self.leader(name, now).is_some() {
            return None;
        }
        let entry = Entry { owner: *owner, expires_at: now + ttl };
        let lease = self.lease(name, owner, LeaseKind::Leader);
        self.leaders.insert(name.clone(), (entry, value.to_vec()));
        self.election_changes += 1;
        Some(lease)
    }

    /// A lease of `kind` for `owner`, with the next fencing token of its name space.
    pub(super) fn lease(&mut self, name: &LockName, owner: &OwnerToken, kind: LeaseKind) -> MemoryLease {
        let space = match kind {
            LeaseKind::Mutex => Space::Mutex,
            LeaseKind::Rw(_) => Space::ReadWrite,
            LeaseKind::Permit => Space::Semaphore,
            LeaseKind::Leader => Space::Election,
        };
        let fence = self.fences.entry((space, name.clone())).or_insert(0);
        *fence += 1;
        MemoryLease { name: name.clone(), owner: *owner, fence: FencingToken::new(*fence), kind }
    }

    /// The expiry of `lease`'s hold, if it still holds.
    pub(super) fn expiry_of(&mut self, lease: &MemoryLease, now: Instant) -> Option<&mut Instant> {
        let (name, owner) = (&lease.name, &lease.owner);
        match lease.kind {
            LeaseKind::Mutex => self
                .mutex_holder(name, now)
                .filter(|entry| entry.owner == *owner)
                .map(|entry| &mut entry.expires_at),
            LeaseKind::Rw(access) => {
                let entry = self.read_write.get_mut(name)?;
                entry.prune(now);
                match access {
                    Access::Write => entry
                        .writer
                        .as_mut()
                        .filter(|writer| writer.owner == *owner)
                        .map(|writer| &mut writer.expires_at),
                    Access::Read => entry.readers.get_mut(owner),
                }
            }
            LeaseKind::Permit => {
                let entry = self.semaphores.get_mut(name)?;
                entry.prune(now);
                entry.holders.get_mut(owner)
            }
            LeaseKind::Leader => self
                .leader(name, now)
                .filter(|(entry, _)| entry.owner == *owner)
                .map(|(entry, _)| &mut entry.expires_at),
        }
    }

    /// Removes `lease`'s hold; returns whether it still held.
    pub(super) fn remove(&mut self, lease: &MemoryLease, now: Instant) -> bool {
        if self.expiry_of(lease, now).is_none() {
            return false;
        }
        let name = &lease.name;
        match lease.kind {
            LeaseKind::Mutex => {
                self.mutexes.remove(name);
            }
            LeaseKind::Rw(access) => {
                if let Some(entry) = self.read_write.get_mut(name) {
                    match access {
                        Access::Write => entry.writer = None,
                        Access::Read => {
                            entry.readers.remove(&lease.owner);
                        }
                    }
                    if entry.is_empty() {
                        self.read_write.remove(name);
                    }
                }
            }
            LeaseKind::Leader => {
                self.leaders.remove(name);
                self.election_changes += 1;
            }
            LeaseKind::Permit => {
                if let Some(entry) = self.semaphores.get_mut(name) {
                    entry.holders.remove(&lease.owner);
                    if entry.holders.is_empty() {
                        self.semaphores.remove(name);
                    }
                }
            }
        }
        true
    }
}
