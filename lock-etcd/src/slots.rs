//! [`LocalSlots`]: one holder per key prefix within a client, queued in-process.
//!
//! All locks of a client share one lease, and the contender's key is `<prefix>/<lease hex>`: two
//! threads of one client locking one name would write the same key, and etcd's Mutex would let
//! both "hold" it (its second `Lock` takes the transaction's else branch and finds itself the
//! owner). So each acquisition first takes the name's local slot and keeps it for as long as its
//! key may exist on the server — while it waits there, while it holds, and until a clean-up of
//! its key has finished — and a second thread of the client waits for the slot, within its own
//! deadline, exactly as it would wait for a rival in another process.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// The slots of one client, by key prefix; a slot exists only while taken or waited for.
#[derive(Default)]
pub(crate) struct LocalSlots {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

#[derive(Default)]
struct Slot {
    taken: Mutex<bool>,
    freed: Condvar,
}

/// How long taking a slot may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SlotWait {
    /// Not at all.
    No,
    /// Until the instant, or forever.
    Until(Option<Instant>),
}

impl LocalSlots {
    /// Takes the slot of `prefix`, waiting as `wait` allows; `None` if it stayed taken.
    pub(crate) fn take(self: &Arc<Self>, prefix: &str, wait: SlotWait) -> Option<SlotGuard> {
        let slot = Arc::clone(self.slots.lock().entry(prefix.to_owned()).or_default());
        let taken = {
            let mut taken = slot.taken.lock();
            loop {
                if !*taken {
                    *taken = true;
                    break true;
                }
                match wait {
                    SlotWait::No => break false,
                    SlotWait::Until(None) => slot.freed.wait(&mut taken),
                    SlotWait::Until(Some(deadline)) => {
                        if slot.freed.wait_until(&mut taken, deadline).timed_out() && *taken {
                            break false;
                        }
                    }
                }
            }
        };
        if !taken {
            self.forget_if_unused(prefix, &slot);
            return None;
        }
        Some(SlotGuard { slots: Arc::clone(self), prefix: prefix.to_owned(), slot })
    }

    /// Removes the slot of `prefix` from the map if nobody but the map holds or awaits it.
    fn forget_if_unused(&self, prefix: &str, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock();
        // The map's and the caller's: nobody else waits (waiters clone it under the map lock).
        let unused = Arc::strong_count(slot) == 2 && !*slot.taken.lock();
        if unused && slots.get(prefix).is_some_and(|mapped| Arc::ptr_eq(mapped, slot)) {
            slots.remove(prefix);
        }
    }

    /// How many slots are taken or awaited (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().len()
    }
}

/// A taken slot; dropping it frees the slot and wakes one waiter.
pub(crate) struct SlotGuard {
    slots: Arc<LocalSlots>,
    prefix: String,
    slot: Arc<Slot>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        *self.slot.taken.lock() = false;
        self.slot.freed.notify_one();
        self.slots.forget_if_unused(&self.prefix, &self.slot);
    }
}

impl std::fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotGuard").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_holder_per_prefix_and_waiters_get_it_in_time() {
        let slots = Arc::new(LocalSlots::default());
        let first = slots.take("a", SlotWait::No).unwrap();
        assert!(slots.take("a", SlotWait::No).is_none());
        let short = Instant::now() + Duration::from_millis(30);
        assert!(slots.take("a", SlotWait::Until(Some(short))).is_none());
        let other = slots.take("b", SlotWait::No).unwrap();
        let waiter = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || slots.take("a", SlotWait::Until(None)).is_some())
        };
        std::thread::sleep(Duration::from_millis(30));
        drop(first);
        assert!(waiter.join().unwrap());
        drop(other);
        assert_eq!(slots.len(), 0, "unused slots are forgotten");
    }
}
