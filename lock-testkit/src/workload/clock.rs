//! [`Clock`]: one monotonic time base for every worker of a run.

use std::time::Instant;

/// Nanoseconds since the clock was made, from [`Instant`] (monotonic; shared by all threads).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn start() -> Self {
        Self { base: Instant::now() }
    }

    /// Nanoseconds since the start.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
