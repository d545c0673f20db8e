//! S11 — hand-off latency (source 003: "no wake-up mechanism"): a thread blocked in `lock()` while
//! another releases acquires within a few round trips, woken by the server, not by a sleep.
//!
//! A backend offers waiting through [`NativeWait`](lock_core::NativeWait), whose contract bounds
//! its fallback re-check to about once a second; a kind that declares no such ability is n/a
//! (its waiters back off), and one that declares it but whose backend does not return it fails.
//! The release comes at a random moment, so a waiter that polls every `p` gets the lock within
//! [`WAKE_BOUND`] with probability `WAKE_BOUND / p` per round: requiring it in 5 of 7 rounds
//! passes a server wake-up (a few round trips) and fails a 300 ms poller (it would pass by luck
//! about once in 500 runs). A round whose release call itself took longer than
//! [`STALLED_RELEASE`] says nothing of the waiter (the server or a pooler in between stalled,
//! and the waiter's grant with it): it is played again, up to [`EXTRA_ROUNDS`] times.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, has_ability, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Far above a loopback round trip, far below a poll period worth the name.
const WAKE_BOUND: Duration = Duration::from_millis(50);
const ROUNDS: usize = 7;
/// Rounds whose hand-off must be within [`WAKE_BOUND`] (room for two slow ones on a busy
/// machine).
const WOKEN_ROUNDS: usize = 5;
/// A release call slower than this is a stall of the path to the server, not a hand-off.
const STALLED_RELEASE: Duration = Duration::from_millis(25);
/// How many stalled rounds are played again; past that, they count as they are.
const EXTRA_ROUNDS: usize = 7;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let declared = target.abilities().native_wait;
    if !has_ability(declared, target.backend()?.native_wait().is_some(), "native_wait")? {
        return Ok(Verdict::NotApplicable(
            "the backend has no server wake-ups; waiters back off between attempts".into(),
        ));
    }
    let holder = client(target, options(10 * SECOND, true))?;
    let waiter = client(target, options(10 * SECOND, true))?;
    let mut handoffs = Vec::with_capacity(ROUNDS);
    let mut replayed = 0;
    while handoffs.len() < ROUNDS {
        let name = unique_name("s11");
        let held = acquire(&Lock::new(&holder, name.clone()))?;
        let (handoff, release_took) = thread::scope(|s| -> Result<(Duration, Duration), Failure> {
            let (ready_tx, ready) = mpsc::channel();
            let (waiter, name) = (&waiter, &name);
            let waiting = s.spawn(move || -> Result<Instant, Failure> {
                let lock = Lock::new(waiter, name.clone());
                let _ = ready_tx.send(());
                let guard = acquire(&lock)?;
                let acquired = Instant::now();
                guard.unlock()?;
                Ok(acquired)
            });
            let _ = ready.recv();
            // Let the waiter block, then release at a moment no poll period can line up with.
            thread::sleep(200 * MS + rand::random_range(0..300) * MS);
            let released = Instant::now();
            held.unlock()?;
            let release_took = released.elapsed();
            let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
            ensure!(acquired >= released, "the waiter acquired the lock before its holder released it");
            Ok((acquired - released, release_took))
        })?;
        if release_took > STALLED_RELEASE && replayed < EXTRA_ROUNDS {
            replayed += 1;
            continue;
        }
        handoffs.push(handoff);
    }
    handoffs.sort();
    let woken = handoffs.iter().filter(|handoff| **handoff < WAKE_BOUND).count();
    ensure!(
        woken >= WOKEN_ROUNDS,
        "only {woken} of {ROUNDS} hand-offs within {WAKE_BOUND:?} (all: {handoffs:?}; {replayed} rounds \
         played again after a release slower than {STALLED_RELEASE:?}): the waiter was not woken by the server"
    );
    Ok(Verdict::Pass)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use lock_core::{
        Acquired, DistributedLock, LockName, MemoryBackend, MemoryLease, NativeWait, OwnerToken, Result,
    };

    use crate::suite::{run, Abilities, SuiteTarget};

    /// The memory backend whose "native" wait polls every 300 ms: S11 must catch it.
    #[derive(Clone, Default)]
    struct Poller {
        inner: MemoryBackend,
        /// Whether `native_wait` returns the ability (false: forgotten).
        returns_ability: bool,
        /// Whether `release` returns 300 ms after freeing the lock (a stalled reply).
        slow_release: bool,
    }

    impl DistributedLock for Poller {
        type Lease = MemoryLease;

        fn backend_name(&self) -> &'static str {
            "poller"
        }

        fn try_acquire(
            &self,
            name: &LockName,
            owner: &OwnerToken,
            ttl: Duration,
        ) -> Result<Option<MemoryLease>> {
            self.inner.try_acquire(name, owner, ttl)
        }

        fn extend(&self, lease: &mut MemoryLease, ttl: Duration) -> Result<bool> {
            self.inner.extend(lease, ttl)
        }

        fn release(&self, lease: MemoryLease) -> Result<bool> {
            let released = self.inner.release(lease);
            if self.slow_release {
                std::thread::sleep(Duration::from_millis(300));
            }
            released
        }

        fn native_wait(&self) -> Option<&dyn NativeWait<Lease = MemoryLease>> {
            self.returns_ability.then_some(self as _)
        }
    }

    impl NativeWait for Poller {
        fn acquire_until(
            &self,
            name: &LockName,
            owner: &OwnerToken,
            ttl: Duration,
            deadline: Option<Instant>,
        ) -> Result<Option<Acquired<MemoryLease>>> {
            loop {
                let sent_at = Instant::now();
                if let Some(lease) = self.inner.try_acquire(name, owner, ttl)? {
                    return Ok(Some(Acquired::new(lease, sent_at)));
                }
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }

    struct PollerTarget(Poller);

    impl SuiteTarget for PollerTarget {
        type Backend = Poller;

        fn label(&self) -> String {
            "300 ms poller".into()
        }

        fn abilities(&self) -> Abilities {
            Abilities::ALL
        }

        fn backend(&self) -> Result<Poller> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn a_300_ms_poller_fails() {
        let target = PollerTarget(Poller { returns_ability: true, ..Poller::default() });
        let failure = run(&target, "S11", "").expect_err("a poller must not pass S11");
        assert!(failure.0.contains("not woken by the server"), "{failure}");
    }

    /// Stalled releases are played again, then counted from the release's call: a poller does
    /// not pass by hiding behind them.
    #[test]
    fn a_poller_behind_stalled_releases_fails() {
        let poller = Poller { returns_ability: true, slow_release: true, ..Poller::default() };
        let failure = run(&PollerTarget(poller), "S11", "").expect_err("a poller must not pass S11");
        assert!(failure.0.contains("not woken by the server"), "{failure}");
    }

    #[test]
    fn a_forgotten_ability_fails_instead_of_n_a() {
        let target = PollerTarget(Poller::default());
        let failure = run(&target, "S11", "").expect_err("a forgotten native_wait must fail");
        assert!(failure.0.contains("forgotten"), "{failure}");
    }

    #[test]
    fn the_memory_backend_is_woken() {
        let verdict = run(&crate::suite::MemoryTarget::new(), "S11", "");
        assert_eq!(verdict, Ok(crate::suite::Verdict::Pass));
    }
}
