//! [`eventually`]: waiting for a condition in tests without a fixed sleep.

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
