//! W1 — uncontended: one worker, one name, 100 warm-up pairs, then 3000 × {acquire, release}
//! ([`Scale::FULL`]).
//!
//! On a kind with a server, each pair is followed by an *empty pair*: two round trips of the
//! target's [`RoundTripProbe`](crate::workload::RoundTripProbe) back to back, through the lock's
//! own backend, timed apart from the pairs. A lock pair needs at least an acquiring and a
//! releasing round trip, so the empty pair is its lower bound, measured under the same
//! conditions as W1 itself (which core the server's thread wakes on, whether it is still awake
//! from the request before): on a 2-core machine those move a round trip between about 15 and
//! 80 µs from one run to the next, and a probe taken apart from the workload is no bound at all.

use serde_json::{json, Value};

use lock_core::{Lock, LockClient};

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::round_trip::nanos;
use crate::workload::{bench_options, Clock, Percentiles, RoundTrips, Scale};

use std::time::Duration;

const WARMUP: usize = 100;

/// What W1 measured.
#[derive(Debug, Clone)]
pub struct W1Report {
    /// Nanoseconds of each measured acquire+release pair.
    pub lat_ns: Vec<u64>,
    /// Nanoseconds for all measured pairs (the interleaved round trips not included).
    pub elapsed_ns: u64,
    /// Half of each empty pair timed after a pair, ns (empty in process).
    pub round_trips_ns: Vec<u64>,
}

/// How W1 compares with its limit, 1 / (2 × round trip): an uncontended pair needs at least an
/// acquiring and a releasing round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum W1Limit {
    /// In process: no round trip bounds it.
    None,
    /// Pairs per second ÷ the limit (at most 1.0).
    Ratio(f64),
    /// Pairs ran faster than two of the round trips measured beside them: the probe is not a
    /// lower bound of the lock's requests here, so no ratio is a result. Carries the ratio.
    ProbeNotALowerBound(f64),
}

impl W1Report {
    /// Adds `other`'s pairs and round trips to this report (W1 run in blocks).
    pub fn append(&mut self, other: W1Report) {
        self.lat_ns.extend(other.lat_ns);
        self.elapsed_ns += other.elapsed_ns;
        self.round_trips_ns.extend(other.round_trips_ns);
    }

    /// Pairs per second.
    pub fn pairs_per_second(&self) -> f64 {
        self.lat_ns.len() as f64 / (self.elapsed_ns as f64 / 1e9)
    }

    /// p50/p99 of one pair.
    pub fn latency(&self) -> Percentiles {
        Percentiles::of(&self.lat_ns)
    }

    /// The mean round trip timed beside the pairs (`None` in process): the mean, as pairs per
    /// second is, so that the ratio compares like with like.
    pub fn round_trip(&self) -> Option<Duration> {
        let count = u64::try_from(self.round_trips_ns.len()).ok().filter(|&count| count > 0)?;
        Some(Duration::from_nanos(self.round_trips_ns.iter().sum::<u64>() / count))
    }

    /// Pairs per second against 1 / (2 × [`round_trip`](Self::round_trip)): the mean empty pair
    /// ÷ the mean lock pair.
    pub fn limit(&self) -> W1Limit {
        match self.round_trip() {
            None => W1Limit::None,
            Some(rtt) => {
                let ratio = self.pairs_per_second() * 2.0 * rtt.as_secs_f64();
                if ratio > 1.0 {
                    W1Limit::ProbeNotALowerBound(ratio)
                } else {
                    W1Limit::Ratio(ratio)
                }
            }
        }
    }

    /// The raw record: `{"workload":"w1","lat_ns":[…],"elapsed_ns":…,"pairs":3000,"warmup":100,
    /// "round_trips_ns":[…]}`.
    pub fn to_json(&self) -> Value {
        json!({"workload": "w1", "lat_ns": self.lat_ns, "elapsed_ns": self.elapsed_ns,
               "pairs": self.lat_ns.len(), "warmup": WARMUP, "round_trips_ns": self.round_trips_ns})
    }
}

/// Runs W1.
///
/// # Errors
/// The first acquire or release error; a probe that cannot reach the server
/// ([`Error::Backend`](lock_core::Error::Backend)).
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W1Report> {
    let backend = target.backend()?;
    let probe_failed = |error: String| lock_core::Error::backend("round-trip probe", error);
    // Through the lock's own pool: the probe's request travels as the lock's do, and usually on
    // the very connection the last release returned.
    let name = unique_name("w1");
    let mut probe =
        target.round_trip_for(&backend, &name).map(|probe| probe.open()).transpose().map_err(probe_failed)?;
    let client = LockClient::with_options(backend, bench_options()?);
    let lock = Lock::new(&client, name);
    for _ in 0..WARMUP {
        lock.lock()?.unlock()?;
        if let Some(probe) = &mut probe {
            empty_pair(probe).map_err(probe_failed)?;
        }
    }
    let clock = Clock::start();
    let mut lat_ns = Vec::with_capacity(scale.w1_pairs);
    let mut round_trips_ns = Vec::with_capacity(if probe.is_some() { scale.w1_pairs } else { 0 });
    for _ in 0..scale.w1_pairs {
        let before = clock.now_ns();
        lock.lock()?.unlock()?;
        lat_ns.push(clock.now_ns() - before);
        if let Some(probe) = &mut probe {
            round_trips_ns.push(nanos(empty_pair(probe).map_err(probe_failed)?) / 2);
        }
    }
    Ok(W1Report { elapsed_ns: lat_ns.iter().sum(), lat_ns, round_trips_ns })
}

/// Two round trips back to back, as a lock pair's acquire and release go.
fn empty_pair(probe: &mut RoundTrips) -> Result<Duration, String> {
    Ok(probe.time_one()? + probe.time_one()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1,000 pairs of `pair_us` each, with `round_trip_us` timed beside each.
    fn report(pair_us: u64, round_trip_us: Option<u64>) -> W1Report {
        let lat_ns = vec![pair_us * 1_000; 1_000];
        let round_trips_ns = round_trip_us.map_or_else(Vec::new, |us| vec![us * 1_000; 1_000]);
        W1Report { elapsed_ns: lat_ns.iter().sum(), lat_ns, round_trips_ns }
    }

    #[test]
    fn a_pair_is_compared_with_two_round_trips() {
        assert_eq!(report(200, Some(50)).limit(), W1Limit::Ratio(0.5));
        assert_eq!(report(100, Some(50)).limit(), W1Limit::Ratio(1.0));
        assert_eq!(report(100, Some(50)).round_trip(), Some(Duration::from_micros(50)));
    }

    #[test]
    fn a_pair_faster_than_two_round_trips_is_a_measurement_problem() {
        assert_eq!(report(80, Some(50)).limit(), W1Limit::ProbeNotALowerBound(1.25));
    }

    #[test]
    fn in_process_there_is_no_limit() {
        assert_eq!(report(1, None).limit(), W1Limit::None);
        assert_eq!(report(1, None).round_trip(), None);
    }
}
