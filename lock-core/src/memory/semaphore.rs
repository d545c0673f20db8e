//! The memory backend's semaphores: a count per name and one expiring entry per permit.

use std::collections::HashMap;
use std::time::Instant;

use super::table::{Locks, SemaphoreEntry};
use super::{check, LeaseKind, MemoryBackend, MemoryLease};
use crate::abilities::{Permits, Request};
use crate::backend::Acquired;
use crate::error::{Error, Result};

impl Permits for MemoryBackend {
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<MemoryLease>>> {
        check(request)?;
        crate::semaphore::check_permits(permits)?;
        self.wait_for(
            request.deadline.instant(),
            |locks, now| try_permit(locks, request, permits, now),
            |locks, _| {
                locks.semaphores.get(request.name).and_then(|entry| entry.holders.values().min().copied())
            },
        )
    }
}

fn try_permit(
    locks: &mut Locks,
    request: &Request<'_>,
    permits: u32,
    now: Instant,
) -> Result<Option<MemoryLease>> {
    let (name, owner) = (request.name, request.owner);
    let entry = locks
        .semaphores
        .entry(name.clone())
        .or_insert_with(|| SemaphoreEntry { permits, holders: HashMap::new() });
    entry.prune(now);
    if entry.holders.is_empty() {
        // Nobody holds a permit: the count is this client's to set.
        entry.permits = permits;
    } else if entry.permits != permits {
        return Err(Error::PermitsMismatch { name: name.clone(), asked: permits, held_with: entry.permits });
    }
    if entry.holders.len() >= permits as usize {
        return Ok(None);
    }
    entry.holders.insert(*owner, now + request.ttl);
    Ok(Some(locks.lease(name, owner, LeaseKind::Permit)))
}
