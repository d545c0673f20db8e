//! A backend that fails on demand, to drive the core's error paths in unit tests.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{DistributedLock, Extension, Fencing, FencingToken, HoldKind};
use crate::error::{Error, Result};
use crate::memory::{MemoryBackend, MemoryLease};
use crate::name::LockName;
use crate::owner::OwnerToken;

/// The memory backend behind switches that make each operation fail. No native wait, so the
/// core's backoff path is exercised.
#[derive(Clone, Default)]
pub(crate) struct FakeBackend {
    pub(crate) inner: MemoryBackend,
    pub(crate) switches: Arc<Switches>,
}

#[derive(Default)]
pub(crate) struct Switches {
    /// Report holds as bound to a session rather than a lease.
    pub(crate) session: AtomicBool,
    /// Report the session as broken right now (`session_suspended`).
    pub(crate) suspended: AtomicBool,
    /// The doubt signal handed out for every lease (`doubt_signal`), when set.
    pub(crate) doubt: parking_lot::Mutex<Option<crate::DoubtSignal>>,
    /// `extend_many` answers for one lease fewer than it was given.
    pub(crate) short_batches: AtomicBool,
    /// `extend_many` panics.
    pub(crate) panic_on_extend: AtomicBool,
    pub(crate) fail_extend: AtomicBool,
    /// `extend_many` hangs this many milliseconds, then fails every item (a server that stopped
    /// answering, behind a read timeout of that length).
    pub(crate) stall_extend_ms: AtomicU64,
    /// `extend` of this lock takes this many milliseconds before it answers.
    pub(crate) slow_extend: parking_lot::Mutex<Option<(LockName, u64)>>,
    /// `extends_independently`: the core then calls `extend` once per lease, concurrently.
    pub(crate) independent: AtomicBool,
    /// The lease margin, in milliseconds.
    pub(crate) margin_ms: AtomicU64,
    pub(crate) fail_release: AtomicBool,
    pub(crate) acquires: AtomicUsize,
    pub(crate) extends: AtomicUsize,
    /// Calls of `extend_many`: renewal round trips.
    pub(crate) batches: AtomicUsize,
    pub(crate) releases: AtomicUsize,
}

fn broken() -> Error {
    Error::Connection { backend: "fake", source: "switched off".into() }
}

impl DistributedLock for FakeBackend {
    type Lease = MemoryLease;

    fn backend_name(&self) -> &'static str {
        "fake"
    }

    fn hold_kind(&self) -> HoldKind {
        if self.switches.session.load(Ordering::SeqCst) {
            HoldKind::Session
        } else {
            HoldKind::Lease
        }
    }

    fn session_suspended(&self) -> bool {
        self.switches.suspended.load(Ordering::SeqCst)
    }

    fn doubt_signal(&self, _lease: &MemoryLease) -> Option<crate::DoubtSignal> {
        self.switches.doubt.lock().clone()
    }

    fn lease_margin(&self, _ttl: Duration) -> Duration {
        Duration::from_millis(self.switches.margin_ms.load(Ordering::SeqCst))
    }

    fn extends_independently(&self) -> bool {
        self.switches.independent.load(Ordering::SeqCst)
    }

    fn extend_many(&self, batch: &mut [Extension<'_, MemoryLease>]) -> Vec<Result<bool>> {
        assert!(!self.switches.panic_on_extend.load(Ordering::SeqCst), "extend_many switched to panic");
        self.switches.batches.fetch_add(1, Ordering::SeqCst);
        let stall = self.switches.stall_extend_ms.load(Ordering::SeqCst);
        if stall > 0 {
            self.switches.extends.fetch_add(batch.len(), Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(stall));
            return batch
                .iter()
                .map(|_| Err(Error::Timeout { backend: "fake", operation: "extend", source: None }))
                .collect();
        }
        let mut results: Vec<_> = batch.iter_mut().map(|item| self.extend(item.lease, item.ttl)).collect();
        if self.switches.short_batches.load(Ordering::SeqCst) {
            results.pop();
        }
        results
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<MemoryLease>> {
        self.switches.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(name, owner, ttl)
    }

    fn extend(&self, lease: &mut MemoryLease, ttl: Duration) -> Result<bool> {
        self.switches.extends.fetch_add(1, Ordering::SeqCst);
        let slow = self.switches.slow_extend.lock().clone();
        if let Some((_, ms)) = slow.filter(|(name, _)| *name == lease.name) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if self.switches.fail_extend.load(Ordering::SeqCst) {
            return Err(broken());
        }
        let stall = self.switches.stall_extend_ms.load(Ordering::SeqCst);
        if stall > 0 {
            std::thread::sleep(Duration::from_millis(stall));
            return Err(Error::Timeout { backend: "fake", operation: "extend", source: None });
        }
        self.inner.extend(lease, ttl)
    }

    fn release(&self, lease: MemoryLease) -> Result<bool> {
        self.switches.releases.fetch_add(1, Ordering::SeqCst);
        if self.switches.fail_release.load(Ordering::SeqCst) {
            return Err(broken());
        }
        self.inner.release(lease)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = MemoryLease>> {
        Some(self)
    }
}

impl Fencing for FakeBackend {
    fn fencing_token(&self, lease: &MemoryLease) -> FencingToken {
        self.inner.fencing_token(lease)
    }
}
