//! Workload M1: what the `metrics` feature costs. W1 runs alternately without a recorder (every
//! handle a no-op: the feature's cost is then one call per metric, as good as compiled out) and
//! with Prometheus's recorder (an exporter's real atomics and histogram buckets), five times
//! each, in one process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use lock_testkit::workload::Scale;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::kinds::KindTarget;

/// How many W1 runs each side gets.
const ROUNDS: usize = 5;

/// W1's pair rate without and with a recorder: the medians of [`ROUNDS`] alternating runs.
pub(crate) struct Overhead {
    pub(crate) without: f64,
    pub(crate) with: f64,
}

impl Overhead {
    /// `with / without`: the target is at least 0.97.
    pub(crate) fn ratio(&self) -> f64 {
        self.with / self.without
    }
}

/// Runs M1 on `target`.
///
/// # Errors
/// A failing W1 run, or another recorder installed in this process.
pub(crate) fn measure(target: &dyn KindTarget) -> Result<Overhead, String> {
    let switch = install()?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for (on, rates) in [(false, &mut without), (true, &mut with)] {
            // Handles are registered when a client is built: each W1 run builds its own.
            switch.on.store(on, Ordering::SeqCst);
            let report = target.w1(Scale::FULL).map_err(|e| format!("M1: {e}"));
            switch.on.store(false, Ordering::SeqCst);
            rates.push(report?.pairs_per_second());
        }
    }
    Ok(Overhead { without: median(without), with: median(with) })
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// A recorder that hands out Prometheus's handles while switched on, no-op handles otherwise.
struct Switch {
    on: AtomicBool,
    inner: PrometheusRecorder,
}

fn install() -> Result<&'static Switch, String> {
    static SWITCH: OnceLock<&'static Switch> = OnceLock::new();
    if let Some(switch) = SWITCH.get() {
        return Ok(switch);
    }
    let switch: &'static Switch = Box::leak(Box::new(Switch {
        on: AtomicBool::new(false),
        inner: PrometheusBuilder::new().build_recorder(),
    }));
    metrics::set_global_recorder(switch).map_err(|e| format!("M1: {e}"))?;
    Ok(SWITCH.get_or_init(|| switch))
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}
