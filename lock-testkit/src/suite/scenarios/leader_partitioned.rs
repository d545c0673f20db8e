//! LE03 — the leader is partitioned: its connections go through a
//! [`FaultProxy`](crate::FaultProxy) that stops forwarding, while a candidate with connections
//! of its own campaigns. Passes when the leader stops being leader — `is_leader()` false, its
//! lost signal fired — before the rival leads, and the rival leads within the lease + 1 s of
//! that (the server ends a cut session by itself), as S16 asks of a cut lock.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Election, HoldState, LockClient, LostSignal};

use crate::suite::outcome::{applicable, ensure, needs};
use crate::suite::support::{client, options, unique_name, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};
use crate::FaultProxies;

/// The lease (for session holds: how long liveness checks may fail before the hold is lost).
const LEASE: Duration = Duration::from_secs(3);
/// The cut client's connect and I/O timeouts: long enough for a connection to open on a loaded
/// 2-core machine before the cut (S16's 1 s was seen too short there), short beside the lease.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long after the leader is told the rival may take to lead: the lease + 1 s the scenario
/// allows the server, plus the rival's own scheduling.
const FREE_WITHIN: Duration = Duration::from_millis(LEASE.as_millis() as u64 + 1_000);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "elections");
    let mut proxies = FaultProxies::default();
    let routed = target.backend_routed(&mut |server| proxies.route(server), TIMEOUT, 1);
    let backend = applicable!(routed)?;
    proxies.check().map_err(|error| Failure(error.to_string()))?;
    let name = unique_name("le03");
    let cut = LockClient::with_options(backend, options(LEASE, true));
    let leadership = Election::new(&cut, name.clone())
        .campaign_for(30 * SECOND)?
        .ok_or_else(|| Failure("the leader-to-be never won".into()))?;
    // Let the leadership be renewed (or checked) at least once before the cut.
    thread::sleep(LEASE / 2);
    ensure!(leadership.is_leader(), "the leadership lapsed before the cut");

    let rival = client(target, options(LEASE, true))?;
    let signal = leadership.lost_signal();
    proxies.cut();
    let cut_at = Instant::now();
    let give_up = cut_at + LEASE + FREE_WITHIN + 10 * SECOND;
    let campaign = {
        let (signal, name) = (signal.clone(), name.clone());
        thread::spawn(move || rival_campaigns(&rival, &name, &signal, give_up))
    };
    // The leader's view meanwhile: once not leader, never leader again.
    let mut told_at = None;
    while !campaign.is_finished() {
        let leading = leadership.is_leader();
        if told_at.is_none() && !leading {
            told_at = Some(Instant::now());
        }
        ensure!(!(told_at.is_some() && leading), "the cut leader went back to leading");
        thread::sleep(Duration::from_millis(5));
    }
    let (won_at, holder_told) =
        campaign.join().map_err(|_| Failure("the rival panicked".into()))??.ok_or_else(|| {
            Failure(format!(
                "no rival led within {:?} of the cut: the server kept the cut leader",
                give_up - cut_at
            ))
        })?;
    ensure!(
        holder_told,
        "a rival led {:?} after the cut, before the cut leader was told it lost",
        won_at - cut_at
    );
    ensure!(
        matches!(leadership.state(), HoldState::Lost | HoldState::InDoubt),
        "the cut leader's state is {:?} after a rival won",
        leadership.state()
    );
    let told_at = told_at.unwrap_or(won_at);
    let after = won_at.saturating_duration_since(told_at);
    ensure!(
        after <= FREE_WITHIN,
        "the rival led {after:?} after the cut leader stopped leading; the server must free it within the lease + 1 s"
    );
    drop(leadership);
    drop(cut);
    drop(proxies);
    Ok(Verdict::Pass)
}

/// Campaigns until `give_up`; returns when it won and whether the leader's `signal` had fired
/// by then.
fn rival_campaigns<B: lock_core::DistributedLock>(
    client: &LockClient<B>,
    name: &lock_core::LockName,
    signal: &LostSignal,
    give_up: Instant,
) -> Result<Option<(Instant, bool)>, Failure> {
    let election = Election::new(client, name.clone()).with_value("the rival");
    while Instant::now() < give_up {
        if let Some(leadership) = election.campaign_for(Duration::from_millis(20))? {
            let won = (Instant::now(), signal.is_lost());
            drop(leadership);
            return Ok(Some(won));
        }
    }
    Ok(None)
}
