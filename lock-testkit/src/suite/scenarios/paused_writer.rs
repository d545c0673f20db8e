//! GW01 — a holder paused past its lease writes on resume: a child process holds the lock and
//! writes to the kind's fenced store, is stopped (`SIGSTOP`: its renewal stops too, as in a long
//! GC pause), a rival acquires — after the lease on lease kinds; session kinds have their
//! session ended as S09 does, since a stopped process keeps its connection — and writes; then
//! the child resumes and writes with its old token. In every cycle the late write is refused
//! as stale and the store keeps the rival's value; where the kind has writes on the lock's own
//! server conditional on the hold (Redis, SQL, ZooKeeper), the child's late one is refused as
//! not held and the rival's stays.

use lock_core::{DistributedLock, HoldKind, Lock};
use nix::sys::signal::Signal;

use crate::suite::child::{serve_if_child, Holder, Role, CHILD_LEASE};
use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{client, has_ability, options, unique_name, SECOND};
use crate::suite::{Failure, NotApplicable, ScenarioResult, SuiteTarget, Verdict};

/// Pauses per run, each with a new holder process.
const CYCLES: usize = 2;

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    let backend = target.backend()?;
    if !has_ability(target.abilities().fencing, backend.fencing().is_some(), "fencing")? {
        return Ok(Verdict::NotApplicable("the backend issues no fencing tokens".into()));
    }
    let env = applicable!(target.child_env());
    let store = applicable!(target.fenced_store())?;
    let session = backend.hold_kind() == HoldKind::Session;
    let rival = client(target, options(10 * SECOND, true))?;
    let dir = tempfile::tempdir().map_err(|e| Failure(format!("no temp dir: {e}")))?;
    for cycle in 0..CYCLES {
        let name = unique_name("gw01");
        let trigger = dir.path().join(format!("resume-{cycle}"));
        let role = Role::FencedWriter { name: name.clone(), trigger: trigger.display().to_string() };
        let holder = Holder::start(test_name, &env, &role)?;
        let paused_token = holder.token()?;
        holder.signal(Signal::SIGSTOP)?;
        if session {
            match target.break_lock(&name) {
                Ok(broken) => broken?,
                Err(NotApplicable(reason)) => return Ok(Verdict::NotApplicable(reason.into())),
            }
        }
        let bound = target.free_after_crash_within(CHILD_LEASE) + 5 * SECOND;
        let guard = Lock::new(&rival, name.clone()).try_lock_for(bound)?.ok_or_else(|| {
            Failure(format!("cycle {cycle}: the paused holder's lock was not free within {bound:?}"))
        })?;
        let token = guard.fencing_token().ok_or_else(|| Failure("no fencing token".into()))?;
        ensure!(token > paused_token, "cycle {cycle}: the rival's token {token} is not above {paused_token}");
        store.write(name.as_str(), token, b"the rival")?;
        let on_server = match target.write_if_held(&guard, name.as_str(), b"the rival") {
            Ok(written) => {
                written.map_err(|e| {
                    Failure(format!("cycle {cycle}: the rival's write on the lock's server: {e}"))
                })?;
                true
            }
            Err(NotApplicable(_)) => false,
        };

        std::fs::write(&trigger, b"").map_err(|e| Failure(format!("cannot write the trigger: {e}")))?;
        holder.signal(Signal::SIGCONT)?;
        let (fenced, late_on_server) = holder.late_writes(30 * SECOND)?;
        ensure!(
            fenced == "stale",
            "cycle {cycle}: the paused holder's late write with token {paused_token} after {token}: {fenced}"
        );
        ensure!(
            late_on_server == "not-held" || (late_on_server == "n/a" && !on_server),
            "cycle {cycle}: the paused holder's late write on the lock's server: {late_on_server}"
        );
        let stored = store.read(name.as_str())?;
        ensure!(
            stored == Some((token, b"the rival".to_vec())),
            "cycle {cycle}: the store holds {stored:?}, not the rival's write"
        );
        // After the release: a row kind's write commits with its holding transaction.
        guard.unlock()?;
        if on_server {
            let left = target.read_guarded(&name, name.as_str()).map_err(|why| Failure(why.0.into()))??;
            ensure!(
                left.as_deref() == Some(b"the rival".as_slice()),
                "cycle {cycle}: the lock's server holds {left:?}, not the rival's write"
            );
        }
    }
    Ok(Verdict::Pass)
}
