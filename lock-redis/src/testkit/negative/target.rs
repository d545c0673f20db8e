//! [`NegativeTarget`]: a broken recipe as a suite target, on the shared Redis server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockName};

use crate::testkit::negative::{BrokenRedisLock, Recipe};
use lock_testkit::harness::shared;
use lock_testkit::suite::{NotApplicable, SuiteTarget};

/// One broken [`Recipe`] as a [`SuiteTarget`]: every client is a [`BrokenRedisLock`] with its own
/// connection to the shared Redis server.
#[derive(Debug, Clone)]
pub struct NegativeTarget {
    recipe: Recipe,
    url: String,
    /// N01's injected crash, shared with every client this target makes.
    crash: Arc<AtomicBool>,
}

impl NegativeTarget {
    /// `recipe` on the shared Redis server (or the one `DISTLOCK_REDIS_URL` names).
    ///
    /// # Panics
    /// When the shared Redis server cannot be started.
    pub fn new(recipe: Recipe) -> Self {
        let server = shared::redis().expect("the shared redis-server for the negative controls");
        Self { recipe, url: server.address().to_owned(), crash: Arc::new(AtomicBool::new(false)) }
    }

    /// The recipe.
    pub fn recipe(&self) -> Recipe {
        self.recipe
    }
}

impl SuiteTarget for NegativeTarget {
    type Backend = BrokenRedisLock;

    fn label(&self) -> String {
        format!("{} {}", self.recipe.id(), self.recipe.title())
    }

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        let semaphore = self.recipe == Recipe::N07CountWithGetThenSet;
        lock_testkit::suite::Abilities::NONE.with_shared(false, semaphore)
    }

    fn backend(&self) -> lock_core::Result<BrokenRedisLock> {
        BrokenRedisLock::connect(&self.url, self.recipe, Arc::clone(&self.crash))
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let key = BrokenRedisLock::key(self.recipe, name);
        let pttl = redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
            .and_then(|mut connection| redis::cmd("PTTL").arg(&key).query::<i64>(&mut connection))
            .map_err(|e| Error::backend("redis probe", e));
        Ok(pttl.map(|ms| match ms {
            -2 => None,
            -1 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
        }))
    }

    fn inject_crash_mid_acquire(&self) -> bool {
        // Only N01 acquires in two steps; the others have nothing to crash between.
        let two_steps = self.recipe == Recipe::N01SetnxThenExpire;
        if two_steps {
            self.crash.store(true, Ordering::SeqCst);
        }
        two_steps
    }
}
