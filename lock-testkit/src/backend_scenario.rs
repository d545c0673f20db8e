//! [`BackendScenario`]: a scenario of one backend (`docs/scenarios.md`'s R01–R04, Q01–Q03,
//! Z01–Z03), shipped by the backend's crate behind its `testkit` feature and run the same way by
//! its own tests and by `distlock compare`.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::suite::Failure;

/// Runs a backend scenario against real servers; its checks are assertions.
type Body = Box<dyn Fn() + Send + Sync>;

/// One scenario of one backend.
pub struct BackendScenario {
    /// The stable id (`"Z01"`).
    pub id: &'static str,
    /// What it checks, in a few words.
    pub title: &'static str,
    body: Body,
}

impl fmt::Debug for BackendScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendScenario")
            .field("id", &self.id)
            .field("title", &self.title)
            .finish_non_exhaustive()
    }
}

impl BackendScenario {
    /// A scenario whose `body` runs it and asserts what must hold (a failed assertion is the
    /// scenario's failure, with its message).
    pub fn new(id: &'static str, title: &'static str, body: impl Fn() + Send + Sync + 'static) -> Self {
        Self { id, title, body: Box::new(body) }
    }

    /// Runs the scenario.
    ///
    /// # Errors
    /// A [`Failure`] with the message of the assertion that failed.
    pub fn run(&self) -> Result<(), Failure> {
        catch_unwind(AssertUnwindSafe(|| (self.body)())).map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".into());
            Failure(message)
        })
    }
}

/// The scenario called `id` of `scenarios`, run as a test.
///
/// # Panics
/// When there is no such scenario, or it fails: that is how the test fails.
pub fn run_backend_scenario(scenarios: Vec<BackendScenario>, id: &str) {
    let scenario = scenarios
        .into_iter()
        .find(|scenario| scenario.id == id)
        .unwrap_or_else(|| panic!("no scenario {id}"));
    (scenario.body)();
    println!("[{}] {}: pass", scenario.id, scenario.title);
}
