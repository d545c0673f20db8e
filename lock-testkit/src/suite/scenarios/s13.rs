//! S13 — bad configuration: a zero or absurd lease is a typed error; an unreachable server is a
//! connection error within the connect timeout (no hang); a wrong password is an authentication
//! error.

use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, LockOptions, OwnerToken};

use crate::suite::outcome::ensure;
use crate::suite::support::unique_name;
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let mut not_applicable = Vec::new();

    // Leases: rejected by the options builder, and by the backend itself when called directly.
    for lease in [Duration::ZERO, Duration::from_secs(365 * 24 * 3600)] {
        let built = LockOptions::builder().lease(lease).build();
        ensure!(
            matches!(built, Err(Error::InvalidConfig { .. })),
            "lease {lease:?} was accepted by the options"
        );
        let backend = target.backend()?;
        let direct = backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), lease);
        ensure!(
            matches!(direct, Err(Error::InvalidConfig { .. })),
            "the backend answered {:?} to an acquisition with lease {lease:?}",
            direct.map(|lease| lease.is_some())
        );
    }

    // The clock starts before the client is built: connecting may happen there.
    let started = Instant::now();
    match target.unreachable_backend() {
        Err(reason) => not_applicable.push(format!("unreachable server: {}", reason.0)),
        Ok(built) => {
            let outcome = built.and_then(|backend| {
                backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), Duration::from_secs(10))
            });
            let took = started.elapsed();
            ensure!(
                matches!(outcome, Err(Error::Connection { .. } | Error::Timeout { .. })),
                "an unreachable server gave {:?}, not a connection error",
                outcome.map(|lease| lease.is_some())
            );
            let bound = target.connect_timeout_bound();
            ensure!(took <= bound, "reporting an unreachable server took {took:?} (bound {bound:?})");
        }
    }

    match target.wrong_password_backend() {
        Err(reason) => not_applicable.push(format!("wrong password: {}", reason.0)),
        Ok(built) => {
            let outcome = built.and_then(|backend| {
                backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), Duration::from_secs(10))
            });
            ensure!(
                matches!(outcome, Err(Error::Authentication { .. })),
                "a wrong password gave {:?}, not an authentication error",
                outcome.map(|lease| lease.is_some()).map_err(|e| Failure::from(e).0)
            );
        }
    }

    // The parts that apply passed; say which did not apply, and why.
    if !not_applicable.is_empty() {
        println!("[{}] S13 partly n/a: {}", target.label(), not_applicable.join("; "));
    }
    Ok(Verdict::Pass)
}
