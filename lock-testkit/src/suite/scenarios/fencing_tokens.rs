//! S09 — fencing tokens (sources 002, 003): holder 1 pauses past its lease, holder 2 acquires,
//! holder 1 writes. Tokens strictly increase per name across holders, expiries and client
//! restarts, and a fenced resource rejects holder 1's stale write.
//!
//! A session hold (row lock, advisory lock, ZooKeeper node) does not run out while its holder
//! pauses: the stale holder appears when the session ends during the pause (a killed connection,
//! an expired session). For those backends the pause ends holder 1's session through
//! [`SuiteTarget::break_lock`] instead of outliving a lease.

use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, HoldKind, Lock, LockName};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, has_ability, options, unique_name, MS, SECOND};
use crate::suite::{Failure, FencedResource, NotApplicable, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_millis(500);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if !has_ability(target.abilities().fencing, target.backend()?.fencing().is_some(), "fencing")? {
        return Ok(Verdict::NotApplicable("the backend issues no fencing tokens".into()));
    }
    let name = unique_name("s09");
    let session = target.backend()?.hold_kind() == HoldKind::Session;
    // Holder 1's pause: past its lease, or (session holds) long enough for its session to end.
    let pause = |name: &LockName| -> Result<Option<Verdict>, Failure> {
        if session {
            match target.break_lock(name) {
                Ok(broken) => broken?,
                Err(NotApplicable(reason)) => return Ok(Some(Verdict::NotApplicable(reason.into()))),
            }
        } else {
            thread::sleep(LEASE + 300 * MS);
        }
        Ok(None)
    };
    let resource = FencedResource::new();
    let (one, two) = (client(target, options(LEASE, false))?, client(target, options(10 * SECOND, true))?);
    let token_of = |guard: &lock_core::LockGuard<T::Backend>| {
        guard.fencing_token().ok_or_else(|| Failure("a fencing backend issued no token".into()))
    };

    // The docs' story: holder 1 writes, pauses (a GC pause) past its lease, holder 2 takes over
    // and writes, holder 1 resumes and writes with its old token.
    let first = acquire(&Lock::new(&one, name.clone()))?;
    let token1 = token_of(&first)?;
    ensure!(resource.write(token1, "holder 1").is_ok(), "the resource rejected the first holder");
    if let Some(verdict) = pause(&name)? {
        return Ok(verdict);
    }
    // (A session hold without renewal learns of its end only when it next talks to the server.)
    ensure!(session || !first.is_held(), "holder 1 still believes it holds the lock after its lease ran out");
    let second = acquire(&Lock::new(&two, name.clone()))?;
    let token2 = token_of(&second)?;
    ensure!(token2 > token1, "token {token2} of holder 2 does not exceed token {token1} of holder 1");
    ensure!(resource.write(token2, "holder 2").is_ok(), "the resource rejected the current holder");
    ensure!(
        resource.write(token1, "holder 1, resumed").is_err(),
        "the resource accepted holder 1's stale write with token {token1} after token {token2}"
    );
    second.unlock()?;
    drop(first);

    // More holders, alternating clients, and one acquisition after a lease ran out with no one
    // else in between: every token exceeds the one before.
    let mut last = token2;
    for (round, client) in [&one, &two, &one, &two].into_iter().enumerate() {
        let guard = acquire(&Lock::new(client, name.clone()))?;
        let token = token_of(&guard)?;
        ensure!(token > last, "acquisition {round}: token {token} does not exceed {last}");
        last = token;
        guard.unlock()?;
    }
    let expiring = acquire(&Lock::new(&one, name.clone()))?;
    let before = token_of(&expiring)?;
    if let Some(verdict) = pause(&name)? {
        return Ok(verdict);
    }
    let released = expiring.unlock();
    ensure!(
        matches!(released, Err(lock_core::Error::NotHeld { .. })),
        "releasing an expired lease gave {released:?}"
    );
    let after_expiry = acquire(&Lock::new(&one, name.clone()))?;
    let after = token_of(&after_expiry)?;
    ensure!(
        before > last && after > before,
        "tokens {last}, {before}, {after} across an expiry do not increase"
    );
    drop(after_expiry);

    // A "restarted" client (a brand-new backend connection) continues the sequence.
    drop((one, two));
    let restarted = client(target, options(10 * SECOND, true))?;
    let third = acquire(&Lock::new(&restarted, name))?;
    let token3 = token_of(&third)?;
    ensure!(token3 > after, "after a client restart, token {token3} does not exceed {after}");
    Ok(Verdict::Pass)
}
