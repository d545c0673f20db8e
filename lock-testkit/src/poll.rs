//! [`eventually`]: waiting for a condition in tests without a fixed sleep;
//! [`never_held_until_lost`]: a hold that must not read held again before its loss.

use std::thread;
use std::time::{Duration, Instant};

/// Polls `condition` every 10 ms for up to `within`; returns whether it held (checked once more
/// at the deadline). A fixed sleep would either waste time or flake on a loaded machine.
pub fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// Polls `guard` every 10 ms until it is told lost, asserting that it reads in doubt or lost at
/// every look, never held (`what`: the hold, for the panic message). For a hold whose server
/// may already have let a rival in, while nothing but its own state stands between the holder
/// and acting on it. The caller makes sure the loss comes (a lease, a clock).
///
/// # Panics
/// When the hold reads held (or released).
pub fn never_held_until_lost<B: lock_core::DistributedLock>(guard: &lock_core::LockGuard<B>, what: &str) {
    let told = guard.lost_signal();
    while !told.is_lost() {
        let state = guard.state();
        assert!(
            matches!(state, lock_core::HoldState::InDoubt | lock_core::HoldState::Lost),
            "{what} reads {state:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}
