//! The single-node wait: a fair queue in Redis, woken by the release's pub/sub message.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::{Attempt, RedisBackend, RedisLease};
use crate::error;
use crate::keys::RedisKeys;
use crate::lua;
use crate::waiter::Registration;

/// The longest a waiter waits for a release message before it re-checks on its own.
///
/// Release messages are fire-and-forget, so this bounds the delay a lost one can cause. It is
/// deliberately not shorter: a hand-off must come from the message, and polling faster would only
/// load the server (conformance scenario S11 checks hand-offs are faster than this).
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// How long a waiter's place in the queue lasts without a refresh. Live waiters refresh it on
/// every re-check (at least every [`FALLBACK_RECHECK`]), so only a dead waiter's entry lapses,
/// and a dead waiter at the head holds up a free lock for at most this long.
pub(crate) const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(3);

/// How long the head of the wait queue has to take a free lock before its entry lapses (the
/// scripts' `TURN_MS`): a waiter that died holds a free lock up for at most this long. The
/// scripts keep their own copy; a test checks that the two agree.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const TURN: Duration = Duration::from_millis(250);

impl RedisBackend {
    /// Takes a waiter that gives up out of the queue (best effort: its entry lapses anyway).
    fn leave_queue(&self, keys: &RedisKeys, owner: &OwnerToken) {
        let result = self.connection().and_then(|mut connection| {
            connection
                .run(|c| {
                    lua::dequeue()
                        .key(keys.lock())
                        .key(keys.queue())
                        .key(keys.queue_timeouts())
                        .arg(owner.to_hex())
                        .arg(keys.channel())
                        .invoke::<i64>(c)
                })
                .map_err(|e| error::map("leave the wait queue", e))
        });
        if let Err(error) = result {
            tracing::debug!(%error, "leaving the redis wait queue failed; the entry will lapse");
        }
    }

    /// Pokes the subscriber thread so it subscribes to a newly waited channel at once.
    fn poke_subscriber(&self) {
        let result = self.connection().and_then(|mut connection| {
            connection
                .run(|c| redis::cmd("PUBLISH").arg(self.inner.hub.control_channel()).arg("").query::<i64>(c))
                .map_err(|e| error::map("wake the subscriber", e))
        });
        if let Err(error) = result {
            // The subscriber still gets there within its tick; waiters re-check meanwhile.
            tracing::debug!(%error, "poking the redis subscriber failed");
        }
    }

    /// The waiting loop of [`NativeWait::acquire_until`]; leaves the queue to the caller.
    fn wait_loop(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        let mut registration: Option<Registration<'_>> = None;
        loop {
            if let Some(waiting) = &registration {
                // Wake-ups so far are answered by what this attempt sees.
                waiting.clear();
            }
            let sent_at = Instant::now();
            let retry_in = match self.attempt(name, keys, owner, ttl, true)? {
                Attempt::Acquired(lease) => return Ok(Some(Acquired::new(lease, sent_at))),
                Attempt::Held { retry_in } => retry_in,
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let bound = |wait: Duration| deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
            match &registration {
                None => {
                    // Subscribe first, then re-check: a release between the failed attempt and
                    // the subscription would otherwise be missed.
                    let (joined, poke) = self.inner.hub.register(keys.channel(), &owner.to_hex());
                    if poke {
                        self.poke_subscriber();
                    }
                    joined.wait_subscribed(bound(FALLBACK_RECHECK));
                    registration = Some(joined);
                }
                Some(waiting) => {
                    let wait = retry_in.map_or(FALLBACK_RECHECK, |hint| hint.min(FALLBACK_RECHECK));
                    waiting.wait(bound(wait));
                }
            }
        }
    }
}

impl NativeWait for RedisBackend {
    /// Waits in the lock's queue: woken by the release message meant for this waiter, re-checking
    /// on its own after at most the lock's remaining lease or one second.
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        check_lease(ttl)?;
        let keys = self.keys(name);
        let outcome = self.wait_loop(name, &keys, owner, ttl, deadline);
        match &outcome {
            Ok(Some(_)) => {}
            // The server just failed to answer: asking it again would cost the caller another
            // timeout. The queue entry lapses on its own (QUEUE_ENTRY_TTL).
            Err(error) if error.is_retryable() => {}
            // Gave up, or a non-I/O error: do not keep a place in the queue that holds up
            // everyone behind (one call to a server that just answered).
            _ => self.leave_queue(&keys, owner),
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::TURN;

    #[test]
    fn the_scripts_turn_is_the_documented_one() {
        let line = format!("local TURN_MS = {}", crate::millis(TURN));
        assert!(crate::lua::QUEUE.contains(&line), "queue.lua does not say `{line}`");
    }
}
