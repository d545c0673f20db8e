//! [`LockOptions`]: how a [`LockClient`](crate::LockClient) leases, renews, waits and reenters.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::name::LockName;

/// A callback run when a held lock is lost, on a thread of distlock's own that runs nothing else
/// (never on the renewal threads): a slow callback delays no signal, renewal or other client.
pub type OnLost = Arc<dyn Fn(&LockName) + Send + Sync>;

/// The longest sleep between attempts a waiter may be configured with.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Validated settings of a [`LockClient`](crate::LockClient). Build them with
/// [`LockOptions::builder`]; `LockOptions::default()` is the builder's defaults.
#[derive(Clone)]
pub struct LockOptions {
    pub(crate) lease: Duration,
    pub(crate) renew_interval: Duration,
    pub(crate) renewal: bool,
    pub(crate) reentrant: bool,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) clock_drift: f64,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) name_label: bool,
    /// `None`: names shown as they are; else the SipHash key of their redacted form.
    pub(crate) redaction: Option<RedactionKey>,
}

/// The 128-bit key of the hash that redacted lock names show
/// ([`LockOptionsBuilder::redaction_key`]); never shown in `Debug` output.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RedactionKey(pub(crate) [u8; 16]);

impl fmt::Debug for RedactionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0 == [0; 16] { "unkeyed" } else { "keyed" })
    }
}

/// The fixed part of the clock-drift margin: scheduling and timer granularity (Redlock's 2 ms).
pub const DRIFT_ALLOWANCE: Duration = Duration::from_millis(2);

impl LockOptions {
    /// A builder with every default.
    pub fn builder() -> LockOptionsBuilder {
        LockOptionsBuilder::default()
    }

    /// The lease duration each acquisition and renewal asks for.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often a held lease is renewed.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// Whether held leases are renewed automatically.
    pub fn renewal(&self) -> bool {
        self.renewal
    }

    /// Whether the same thread may lock again while it holds the lock.
    pub fn reentrant(&self) -> bool {
        self.reentrant
    }

    /// The shortest and longest sleep between attempts of a waiter without server wake-ups.
    pub fn backoff(&self) -> (Duration, Duration) {
        (self.backoff_min, self.backoff_max)
    }

    /// The clock-drift factor: see [`LockOptionsBuilder::clock_drift`].
    pub fn clock_drift(&self) -> f64 {
        self.clock_drift
    }

    /// How much shorter than `lease` a holder counts its hold: `lease × clock_drift` plus
    /// [`DRIFT_ALLOWANCE`], so a server clock running that much fast cannot free the lock before
    /// the holder knows it lost it.
    pub fn drift_margin(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.clock_drift) + DRIFT_ALLOWANCE
    }

    /// Whether metrics carry a `name` label: see [`LockOptionsBuilder::name_label`].
    pub fn name_label(&self) -> bool {
        self.name_label
    }

    /// Whether spans and log events show lock names redacted: see
    /// [`LockOptionsBuilder::redact_names`].
    pub fn redact_names(&self) -> bool {
        self.redaction.is_some()
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptionsBuilder::default().build().expect("the default options are valid")
    }
}

impl fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockOptions")
            .field("lease", &self.lease)
            .field("renew_interval", &self.renew_interval)
            .field("renewal", &self.renewal)
            .field("reentrant", &self.reentrant)
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .field("clock_drift", &self.clock_drift)
            .field("on_lost", &self.on_lost.as_ref().map(|_| "Fn(&LockName)"))
            .field("name_label", &self.name_label)
            .field("redaction", &self.redaction)
            .finish()
    }
}

/// Builds [`LockOptions`] by value; [`build`](Self::build) validates.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockOptionsBuilder {
    lease: Duration,
    renew_interval: Option<Duration>,
    renewal: bool,
    reentrant: bool,
    backoff_min: Duration,
    backoff_max: Duration,
    clock_drift: f64,
    on_lost: Option<OnLost>,
    name_label: bool,
    redaction: Option<RedactionKey>,
}

impl Default for LockOptionsBuilder {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            renew_interval: None,
            renewal: true,
            reentrant: true,
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(100),
            clock_drift: 0.01,
            on_lost: None,
            name_label: false,
            redaction: None,
        }
    }
}

impl LockOptionsBuilder {
    /// How long the server keeps a lock its holder stops renewing (a crashed holder's lock is free
    /// again after at most this long). Between 1 ms and 24 h.
    ///
    /// Defaults to 30 s (Redisson's watchdog default).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often a held lease is extended. Must be shorter than the lease; at
    /// more than half the lease, one failed renewal can already cost the lock.
    ///
    /// Defaults to a third of the lease.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// Whether held leases are renewed until released. Without renewal a lock held past its lease
    /// is lost (and reported lost).
    ///
    /// Defaults to `true`.
    pub fn renewal(mut self, enabled: bool) -> Self {
        self.renewal = enabled;
        self
    }

    /// Whether a thread that holds a lock may lock it again (Java's `ReentrantLock`); the backend
    /// is then touched only by the first lock and the last unlock.
    ///
    /// Defaults to `true`.
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// The shortest and longest sleep between attempts when the backend cannot wake waiters. The
    /// sleep doubles from `min` up to `max`, each drawn at random from its upper half (jitter), so
    /// waiters neither spin nor march in step.
    ///
    /// Defaults to 1 ms and 100 ms; `max` may be at most [`MAX_BACKOFF`].
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// A callback run when a held lock is lost (renewal failed for a whole lease, the server said
    /// the lock is no longer held, or the lease ran out with renewal off). It runs after the
    /// guard's [`LostSignal`](crate::LostSignal) fired, on a callback thread of distlock's own
    /// (never a renewal thread), so a slow or stuck callback delays no signal, renewal or other
    /// callback; a panic in it is caught and logged. Up to
    /// [`MAX_CALLBACK_THREADS`](crate::MAX_CALLBACK_THREADS) callbacks run at once; more wait.
    ///
    /// Defaults to none; the guard's [`LostSignal`](crate::LostSignal) fires either way.
    pub fn on_lost(mut self, callback: impl Fn(&LockName) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(callback));
        self
    }

    /// How fast a server's clock may run against this process's, as a fraction (Redlock's drift
    /// factor): every hold counts as lost `lease × clock_drift + 2 ms` before its lease ends by
    /// this process's clock, so a server whose clock runs that much fast frees the lock only after
    /// the holder was told. Between 0 and 0.1. Where a backend vouches for less than the lease
    /// ([`DistributedLock::lease_margin`](crate::DistributedLock::lease_margin): ZooKeeper's
    /// session timeout), the margin is taken off what it vouches for.
    ///
    /// Defaults to 0.01 (1 %).
    pub fn clock_drift(mut self, factor: f64) -> Self {
        self.clock_drift = factor;
        self
    }

    /// Whether the metrics (feature `metrics`) carry the lock's name as a `name` label. Off by
    /// default: every distinct name is a new time series, so turn it on only for a bounded set
    /// of names (not `orders:{id}`).
    pub fn name_label(mut self, enabled: bool) -> Self {
        self.name_label = enabled;
        self
    }

    /// Whether spans, lock-core's log events, error texts in them and metric labels show lock
    /// names as a short stable hash (`#1f0c…`) instead of the name, for names that carry
    /// personal data. The hash is SipHash-2-4 of the name's UTF-8 bytes, with the all-zero key
    /// (or the [`redaction_key`](Self::redaction_key)), as 16 lower-case hex digits after `#`:
    /// the same name gives the same hash in every process, release and language that computes
    /// it, so one lock's events still line up. Unkeyed, this is pseudonymisation, not
    /// encryption: whoever can guess a name (an e-mail address, a user id) can check it — set a
    /// secret key against that. The backends' own DEBUG-level events may still name keys or
    /// channels.
    ///
    /// Defaults to off.
    pub fn redact_names(mut self, enabled: bool) -> Self {
        self.redaction = enabled.then(|| self.redaction.unwrap_or_default());
        self
    }

    /// Redacts names (as [`redact_names`](Self::redact_names)) with a keyed hash: SipHash-2-4
    /// under this secret 128-bit key, so only those who hold the key can tell which name a hash
    /// stands for, even for names a dictionary would guess. Keep the key as you keep a password
    /// (it never appears in `Debug` output); the same key gives the same hashes in every process.
    ///
    /// Defaults to no key (the all-zero key).
    pub fn redaction_key(mut self, key: [u8; 16]) -> Self {
        self.redaction = Some(RedactionKey(key));
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the lease is outside 1 ms ..= 24 h, the renew interval is zero
    /// or not shorter than the lease, or the backoff bounds are zero, reversed or above
    /// [`MAX_BACKOFF`].
    pub fn build(self) -> Result<LockOptions> {
        // Servers count leases in whole milliseconds; so does the holder.
        let lease = Duration::from_millis(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
        check_lease(lease)?;
        let renew_interval = self.renew_interval.unwrap_or(lease / 3);
        if renew_interval.is_zero() || renew_interval >= lease {
            return Err(Error::invalid_config(format!(
                "renew interval {renew_interval:?} must be above zero and shorter than the lease {lease:?}"
            )));
        }
        if !(0.0..=0.1).contains(&self.clock_drift) {
            return Err(Error::invalid_config(format!(
                "clock drift {} must be between 0 and 0.1 (10 %)",
                self.clock_drift
            )));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max || self.backoff_max > MAX_BACKOFF
        {
            return Err(Error::invalid_config(format!(
                "backoff bounds {:?}..{:?} must be above zero, in order and at most {MAX_BACKOFF:?}",
                self.backoff_min, self.backoff_max
            )));
        }
        Ok(LockOptions {
            lease,
            renew_interval,
            renewal: self.renewal,
            reentrant: self.reentrant,
            backoff_min: self.backoff_min,
            backoff_max: self.backoff_max,
            clock_drift: self.clock_drift,
            on_lost: self.on_lost,
            name_label: self.name_label,
            redaction: self.redaction,
        })
    }
}

/// Checks that a lease duration can be sent to a server that counts whole milliseconds.
///
/// # Errors
/// [`Error::InvalidConfig`] when `lease` is under 1 ms, over [`MAX_LEASE`], or not a whole
/// number of milliseconds (the server would cut it shorter than the holder believes).
pub fn check_lease(lease: Duration) -> Result<()> {
    if lease < Duration::from_millis(1) {
        return Err(Error::invalid_config(format!("lease {lease:?} is under 1 ms")));
    }
    if !lease.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(Error::invalid_config(format!("lease {lease:?} is not a whole number of milliseconds")));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid_config(format!("lease {lease:?} is over the {MAX_LEASE:?} maximum")));
    }
    Ok(())
}

/// The longest lease accepted: a lock that outlives a crashed holder by more than a day is a
/// configuration mistake, not a lease.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_documented_values() {
        let o = LockOptions::default();
        assert_eq!(o.lease(), Duration::from_secs(30));
        assert_eq!(o.renew_interval(), Duration::from_secs(10));
        assert!(o.renewal() && o.reentrant());
        assert_eq!(o.backoff(), (Duration::from_millis(1), Duration::from_millis(100)));
        assert_eq!(o.clock_drift(), 0.01);
        assert_eq!(o.drift_margin(Duration::from_secs(3)), Duration::from_millis(32));
    }

    #[test]
    fn invalid_values_are_rejected_at_build() {
        let ms = Duration::from_millis;
        for builder in [
            LockOptions::builder().lease(Duration::ZERO),
            LockOptions::builder().lease(Duration::from_micros(500)),
            LockOptions::builder().lease(Duration::from_secs(25 * 3600)),
            LockOptions::builder().lease(ms(100)).renew_interval(ms(100)),
            LockOptions::builder().renew_interval(Duration::ZERO),
            LockOptions::builder().backoff(Duration::ZERO, ms(1)),
            LockOptions::builder().backoff(ms(5), ms(1)),
            LockOptions::builder().clock_drift(-0.01),
            LockOptions::builder().clock_drift(0.5),
            LockOptions::builder().clock_drift(f64::NAN),
        ] {
            assert!(matches!(builder.build(), Err(Error::InvalidConfig { .. })));
        }
    }
}
