//! A backend-neutral frame for the docs' broken recipes (negative controls, `SCENARIOS.md`'s
//! N01–N06): each backend crate ships its recipes, behind its `testkit` feature, as a list of
//! [`BrokenRecipe`]s; tests and `distlock compare` run them all the same way.
//!
//! A recipe is *caught* when it works as a lock on the happy path (it passes S02) and fails the
//! scenario it breaks: the failure is then the recipe's flaw, not a broken harness. A suite that
//! passes a broken recipe has no teeth.

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
/// and `scenario` fails. Not for S04, whose holder is this test binary re-run by test name: use
/// [`caught_by_scenario_in`].
///
/// # Errors
/// A [`Failure`] when S02 does not pass, or when `scenario` passes (or is n/a).
pub fn caught_by_scenario<T: SuiteTarget>(target: &T, scenario: &str) -> Result<Caught, Failure> {
    caught_by_scenario_in(target, scenario, &target.label())
}

/// [`caught_by_scenario`] run from the test called `test_name` (its full path in the test
/// binary), which S04 re-runs as the holder process.
///
/// # Errors
/// A [`Failure`] when S02 does not pass, or when `scenario` passes (or is n/a).
pub fn caught_by_scenario_in<T: SuiteTarget>(
    target: &T,
    scenario: &str,
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
        Err(Failure(how)) => Ok(Caught { how }),
        Ok(verdict) => {
            Err(Failure(format!("{label} passed {scenario} ({verdict:?}): the suite has no teeth")))
        }
    }
}
