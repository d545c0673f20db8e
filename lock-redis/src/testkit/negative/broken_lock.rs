//! [`BrokenRedisLock`]: the plumbing the broken recipes share (one connection, errors, keys).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    check_lease, poll_until, Acquired, DistributedLock, Error, LockName, OwnerToken, Permits, Request, Result,
};
use parking_lot::Mutex;
use redis::{Connection, RedisError, RedisResult};

use crate::testkit::negative::{
    count_with_get_then_set, del_without_owner_check, get_compare_del, same_value_for_every_holder,
    setnx_then_expire, Recipe,
};

/// The backend label of every broken recipe.
const BACKEND: &str = "redis (broken recipe)";

/// Connect, read and write timeout of a broken lock's connection.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A Redis lock that follows one of the docs' broken [`Recipe`]s. One connection per value.
pub struct BrokenRedisLock {
    recipe: Recipe,
    connection: Mutex<Connection>,
    /// N01: set to crash the next acquisition between `SETNX` and `EXPIRE`.
    pub(crate) crash: Arc<AtomicBool>,
}

/// A lease of a [`BrokenRedisLock`]: the key and the value the recipe stored.
#[derive(Debug)]
pub struct BrokenLease {
    pub(crate) key: String,
    pub(crate) value: String,
    /// N07: a semaphore permit, not a mutex hold.
    pub(crate) permit: bool,
}

impl BrokenRedisLock {
    /// Connects to `url` with `recipe`; `crash` arms N01's injected crash.
    ///
    /// # Errors
    /// When connecting fails.
    pub fn connect(url: &str, recipe: Recipe, crash: Arc<AtomicBool>) -> Result<Self> {
        let connect = || -> RedisResult<Connection> {
            let connection = redis::Client::open(url)?.get_connection_with_timeout(TIMEOUT)?;
            connection.set_read_timeout(Some(TIMEOUT))?;
            connection.set_write_timeout(Some(TIMEOUT))?;
            Ok(connection)
        };
        let connection = connect().map_err(map)?;
        Ok(Self { recipe, connection: Mutex::new(connection), crash })
    }

    /// The recipe this lock follows.
    pub fn recipe(&self) -> Recipe {
        self.recipe
    }

    /// The key the lock `name` is stored under (the recipes name keys plainly, as the docs do).
    pub fn key(recipe: Recipe, name: &LockName) -> String {
        format!("negative:{}:{}", recipe.id(), name)
    }

    /// Runs one command (or script) on the connection.
    pub(crate) fn call<T>(&self, command: impl FnOnce(&mut Connection) -> RedisResult<T>) -> Result<T> {
        command(&mut self.connection.lock()).map_err(map)
    }
}

fn map(error: RedisError) -> Error {
    if error.is_io_error() {
        Error::Connection { backend: BACKEND, source: error.into() }
    } else {
        Error::backend(BACKEND, error)
    }
}

/// Milliseconds for `PX`/`PEXPIRE`.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `SET key value NX PX ttl`: the atomic acquisition N02–N04 share (their flaws are elsewhere).
pub(crate) fn set_nx_px(
    lock: &BrokenRedisLock,
    key: String,
    value: String,
    ttl: Duration,
) -> Result<Option<BrokenLease>> {
    let set: Option<String> =
        lock.call(|c| redis::cmd("SET").arg(&key).arg(&value).arg("NX").arg("PX").arg(millis(ttl)).query(c))?;
    Ok(set.map(|_| BrokenLease { key, value, permit: false }))
}

impl DistributedLock for BrokenRedisLock {
    type Lease = BrokenLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<BrokenLease>> {
        check_lease(ttl)?;
        let key = Self::key(self.recipe, name);
        match self.recipe {
            Recipe::N01SetnxThenExpire => setnx_then_expire::acquire(self, key, ttl),
            // N02 and N04 acquire correctly, with a unique token; their flaws are in release. N07's
            // mutex is correct too; its flaw is in its semaphore.
            Recipe::N02DelWithoutOwnerCheck | Recipe::N04GetCompareDel | Recipe::N07CountWithGetThenSet => {
                set_nx_px(self, key, owner.to_hex(), ttl)
            }
            Recipe::N03SameValueForEveryHolder => same_value_for_every_holder::acquire(self, key, ttl),
        }
    }

    fn extend(&self, lease: &mut BrokenLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        match self.recipe {
            _ if lease.permit => count_with_get_then_set::extend(self, lease, ttl),
            Recipe::N01SetnxThenExpire => setnx_then_expire::extend(self, lease, ttl),
            // The other recipes store a value they can compare; extending is not their flaw.
            _ => del_without_owner_check::extend(self, lease, ttl),
        }
    }

    fn release(&self, lease: BrokenLease) -> Result<bool> {
        match self.recipe {
            _ if lease.permit => count_with_get_then_set::release(self, lease),
            Recipe::N01SetnxThenExpire => setnx_then_expire::release(self, lease),
            Recipe::N02DelWithoutOwnerCheck | Recipe::N07CountWithGetThenSet => {
                del_without_owner_check::release(self, lease)
            }
            Recipe::N03SameValueForEveryHolder => same_value_for_every_holder::release(self, lease),
            Recipe::N04GetCompareDel => get_compare_del::release(self, lease),
        }
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = BrokenLease>> {
        (self.recipe == Recipe::N07CountWithGetThenSet).then_some(self as &dyn Permits<Lease = BrokenLease>)
    }
}

impl Permits for BrokenRedisLock {
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<BrokenLease>>> {
        check_lease(request.ttl)?;
        poll_until(request, |_| count_with_get_then_set::acquire(self, request.name, permits, request.ttl))
    }
}

impl std::fmt::Debug for BrokenRedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokenRedisLock").field("recipe", &self.recipe).finish_non_exhaustive()
    }
}
