//! [`RoundTripProbe`]: the physical limit a benchmark result is printed beside — one round trip
//! to the backend's server, with the cheapest request on the kind of connection the lock uses.
//!
//! A probe opens a connection ([`RoundTripProbe::open`]) and times single round trips on it, so a
//! workload can interleave them with its own requests (W1 does): both then run under the same
//! conditions — CPU frequency, which core the server's thread wakes on, what else the machine
//! does — and the round trip is a lower bound of the workload's requests, not a number taken
//! minutes earlier on a quieter machine.

use std::fmt;
use std::time::Duration;

use crate::workload::Percentiles;

/// Times one round trip on a connection the closure owns.
pub type TimeOne = Box<dyn FnMut() -> Result<Duration, String> + Send>;

/// Measures server round trips (Redis `PING`, SQL `SELECT 1`, …) on demand.
pub struct RoundTripProbe {
    description: String,
    samples: usize,
    open: Box<dyn Fn() -> Result<TimeOne, String> + Send + Sync>,
}

impl RoundTripProbe {
    /// A probe whose `open` connects and returns a function that times one round trip on that
    /// connection. [`measure`](Self::measure) takes the median of `samples` of them.
    /// `description` says what one round trip is, and on which connection (`` `SELECT 1` on one
    /// pooled connection to … ``); reports add how the samples were taken.
    pub fn new(
        description: impl Into<String>,
        samples: usize,
        open: impl Fn() -> Result<TimeOne, String> + Send + Sync + 'static,
    ) -> Self {
        Self { description: description.into(), samples: samples.max(1), open: Box::new(open) }
    }

    /// What one round trip is.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// A connection to time single round trips on.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn open(&self) -> Result<RoundTrips, String> {
        Ok(RoundTrips { time_one: (self.open)()? })
    }

    /// The median of the probe's samples on one new connection, after as many to warm up.
    ///
    /// # Errors
    /// When the server cannot be asked.
    pub fn measure(&self) -> Result<Duration, String> {
        let mut round_trips = self.open()?;
        for _ in 0..self.samples {
            round_trips.time_one()?;
        }
        let mut timings = Vec::with_capacity(self.samples);
        for _ in 0..self.samples {
            timings.push(nanos(round_trips.time_one()?));
        }
        Ok(Duration::from_nanos(Percentiles::of(&timings).p50))
    }
}

impl fmt::Debug for RoundTripProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoundTripProbe")
            .field("description", &self.description)
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

/// An open probe connection ([`RoundTripProbe::open`]).
pub struct RoundTrips {
    time_one: TimeOne,
}

impl RoundTrips {
    /// Times one round trip.
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn time_one(&mut self) -> Result<Duration, String> {
        (self.time_one)()
    }
}

impl fmt::Debug for RoundTrips {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoundTrips").finish_non_exhaustive()
    }
}

/// `duration` in whole nanoseconds, saturating.
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
