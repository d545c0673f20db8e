//! S12 — independent names do not interfere; names are safe. Two names lock concurrently; the
//! empty name is a typed error; 1,000-character, unicode, `/`, `..`, NUL, quote and SQL
//! metacharacter names either work or are rejected cleanly — never an injection, never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};

use lock_core::{Error, Lock, LockClient, LockName};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Names that break naive key, path or query building. Pairs that a careless escape would map to
/// one key (`a/b` and `a_b`, the quotes) are all held at once, so a collision shows as contention.
fn hostile_suffixes() -> Vec<String> {
    vec![
        "x".repeat(1_000),
        "锁/ロック/🔒".into(),
        "a/b".into(),
        "a_b".into(),
        "a%2Fb".into(),
        "../../../etc/passwd".into(),
        "..".into(),
        "/".into(),
        "nul\0byte".into(),
        "quote'single".into(),
        "quote\"double".into(),
        "quote`back".into(),
        "x'; DROP TABLE distlock_locks; --".into(),
        "%_*?[]{}\\".into(),
        "{hash}tag".into(),
        " leading and trailing spaces ".into(),
    ]
}

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);

    // Independent names: holding one does not block the other.
    let (one, two) = (unique_name("s12-one"), unique_name("s12-two"));
    let held_one = acquire(&Lock::new(&a, one))?;
    ensure!(Lock::new(&b, two).try_lock()?.is_some(), "holding one name blocked another");
    drop(held_one);

    ensure!(
        matches!(a.lock_named(""), Err(Error::InvalidName { .. })),
        "the empty name was not rejected with InvalidName"
    );

    let prefix = unique_name("s12");
    let mut held = Vec::new();
    for suffix in hostile_suffixes() {
        let text = format!("{prefix}-{suffix}");
        let shown: String = text.escape_debug().take(60).collect();
        let attempt = catch_unwind(AssertUnwindSafe(|| hold_if_valid(&a, &b, &text)));
        match attempt {
            Err(_) => return Err(Failure(format!("name \"{shown}…\" made the client panic"))),
            Ok(Err(failure)) => return Err(Failure(format!("name \"{shown}…\": {}", failure.0))),
            Ok(Ok(Some(guard))) => held.push(guard),
            Ok(Ok(None)) => {} // rejected cleanly
        }
    }
    ensure!(!held.is_empty(), "every hostile name was rejected; at least the printable ones must work");
    for guard in held {
        guard.unlock()?;
    }
    Ok(Verdict::Pass)
}

/// Locks `text` through client `a` (while every earlier hostile name is still held), checks that
/// client `b` is shut out of exactly that name, and returns the guard; `None` if the name is
/// rejected with [`Error::InvalidName`].
fn hold_if_valid<B: lock_core::DistributedLock>(
    a: &LockClient<B>,
    b: &LockClient<B>,
    text: &str,
) -> Result<Option<lock_core::LockGuard<B>>, Failure> {
    let name = match LockName::new(text) {
        Ok(name) => name,
        Err(Error::InvalidName { .. }) => return Ok(None),
        Err(other) => return Err(other.into()),
    };
    let guard = Lock::new(a, name.clone())
        .try_lock()?
        .ok_or_else(|| Failure("was already held: two names map to one lock".into()))?;
    if Lock::new(b, name).try_lock()?.is_some() {
        return Err(Failure("another client acquired it while held".into()));
    }
    Ok(Some(guard))
}
