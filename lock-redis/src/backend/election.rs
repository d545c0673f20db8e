//! Leader election ([`Elections`]) on the node that serves the election's name.
//!
//! An election named N is a mutex on keys of its own ([`RedisKeys::election`](crate::RedisKeys::election)):
//! a campaign waits, queues, takes its fencing token, waits for replicas (`WAIT`) and follows
//! the cluster exactly as the mutex N would, yet never contends with it, and the core extends
//! and releases the leadership with the kind's mutex scripts. Beside the lock, the leader
//! record ([`RedisKeys::leader_record`](crate::RedisKeys::leader_record)) holds the leader's
//! owner token, fencing token and value:
//! - **campaign**: the kind's acquire script inside `election_campaign.lua`, which writes the
//!   record in the step that wins (so followers never see a leader without its value) and
//!   publishes `elected` on the election's channel;
//! - **proclaim**: `election_proclaim.lua` checks the owner and rewrites the record in one step,
//!   then publishes `proclaimed`;
//! - **leader**: `election_leader.lua` reads the lock and the record in one step, and attributes
//!   the record only to the owner that wrote it;
//! - **watch**: a registration with the node's subscriber that hears every message of the
//!   election's channel: the notices above, and every release or hand-over (an election's
//!   release always publishes, fair client or not). The payloads `elected` and `proclaimed`
//!   name no waiter (owner tokens are hex), so they wake watches, never queued candidates.
//!
//! A leader whose lease runs out sends no message: followers see it by their re-check
//! ([`leader_recheck`](lock_core::leader_recheck)).

use std::sync::LazyLock;
use std::time::Instant;

use lock_core::{
    check_lease, Acquired, Deadline, Elections, Error, FencingToken, Leader, LeaderWatch, LockName,
    Primitive, Request, Result,
};

use super::wait::Wakeups;
use super::{Attempt, RedisBackend, RedisLease, RedisLockKind, Route};
use crate::error;
use crate::lua::{self, LuaScript, PUBLISH, SPUBLISH};

/// Where `election_campaign.lua` takes the kind's acquire script.
const ACQUIRE_MARKER: &str = "--[[ acquire ]]";

/// The campaign script of `kind`, publishing with `SPUBLISH` when `sharded` (a cluster's).
fn campaign_source(kind: RedisLockKind, sharded: bool) -> LuaScript {
    let acquire = kind.scripts(sharded).acquire.source();
    let wrapper = include_str!("../scripts/election_campaign.lua");
    assert_eq!(wrapper.matches(ACQUIRE_MARKER).count(), 1, "the campaign script lost its marker");
    LuaScript::new(publishing(wrapper.replacen(ACQUIRE_MARKER, acquire, 1), sharded))
}

fn proclaim_source(sharded: bool) -> LuaScript {
    let source = lua::with_held_by(include_str!("../scripts/election_proclaim.lua"));
    LuaScript::new(publishing(source, sharded))
}

/// `source` with its wake-ups sent by `SPUBLISH` when `sharded`, as [`LockScripts::sharded`](crate::lua::LockScripts::sharded).
fn publishing(source: String, sharded: bool) -> String {
    if sharded {
        source.replace(PUBLISH, SPUBLISH)
    } else {
        source
    }
}

/// The proclaim script, sharded or not.
fn proclaim_script(sharded: bool) -> &'static LuaScript {
    static SCRIPTS: [LazyLock<LuaScript>; 2] =
        [LazyLock::new(|| proclaim_source(false)), LazyLock::new(|| proclaim_source(true))];
    &SCRIPTS[usize::from(sharded)]
}

/// The leader's read (it publishes nothing: one script for every deployment).
fn leader_script() -> &'static LuaScript {
    static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
        LuaScript::new(lua::with_queue(&lua::with_held_by(include_str!("../scripts/election_leader.lua"))))
    });
    &SCRIPT
}

/// The leader as `election_leader.lua` answers: `[]` nobody, `[fence, value]` the leader (an
/// empty fence: its token is unknown).
fn leader_from(reply: Vec<Vec<u8>>) -> Option<Leader> {
    let mut fields = reply.into_iter();
    let fence = fields.next()?;
    let value = fields.next().unwrap_or_default();
    let token = std::str::from_utf8(&fence).ok().and_then(|fence| fence.parse().ok()).map(FencingToken::new);
    Some(Leader::new(value, token))
}

impl RedisBackend {
    /// The campaign script of this backend's kind and deployment (see [`Route::Campaign`]).
    pub(super) fn campaign_script(&self) -> &'static LuaScript {
        static SCRIPTS: [LazyLock<LuaScript>; 4] = [
            LazyLock::new(|| campaign_source(RedisLockKind::SetNx, false)),
            LazyLock::new(|| campaign_source(RedisLockKind::SetNx, true)),
            LazyLock::new(|| campaign_source(RedisLockKind::ReentrantHash, false)),
            LazyLock::new(|| campaign_source(RedisLockKind::ReentrantHash, true)),
        ];
        let kind = match self.inner.kind {
            RedisLockKind::SetNx => 0,
            RedisLockKind::ReentrantHash => 2,
        };
        &SCRIPTS[kind + usize::from(self.inner.nodes.cluster().is_some())]
    }
}

impl Elections for RedisBackend {
    /// Waits as the mutex does (queued in arrival order on a fair client, woken by the
    /// release's message); `Deadline::Now` is one attempt that never joins the queue.
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<RedisLease>>> {
        check_lease(request.ttl)?;
        let (name, owner, ttl) = (request.name, request.owner, request.ttl);
        let keys = self.keys(name).election();
        let until = match request.deadline {
            Deadline::Now => {
                let sent_at = Instant::now();
                let route = Route::Campaign { waiting: false, until: None, value };
                return Ok(match self.attempt(name, &keys, owner, ttl, route)? {
                    Attempt::Acquired(lease) => Some(Acquired::new(lease, sent_at)),
                    Attempt::Held { .. } => None,
                });
            }
            waiting => waiting.instant(),
        };
        self.wait_for_mutex(
            name,
            &keys,
            owner,
            ttl,
            Route::Campaign { waiting: self.inner.fair, until, value },
        )
    }

    fn proclaim(&self, lease: &mut RedisLease, value: &[u8]) -> Result<()> {
        if lease.primitive != Primitive::Leader {
            return Err(Error::invalid_config("proclaim needs the lease of a won campaign"));
        }
        let lease: &RedisLease = lease;
        let record = lease.keys.leader_record();
        let script = proclaim_script(self.inner.nodes.cluster().is_some());
        let written: i64 = self.routed(&lease.keys, |hop| {
            let mut command = script.invoke(&[lease.keys.lock(), &record]);
            command.arg(&lease.token).arg(lease.fence.get()).arg(value).arg(lease.keys.channel());
            hop.connection()?.run(|c| script.query(c, &command)).map_err(|e| error::map("proclaim", e))
        })?;
        if written == 1 {
            Ok(())
        } else {
            Err(Error::NotHeld { name: lease.name.clone() })
        }
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let keys = self.keys(name).election();
        let record = keys.leader_record();
        let script = leader_script();
        let reply: Vec<Vec<u8>> = self.routed(&keys, |hop| {
            let command = script.invoke(&[keys.lock(), &record]);
            hop.connection()?.run(|c| script.query(c, &command)).map_err(|e| error::map("read the leader", e))
        })?;
        Ok(leader_from(reply))
    }

    /// Subscribed when it returns, within one I/O timeout: a channel the server will not
    /// subscribe (an ACL user without rights on it) leaves a watch that wakes by its deadline
    /// only, as the trait's re-check expects.
    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        let mut wakeups = Wakeups::hearing_all(self, self.keys(name).election());
        if !wakeups.subscribe(Instant::now() + self.inner.io_timeout)? {
            tracing::debug!(election = %name, "a leader watch is not subscribed yet; followers re-check on their own");
        }
        // The subscription's own wake-up: the caller reads the leader after this returns.
        wakeups.clear();
        Ok(Box::new(RedisLeaderWatch { wakeups }))
    }
}

/// A [`LeaderWatch`] on the election's channel, following its slot to a new primary.
struct RedisLeaderWatch<'a> {
    wakeups: Wakeups<'a>,
}

impl LeaderWatch for RedisLeaderWatch<'_> {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        self.wakeups.follow_slot();
        Ok(self.wakeups.wait(until))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_reply_reads_as_nobody_a_leader_or_an_unknown_one() {
        assert_eq!(leader_from(Vec::new()), None);
        let known = leader_from(vec![b"7".to_vec(), b"host:1".to_vec()]);
        assert_eq!(known, Some(Leader::new("host:1", Some(FencingToken::new(7)))));
        assert_eq!(leader_from(vec![Vec::new(), Vec::new()]), Some(Leader::new("", None)));
        assert_eq!(leader_from(vec![b"x".to_vec()]), Some(Leader::new("", None)));
    }

    #[test]
    fn every_election_script_assembles_and_shards_its_notices() {
        for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
            let plain = campaign_source(kind, false);
            assert!(!plain.source().contains(ACQUIRE_MARKER) && plain.source().contains("'elected'"));
            let sharded = campaign_source(kind, true);
            assert!(!sharded.source().contains("'PUBLISH'"), "{}", sharded.source());
        }
        assert!(!proclaim_script(true).source().contains("'PUBLISH'"));
        assert!(proclaim_script(false).source().contains("local function held_by"));
        assert!(leader_script().source().contains("local function is_reservation"));
    }
}
