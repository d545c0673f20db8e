//! [`Waiters`]: the threads of one client that wait for lock-table names, in arrival order per
//! name, and their wake-ups. The server's wake-up (PostgreSQL's `NOTIFY`, MariaDB's doorbell)
//! reaches the client, which wakes the longest-waiting thread of the name: one release can be
//! taken once, so one wake-up per release. A woken thread that stops waiting passes the wake-up
//! on to the next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// The waiting threads of one client, by lock name.
#[derive(Default)]
pub(crate) struct Waiters {
    by_name: Mutex<HashMap<String, Vec<Weak<Slot>>>>,
    /// Signalled when a thread registers (a doorbell sleeps while nobody waits).
    registered: Condvar,
}

impl Waiters {
    /// Registers a thread waiting for `name`, behind those already waiting for it.
    pub(crate) fn register(&self, name: &str) -> Registration<'_> {
        let slot = Arc::new(Slot::default());
        let mut by_name = self.by_name.lock();
        let slots = by_name.entry(name.to_owned()).or_default();
        for earlier in slots.iter().filter_map(Weak::upgrade) {
            earlier.joined.store(true, Ordering::Release);
        }
        slots.push(Arc::downgrade(&slot));
        drop(by_name);
        self.registered.notify_all();
        Registration { waiters: self, name: name.to_owned(), slot }
    }

    /// Wakes the longest-waiting thread for `name`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake(&self, name: &str) {
        let mut by_name = self.by_name.lock();
        if let Some(slots) = by_name.get_mut(name) {
            slots.retain(|slot| slot.strong_count() > 0);
            if let Some(slot) = slots.first().and_then(Weak::upgrade) {
                slot.wake();
            }
            if slots.is_empty() {
                by_name.remove(name);
            }
        }
    }

    /// Wakes the longest-waiting thread of every name (a wake-up that does not say which name).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn wake_each_name(&self) {
        for slots in self.by_name.lock().values() {
            if let Some(slot) = slots.iter().find_map(Weak::upgrade) {
                slot.wake();
            }
        }
    }

    /// Wakes every thread registered for `name` (an election's watchers: each re-reads).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake_every(&self, name: &str) {
        if let Some(slots) = self.by_name.lock().get(name) {
            for slot in slots.iter().filter_map(Weak::upgrade) {
                slot.wake();
            }
        }
    }

    /// Wakes every waiting thread (wake-ups may have been lost: each re-checks).
    pub(crate) fn wake_all(&self) {
        for slot in self.by_name.lock().values().flatten().filter_map(Weak::upgrade) {
            slot.wake();
        }
    }

    /// Whether some thread of the client waits for `name`.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn is_waiting(&self, name: &str) -> bool {
        self.by_name.lock().get(name).is_some_and(|slots| slots.iter().any(|slot| slot.strong_count() > 0))
    }

    /// Waits until some thread is registered, or `until`; whether one is.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn wait_for_any(&self, until: Instant) -> bool {
        let mut by_name = self.by_name.lock();
        by_name.retain(|_, slots| slots.iter().any(|slot| slot.strong_count() > 0));
        if by_name.is_empty() {
            let _ = self.registered.wait_until(&mut by_name, until);
        }
        !by_name.is_empty()
    }
}

/// One waiting thread's wake-up flag.
#[derive(Default)]
struct Slot {
    woken: Mutex<bool>,
    changed: Condvar,
    /// Another thread registered for the name since [`Registration::others_waiting`] last
    /// asked.
    joined: AtomicBool,
}

impl Slot {
    fn wake(&self) {
        *self.woken.lock() = true;
        self.changed.notify_all();
    }
}

/// A waiting thread's registration; dropping it unregisters.
pub(crate) struct Registration<'a> {
    waiters: &'a Waiters,
    name: String,
    slot: Arc<Slot>,
}

impl Registration<'_> {
    /// Forgets wake-ups received so far (the attempt about to be made answers them).
    pub(crate) fn clear(&self) {
        *self.slot.woken.lock() = false;
    }

    /// Whether other threads of this client wait for the same name (then the client stays in
    /// the lock's queue when this one takes the lock).
    /// ([`joined_since`](Self::joined_since) then tells whether another one registered later.)
    pub(crate) fn others_waiting(&self) -> bool {
        let by_name = self.waiters.by_name.lock();
        self.slot.joined.store(false, Ordering::Release);
        by_name.get(&self.name).is_some_and(|slots| {
            slots
                .iter()
                .any(|slot| slot.strong_count() > 0 && !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(&self.slot)))
        })
    }

    /// Whether another thread of this client registered for the name since
    /// [`others_waiting`](Self::others_waiting) last asked (it may have written the client's
    /// queue entry that this thread's win then found gone, or written it again after).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn joined_since(&self) -> bool {
        self.slot.joined.load(Ordering::Acquire)
    }

    /// Sleeps until woken or `until`; whether woken, and the wake-up is taken (a later one is
    /// kept for the next call).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wait_and_clear(&self, until: Instant) -> bool {
        let mut woken = self.slot.woken.lock();
        while !*woken {
            if self.slot.changed.wait_until(&mut woken, until).timed_out() {
                break;
            }
        }
        std::mem::take(&mut *woken)
    }

    /// Sleeps until woken or `until`; whether woken.
    pub(crate) fn wait(&self, until: Instant) -> bool {
        let mut woken = self.slot.woken.lock();
        while !*woken {
            if self.slot.changed.wait_until(&mut woken, until).timed_out() {
                break;
            }
        }
        *woken
    }
}

impl Registration<'_> {
    /// Unregisters; whether this was the client's last thread waiting for the name (then the
    /// client leaves the lock's queue). Decided under the registry's lock: of two threads that
    /// finish at once, exactly one is the last.
    pub(crate) fn finish(mut self) -> bool {
        self.unregister()
    }

    /// Unregisters (once); a wake-up this thread took and did not act on goes to the next
    /// thread. Whether no thread of the client waits for the name any more.
    fn unregister(&mut self) -> bool {
        let unanswered = std::mem::take(&mut *self.slot.woken.lock());
        let mut by_name = self.waiters.by_name.lock();
        let Some(slots) = by_name.get_mut(&self.name) else { return true };
        let before = slots.len();
        slots.retain(|slot| slot.strong_count() > 0 && !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(&self.slot)));
        if slots.len() == before {
            // Unregistered already.
            return slots.is_empty();
        }
        if unanswered {
            if let Some(next) = slots.first().and_then(Weak::upgrade) {
                next.wake();
            }
        }
        let last = slots.is_empty();
        if last {
            by_name.remove(&self.name);
        }
        last
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn woken(registration: &Registration<'_>) -> bool {
        *registration.slot.woken.lock()
    }

    #[test]
    fn a_wake_up_goes_to_the_oldest_waiter_and_is_passed_on_when_unanswered() {
        let waiters = Waiters::default();
        let (first, second) = (waiters.register("a"), waiters.register("a"));
        let other = waiters.register("b");
        assert!(first.joined_since() && !second.joined_since());
        assert!(first.others_waiting() && !other.others_waiting());
        assert!(!first.joined_since(), "asking again starts afresh");
        drop(waiters.register("a"));
        assert!(first.joined_since() && second.joined_since() && !other.joined_since());
        waiters.wake("a");
        assert!(woken(&first) && !woken(&second) && !woken(&other));
        assert!(!first.finish(), "another thread still waits for the name");
        assert!(woken(&second), "the unanswered wake-up moved on");
        second.clear();
        waiters.wake_each_name();
        assert!(woken(&second) && woken(&other));
        assert!(second.wait(Instant::now() + Duration::from_secs(5)));
        assert!(second.finish(), "the last thread for the name");
    }

    #[test]
    fn wait_for_any_sees_registrations() {
        let waiters = Waiters::default();
        assert!(!waiters.wait_for_any(Instant::now() + Duration::from_millis(10)));
        let registration = waiters.register("a");
        assert!(waiters.wait_for_any(Instant::now()));
        drop(registration);
        assert!(!waiters.wait_for_any(Instant::now()));
    }
}
