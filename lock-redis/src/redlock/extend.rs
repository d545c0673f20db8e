//! Extending and releasing on every node: each counts only if a quorum confirmed it.

use std::time::{Duration, Instant};

use lock_core::{Error, Extension, Result};
use redis::Value;

use super::scripts;
use super::tally::{NodeError, Tally, BACKEND};
use super::PER_COMMAND;
use super::{RedlockBackend, RedlockLease};
use crate::millis;

impl RedlockBackend {
    /// Extends on every node; `Ok(true)` only if a quorum confirmed in time.
    pub(super) fn extend_one(&self, lease: &mut RedlockLease, ttl: Duration) -> Result<bool> {
        Self::check_ttl(ttl)?;
        let started = Instant::now();
        let mut fanout = self.fanout();
        let script = scripts::extend();
        let request = script
            .invoke(&[lease.keys.lock(), lease.keys.fence()])
            .arg(&lease.token)
            .arg(millis(ttl))
            .arg(lease.fence.get())
            .get_packed_command();
        let mut tally = self.tally();
        for (index, reply) in self.run_script(&mut fanout, script, &request, "extend").into_iter().enumerate()
        {
            count_flag(&mut tally, index, reply, "extend");
        }
        let outcome = Self::conclude_extension(lease, ttl, started, &tally);
        self.extension_result(outcome, &tally)
    }

    /// Extends every lease of the batch with ONE pipeline per node (`SCRIPT LOAD` first, so a
    /// node that forgot the script mid-way cannot fail the batch), all nodes at once.
    pub(super) fn extend_batch(&self, batch: &mut [Extension<'_, RedlockLease>]) -> Vec<Result<bool>> {
        let mut results: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| Self::check_ttl(item.ttl).err().map(Err)).collect();
        let valid: Vec<usize> = (0..batch.len()).filter(|&index| results[index].is_none()).collect();
        if valid.is_empty() {
            return results.into_iter().map(|result| result.unwrap_or(Ok(false))).collect();
        }
        let started = Instant::now();
        let script = scripts::extend();
        let mut request = script.load();
        for &index in &valid {
            let item = &batch[index];
            request.extend(
                script
                    .invoke(&[item.lease.keys.lock(), item.lease.keys.fence()])
                    .arg(&item.lease.token)
                    .arg(millis(item.ttl))
                    .arg(item.lease.fence.get())
                    .get_packed_command(),
            );
        }
        let mut fanout = self.fanout();
        let everyone = vec![Some(request.as_slice()); self.inner.nodes.len()];
        let extra = PER_COMMAND * u32::try_from(valid.len()).unwrap_or(u32::MAX);
        let replies = fanout.exchange(&everyone, 1 + valid.len(), extra, "extend");
        drop(fanout);
        let mut tallies: Vec<Tally> = valid.iter().map(|_| self.tally()).collect();
        for (node, reply) in replies.into_iter().enumerate() {
            match reply.unwrap_or_else(|| Err(NodeError::unanswered())) {
                Ok(values) => {
                    // The first reply is SCRIPT LOAD's.
                    for (tally, value) in tallies.iter_mut().zip(values.into_iter().skip(1)) {
                        let value =
                            value.extract_error().map_err(|error| NodeError::from_redis("extend", error));
                        count_flag(tally, node, value, "extend");
                    }
                }
                Err(error) => tallies.iter_mut().for_each(|tally| tally.fail(node, error.clone())),
            }
        }
        for (&index, tally) in valid.iter().zip(&tallies) {
            let ttl = batch[index].ttl;
            let outcome = Self::conclude_extension(batch[index].lease, ttl, started, tally);
            results[index] = Some(self.extension_result(outcome, tally));
        }
        results.into_iter().map(|result| result.unwrap_or(Ok(false))).collect()
    }

    /// Releases on every node; `Ok(true)` if a quorum still held the lock for this lease.
    pub(super) fn release_lease(&self, lease: RedlockLease) -> Result<bool> {
        let mut fanout = self.fanout();
        let script = scripts::release();
        let request = script
            .invoke(&[lease.keys.lock(), lease.keys.fence()])
            .arg(&lease.token)
            .arg(lease.fence.get())
            .arg(lease.keys.channel())
            .get_packed_command();
        let mut tally = self.tally();
        for (index, reply) in
            self.run_script(&mut fanout, script, &request, "release").into_iter().enumerate()
        {
            count_flag(&mut tally, index, reply, "release");
        }
        if tally.confirmed_by_quorum() {
            Ok(true)
        } else if tally.answered_by_quorum() {
            Ok(false)
        } else {
            // The holds the unreachable nodes may still have expire with their lease.
            Err(self.failure(&tally, "release"))
        }
    }

    /// Concludes an extension from the nodes' answers.
    fn conclude_extension(
        lease: &mut RedlockLease,
        ttl: Duration,
        started: Instant,
        tally: &Tally,
    ) -> Outcome {
        let elapsed = started.elapsed();
        let drift = Self::clock_drift(ttl);
        let validity = ttl.checked_sub(elapsed + drift).filter(|validity| !validity.is_zero());
        match (tally.confirmed_by_quorum(), validity) {
            (true, Some(validity)) => {
                lease.lease = ttl;
                lease.elapsed = elapsed;
                lease.validity = validity;
                lease.valid_until = started + (ttl - drift);
                Outcome::Confirmed
            }
            (true, None) => Outcome::TooSlow { elapsed, ttl, drift },
            (false, _) if tally.answered_by_quorum() => Outcome::Denied,
            (false, _) => Outcome::NoQuorum,
        }
    }

    fn extension_result(&self, outcome: Outcome, tally: &Tally) -> Result<bool> {
        match outcome {
            Outcome::Confirmed => Ok(true),
            Outcome::Denied => Ok(false),
            Outcome::TooSlow { elapsed, ttl, drift } => Err(Error::Timeout {
                backend: BACKEND,
                operation: "extend",
                source: Some(
                    format!("a quorum confirmed after {elapsed:?}, leaving nothing of a {ttl:?} lease after the {drift:?} drift allowance").into(),
                ),
            }),
            Outcome::NoQuorum => Err(self.failure(tally, "extend")),
        }
    }
}

/// How an extension ended, before it is turned into the caller's result.
enum Outcome {
    Confirmed,
    Denied,
    TooSlow { elapsed: Duration, ttl: Duration, drift: Duration },
    NoQuorum,
}

/// Counts a 1/0 script reply (extended or not, released or not) into `tally`.
fn count_flag(
    tally: &mut Tally,
    node: usize,
    reply: std::result::Result<Value, NodeError>,
    operation: &'static str,
) {
    match reply {
        Ok(Value::Int(1)) => tally.confirm(),
        Ok(Value::Int(0)) => tally.deny(),
        Ok(other) => tally.fail(node, NodeError::reply(operation, other)),
        Err(error) => tally.fail(node, error),
    }
}
