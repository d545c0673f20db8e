//! [`LostSignal`]: how a holder learns that its lock is gone.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Fires once when a held lock is lost: renewal failed for a whole lease, the server said the lock
/// is no longer held, or (with renewal off) the lease ran out.
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
    lost: Mutex<bool>,
    changed: Condvar,
}

impl LostSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        *self.inner.lost.lock()
    }

    /// Blocks until the lock is lost or `timeout` passes; returns whether it was lost.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        // A timeout too long to represent is no timeout at all.
        let deadline = Instant::now().checked_add(timeout);
        let mut lost = self.inner.lost.lock();
        while !*lost {
            match deadline {
                Some(deadline) => {
                    if self.inner.changed.wait_until(&mut lost, deadline).timed_out() {
                        break;
                    }
                }
                None => self.inner.changed.wait(&mut lost),
            }
        }
        *lost
    }

    /// Fires the signal (again is harmless).
    pub(crate) fn fire(&self) {
        *self.inner.lost.lock() = true;
        self.inner.changed.notify_all();
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
}
