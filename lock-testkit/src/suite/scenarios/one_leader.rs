//! LE01 — one leader at any time: [`CANDIDATES`] candidates in each of two processes (this one
//! and a child, where the backend reaches across processes) serve [`TERMS`] terms each, leaders
//! resigning (or dropping their leadership) after a random part of a term. While leading, every
//! candidate leaves a file in a shared directory and samples the files there and its own
//! `is_leader()`: two files at once, or a leader that is not, is a breach.

use crate::suite::child::{serve_if_child, Holder, Role};
use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::terms::{serve_terms, Terms};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const CANDIDATES: usize = 4;
const TERMS: usize = 3;

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    needs!(target, "elections");
    let name = unique_name("le01");
    let dir = tempfile::Builder::new()
        .prefix("distlock-le01-")
        .tempdir()
        .map_err(|e| Failure(format!("cannot make the leaders' directory: {e}")))?;
    let child = match target.child_env() {
        Ok(env) => {
            let path = dir.path().to_string_lossy().into_owned();
            let role = Role::Campaign { name: name.clone(), candidates: CANDIDATES, terms: TERMS, dir: path };
            Some(Holder::start(test_name, &env, &role)?)
        }
        // In-process backends: twice the candidates, in this process.
        Err(_) => None,
    };
    let here = if child.is_some() { CANDIDATES } else { 2 * CANDIDATES };
    let client = client(target, options(10 * SECOND, true))?;
    let seen = serve_terms(&client, &name, (here, TERMS), dir.path())?;
    let there = match &child {
        Some(child) => {
            let (overlaps, served) = child.contention_result(4 * ACQUIRE_BOUND)?;
            Terms { overlaps, served }
        }
        None => Terms { overlaps: 0, served: 0 },
    };
    ensure!(
        seen.overlaps + there.overlaps == 0,
        "two leaders at once (or a leader that was not) in {} samples",
        seen.overlaps + there.overlaps
    );
    ensure!(
        seen.served + there.served == 2 * CANDIDATES * TERMS,
        "terms served: {} here and {} in the child, of {}",
        seen.served,
        there.served,
        2 * CANDIDATES * TERMS
    );
    Ok(Verdict::Pass)
}
