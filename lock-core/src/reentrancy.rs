//! Per-thread hold counts: which thread of this client holds which lock, and how many times.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

use crate::backend::DistributedLock;
use crate::held::HeldLease;
use crate::name::LockName;

/// The locks each thread of one client holds, with Java `ReentrantLock` hold counts.
///
/// The backend is touched only when a count goes 0 → 1 (acquire) and 1 → 0 (release); nested
/// locks and unlocks in between are counted here.
pub(crate) struct HoldTable<B: DistributedLock> {
    holds: Mutex<HashMap<(ThreadId, LockName), Hold<B>>>,
}

struct Hold<B: DistributedLock> {
    count: usize,
    held: Arc<HeldLease<B>>,
}

/// What the current thread already has of a lock.
pub(crate) enum Reentry<B: DistributedLock> {
    /// Nothing: the backend must be asked.
    NotHeld,
    /// The lock, with its count raised by one.
    Entered(Arc<HeldLease<B>>),
    /// The lock, but the options forbid entering it again.
    Refused,
}

impl<B: DistributedLock> HoldTable<B> {
    pub(crate) fn new() -> Self {
        Self { holds: Mutex::new(HashMap::new()) }
    }

    fn key(name: &LockName) -> (ThreadId, LockName) {
        (thread::current().id(), name.clone())
    }

    /// The id under which the current thread's holds are kept; guards remember it, so releasing
    /// needs no `thread::current()` (which may be gone in a thread-local destructor).
    pub(crate) fn current_thread() -> ThreadId {
        thread::current().id()
    }

    /// Enters `name` again if the current thread holds it (and `reentrant` allows).
    pub(crate) fn reenter(&self, name: &LockName, reentrant: bool) -> Reentry<B> {
        match self.holds.lock().get_mut(&Self::key(name)) {
            None => Reentry::NotHeld,
            Some(_) if !reentrant => Reentry::Refused,
            Some(hold) => {
                hold.count += 1;
                Reentry::Entered(Arc::clone(&hold.held))
            }
        }
    }

    /// Records a fresh acquisition by the current thread (count 1).
    pub(crate) fn insert(&self, held: Arc<HeldLease<B>>) {
        let key = Self::key(&held.name);
        self.holds.lock().insert(key, Hold { count: 1, held });
    }

    /// Lowers `thread`'s count for `name`; returns `true` when it reached zero (the entry is then
    /// gone and the caller must release the lease).
    pub(crate) fn exit(&self, thread: ThreadId, name: &LockName) -> bool {
        let key = (thread, name.clone());
        let mut holds = self.holds.lock();
        let Some(hold) = holds.get_mut(&key) else {
            // Guards are !Send, so only a guard of this thread can get here; no entry means it
            // was already released.
            return false;
        };
        hold.count -= 1;
        if hold.count == 0 {
            holds.remove(&key);
            true
        } else {
            false
        }
    }

    /// Forgets every thread's hold of `name`; returns their acquisitions (one, unless a thread
    /// kept a lost hold while another acquired anew).
    pub(crate) fn remove_all(&self, name: &LockName) -> Vec<Arc<HeldLease<B>>> {
        let mut holds = self.holds.lock();
        let keys: Vec<_> = holds.keys().filter(|(_, held)| held == name).cloned().collect();
        keys.into_iter().filter_map(|key| holds.remove(&key)).map(|hold| hold.held).collect()
    }

    /// Forgets every hold; returns their acquisitions.
    pub(crate) fn drain(&self) -> Vec<Arc<HeldLease<B>>> {
        self.holds.lock().drain().map(|(_, hold)| hold.held).collect()
    }

    /// The current thread's hold count and acquisition of `name`, if it holds it.
    pub(crate) fn current(&self, name: &LockName) -> Option<(usize, Arc<HeldLease<B>>)> {
        self.holds.lock().get(&Self::key(name)).map(|hold| (hold.count, Arc::clone(&hold.held)))
    }
}
