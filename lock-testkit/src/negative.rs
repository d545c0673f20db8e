//! A backend-neutral frame for the docs' broken recipes (negative controls, `docs/scenarios.md`'s
//! N01–N06): each backend crate ships its recipes, behind its `testkit` feature, as a list of
//! [`BrokenRecipe`]s; tests and `distlock compare` run them all the same way.
//!
//! A recipe is *caught* when it works as a lock on the happy path (it passes S02) and fails the
//! scenario it breaks *on the assertion it was written to break* (its [`breach`](crate::suite::breach)): the failure is
//! then the recipe's flaw, not a broken harness or a timeout. A suite that passes a broken recipe
//! has no teeth.

use std::fmt;

use crate::suite::{run, Failure, SuiteTarget, Verdict};

/// Runs a recipe against real servers and reports whether its scenario caught it.
type Check = Box<dyn Fn() -> Result<Caught, Failure> + Send + Sync>;

/// One broken recipe of the docs, as a backend crate ships it.
pub struct BrokenRecipe {
    /// The stable id (`"N02"`).
    pub id: &'static str,
    /// The recipe in a few words (`"del without owner check"`).
    pub title: &'static str,
    /// The scenario it must fail (`"S06"`, `"R02"`).
    pub caught_by: &'static str,
    check: Check,
}

impl fmt::Debug for BrokenRecipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokenRecipe")
            .field("id", &self.id)
            .field("title", &self.title)
            .field("caught_by", &self.caught_by)
            .finish_non_exhaustive()
    }
}

/// A broken recipe that failed its scenario, as it must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caught {
    /// How the scenario failed (its failure message).
    pub how: String,
}

impl BrokenRecipe {
    /// A recipe whose `check` runs it against real servers.
    pub fn new(
        id: &'static str,
        title: &'static str,
        caught_by: &'static str,
        check: impl Fn() -> Result<Caught, Failure> + Send + Sync + 'static,
    ) -> Self {
        Self { id, title, caught_by, check: Box::new(check) }
    }

    /// Runs the recipe against real servers.
    ///
    /// # Errors
    /// A [`Failure`] when the scenario did not catch it, or it could not be run.
    pub fn check(&self) -> Result<Caught, Failure> {
        (self.check)()
    }

    /// Runs [`check`](Self::check) as a test: prints how the recipe was caught.
    ///
    /// # Panics
    /// When the recipe was not caught (the suite has no teeth) or could not be run.
    pub fn assert_caught(&self) {
        match self.check() {
            Ok(Caught { how }) => {
                println!("[{} {}] {} failed as it must: {how}", self.id, self.title, self.caught_by)
            }
            Err(failure) => {
                panic!("[{} {}] not caught by {}: {failure}", self.id, self.title, self.caught_by)
            }
        }
    }
}

/// The usual check of a recipe that runs as a [`SuiteTarget`]: S02 passes (it works as a lock),
/// and `scenario` fails with `breach` (one of [`breach`](crate::suite::breach)'s phrases) in its message. Not for S04,
/// whose holder is this test binary re-run by test name: use [`caught_by_scenario_in`].
///
/// # Errors
/// A [`Failure`] when S02 does not pass, when `scenario` passes (or is n/a), or when it fails
/// some other way.
pub fn caught_by_scenario<T: SuiteTarget>(
    target: &T,
    scenario: &str,
    breach: &str,
) -> Result<Caught, Failure> {
    caught_by_scenario_in(target, scenario, breach, &target.label())
}

/// Whether `failure` is the breach a recipe was written to commit.
///
/// # Errors
/// A [`Failure`] that says what failed instead.
pub fn caught_if_breached(failure: Failure, scenario: &str, breach: &str) -> Result<Caught, Failure> {
    if failure.0.contains(breach) {
        Ok(Caught { how: failure.0 })
    } else {
        Err(Failure(format!(
            "{scenario} failed, but not on the assertion the recipe breaks (\"{breach}\"): {failure}"
        )))
    }
}

/// [`caught_by_scenario`] run from the test called `test_name` (its full path in the test
/// binary), which S04 re-runs as the holder process.
///
/// # Errors
/// As [`caught_by_scenario`].
pub fn caught_by_scenario_in<T: SuiteTarget>(
    target: &T,
    scenario: &str,
    breach: &str,
    test_name: &str,
) -> Result<Caught, Failure> {
    let label = target.label();
    match run(target, "S02", &label) {
        Ok(Verdict::Pass) => {}
        other => {
            return Err(Failure(format!("{label} must work as a lock on the happy path (S02): {other:?}")))
        }
    }
    match run(target, scenario, test_name) {
        Err(failure) => caught_if_breached(failure, scenario, breach),
        Ok(verdict) => {
            Err(Failure(format!("{label} passed {scenario} ({verdict:?}): the suite has no teeth")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::breach::RELEASED_ANOTHERS_LOCK;
    use crate::suite::MemoryTarget;

    #[test]
    fn a_recipe_is_caught_only_by_the_breach_it_commits() {
        let breached = Failure(format!("S06: A {RELEASED_ANOTHERS_LOCK} (B's lease)"));
        assert!(caught_if_breached(breached, "S06", RELEASED_ANOTHERS_LOCK).is_ok());
        // Failing some other way (a connection error, a timeout) proves nothing about the recipe.
        let other = Failure("S06: connection refused".to_owned());
        let refused = caught_if_breached(other, "S06", RELEASED_ANOTHERS_LOCK).unwrap_err();
        assert!(refused.0.contains("not on the assertion the recipe breaks"), "{refused}");
    }

    #[test]
    fn a_correct_lock_is_never_caught() {
        let passed = caught_by_scenario(&MemoryTarget::new(), "S06", RELEASED_ANOTHERS_LOCK).unwrap_err();
        assert!(passed.0.contains("no teeth"), "{passed}");
    }
}
