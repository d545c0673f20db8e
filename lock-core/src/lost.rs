//! [`LostSignal`]: how a holder learns that its lock is gone.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Fires once when a held lock is lost: renewal failed for a whole lease, the server said the lock
/// is no longer held, or (with renewal off) the lease ran out.
///
/// A lease's end is kept in the signal itself: [`is_lost`](Self::is_lost) and
/// [`wait_timeout`](Self::wait_timeout) count the hold lost from the moment its last confirmed
/// lease ends, by this process's clock — not from when a background thread gets round to
/// reporting it, which a loaded machine may delay.
///
/// Cheap to clone; every clone observes the same signal. Poll it with [`is_lost`](Self::is_lost)
/// or block on it with [`wait_timeout`](Self::wait_timeout), e.g. from a thread that cancels the
/// work the lock protects.
#[derive(Clone, Default)]
pub struct LostSignal {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    fired: bool,
    /// When the hold counts as lost unless confirmed again; `None` once released (or never held).
    expires: Option<Instant>,
    /// Released: no expiry counts any more (a renewal confirmed after the release sets none).
    settled: bool,
}

impl State {
    fn is_lost(&self, now: Instant) -> bool {
        self.fired || self.expires.is_some_and(|expires| now >= expires)
    }
}

impl LostSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.inner.state.lock().is_lost(Instant::now())
    }

    /// Blocks until the lock is lost or `timeout` passes; returns whether it was lost.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        // A timeout too long to represent is no timeout at all.
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.inner.state.lock();
        loop {
            let now = Instant::now();
            if state.is_lost(now) {
                return true;
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                return false;
            }
            // Woken by a fire or a new expiry, at the expiry, or at the deadline.
            match [deadline, state.expires].into_iter().flatten().min() {
                Some(until) => {
                    self.inner.changed.wait_until(&mut state, until);
                }
                None => self.inner.changed.wait(&mut state),
            }
        }
    }

    /// Fires the signal (again is harmless).
    pub(crate) fn fire(&self) {
        self.inner.state.lock().fired = true;
        self.inner.changed.notify_all();
    }

    /// Sets when the hold counts as lost unless confirmed again.
    pub(crate) fn set_expiry(&self, expires: Instant) {
        let mut state = self.inner.state.lock();
        if !state.settled {
            state.expires = Some(expires);
            self.inner.changed.notify_all();
        }
    }

    /// The hold ended (released): a loss the clock already counted stays reported; no later one
    /// comes. Returns whether the hold ended lost.
    pub(crate) fn settle(&self) -> bool {
        let mut state = self.inner.state.lock();
        state.fired = state.is_lost(Instant::now());
        state.expires = None;
        state.settled = true;
        state.fired
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal").field("lost", &self.is_lost()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_and_wakes_waiters() {
        let signal = LostSignal::new();
        assert!(!signal.wait_timeout(Duration::from_millis(5)));
        let waiter = {
            let signal = signal.clone();
            std::thread::spawn(move || signal.wait_timeout(Duration::from_secs(10)))
        };
        signal.fire();
        signal.fire();
        assert!(waiter.join().unwrap());
        assert!(signal.is_lost());
    }

    #[test]
    fn the_expiry_counts_without_a_fire_until_released() {
        let signal = LostSignal::new();
        signal.set_expiry(Instant::now() + Duration::from_millis(30));
        assert!(!signal.is_lost());
        assert!(signal.wait_timeout(Duration::from_secs(10)), "lost at the expiry, with nobody firing");
        signal.settle();
        assert!(signal.is_lost(), "a loss already counted stays after the release");
        let released = LostSignal::new();
        released.set_expiry(Instant::now() + Duration::from_millis(10));
        released.settle();
        released.set_expiry(Instant::now() + Duration::from_millis(5)); // a late renewal's
        std::thread::sleep(Duration::from_millis(20));
        assert!(!released.is_lost(), "a hold released in time is not lost by the clock later");
    }
}
