//! What a scenario concludes: pass, not applicable (with the reason), or a failure.

use std::fmt;

/// A scenario that ran to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held.
    Pass,
    /// The backend cannot support the scenario by design; the reason says why.
    NotApplicable(String),
}

/// A check that did not hold, or an error the scenario did not expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

/// The result of one scenario run.
pub type ScenarioResult = Result<Verdict, Failure>;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lock_core::Error> for Failure {
    fn from(error: lock_core::Error) -> Self {
        // The error's `Display` shows its causes.
        Failure(format!("unexpected error: {error}"))
    }
}

/// Fails the scenario with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err($crate::suite::Failure(format!($($message)+)));
        }
    };
}
pub(crate) use ensure;

/// Unwraps a probe of the target, or ends the scenario as not applicable with its reason.
macro_rules! applicable {
    ($probe:expr) => {
        match $probe {
            Ok(value) => value,
            Err($crate::suite::NotApplicable(reason)) => {
                return Ok($crate::suite::Verdict::NotApplicable(reason.to_string()))
            }
        }
    };
}
pub(crate) use applicable;

/// Ends the scenario as not applicable unless the kind has the shared-mode `ability`
/// (see [`shared_ability`](crate::suite::support::shared_ability)) or, for `"elections"`,
/// leader election ([`elections_apply`](crate::suite::support::elections_apply)).
macro_rules! needs {
    ($target:expr, "elections") => {
        if let Err(reason) = $crate::suite::support::elections_apply($target)? {
            return Ok($crate::suite::Verdict::NotApplicable(reason));
        }
    };
    ($target:expr, $ability:literal) => {
        if let Err(reason) = $crate::suite::support::shared_ability($target, $ability)? {
            return Ok($crate::suite::Verdict::NotApplicable(reason));
        }
    };
}
pub(crate) use needs;
