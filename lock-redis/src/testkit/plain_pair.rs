//! The uncontended pair of a Redis lock beside the plain recipe's (`distlock bench`): `SET NX PX`
//! to acquire and a Lua compare-and-delete to release, on one connection, with neither fencing
//! token nor wait queue. Both run in the same process against the same server, one pair of each
//! in turn, so the difference of their medians is what the lock's extras cost a caller.

use std::fmt;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, LockName, OwnerToken};

/// The lease of every pair (never reached: each is released at once).
const LEASE: Duration = Duration::from_secs(60);

/// The medians of both kinds of uncontended pair.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PairLatencies {
    /// Pairs of each kind timed (after as many to warm up).
    pub pairs: usize,
    /// The lock's pair through its backend (`try_acquire` + `release`) on fresh names.
    pub lock_p50: Duration,
    /// The plain recipe's pair on one connection.
    pub plain_p50: Duration,
}

impl PairLatencies {
    /// The lock's median pair minus the plain recipe's, in µs (negative when faster).
    pub fn extra_usec(&self) -> f64 {
        (self.lock_p50.as_secs_f64() - self.plain_p50.as_secs_f64()) * 1e6
    }
}

impl fmt::Display for PairLatencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "uncontended pair p50 ({} pairs each, alternated): this lock {:.1} µs, the plain SET NX PX + \
             compare-and-delete recipe {:.1} µs: {:+.1} µs (target ≤ +5 µs, the fence and queue check included)",
            self.pairs,
            self.lock_p50.as_secs_f64() * 1e6,
            self.plain_p50.as_secs_f64() * 1e6,
            self.extra_usec()
        )
    }
}

/// Times `pairs` uncontended pairs of the lock on `backend` and as many of the plain recipe on a
/// connection of its own to `url`, one of each in turn, and gives both medians. The plain
/// recipe's keys live under `distlock-plain:` and are deleted by its own releases; the lock's
/// names start with `plain-pair-<run>`, and their fencing counters are deleted afterwards (on a
/// backend with the default namespace).
///
/// # Errors
/// A failed operation, or a server that cannot be reached.
pub fn measure<B: DistributedLock>(backend: &B, url: &str, pairs: usize) -> Result<PairLatencies, String> {
    let mut plain = super::plain_recipe::PlainRecipe::connect(url)?;
    let owner = OwnerToken::random();
    let token = owner.to_hex();
    // Under the suite's namespace (`distlock-bench:` on a user's server), for the clean-ups.
    let run = lock_testkit::suite::unique_name("plain-pair");
    let pairs = pairs.max(1);
    let (mut lock_times, mut plain_times) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for i in 0..2 * pairs {
        let name = LockName::new(format!("{run}-{i}")).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let lease = backend.try_acquire(&name, &owner, LEASE).map_err(|e| e.to_string())?;
        let lease = lease.ok_or_else(|| format!("{name}: a fresh name was refused"))?;
        if !backend.release(lease).map_err(|e| e.to_string())? {
            return Err(format!("{name}: a held lock was not released"));
        }
        let lock_time = started.elapsed();

        let key = format!("distlock-plain:{run}:{i}");
        let started = Instant::now();
        if !plain.set_nx_px(&key, &token, LEASE)? {
            return Err("the plain SET NX was refused on a fresh key".into());
        }
        if !plain.compare_and_delete(&key, &token)? {
            return Err("the plain compare-and-delete failed".into());
        }
        let plain_time = started.elapsed();
        // The first half warms the connections, the scripts and the server up.
        if i >= pairs {
            lock_times.push(lock_time);
            plain_times.push(plain_time);
        }
    }
    // The fencing counters never expire: delete what the measured names left.
    super::single_node::delete_keys_of_names(url, "distlock", run.as_str())?;
    Ok(PairLatencies { pairs, lock_p50: median(&mut lock_times), plain_p50: median(&mut plain_times) })
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_sample() {
        let mut times = [3, 1, 2].map(Duration::from_micros);
        assert_eq!(median(&mut times), Duration::from_micros(2));
        assert_eq!(median(&mut []), Duration::ZERO);
    }
}
