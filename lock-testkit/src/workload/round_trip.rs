//! [`RoundTripProbe`]: the physical limit a benchmark result is printed beside — one round trip
//! to the backend's server, measured in the same run.

use std::fmt;
use std::time::{Duration, Instant};

use crate::workload::Percentiles;

/// Measures one server round trip (Redis `PING`, SQL `SELECT 1`, …) on demand.
pub struct RoundTripProbe {
    description: String,
    measure: Box<dyn Fn() -> Result<Duration, String> + Send + Sync>,
}

impl RoundTripProbe {
    /// A probe that `measure`s a round trip, described as `description` in reports (say what is
    /// timed, on which connection, and how the samples are summarized).
    pub fn new(
        description: impl Into<String>,
        measure: impl Fn() -> Result<Duration, String> + Send + Sync + 'static,
    ) -> Self {
        Self { description: description.into(), measure: Box::new(measure) }
    }

    /// How the round trip is measured.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Measures the round trip now.
    ///
    /// # Errors
    /// When the server cannot be asked.
    pub fn measure(&self) -> Result<Duration, String> {
        (self.measure)()
    }
}

impl fmt::Debug for RoundTripProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoundTripProbe").field("description", &self.description).finish_non_exhaustive()
    }
}

/// The median time of `samples` calls of `round_trip`, after as many warm-up calls.
///
/// # Errors
/// The first error `round_trip` returns.
pub fn median_round_trip(
    samples: usize,
    mut round_trip: impl FnMut() -> Result<(), String>,
) -> Result<Duration, String> {
    for _ in 0..samples {
        round_trip()?;
    }
    let mut timings = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        round_trip()?;
        timings.push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    Ok(Duration::from_nanos(Percentiles::of(&timings).p50))
}
