//! LE02 — the leader is killed (`kill -9`): followers see it lead, and a candidate of another
//! process leads within the lease plus a second (TTL backends) or as soon as the server ends the
//! dead session (session backends), as S04 frees a dead holder's lock.

use lock_core::Election;

use crate::suite::child::{serve_if_child, Holder, Role, CHILD_LEASE, LEADER_VALUE};
use crate::suite::outcome::{applicable, ensure, needs};
use crate::suite::support::{client, options, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    needs!(target, "elections");
    let env = applicable!(target.child_env());
    let name = unique_name("le02");
    let mut leader = Holder::start(test_name, &env, &Role::Leader(name.clone()))?;
    let survivor = client(target, options(10 * SECOND, true))?;
    let election = Election::new(&survivor, name.clone()).with_value("the survivor");
    let seen = election.leader()?;
    ensure!(
        seen.as_ref().is_some_and(|leader| leader.value == LEADER_VALUE.as_bytes()),
        "followers saw {seen:?} while the child process led"
    );
    ensure!(election.try_campaign()?.is_none(), "a second leader won while the child process led");

    let bound = target.free_after_crash_within(CHILD_LEASE);
    let leadership =
        leader.kill_and_take("the leadership", bound, |timeout| election.campaign_for(timeout))?;
    ensure!(leadership.is_leader(), "the new leader does not lead");
    let now = election.leader()?;
    ensure!(
        now.as_ref().is_some_and(|leader| leader.token == leadership.fencing_token()),
        "followers see {now:?} after the new leader won with token {:?}",
        leadership.fencing_token()
    );
    Ok(Verdict::Pass)
}
