//! Counter and histogram handles: the `metrics` crate's with the `metrics` feature, no-ops
//! without it, so the instrumented code has no `cfg` of its own.

/// A label set: `backend`, `kind`, and whatever else the metric has.
pub(crate) type Labels = Vec<(&'static str, String)>;

#[cfg(feature = "metrics")]
mod imp {
    pub(crate) use metrics::{Counter, Histogram};

    fn labels(labels: &super::Labels) -> Vec<metrics::Label> {
        labels.iter().map(|(key, value)| metrics::Label::new(*key, value.clone())).collect()
    }

    pub(crate) fn counter(name: &'static str, with: &super::Labels) -> Counter {
        metrics::counter!(name, labels(with))
    }

    pub(crate) fn histogram(name: &'static str, with: &super::Labels) -> Histogram {
        metrics::histogram!(name, labels(with))
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    /// Counts nothing: the `metrics` feature is off.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Counter;

    impl Counter {
        pub(crate) fn increment(&self, _: u64) {}
    }

    /// Records nothing: the `metrics` feature is off.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Histogram;

    impl Histogram {
        pub(crate) fn record(&self, _: f64) {}
    }

    pub(crate) fn counter(_: &'static str, _: &super::Labels) -> Counter {
        Counter
    }

    pub(crate) fn histogram(_: &'static str, _: &super::Labels) -> Histogram {
        Histogram
    }
}

pub(crate) use imp::{counter, histogram, Counter, Histogram};
