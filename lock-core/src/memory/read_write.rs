//! The memory backend's read-write locks: writer-preferring, with a downgrade path for the
//! writer's own reads.

use std::time::Instant;

use super::table::{Entry, Locks};
use super::{check, LeaseKind, MemoryBackend, MemoryLease};
use crate::abilities::{Access, Deadline, ReadWrite, Request};
use crate::backend::Acquired;
use crate::error::Result;

impl ReadWrite for MemoryBackend {
    /// Readers share unless a writer holds the lock or waits for it (other than the reader's own
    /// owner: a writer's downgrade); a writer waits for every hold to end, and holds new readers
    /// back from the moment it starts waiting.
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<MemoryLease>>> {
        check(request)?;
        let waits = request.deadline != Deadline::Now;
        if waits && access == Access::Write {
            // In line while this call waits, whatever the lock's holders do meanwhile.
            self.state
                .locks
                .lock()
                .read_write
                .entry(request.name.clone())
                .or_default()
                .waiting_writers
                .insert(*request.owner, None);
        }
        let acquired = self.wait_for(
            request.deadline.instant(),
            |locks, now| Ok(try_rw(locks, request, access, now)),
            |locks, _| locks.read_write.get(request.name).and_then(|entry| entry.next_expiry()),
        );
        if waits && access == Access::Write {
            let mut locks = self.state.locks.lock();
            if let Some(entry) = locks.read_write.get_mut(request.name) {
                entry.waiting_writers.remove(request.owner);
                if entry.is_empty() {
                    locks.read_write.remove(request.name);
                }
            }
            drop(locks);
            // Readers held back by this writer may go now, if it gave up.
            self.state.released.notify_all();
        }
        acquired
    }
}

fn try_rw(locks: &mut Locks, request: &Request<'_>, access: Access, now: Instant) -> Option<MemoryLease> {
    let (name, owner) = (request.name, request.owner);
    let entry = locks.read_write.entry(name.clone()).or_default();
    entry.prune(now);
    let writer = entry.writer.as_ref().map(|writer| writer.owner);
    let granted = match access {
        Access::Read => match writer {
            Some(writer) => writer == *owner,
            None => entry.waiting_writers.is_empty(),
        },
        // Waiting writers hold back readers, not each other: the first to find the lock free
        // takes it.
        Access::Write => writer.is_none() && entry.readers.is_empty(),
    };
    if !granted {
        return None;
    }
    let expires_at = now + request.ttl;
    match access {
        Access::Read => {
            entry.readers.insert(*owner, expires_at);
        }
        Access::Write => entry.writer = Some(Entry { owner: *owner, expires_at }),
    }
    Some(locks.lease(name, owner, LeaseKind::Rw(access)))
}
