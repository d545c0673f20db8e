//! GW02 — guarded writes through a fenced store: the writes of successive holders, interleaved
//! with late writes of the holders before them. Every write whose token is below one that
//! already wrote is refused with [`Error::StaleToken`](lock_core::Error::StaleToken); a holder's
//! repeated and identical writes are accepted (MySQL's changed-rows count must not read as a
//! refusal); a key never written takes any token (an upsert); the store ends with the last
//! holder's value.

use std::time::Duration;

use lock_core::{DistributedLock, Error, FencingToken, Lock, LockGuard};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, has_ability, options, unique_name};
use crate::suite::{Failure, NotApplicable, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(10);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if !has_ability(target.abilities().fencing, target.backend()?.fencing().is_some(), "fencing")? {
        return Ok(Verdict::NotApplicable("the backend issues no fencing tokens".into()));
    }
    let store = match target.fenced_store() {
        Ok(store) => store?,
        Err(NotApplicable(reason)) => return Ok(Verdict::NotApplicable(reason.into())),
    };
    let name = unique_name("gw02");
    let key = name.as_str();
    let clients = [client(target, options(LEASE, true))?, client(target, options(LEASE, true))?];
    let token_of = |guard: &LockGuard<T::Backend>| {
        guard.fencing_token().ok_or_else(|| Failure("a fencing backend issued no token".into()))
    };

    // Three holders in turn, alternating clients; after each one's writes, every earlier
    // holder writes late.
    let mut earlier: Vec<FencingToken> = Vec::new();
    for (round, client) in [&clients[0], &clients[1], &clients[0]].into_iter().enumerate() {
        let guard = acquire(&Lock::new(client, name.clone()))?;
        let token = token_of(&guard)?;
        ensure!(
            earlier.iter().all(|before| token > *before),
            "holder {round}: token {token} is not above {earlier:?}"
        );
        let value = format!("holder {round}");
        // The last two are identical: the second changes no row.
        for attempt in ["first", "second", "identical"] {
            let written = if attempt == "first" { format!("{value}, first") } else { value.clone() };
            store.write(key, token, written.as_bytes()).map_err(|error| {
                Failure(format!("holder {round}'s {attempt} write with token {token} was refused: {error}"))
            })?;
        }
        for &stale in &earlier {
            let refused = store.write(key, stale, b"a stale holder's late write");
            ensure!(
                matches!(refused, Err(Error::StaleToken { presented, highest, .. }) if presented == stale && highest == token),
                "a late write with token {stale} after token {token} gave {refused:?}, not a stale-token refusal"
            );
        }
        guard.unlock()?;
        earlier.push(token);
    }
    let last = *earlier.last().expect("three holders");
    let stored = store.read(key)?;
    ensure!(
        stored == Some((last, b"holder 2".to_vec())),
        "the store ended with {stored:?}, not the last holder's value with token {last}"
    );

    // A key no one wrote takes any token, even one below the other key's fence.
    let fresh = format!("{key}-fresh");
    store.write(&fresh, earlier[0], b"first write of a new key")?;
    ensure!(
        store.read(&fresh)? == Some((earlier[0], b"first write of a new key".to_vec())),
        "a new key's first write was not stored"
    );
    Ok(Verdict::Pass)
}
