//! S03 — timed wait (source 003): `try_lock_for(200ms)` on a held lock gives up after at least
//! 200 ms and not much later; a waiter gets the lock soon after the release. Any timeout is
//! valid, however long: with 100 and 1,000 days (past every server's limit on one wait, e.g.
//! PostgreSQL's `lock_timeout` of `INT_MAX` ms), the longest an `Instant` can add and
//! `Duration::MAX`, the mutex, read-write and permit waits succeed at once on a free lock, and
//! a waiter gets a held one soon after its release.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock, LockClient, LockGuard, ReadWriteLock, Semaphore};

use crate::suite::outcome::ensure;
use crate::suite::support::{
    acquire, client, options, shared_ability, unique_name, ACQUIRE_BOUND, MS, SECOND,
};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const WAIT: Duration = Duration::from_millis(200);
/// Generous: the check is that the wait is bounded, not how fast the machine is.
const SLACK: Duration = Duration::from_millis(800);
/// Timeouts past every server's limit on one wait (PostgreSQL's `lock_timeout`: about 24.8
/// days; MariaDB's `max_statement_time`: a year), where a backend waits in slices; one that
/// ends half a second before the latest instant an `Instant` holds, where a backend that adds
/// its own timeouts to the deadline would overflow; and `Duration::MAX`, which no `Instant`
/// can add. Each is asked for right before its wait: the edge of time moves on.
const LONG_TIMEOUTS: [fn() -> Duration; 4] =
    [|| Duration::from_secs(100 * DAY), || Duration::from_secs(1_000 * DAY), edge_of_time, || Duration::MAX];

/// The longest timeout `Instant::now()` can add, less half a second.
fn edge_of_time() -> Duration {
    let now = Instant::now();
    let (mut longest, mut step) = (Duration::ZERO, Duration::MAX);
    while !step.is_zero() {
        match longest.checked_add(step).filter(|longer| now.checked_add(*longer).is_some()) {
            Some(longer) => longest = longer,
            None => step /= 2,
        }
    }
    longest.saturating_sub(Duration::from_millis(500))
}
const DAY: u64 = 24 * 3600;
/// How soon after a release a waiter with a long timeout must have the lock (generous: a loaded
/// machine; a lock-table waiter not woken re-checks within a second).
const AFTER_RELEASE: Duration = Duration::from_secs(5);
/// How soon a long wait on a free lock must return.
const AT_ONCE: Duration = Duration::from_secs(5);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s03");
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);
    let held = acquire(&Lock::new(&a, name.clone()))?;
    let waiter = Lock::new(&b, name);

    let started = Instant::now();
    let attempt = waiter.try_lock_for(WAIT)?;
    let waited = started.elapsed();
    ensure!(attempt.is_none(), "try_lock_for acquired a held lock");
    ensure!(waited >= WAIT, "try_lock_for gave up after {waited:?}, before its {WAIT:?}");
    ensure!(waited < WAIT + SLACK, "try_lock_for gave up after {waited:?}, long after its {WAIT:?}");

    thread::scope(|s| -> ScenarioResult {
        let waiting = s.spawn(|| -> Result<Instant, Failure> {
            let guard = waiter.try_lock_for(10 * SECOND)?;
            ensure!(guard.is_some(), "the waiter timed out although the lock was released");
            Ok(Instant::now())
        });
        thread::sleep(100 * MS);
        held.unlock()?;
        let released = Instant::now();
        let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
        let after = acquired.saturating_duration_since(released);
        ensure!(after < 2 * SECOND, "the waiter got the lock {after:?} after its release");
        Ok(Verdict::Pass)
    })?;
    long_timeouts(target)
}

/// An acquisition on a client with a timeout (a mutex's, a read or write lock's or a permit's).
type Take<'a, B> = &'a (dyn Fn(&LockClient<B>, Duration) -> lock_core::Result<Option<LockGuard<B>>> + Sync);

/// [`LONG_TIMEOUTS`] on every primitive the kind has.
fn long_timeouts<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);
    let mutex = unique_name("s03-long");
    let lock = |c: &LockClient<T::Backend>, timeout| Lock::new(c, mutex.clone()).try_lock_for(timeout);
    long_waits("try_lock_for", &a, &b, &lock, &lock)?;
    if shared_ability(target, "read_write")?.is_ok() {
        let name = unique_name("s03-long-rw");
        let write =
            |c: &LockClient<T::Backend>, timeout| ReadWriteLock::new(c, name.clone()).try_write_for(timeout);
        let read =
            |c: &LockClient<T::Backend>, timeout| ReadWriteLock::new(c, name.clone()).try_read_for(timeout);
        long_waits("try_write_for", &a, &b, &write, &write)?;
        long_waits("try_read_for", &a, &b, &write, &read)?;
    }
    if shared_ability(target, "permits")?.is_ok() {
        let name = unique_name("s03-long-sem");
        let permit = |c: &LockClient<T::Backend>, timeout| {
            Semaphore::new(c, name.clone(), 1)?.try_acquire_for(timeout)
        };
        long_waits("try_acquire_for", &a, &b, &permit, &permit)?;
    }
    Ok(Verdict::Pass)
}

/// `wait` (named `form`) with each of [`LONG_TIMEOUTS`] by client `b`: at once on a free lock,
/// and soon after `a` releases what it holds through `hold`.
fn long_waits<B: DistributedLock>(
    form: &str,
    a: &LockClient<B>,
    b: &LockClient<B>,
    hold: Take<'_, B>,
    wait: Take<'_, B>,
) -> Result<(), Failure> {
    for timeout_now in LONG_TIMEOUTS {
        let timeout = timeout_now();
        let started = Instant::now();
        let free = wait(b, timeout);
        let took = started.elapsed();
        let free = free.map_err(|error| Failure(format!("{form}({timeout:?}) on a free lock: {error}")))?;
        let Some(free) = free else {
            return Err(Failure(format!("{form}({timeout:?}) did not get a free lock")));
        };
        ensure!(took < AT_ONCE, "{form}({timeout:?}) took {took:?} to get a free lock");
        free.unlock()?;

        let held = hold(a, ACQUIRE_BOUND)?.ok_or_else(|| {
            Failure(format!("{form}: the holder could not acquire within {ACQUIRE_BOUND:?}"))
        })?;
        thread::scope(|s| -> Result<(), Failure> {
            let waiting = s.spawn(|| -> Result<Instant, Failure> {
                let timeout = timeout_now();
                let guard = wait(b, timeout)
                    .map_err(|error| Failure(format!("{form}({timeout:?}) on a held lock: {error}")))?;
                let Some(guard) = guard else {
                    return Err(Failure(format!(
                        "{form}({timeout:?}) gave up although the lock was released"
                    )));
                };
                let acquired = Instant::now();
                guard.unlock()?;
                Ok(acquired)
            });
            thread::sleep(100 * MS);
            held.unlock()?;
            let released = Instant::now();
            let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
            let after = acquired.saturating_duration_since(released);
            ensure!(after < AFTER_RELEASE, "{form}({timeout:?}) got the lock {after:?} after its release");
            Ok(())
        })?;
    }
    Ok(())
}
