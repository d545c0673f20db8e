//! The docs' broken Redis lock recipes, as deliberately broken
//! [`DistributedLock`](lock_core::DistributedLock)s: negative controls for the conformance suite.
//!
//! Each does exactly what its recipe in the source articles does, and works as a lock on the happy path
//! (it passes S02), so when it fails its scenario the failure is the recipe's flaw, not a broken
//! harness. A suite that passed them would have no teeth.
//!
//! | id | recipe | must fail |
//! |---|---|---|
//! | N01 | `SETNX` then `EXPIRE`, two commands (sources 000, 001) | S05, with a crash injected between them |
//! | N02 | `DEL` without checking the owner (sources 000, 001) | S06 |
//! | N03 | every holder writes `1`, compare-and-delete release (source 004) | S06 |
//! | N04 | `GET`, compare, then `DEL`, three commands (source 003) | S06, with a pause between `GET` and `DEL` |
//! | N06 | Redlock without fencing while a node restarts (sources 002, 003) | R02 ([`crate::testkit::redlock::r02`]) |
//! | N07 | a semaphore counted with `GET`, compare, then `SET` | SEM01, with a pause between `GET` and `SET` |
//!
//! N01–N04 and N07 are [`Recipe`]s run as suite targets ([`NegativeTarget`]); N06 is a Redlock variant
//! ([`UnfencedRedlock`]) run through the R02 function, which needs five nodes it can restart.
//! [`broken_recipes`](crate::testkit::broken_recipes) lists all six in the testkit's
//! backend-neutral frame.
//!
//! ```no_run
//! use lock_redis::testkit::negative::{NegativeTarget, Recipe};
//! use lock_testkit::negative::caught_by_scenario;
//!
//! let target = NegativeTarget::new(Recipe::N02DelWithoutOwnerCheck);
//! // Works as a lock (passes S02), but releases someone else's lock (fails S06).
//! assert!(caught_by_scenario(&target, "S06", lock_testkit::suite::breach::RELEASED_ANOTHERS_LOCK).is_ok());
//! ```

mod broken_lock;
mod count_with_get_then_set;
mod del_without_owner_check;
mod get_compare_del;
mod same_value_for_every_holder;
mod setnx_then_expire;
mod target;
mod unfenced_redlock;

pub use broken_lock::{BrokenLease, BrokenRedisLock};
pub use count_with_get_then_set::COUNT_PAUSE;
pub use get_compare_del::RELEASE_PAUSE;
pub use target::NegativeTarget;
pub use unfenced_redlock::UnfencedRedlock;
/// One of the docs' broken recipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recipe {
    /// N01: `SETNX key true`, then `EXPIRE` as a second command; release is `DEL`. A crash
    /// between the two leaves a lock without expiry.
    N01SetnxThenExpire,
    /// N02: `SET key token NX PX` (atomic), but release is a plain `DEL`: a holder whose lease ran
    /// out deletes the next holder's lock.
    N02DelWithoutOwnerCheck,
    /// N03: every holder writes the same value `1`, and release compares with `1` before
    /// deleting: the compare can never tell holders apart.
    N03SameValueForEveryHolder,
    /// N04: release is `GET`, compare in the client, then `DEL`, as separate commands: the lease
    /// can run out, and the next holder acquire, between the compare and the delete.
    N04GetCompareDel,
    /// N07: a semaphore that reads its count with `GET`, compares in the client, then writes
    /// `count + 1` with `SET`: two clients between one's read and its write both take a permit.
    N07CountWithGetThenSet,
}

impl Recipe {
    /// Every recipe, in id order.
    pub const ALL: [Recipe; 5] = [
        Recipe::N01SetnxThenExpire,
        Recipe::N02DelWithoutOwnerCheck,
        Recipe::N03SameValueForEveryHolder,
        Recipe::N04GetCompareDel,
        Recipe::N07CountWithGetThenSet,
    ];

    /// The stable id (`"N01"`).
    pub const fn id(self) -> &'static str {
        match self {
            Recipe::N01SetnxThenExpire => "N01",
            Recipe::N02DelWithoutOwnerCheck => "N02",
            Recipe::N03SameValueForEveryHolder => "N03",
            Recipe::N04GetCompareDel => "N04",
            Recipe::N07CountWithGetThenSet => "N07",
        }
    }

    /// The recipe in a few words.
    pub const fn title(self) -> &'static str {
        match self {
            Recipe::N01SetnxThenExpire => "setnx then expire",
            Recipe::N02DelWithoutOwnerCheck => "del without owner check",
            Recipe::N03SameValueForEveryHolder => "every holder writes 1",
            Recipe::N04GetCompareDel => "get, compare, then del",
            Recipe::N07CountWithGetThenSet => "semaphore counted with get then set",
        }
    }

    /// The assertion of [`must_fail`](Self::must_fail) the recipe breaks (a phrase of
    /// [`lock_testkit::suite::breach`]).
    pub const fn breaks(self) -> &'static str {
        match self {
            Recipe::N01SetnxThenExpire => lock_testkit::suite::breach::IMMORTAL_LOCK,
            Recipe::N07CountWithGetThenSet => lock_testkit::suite::breach::OVER_ADMITTED,
            _ => lock_testkit::suite::breach::RELEASED_ANOTHERS_LOCK,
        }
    }

    /// The scenario the recipe must fail.
    pub const fn must_fail(self) -> &'static str {
        match self {
            Recipe::N01SetnxThenExpire => "S05",
            Recipe::N07CountWithGetThenSet => "SEM01",
            _ => "S06",
        }
    }
}
