//! One acquisition attempt on every node at once: votes, the quorum, the fencing token, raising
//! lagging counters after a grant, and undoing an attempt that failed.

use std::time::{Duration, Instant};

use lock_core::{Error, FencingToken, LockName, OwnerToken, Result};
use rand::RngExt as _;
use redis::Value;

use super::fanout::Fanout;
use super::scripts;
use super::tally::{NodeError, BACKEND};
use super::{RedlockBackend, RedlockLease};
use crate::keys::RedisKeys;
use crate::transaction;

/// The outcome of one acquisition attempt that reached a quorum.
pub(super) enum Attempt {
    Acquired(Box<RedlockLease>),
    /// A quorum answered and too few granted.
    Refused {
        /// Retry within this long at the latest (the soonest a refusing node's lease ends).
        retry_in: Option<Duration>,
        /// Some nodes granted: other clients are contending right now (a split vote).
        split: bool,
        /// How long the attempt took.
        took: Duration,
    },
}

/// One node's answer to the acquisition ([`vote_request`]).
pub(super) struct Vote {
    pub(super) granted: bool,
    pub(super) fence: u64,
    /// The remaining lease on a refusing node, in ms; negative when unknown.
    pub(super) remaining_ms: i64,
}

impl RedlockBackend {
    /// One acquisition attempt. `Err` when too few nodes answered (or the quorum was too slow).
    pub(super) fn attempt(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Attempt> {
        let started = Instant::now();
        // A fresh value per attempt: the undo of a failed attempt (which may run late, behind the
        // acquisition on a connection whose reply did not come in time) deletes only that
        // attempt's grants, never a grant of the same owner's next attempt.
        let token = attempt_value(owner);
        let mut fanout = self.fanout();
        if fanout.ready() < self.inner.quorum {
            // Too few nodes can even be asked: fail before holding anything anywhere.
            let mut tally = self.tally();
            for (index, error) in fanout.failures() {
                tally.fail(index, error.clone());
            }
            return Err(self.failure(&tally, "acquire"));
        }
        let request = vote_request(keys, &token, ttl);
        let everyone = vec![Some(request.as_slice()); self.inner.nodes.len()];
        let replies: Vec<_> = fanout
            .exchange(&everyone, transaction::replies(VOTE_COMMANDS), Duration::ZERO, "acquire")
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|| Err(NodeError::unanswered())))
            .collect();

        let mut tally = self.tally();
        let mut granted = Vec::new();
        let mut may_hold = vec![false; replies.len()];
        let mut fence = 0;
        // Each answering node's counter after this attempt (refusals take a number too).
        let mut counters: Vec<Option<u64>> = vec![None; replies.len()];
        let mut retry_in: Option<Duration> = None;
        for (index, reply) in replies.into_iter().enumerate() {
            match reply.and_then(|replies| parse_vote(replies, &token)) {
                Ok(vote) => {
                    fence = fence.max(vote.fence);
                    counters[index] = Some(vote.fence);
                    if vote.granted {
                        tally.confirm();
                        granted.push(index);
                        may_hold[index] = true;
                    } else {
                        tally.deny();
                        if let Ok(ms) = u64::try_from(vote.remaining_ms) {
                            let remaining = Duration::from_millis(ms.max(1));
                            retry_in = Some(retry_in.map_or(remaining, |soonest| soonest.min(remaining)));
                        }
                    }
                }
                Err(error) => {
                    tally.fail(index, error);
                    may_hold[index] = true; // Its reply may have been lost.
                }
            }
        }
        let elapsed = started.elapsed();
        let drift = Self::clock_drift(ttl);
        let validity = ttl.checked_sub(elapsed + drift).filter(|validity| !validity.is_zero());
        if let (true, Some(validity)) = (tally.confirmed_by_quorum(), validity) {
            self.raise_lagging_counters(&mut fanout, keys, fence, &counters);
            return Ok(Attempt::Acquired(Box::new(RedlockLease {
                name: name.clone(),
                keys: keys.clone(),
                token,
                fence: FencingToken::new(fence),
                lease: ttl,
                elapsed,
                validity,
                valid_until: started + (ttl - drift),
                granted,
            })));
        }
        self.undo_attempt(&mut fanout, keys, &token, fence, &may_hold);
        if tally.confirmed_by_quorum() {
            return Err(Error::Timeout {
                backend: BACKEND,
                operation: "acquire",
                source: Some(
                    format!("a quorum granted after {elapsed:?}, leaving nothing of a {ttl:?} lease after the {drift:?} drift allowance").into(),
                ),
            });
        }
        if tally.answered_by_quorum() {
            return Ok(Attempt::Refused { retry_in, split: !granted.is_empty(), took: elapsed });
        }
        Err(self.failure(&tally, "acquire"))
    }

    /// Raises every answering node whose counter is below the issued `fence` to it, before the
    /// holder can use the token. Without this a node learns the token only at the holder's first
    /// renewal: counters `[5, 1, 1, 1, 1]` issue 6 while four nodes stay at 2, and a holder that
    /// pauses before renewing loses its lease to one whose quorum of those four issues 3 — and
    /// the stale holder's 6 then beats the new holder at the resource. In the steady state every
    /// node saw every acquisition and the counters agree: no extra round. Best effort within one
    /// node timeout; a node that misses it still learns the token at the renewal or release.
    fn raise_lagging_counters(
        &self,
        fanout: &mut Fanout<'_>,
        keys: &RedisKeys,
        fence: u64,
        counters: &[Option<u64>],
    ) {
        let lagging: Vec<bool> =
            counters.iter().map(|counter| counter.is_some_and(|seen| seen < fence)).collect();
        if !lagging.contains(&true) {
            return;
        }
        let script = scripts::raise();
        // A rare path: load the script in the same write rather than risk a NOSCRIPT round.
        let mut request = script.load();
        request.extend(script.invoke(&[keys.fence()]).arg(fence).get_packed_command());
        let requests: Vec<Option<&[u8]>> = lagging
            .iter()
            .enumerate()
            .map(|(index, &lags)| (lags && fanout.is_ready(index)).then_some(request.as_slice()))
            .collect();
        for (index, outcome) in
            fanout.exchange(&requests, 2, Duration::ZERO, "raise the fencing counter").into_iter().enumerate()
        {
            if let Some(Err(error)) = outcome {
                tracing::debug!(node = index, %error, "raising a redlock fencing counter failed; the renewal will");
            }
        }
    }

    /// Releases a failed attempt on every node `may_hold` marks: those that granted it, and
    /// those that did not answer. `token` is that attempt's own value, so the undo cannot touch
    /// another attempt's grant.
    fn undo_attempt(
        &self,
        fanout: &mut Fanout<'_>,
        keys: &RedisKeys,
        token: &str,
        fence: u64,
        may_hold: &[bool],
    ) {
        if !may_hold.contains(&true) {
            return;
        }
        let script = scripts::release();
        // A rare path: load the script in the same write rather than risk a NOSCRIPT round.
        let mut request = script.load();
        request.extend(
            script
                .invoke(&[keys.lock(), keys.fence()])
                .arg(token)
                .arg(fence)
                .arg(keys.channel())
                .get_packed_command(),
        );
        // Late nodes run the release right after the acquisition, on the same connection.
        fanout.follow_unanswered(may_hold, &request);
        // Nodes whose connection broke under the acquisition: a fresh one, if it comes in time.
        fanout.reconnect(may_hold);
        let requests: Vec<Option<&[u8]>> = may_hold
            .iter()
            .enumerate()
            .map(|(index, &may)| (may && fanout.is_ready(index)).then_some(request.as_slice()))
            .collect();
        for (index, outcome) in
            fanout.exchange(&requests, 2, Duration::ZERO, "release").into_iter().enumerate()
        {
            if let Some(Err(error)) = outcome {
                // The attempt's hold there, if any, expires with its lease.
                tracing::debug!(node = index, %error, "undoing a failed redlock attempt on a node failed");
            }
        }
    }
}

/// The commands of [`vote_request`].
const VOTE_COMMANDS: usize = 4;

/// One node's vote, as a `MULTI`/`EXEC` transaction of plain commands (a script's set-up costs
/// the node more than the commands): `GET lock` (a grant the same attempt already has there is
/// kept: a request may reach a node twice when a dead connection is retried), `SET lock <value>
/// NX PX <lease>`, `INCR fence` (the node's next fencing number, also on a refusal: tokens skip
/// numbers, never repeat) and `PTTL lock` (a refusal's hint).
pub(super) fn vote_request(keys: &RedisKeys, token: &str, ttl: Duration) -> Vec<u8> {
    let (lock, fence) = (keys.lock().as_bytes(), keys.fence().as_bytes());
    let (ms, start) = transaction::decimal(crate::millis(ttl));
    let mut request = transaction::Packed::with_capacity(192 + 3 * lock.len() + fence.len() + token.len());
    request
        .command(&[b"MULTI"])
        .command(&[b"GET", lock])
        .command(&[b"SET", lock, token.as_bytes(), b"NX", b"PX", &ms[start..]])
        .command(&[b"INCR", fence])
        .command(&[b"PTTL", lock])
        .command(&[b"EXEC"]);
    request.into_bytes()
}

/// A node's vote from its replies to [`vote_request`] for `token`; any error reply (a refused
/// `MULTI`, `EXECABORT`) is the node's failure.
pub(super) fn parse_vote(replies: Vec<Value>, token: &str) -> std::result::Result<Vote, NodeError> {
    let exec = transaction::exec_reply(replies).map_err(|error| NodeError::from_redis("acquire", error))?;
    let (holder, set, fence, remaining_ms): (Option<String>, Option<String>, i64, i64) =
        redis::from_redis_value(exec).map_err(|error| NodeError::reply("acquire", error))?;
    Ok(Vote {
        granted: set.is_some() || holder.as_deref() == Some(token),
        fence: u64::try_from(fence).unwrap_or(0),
        remaining_ms,
    })
}

/// The value one acquisition attempt stores on the nodes: the owner token, a colon, and 64 random
/// bits (16 hex digits) of this attempt.
///
/// Redlock's owner value must be unique per acquisition, not just per owner: a failed attempt is
/// undone by compare-and-delete, and that undo can reach a node late (it is written behind the
/// unanswered acquisition on the same connection). Were the value the same for the owner's next
/// attempt, the late undo would delete that attempt's grant, and the owner would count a quorum
/// it does not have.
pub(super) fn attempt_value(owner: &OwnerToken) -> String {
    format!("{}:{:016x}", owner.to_hex(), rand::rng().random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vote_is_the_transaction_redis_rs_would_pack() {
        let keys = RedisKeys::new("distlock", &LockName::new("orders/{42}").unwrap());
        let token = "0123abcd:00000000000000ff";
        let mut expected = redis::cmd("MULTI").get_packed_command();
        for command in [
            redis::cmd("GET").arg(keys.lock()).to_owned(),
            redis::cmd("SET").arg(keys.lock()).arg(token).arg("NX").arg("PX").arg(30_000u64).to_owned(),
            redis::cmd("INCR").arg(keys.fence()).to_owned(),
            redis::cmd("PTTL").arg(keys.lock()).to_owned(),
        ] {
            expected.extend(command.get_packed_command());
        }
        expected.extend(redis::cmd("EXEC").get_packed_command());
        assert_eq!(vote_request(&keys, token, Duration::from_secs(30)), expected);
        assert_eq!(transaction::replies(VOTE_COMMANDS), 6);
    }
}
