//! [`MultiLock`]: several locks of one client — mutexes and read-write locks' write sides —
//! taken together, all or nothing: Redisson's `RedissonMultiLock`, Curator's
//! `InterProcessMultiLock`, on any backend.

use std::fmt;
use std::time::{Duration, Instant};

use crate::abilities::Deadline;
use crate::backend::{DistributedLock, FencingToken};
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::name::LockName;
use crate::rw_lock::ReadWriteLock;

/// Several named locks of one [`LockClient`], acquired together: a transfer between two
/// accounts locks both.
///
/// # Contract
/// - **All or nothing**: an acquisition returns a [`MultiGuard`] holding every lock, or holds
///   none of them when it returns — a timeout or an error part-way releases what was taken.
/// - **No deadlock among multi-locks**: the locks are always taken in one global order (by
///   name, byte by byte), whatever order they were given in, so two multi-locks over
///   overlapping names never wait for each other in a cycle. A thread that already holds one
///   of the locks on its own (a [`LockGuard`]) and then waits for a multi-lock can still
///   deadlock with another thread doing the reverse, as with any two locks taken in two orders.
/// - **The same timeouts**: [`try_lock_for`](Self::try_lock_for) and
///   [`try_lock_until`](Self::try_lock_until) bound the whole acquisition, not each lock.
/// - Each lock behaves as its own [`Lock`] would: reentrant per thread, renewed, fenced.
///   Names given twice count once.
pub struct MultiLock<B: DistributedLock> {
    /// In acquisition order (sorted by name, a mutex before the write lock of the same name),
    /// without duplicates.
    locks: Vec<Member<B>>,
}

/// One lock of a [`MultiLock`]: a mutex, or the write side of a read-write lock.
enum Member<B: DistributedLock> {
    Mutex(Lock<B>),
    Write(ReadWriteLock<B>),
}

impl<B: DistributedLock> Member<B> {
    fn name(&self) -> &LockName {
        match self {
            Member::Mutex(lock) => lock.name(),
            Member::Write(lock) => lock.name(),
        }
    }

    /// Its client's spans and events.
    fn observer(&self) -> &crate::observe::Observer {
        match self {
            Member::Mutex(lock) => &lock.client().shared.observer,
            Member::Write(lock) => &lock.client.shared.observer,
        }
    }

    fn acquire(&self, deadline: Deadline) -> Result<Option<LockGuard<B>>> {
        match (self, deadline) {
            (Member::Mutex(lock), Deadline::Now) => lock.try_lock(),
            (Member::Mutex(lock), Deadline::At(at)) => lock.try_lock_until(at),
            (Member::Mutex(lock), Deadline::Never) => lock.lock().map(Some),
            (Member::Write(lock), Deadline::Now) => lock.try_write(),
            (Member::Write(lock), Deadline::At(at)) => lock.try_write_until(at),
            (Member::Write(lock), Deadline::Never) => lock.write().map(Some),
        }
    }
}

impl<B: DistributedLock> Clone for Member<B> {
    fn clone(&self) -> Self {
        match self {
            Member::Mutex(lock) => Member::Mutex(lock.clone()),
            Member::Write(lock) => Member::Write(lock.clone()),
        }
    }
}

impl<B: DistributedLock> MultiLock<B> {
    /// The locks called `names` of `client`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty set of names.
    pub fn new(client: &LockClient<B>, names: impl IntoIterator<Item = LockName>) -> Result<Self> {
        Self::mixed(client, names, [])
    }

    /// The mutexes called `names` and the write locks of the [`ReadWriteLock`]s called
    /// `write_names`, all of `client`, taken together (Redisson's `RedissonMultiLock` over
    /// `RLock`s and write locks).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no names at all.
    pub fn mixed(
        client: &LockClient<B>,
        names: impl IntoIterator<Item = LockName>,
        write_names: impl IntoIterator<Item = LockName>,
    ) -> Result<Self> {
        let mut locks: Vec<Member<B>> = names
            .into_iter()
            .map(|name| Member::Mutex(Lock::new(client, name)))
            .chain(write_names.into_iter().map(|name| Member::Write(ReadWriteLock::new(client, name))))
            .collect();
        let key = |member: &Member<B>| {
            (member.name().as_str().as_bytes().to_vec(), matches!(member, Member::Write(_)))
        };
        locks.sort_by_key(key);
        locks.dedup_by(|a, b| key(a) == key(b));
        if locks.is_empty() {
            return Err(Error::invalid_config("a multi-lock needs at least one lock name"));
        }
        Ok(Self { locks })
    }

    /// The names, in the order they are acquired.
    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        self.locks.iter().map(Member::name)
    }

    /// Acquires every lock, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Lock::lock`]; the locks taken before the error are released.
    pub fn lock(&self) -> Result<MultiGuard<B>> {
        self.acquire(Deadline::Never)?.ok_or_else(|| {
            // `Lock::lock` never returns without the lock.
            Error::backend("multi-lock", "a lock returned without being acquired")
        })
    }

    /// Acquires every lock if all are free right now; `Ok(None)` (holding none) otherwise.
    ///
    /// # Errors
    /// As [`Lock::try_lock`]; the locks taken before the error are released.
    pub fn try_lock(&self) -> Result<Option<MultiGuard<B>>> {
        self.acquire(Deadline::Now)
    }

    /// Acquires every lock, waiting at most `timeout` for all of them together; `Ok(None)`
    /// (holding none) if that was not enough.
    ///
    /// # Errors
    /// As [`Lock::try_lock_for`]; the locks taken before the error are released.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MultiGuard<B>>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires every lock, waiting until `deadline` at the latest; `Ok(None)` (holding none) if
    /// it passed first.
    ///
    /// # Errors
    /// As [`Lock::try_lock_until`]; the locks taken before the error are released.
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<MultiGuard<B>>> {
        self.acquire(Deadline::until(deadline))
    }

    /// Takes the locks in order, each by `deadline`; on the first refusal or error, gives back
    /// (in reverse order) what it took.
    fn acquire(&self, deadline: Deadline) -> Result<Option<MultiGuard<B>>> {
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.acquire(deadline) {
                Ok(Some(guard)) => guards.push(guard),
                outcome => {
                    // The caller hears of the refusal or the first error; a failed give-back
                    // leaves that lock to its lease (or session), as a guard's drop would.
                    if let Err(error) = release_all(guards) {
                        let error = lock.observer().describe(&error);
                        tracing::debug!(%error, "giving back a multi-lock's locks failed");
                    }
                    return outcome.map(|_| None);
                }
            }
        }
        Ok(Some(MultiGuard { guards }))
    }
}

impl<B: DistributedLock> Clone for MultiLock<B> {
    fn clone(&self) -> Self {
        Self { locks: self.locks.clone() }
    }
}

impl<B: DistributedLock> fmt::Debug for MultiLock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock").field("names", &self.names().collect::<Vec<_>>()).finish()
    }
}

/// Holds every lock of a [`MultiLock`] until dropped or [`unlock`](Self::unlock)ed; like a
/// [`LockGuard`], it stays on the thread that locked.
#[must_use = "if unused the locks will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MultiGuard<B: DistributedLock> {
    /// In acquisition order; released in reverse.
    guards: Vec<LockGuard<B>>,
}

impl<B: DistributedLock> MultiGuard<B> {
    /// The guard of each lock, in acquisition order (by name).
    pub fn guards(&self) -> &[LockGuard<B>] {
        &self.guards
    }

    /// The fencing token of each lock, by name, in acquisition order (`None` where the backend
    /// issues none).
    pub fn fencing_tokens(&self) -> Vec<(&LockName, Option<FencingToken>)> {
        self.guards.iter().map(|guard| (guard.name(), guard.fencing_token())).collect()
    }

    /// Whether every lock is still believed held (see [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Releases every lock, in reverse order of acquisition, each even if an earlier one
    /// failed.
    ///
    /// # Errors
    /// The first release error (as [`LockGuard::unlock`]).
    pub fn unlock(self) -> Result<()> {
        release_all(self.guards)
    }
}

impl<B: DistributedLock> fmt::Debug for MultiGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard").field("guards", &self.guards).finish()
    }
}

/// Unlocks `guards` last first; the first error, after trying them all.
fn release_all<B: DistributedLock>(guards: Vec<LockGuard<B>>) -> Result<()> {
    let mut outcome = Ok(());
    for guard in guards.into_iter().rev() {
        if let Err(error) = guard.unlock() {
            if outcome.is_ok() {
                outcome = Err(error);
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;

    use super::*;
    use crate::fake::FakeBackend;
    use crate::memory::MemoryBackend;

    fn names(names: &[&str]) -> Vec<LockName> {
        names.iter().map(|name| LockName::new(*name).unwrap()).collect()
    }

    #[test]
    fn names_are_taken_in_one_order_once() {
        let client = LockClient::new(MemoryBackend::new());
        let multi = MultiLock::new(&client, names(&["b", "a", "b", "c"])).unwrap();
        let order: Vec<&str> = multi.names().map(LockName::as_str).collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert!(matches!(MultiLock::new(&client, Vec::new()), Err(Error::InvalidConfig { .. })));
    }

    #[test]
    fn it_is_all_or_nothing() {
        let client = LockClient::new(MemoryBackend::new());
        let other = LockClient::new(client.backend().clone());
        let held_b = Lock::new(&other, LockName::new("b").unwrap()).lock().unwrap();
        let multi = MultiLock::new(&client, names(&["a", "b"])).unwrap();
        assert!(multi.try_lock().unwrap().is_none());
        assert!(multi.try_lock_for(Duration::from_millis(50)).unwrap().is_none());
        let a = Lock::new(&other, LockName::new("a").unwrap());
        assert!(a.try_lock().unwrap().is_some(), "a was given back");
        drop(held_b);
        let guard = multi.try_lock().unwrap().expect("both free");
        assert!(guard.is_held() && guard.guards().len() == 2);
        assert_eq!(guard.fencing_tokens().len(), 2);
        guard.unlock().unwrap();
    }

    #[test]
    fn an_error_part_way_gives_back_what_was_taken() {
        let backend = FakeBackend::default();
        let client = LockClient::new(backend.clone());
        let multi = MultiLock::new(&client, names(&["a", "b"])).unwrap();
        let guard = multi.lock().unwrap();
        guard.unlock().unwrap();
        // Every release fails from now on: the guard reports the first error, after trying all.
        backend.switches.fail_release.store(true, Ordering::SeqCst);
        let guard = multi.lock().unwrap();
        assert!(guard.unlock().is_err());
        assert_eq!(backend.switches.releases.load(Ordering::SeqCst), 4, "both releases were tried");
    }

    #[test]
    fn write_locks_join_mutexes() {
        let client = LockClient::new(MemoryBackend::new());
        let other = LockClient::new(client.backend().clone());
        let multi = MultiLock::mixed(&client, names(&["a"]), names(&["a", "b"])).unwrap();
        assert_eq!(multi.names().count(), 3, "a mutex and a write lock of one name are two locks");
        let reader = ReadWriteLock::new(&other, LockName::new("b").unwrap()).read().unwrap();
        assert!(multi.try_lock().unwrap().is_none(), "b's write lock is read-held");
        assert!(
            Lock::new(&other, LockName::new("a").unwrap()).try_lock().unwrap().is_some(),
            "a was given back"
        );
        drop(reader);
        let guard = multi.try_lock().unwrap().expect("all free");
        assert!(ReadWriteLock::new(&other, LockName::new("a").unwrap()).try_read().unwrap().is_none());
        guard.unlock().unwrap();
    }

    #[test]
    fn crossed_multi_locks_do_not_deadlock() {
        let backend = MemoryBackend::new();
        let inside = AtomicBool::new(false);
        thread::scope(|scope| {
            for order in [["a", "b"], ["b", "a"]] {
                let (backend, inside) = (backend.clone(), &inside);
                scope.spawn(move || {
                    let client = LockClient::new(backend);
                    let multi = MultiLock::new(&client, names(&order)).unwrap();
                    for _ in 0..200 {
                        let guard =
                            multi.try_lock_for(Duration::from_secs(10)).unwrap().expect("no deadlock");
                        assert!(!inside.swap(true, Ordering::SeqCst), "both inside at once");
                        inside.store(false, Ordering::SeqCst);
                        guard.unlock().unwrap();
                    }
                });
            }
        });
    }
}
