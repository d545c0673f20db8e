//! What a service owner can watch: `tracing` spans (always) and metrics (feature `metrics`).
//!
//! Spans have the target `distlock` and level DEBUG (`RUST_LOG=distlock=debug`):
//! `acquire`, `release`, and per renewal batch `renew` (lease kinds) or `liveness_check`
//! (session kinds). Their fields: `backend`, `kind`, `name` (redacted with
//! [`redact_names`](crate::LockOptionsBuilder::redact_names)), `mode`, and as they end
//! `outcome`, `wait_ms`, `token` (the fencing token). No URL, password or owner token is ever a
//! field. Metric names, units and labels: [`metrics`].

mod handles;
pub mod metrics;
mod shown_name;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tracing::field::Empty;
use tracing::span::EnteredSpan;
use tracing::Span;

use self::handles::{Counter, Histogram, Labels};
pub(crate) use self::shown_name::ShownName;
use crate::abilities::Primitive;
use crate::backend::{DistributedLock, FencingToken, HoldKind};
use crate::error::{Error, Result};
use crate::name::LockName;
use crate::options::{LockOptions, RedactionKey};

/// One client's instruments and span settings.
pub(crate) struct Observer {
    backend: &'static str,
    kind: &'static str,
    hold_kind: HoldKind,
    name_label: bool,
    redact: Option<RedactionKey>,
    /// Per mode, without a name label: registered on the mode's first use (a client that never
    /// takes a read lock exports no read series).
    by_mode: [OnceLock<Arc<HoldInstruments>>; 5],
    /// Per (name, mode), with [`LockOptions::name_label`]: registered on a name's first use.
    by_name: RwLock<ByName>,
    renewals: RenewalInstruments,
}

/// The per-name handles of a client with name labels, kept while a hold uses them: a client that
/// locks ever new names does not grow the map without bound (the series stay with the recorder).
#[derive(Default)]
struct ByName {
    map: HashMap<(LockName, &'static str), Arc<HoldInstruments>>,
    /// The map's size after the last prune: the next prune comes when it has doubled.
    pruned_at: usize,
}

impl ByName {
    /// The smallest map worth pruning.
    const PRUNE_FROM: usize = 1024;

    /// Drops the handles no hold uses (the map's is their only reference) once the map has
    /// doubled since the last prune: amortised O(1) per new name.
    fn prune(&mut self) {
        if self.map.len() >= Self::PRUNE_FROM.max(self.pruned_at * 2) {
            self.map.retain(|_, instruments| Arc::strong_count(instruments) > 1);
            self.pruned_at = self.map.len();
        }
    }
}

impl Observer {
    pub(crate) fn new<B: DistributedLock>(backend: &B, options: &LockOptions) -> Self {
        static DESCRIBED: Once = Once::new();
        DESCRIBED.call_once(metrics::describe);
        let (backend_name, kind) = (backend.backend_name(), backend.kind_name());
        let base = vec![("backend", backend_name.to_owned()), ("kind", kind.to_owned())];
        Self {
            backend: backend_name,
            kind,
            hold_kind: backend.hold_kind(),
            // Without the feature nothing is recorded: no per-name handles to keep.
            name_label: options.name_label && cfg!(feature = "metrics"),
            redact: options.redaction,
            by_mode: Default::default(),
            by_name: RwLock::new(ByName::default()),
            renewals: RenewalInstruments::new(&base),
        }
    }

    /// `name` as spans and events of this client show it.
    pub(crate) fn shown<'a>(&self, name: &'a LockName) -> ShownName<'a> {
        ShownName { name, redact: self.redact }
    }

    /// `error`'s text as spans and events of this client show it: with the lock name it
    /// carries redacted, when names are.
    pub(crate) fn describe(&self, error: &Error) -> String {
        let text = error.to_string();
        match error.lock_name() {
            Some(name) if self.redact.is_some() => text.replace(name.as_str(), &self.shown(name).to_string()),
            _ => text,
        }
    }

    fn instruments(&self, name: &LockName, primitive: Primitive) -> Arc<HoldInstruments> {
        let register = |name: Option<&LockName>| {
            let base = vec![("backend", self.backend.to_owned()), ("kind", self.kind.to_owned())];
            // A redacted name is a label only as its hash.
            let name = name.map(|name| self.shown(name).to_string());
            Arc::new(HoldInstruments::new(&base, primitive.as_str(), name))
        };
        if !self.name_label {
            return Arc::clone(self.by_mode[index(primitive)].get_or_init(|| register(None)));
        }
        let key = (name.clone(), primitive.as_str());
        // Acquisitions of names already seen share a read lock: no client-wide exclusion.
        if let Some(instruments) = self.by_name.read().map.get(&key) {
            return Arc::clone(instruments);
        }
        let mut by_name = self.by_name.write();
        let instruments = Arc::clone(by_name.map.entry(key).or_insert_with(|| register(Some(name))));
        by_name.prune();
        instruments
    }

    /// Starts timing an acquisition of `name`'s `primitive` lock from the server, inside an
    /// `acquire` span.
    pub(crate) fn attempt(&self, name: &LockName, primitive: Primitive) -> Attempt {
        let span = tracing::debug_span!(
            target: "distlock",
            "acquire",
            backend = self.backend,
            kind = self.kind,
            name = %self.shown(name),
            mode = primitive.as_str(),
            outcome = Empty,
            wait_ms = Empty,
            token = Empty,
        );
        Attempt {
            span: span.entered(),
            started: Instant::now(),
            instruments: self.instruments(name, primitive),
        }
    }

    /// A `release` span for one hold.
    pub(crate) fn release_span(
        &self,
        name: &LockName,
        primitive: Primitive,
        token: Option<FencingToken>,
    ) -> Span {
        let span = tracing::debug_span!(
            target: "distlock",
            "release",
            backend = self.backend,
            kind = self.kind,
            name = %self.shown(name),
            mode = primitive.as_str(),
            token = Empty,
            outcome = Empty,
        );
        if let Some(token) = token {
            span.record("token", token.get());
        }
        span
    }

    /// Starts timing one renewal batch of `leases` holds, inside a `renew` span (or
    /// `liveness_check`, for session-bound kinds).
    pub(crate) fn renewal_batch(&self, leases: usize) -> RenewalBatch<'_> {
        let span = match self.hold_kind {
            HoldKind::Session => tracing::debug_span!(
                target: "distlock",
                "liveness_check",
                backend = self.backend,
                kind = self.kind,
                holds = leases,
                confirmed = Empty,
                lost = Empty,
                failed = Empty,
            ),
            _ => tracing::debug_span!(
                target: "distlock",
                "renew",
                backend = self.backend,
                kind = self.kind,
                leases,
                confirmed = Empty,
                lost = Empty,
                failed = Empty,
            ),
        };
        RenewalBatch {
            span: span.entered(),
            started: Instant::now(),
            instruments: &self.renewals,
            confirmed: 0,
            lost: 0,
            failed: 0,
        }
    }
}

/// The index of `primitive`'s instruments among a name's.
fn index(primitive: Primitive) -> usize {
    match primitive {
        Primitive::Mutex => 0,
        Primitive::Read => 1,
        Primitive::Write => 2,
        Primitive::Permit => 3,
        Primitive::Leader => 4,
    }
}

/// The per-lock instruments of one mode (and name, with name labels).
pub(crate) struct HoldInstruments {
    acquisitions: Counter,
    contended: Counter,
    timeouts: Counter,
    errors: Counter,
    wait: Histogram,
    hold: Histogram,
    losses: Counter,
    in_doubt: Counter,
    not_held_releases: Counter,
    failed_releases: Counter,
}

impl HoldInstruments {
    fn new(base: &Labels, mode: &'static str, name: Option<String>) -> Self {
        let mut labels = base.clone();
        labels.push(("mode", mode.to_owned()));
        if let Some(name) = name {
            labels.push(("name", name));
        }
        let with_reason = |reason: &str| {
            let mut labels = labels.clone();
            labels.push(("reason", reason.to_owned()));
            handles::counter(metrics::RELEASE_FAILURES, &labels)
        };
        Self {
            acquisitions: handles::counter(metrics::ACQUISITIONS, &labels),
            contended: handles::counter(metrics::CONTENDED_ACQUISITIONS, &labels),
            timeouts: handles::counter(metrics::ACQUIRE_TIMEOUTS, &labels),
            errors: handles::counter(metrics::ACQUIRE_ERRORS, &labels),
            wait: handles::histogram(metrics::ACQUIRE_WAIT, &labels),
            hold: handles::histogram(metrics::HOLD_TIME, &labels),
            losses: handles::counter(metrics::LOSSES, &labels),
            in_doubt: handles::counter(metrics::IN_DOUBT, &labels),
            not_held_releases: with_reason("not_held"),
            failed_releases: with_reason("error"),
        }
    }
}

/// One acquisition being timed, inside its `acquire` span.
pub(crate) struct Attempt {
    span: EnteredSpan,
    started: Instant,
    instruments: Arc<HoldInstruments>,
}

impl Attempt {
    /// Records how the server acquisition ended: granted (`Some`, with whether it waited and
    /// its fencing token), given up (`None`) or failed.
    pub(crate) fn finish(&self, outcome: Result<Option<(bool, Option<FencingToken>)>, String>) {
        let waited = self.started.elapsed();
        let span = &self.span;
        span.record("wait_ms", waited.as_secs_f64() * 1e3);
        match outcome {
            Ok(Some((contended, token))) => {
                self.instruments.acquisitions.increment(1);
                if contended {
                    self.instruments.contended.increment(1);
                }
                self.instruments.wait.record(waited.as_secs_f64());
                span.record("outcome", if contended { "acquired after waiting" } else { "acquired" });
                if let Some(token) = token {
                    span.record("token", token.get());
                }
            }
            Ok(None) => {
                self.instruments.timeouts.increment(1);
                span.record("outcome", "still held");
            }
            Err(error) => {
                self.instruments.errors.increment(1);
                span.record("outcome", error);
            }
        }
    }

    /// What the hold will report to, from its grant on.
    pub(crate) fn hold_metrics(&self) -> HoldMetrics {
        HoldMetrics {
            instruments: Arc::clone(&self.instruments),
            granted_at: Instant::now(),
            ended: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            in_doubt: AtomicBool::new(false),
        }
    }
}

/// The metrics of one hold, kept by its [`HeldLease`](crate::held::HeldLease).
pub(crate) struct HoldMetrics {
    instruments: Arc<HoldInstruments>,
    granted_at: Instant,
    /// Set when the hold time was recorded (at the release or the loss, whichever is first).
    ended: AtomicBool,
    /// Set when the loss was counted (by the renewal timer or a release, whichever is first).
    lost: AtomicBool,
    /// Set while the hold is in doubt, so an episode is counted once.
    in_doubt: AtomicBool,
}

impl HoldMetrics {
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.instruments.hold.record(self.granted_at.elapsed().as_secs_f64());
        }
    }

    /// Records the end of a hold dropped without asking the server (a close that stopped
    /// waiting for an unanswering one).
    pub(crate) fn abandoned(&self) {
        self.end();
    }

    pub(crate) fn lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            self.instruments.losses.increment(1);
        }
        self.end();
    }

    /// Records whether a session hold is in doubt now; a change into doubt is an episode.
    pub(crate) fn in_doubt(&self, doubted: bool) {
        if self.in_doubt.swap(doubted, Ordering::AcqRel) != doubted && doubted {
            self.instruments.in_doubt.increment(1);
        }
    }

    /// Records a release and how it went (`describe` gives an error's text for the span); a
    /// hold already reported lost counts no failure.
    pub(crate) fn released(
        &self,
        outcome: &Result<()>,
        lost_before: bool,
        span: &Span,
        describe: impl Fn(&Error) -> String,
    ) {
        match outcome {
            Ok(()) => {
                span.record("outcome", "released");
            }
            Err(Error::NotHeld { .. }) => {
                span.record("outcome", "not held");
                if !lost_before {
                    self.instruments.not_held_releases.increment(1);
                }
            }
            Err(error) => {
                span.record("outcome", describe(error));
                if !lost_before {
                    self.instruments.failed_releases.increment(1);
                }
            }
        }
        self.end();
    }
}

/// A client's renewal instruments.
struct RenewalInstruments {
    confirmed: Counter,
    lost: Counter,
    failed: Counter,
    batch: Histogram,
}

impl RenewalInstruments {
    fn new(base: &Labels) -> Self {
        let with_outcome = |outcome: &str| {
            let mut labels = base.clone();
            labels.push(("outcome", outcome.to_owned()));
            handles::counter(metrics::RENEWALS, &labels)
        };
        Self {
            confirmed: with_outcome("confirmed"),
            lost: with_outcome("lost"),
            failed: with_outcome("failed"),
            batch: handles::histogram(metrics::RENEWAL_BATCH, base),
        }
    }
}

/// One renewal batch being timed, inside its span; counts go to the span and metrics on drop.
pub(crate) struct RenewalBatch<'a> {
    span: EnteredSpan,
    started: Instant,
    instruments: &'a RenewalInstruments,
    confirmed: u64,
    lost: u64,
    failed: u64,
}

impl RenewalBatch<'_> {
    /// The server's answers are in: the time so far is the batch's.
    pub(crate) fn answered(&self) -> Duration {
        let took = self.started.elapsed();
        self.instruments.batch.record(took.as_secs_f64());
        took
    }

    pub(crate) fn confirmed(&mut self) {
        self.confirmed += 1;
    }

    pub(crate) fn lost(&mut self) {
        self.lost += 1;
    }

    pub(crate) fn failed(&mut self) {
        self.failed += 1;
    }
}

impl Drop for RenewalBatch<'_> {
    fn drop(&mut self) {
        let RenewalBatch { span, instruments, confirmed, lost, failed, .. } = self;
        instruments.confirmed.increment(*confirmed);
        instruments.lost.increment(*lost);
        instruments.failed.increment(*failed);
        span.record("confirmed", *confirmed);
        span.record("lost", *lost);
        span.record("failed", *failed);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    /// A client with name labels that locks ever new names keeps handles only for names in use.
    #[test]
    fn per_name_handles_do_not_outlive_their_holds() {
        let options = LockOptions::builder().name_label(true).build().unwrap();
        let observer = Observer::new(&MemoryBackend::new(), &options);
        let name = |i: usize| LockName::new(format!("order-{i}")).unwrap();
        let in_use: Vec<_> = (0..10).map(|i| observer.instruments(&name(i), Primitive::Mutex)).collect();
        for i in 10..10_000 {
            drop(observer.instruments(&name(i), Primitive::Mutex));
        }
        let kept = observer.by_name.read().map.len();
        assert!(kept <= 2 * ByName::PRUNE_FROM, "{kept} handles kept for 10 names in use");
        // The handles in use survive every prune: the same ones are handed out again.
        for (i, instruments) in in_use.iter().enumerate() {
            assert!(Arc::ptr_eq(instruments, &observer.instruments(&name(i), Primitive::Mutex)));
        }
    }
}
