//! Per-thread hold counts: which thread of this client holds which lock, and how many times.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

use crate::abilities::Primitive;
use crate::backend::DistributedLock;
use crate::held::HeldLease;
use crate::name::LockName;

/// Where the hold table counts a hold: by its [`Primitive`], and a permit also by its own
/// number (permits are never re-entered: each acquisition is its own permit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HoldSlot {
    Mutex,
    Read,
    Write,
    /// A process-wide serial number tells the permits apart.
    Permit(u64),
    /// A leadership of an election: never re-entered.
    Leader,
}

impl HoldSlot {
    /// The primitive held.
    pub(crate) fn primitive(self) -> Primitive {
        match self {
            Self::Mutex => Primitive::Mutex,
            Self::Read => Primitive::Read,
            Self::Write => Primitive::Write,
            Self::Permit(_) => Primitive::Permit,
            Self::Leader => Primitive::Leader,
        }
    }
}

type Key = (ThreadId, LockName, HoldSlot);

/// The locks each thread of one client holds, with Java `ReentrantLock` hold counts.
///
/// The backend is touched only when a count goes 0 → 1 (acquire) and 1 → 0 (release); nested
/// locks and unlocks in between are counted here.
pub(crate) struct HoldTable<B: DistributedLock> {
    holds: Mutex<Holds<B>>,
}

struct Holds<B: DistributedLock> {
    by_thread: HashMap<Key, Hold<B>>,
    /// Set by [`HoldTable::close`]: no hold is recorded after it.
    closed: bool,
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
        Self { holds: Mutex::new(Holds { by_thread: HashMap::new(), closed: false }) }
    }

    fn key(name: &LockName, slot: HoldSlot) -> Key {
        (thread::current().id(), name.clone(), slot)
    }

    /// The id under which the current thread's holds are kept; guards remember it, so releasing
    /// needs no `thread::current()` (which may be gone in a thread-local destructor).
    pub(crate) fn current_thread() -> ThreadId {
        thread::current().id()
    }

    /// Enters `name`'s `slot` lock again if the current thread holds it (and `reentrant` allows).
    pub(crate) fn reenter(&self, name: &LockName, slot: HoldSlot, reentrant: bool) -> Reentry<B> {
        match self.holds.lock().by_thread.get_mut(&Self::key(name, slot)) {
            None => Reentry::NotHeld,
            Some(_) if !reentrant => Reentry::Refused,
            Some(hold) => {
                hold.count += 1;
                Reentry::Entered(Arc::clone(&hold.held))
            }
        }
    }

    /// Records a fresh acquisition by the current thread (count 1), unless the table was
    /// closed; returns whether it was recorded.
    pub(crate) fn insert_unless_closed(&self, held: Arc<HeldLease<B>>) -> bool {
        let key = Self::key(&held.name, held.slot);
        let mut holds = self.holds.lock();
        if holds.closed {
            return false;
        }
        holds.by_thread.insert(key, Hold { count: 1, held });
        true
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.holds.lock().closed
    }

    /// Lowers `thread`'s count for `name`'s `slot` lock; returns `true` when it reached zero (the
    /// entry is then gone and the caller must release the lease).
    pub(crate) fn exit(&self, thread: ThreadId, name: &LockName, slot: HoldSlot) -> bool {
        let key = (thread, name.clone(), slot);
        let mut holds = self.holds.lock();
        let Some(hold) = holds.by_thread.get_mut(&key) else {
            // Guards are !Send, so only a guard of this thread can get here; no entry means it
            // was already released.
            return false;
        };
        hold.count -= 1;
        if hold.count == 0 {
            holds.by_thread.remove(&key);
            true
        } else {
            false
        }
    }

    /// Forgets every thread's hold of `name`'s `slot` lock; returns their acquisitions (one for
    /// the mutex, unless a thread kept a lost hold while another acquired anew).
    pub(crate) fn remove_all(&self, name: &LockName, slot: HoldSlot) -> Vec<Arc<HeldLease<B>>> {
        let mut holds = self.holds.lock();
        let keys: Vec<_> = holds
            .by_thread
            .keys()
            .filter(|(_, held, held_slot)| held == name && *held_slot == slot)
            .cloned()
            .collect();
        keys.into_iter().filter_map(|key| holds.by_thread.remove(&key)).map(|hold| hold.held).collect()
    }

    /// Refuses every later hold and forgets every hold; returns their acquisitions, or `None`
    /// if the table was closed already.
    pub(crate) fn close(&self) -> Option<Vec<Arc<HeldLease<B>>>> {
        let mut holds = self.holds.lock();
        if std::mem::replace(&mut holds.closed, true) {
            return None;
        }
        Some(holds.by_thread.drain().map(|(_, hold)| hold.held).collect())
    }

    /// The current thread's hold count and acquisition of `name`'s `slot` lock, if it holds it.
    pub(crate) fn current(&self, name: &LockName, slot: HoldSlot) -> Option<(usize, Arc<HeldLease<B>>)> {
        self.holds
            .lock()
            .by_thread
            .get(&Self::key(name, slot))
            .map(|hold| (hold.count, Arc::clone(&hold.held)))
    }
}
