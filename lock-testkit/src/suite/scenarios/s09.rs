//! S09 — fencing tokens (seeds 002, 003): holder 1 pauses past its lease, holder 2 acquires,
//! holder 1 writes. Tokens strictly increase per name across holders, expiries and client
//! restarts, and a fenced resource rejects holder 1's stale write.

use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, Lock};

use crate::suite::outcome::ensure;
use crate::suite::support::{client, options, unique_name, MS, SECOND};
use crate::suite::{FencedResource, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_millis(500);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if target.backend()?.fencing().is_none() {
        return Ok(Verdict::NotApplicable("the backend issues no fencing tokens".into()));
    }
    let name = unique_name("s09");
    let resource = FencedResource::new();
    let (one, two) = (client(target, options(LEASE, false))?, client(target, options(10 * SECOND, true))?);

    let first = Lock::new(&one, name.clone()).lock()?;
    let token1 = first
        .fencing_token()
        .ok_or_else(|| crate::suite::Failure("no token from a fencing backend".into()))?;
    thread::sleep(LEASE + 300 * MS); // holder 1 "pauses" (the docs' GC pause) past its lease

    let second = Lock::new(&two, name.clone()).try_lock_for(2 * SECOND)?;
    let second = second.ok_or_else(|| crate::suite::Failure("holder 2 could not acquire".into()))?;
    let token2 =
        second.fencing_token().ok_or_else(|| crate::suite::Failure("no token for holder 2".into()))?;
    ensure!(token2 > token1, "token {token2} of holder 2 does not exceed token {token1} of holder 1");
    ensure!(resource.write(token2, "holder 2").is_ok(), "the resource rejected the current holder");
    ensure!(
        resource.write(token1, "holder 1, resumed").is_err(),
        "the resource accepted holder 1's stale write with token {token1} after token {token2}"
    );
    second.unlock()?;
    drop(first);

    // A "restarted" client (a brand-new backend connection) continues the sequence.
    drop((one, two));
    let restarted = client(target, options(10 * SECOND, true))?;
    let third = Lock::new(&restarted, name).lock()?;
    let token3 =
        third.fencing_token().ok_or_else(|| crate::suite::Failure("no token after restart".into()))?;
    ensure!(token3 > token2, "after a client restart, token {token3} does not exceed {token2}");
    Ok(Verdict::Pass)
}
