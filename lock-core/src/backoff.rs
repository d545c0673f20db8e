//! Capped exponential backoff with jitter, for waiters without server wake-ups.

use std::time::{Duration, Instant};

use rand::RngExt;

/// Sleeps between attempts: each sleep is drawn from the upper half of a bound that doubles from
/// `min` to `max`. The jitter keeps waiters from retrying in lockstep; the cap bounds how late a
/// waiter notices a release.
#[derive(Debug)]
pub(crate) struct Backoff {
    bound: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self { bound: min, max }
    }

    /// The next sleep, without sleeping.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let bound = self.bound;
        self.bound = self.bound.saturating_mul(2).min(self.max);
        rand::rng().random_range(bound / 2..=bound)
    }

    /// Sleeps for the next delay, cut short at `deadline`; returns `false` if the deadline has
    /// passed (no point in another attempt after it).
    pub(crate) fn sleep_until(&mut self, deadline: Option<Instant>) -> bool {
        let delay = self.next_delay();
        match deadline {
            None => std::thread::sleep(delay),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                std::thread::sleep(delay.min(deadline - now));
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_with_jitter_up_to_the_cap() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(2), ms(16));
        let delays: Vec<_> = (0..8).map(|_| backoff.next_delay()).collect();
        for (delay, bound) in delays.iter().zip([2, 4, 8, 16, 16, 16, 16, 16]) {
            assert!(*delay >= ms(bound) / 2 && *delay <= ms(bound), "{delay:?} outside bound {bound} ms");
        }
        // Jitter: eight draws from the capped range are not all equal.
        let capped: Vec<_> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(capped.iter().any(|d| *d != capped[0]));
    }

    #[test]
    fn a_passed_deadline_stops_the_wait() {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        assert!(!backoff.sleep_until(Some(Instant::now() - Duration::from_millis(1))));
    }
}
