//! S11 — hand-off latency (source 003: "no wake-up mechanism"): a thread blocked in `lock()` while
//! another releases acquires within a few round trips of the release's reply, woken by the
//! server, not by a sleep.
//!
//! A backend offers waiting through [`NativeWait`](lock_core::NativeWait), whose contract bounds
//! its fallback re-check to about once a second; a kind that declares no such ability is n/a
//! (its waiters back off), and one that declares it but whose backend does not return it fails.
//! The release comes at a random moment, so a waiter that polls every `p` gets the lock within
//! [`WAKE_BOUND`] with probability `WAKE_BOUND / p` per round: requiring it in 5 of 7 rounds
//! passes a server wake-up (a few round trips) and fails a 300 ms poller (it would pass by luck
//! about once in 500 runs).

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
    for _ in 0..ROUNDS {
        let name = unique_name("s11");
        let held = acquire(&Lock::new(&holder, name.clone()))?;
        let handoff = thread::scope(|s| -> Result<Duration, Failure> {
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
            let releasing = Instant::now();
            held.unlock()?;
            // From the release's reply: a server or pooler that stalls delays that reply as much
            // as the waiter's grant, and is no waiter's fault.
            let released = Instant::now();
            let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
            ensure!(acquired >= releasing, "the waiter acquired the lock before its holder released it");
            Ok(acquired.saturating_duration_since(released))
        })?;
        handoffs.push(handoff);
    }
    handoffs.sort();
    let woken = handoffs.iter().filter(|handoff| **handoff < WAKE_BOUND).count();
    ensure!(
        woken >= WOKEN_ROUNDS,
        "only {woken} of {ROUNDS} hand-offs within {WAKE_BOUND:?} (all: {handoffs:?}): the waiter \
         was not woken by the server"
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
            self.inner.release(lease)
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
