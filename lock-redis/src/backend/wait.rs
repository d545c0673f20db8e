//! The single-node wait: a fair queue in Redis, woken by the release's pub/sub message (the loop
//! itself is `wait_loop.rs`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use super::{Attempt, RedisBackend, RedisLease, Route};
use crate::cleanup;
use crate::error;
use crate::keys::RedisKeys;
use crate::topology::{Hop, Node};
use crate::wait_loop::{self, Refusal, Waiter};
use crate::waiter::{Registration, Slot, WaitHub};

/// How long a waiter's place in the queue lasts without a refresh. Live waiters refresh it on
/// every re-check (at least every [`FALLBACK_RECHECK`](crate::wait_loop::FALLBACK_RECHECK)), so only a dead waiter's entry lapses,
/// and a dead waiter at the head holds up a free lock for at most this long.
pub(crate) const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(3);

/// How long the head of the wait queue has to take a free lock before its entry lapses (the
/// scripts' `TURN_MS`): a waiter that died holds a free lock up for at most this long. The
/// scripts keep their own copy; a test checks that the two agree.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const TURN: Duration = Duration::from_millis(250);

/// How long a waiter that gave up retries leaving the queue itself (see
/// [`RedisBackend::leave_queue`]).
const LEAVE_QUEUE_RETRIES: Duration = Duration::from_millis(400);

impl RedisBackend {
    /// Takes a waiter that gives up out of the queue: at once when the server answers, else by
    /// the clean-up thread (an entry left behind would get a turn at the next release, and hold
    /// the lock up for it). Redirects are followed for [`LEAVE_QUEUE_RETRIES`] at most: the
    /// caller's deadline has passed, and a slot migration may refuse the request (`TRYAGAIN`)
    /// for longer than the I/O timeout — the clean-up thread waits for it instead.
    fn leave_queue(&self, keys: &RedisKeys, owner: &OwnerToken) {
        let token = owner.to_hex();
        let result = self.routed_until(keys, Some(Instant::now() + LEAVE_QUEUE_RETRIES), |hop| {
            let script = &self.scripts().dequeue;
            let command = script
                .invoke(&[keys.lock(), keys.queue(), keys.queue_timeouts()])
                .arg(&token)
                .arg(keys.channel())
                .to_owned();
            script
                .exchange::<i64>(&mut *hop.connection()?, &command)
                .map_err(|e| error::map("leave the wait queue", e))
        });
        if let Err(error) = result {
            tracing::debug!(%error, "leaving the redis wait queue failed; the clean-up thread retries");
            cleanup::leave_queue_in_background(self, keys, token, "leaving the wait queue failed");
        }
    }

    /// Pokes the subscriber thread of `hub` (on `hop`'s node) so it subscribes to a newly waited
    /// channel at once.
    ///
    /// # Errors
    /// When the server did not answer (a timeout, a broken or refused connection): the caller's
    /// next attempt would only cost another timeout. Other failures (an ACL user without rights
    /// on the control channel) are logged: the subscriber still gets there within its tick.
    pub(super) fn poke_subscriber(&self, hop: &Hop, hub: &WaitHub) -> Result<()> {
        let result = hop.connection().and_then(|mut connection| {
            connection
                .run(|c| redis::cmd("PUBLISH").arg(hub.control_channel()).arg("").query::<i64>(c))
                .map_err(|e| error::map("wake the subscriber", e))
        });
        match result {
            Err(error) if error.is_retryable() => Err(error),
            Err(error) => {
                tracing::debug!(%error, "poking the redis subscriber failed");
                Ok(())
            }
            Ok(_) => Ok(()),
        }
    }
}

/// One waiter's wake-ups: its registration for a lock channel with the hub of the node that
/// serves the lock, which follows the lock's slot to its new primary in a cluster. Every
/// single-node waiter (mutex, read-write lock, semaphore) waits through one, in
/// [`wait_loop`]; so does a leader watch, which owns its keys (it outlives the call that made
/// it) and hears every message.
pub(super) struct Wakeups<'a> {
    backend: &'a RedisBackend,
    keys: Cow<'a, RedisKeys>,
    channel: Cow<'a, str>,
    /// The waiter's owner token, as a release message may name it; empty: every message.
    token: String,
    registration: Option<Registration>,
    /// The node whose hub the registration is with (a cluster's primary for the lock's slot).
    registered_on: Option<Arc<Node>>,
}

impl<'a> Wakeups<'a> {
    /// Wake-ups on `channel` for the waiter `owner` of the lock whose keys are `keys`; nothing is
    /// registered before [`subscribe`](Self::subscribe).
    pub(super) fn new(
        backend: &'a RedisBackend,
        keys: &'a RedisKeys,
        channel: &'a str,
        owner: &OwnerToken,
    ) -> Self {
        let (keys, channel) = (Cow::Borrowed(keys), Cow::Borrowed(channel));
        Self { backend, keys, channel, token: owner.to_hex(), registration: None, registered_on: None }
    }

    /// Wake-ups by every message on the channel of `keys` (a leader watch): releases and
    /// hand-overs whomever they name, and the election's own notices.
    pub(super) fn hearing_all(backend: &'a RedisBackend, keys: RedisKeys) -> Self {
        let channel = Cow::Owned(keys.channel().to_owned());
        let keys = Cow::Owned(keys);
        Self { backend, keys, channel, token: String::new(), registration: None, registered_on: None }
    }

    /// Registers with the hub of `hop`'s node (in place of any earlier registration); returns
    /// whether its subscriber thread needs a poke.
    fn register(&mut self, hop: &Hop) -> bool {
        let hub = self.backend.inner.nodes.hub(hop, &self.backend.inner.prefix);
        let (joined, poke) = if self.token.is_empty() {
            hub.register_slot(&self.channel, Slot::hearing_all())
        } else {
            hub.register(&self.channel, &self.token)
        };
        self.registration = Some(joined);
        self.registered_on = Some(Arc::clone(&hop.node));
        poke
    }

    /// In a cluster, after the lock's slot moved to another primary (its old primary gave up
    /// the shard channel and woke this waiter), waits on the new primary's hub instead. Best
    /// effort: a failed poke leaves the subscription to the subscriber's next tick. Called
    /// after every refusal: a slot that moved is then followed within one re-check.
    pub(super) fn follow_slot(&mut self) {
        let Some(registered) = &self.registered_on else { return };
        let Ok(hop) = self.backend.inner.nodes.hop(&self.keys) else { return };
        if Arc::ptr_eq(&hop.node, registered) {
            return;
        }
        if self.register(&hop) {
            let hub = self.backend.inner.nodes.hub(&hop, &self.backend.inner.prefix);
            if let Err(error) = self.backend.poke_subscriber(&hop, hub) {
                tracing::debug!(%error, "poking the subscriber of the slot's new primary failed");
            }
        }
    }

    /// [`Waiter::subscribe`]: registers on the lock's node and waits for the subscription
    /// until `until`; returns whether it is subscribed.
    ///
    /// # Errors
    /// The node cannot be found, or did not answer the poke (see
    /// [`poke_subscriber`](RedisBackend::poke_subscriber)).
    pub(super) fn subscribe(&mut self, until: Instant) -> Result<bool> {
        let hop = self.backend.inner.nodes.hop(&self.keys)?;
        if self.register(&hop) {
            let hub = self.backend.inner.nodes.hub(&hop, &self.backend.inner.prefix);
            self.backend.poke_subscriber(&hop, hub)?;
        }
        Ok(self.registration.as_ref().is_some_and(|joined| joined.wait_subscribed(until)))
    }

    /// [`Waiter::clear`].
    pub(super) fn clear(&self) {
        if let Some(registration) = &self.registration {
            registration.clear();
        }
    }

    /// [`Waiter::wait`]; returns whether a message woke it.
    pub(super) fn wait(&self, until: Instant) -> bool {
        self.registration.as_ref().is_some_and(|registration| registration.wait(until))
    }
}

/// A waiter on the node that serves a lock: every single-node primitive's (the mutex's queue,
/// the read-write lock's and the semaphore's scripts), differing only in `attempt`. A refusal
/// follows the lock's slot ([`Wakeups::follow_slot`]).
pub(super) struct NodeWaiter<'a, F> {
    pub(super) wakeups: Wakeups<'a>,
    /// One attempt: the lease, or why not.
    pub(super) attempt: F,
}

impl<F: FnMut() -> Result<std::result::Result<RedisLease, Refusal>>> Waiter for NodeWaiter<'_, F> {
    type Lease = RedisLease;

    fn attempt(&mut self) -> Result<std::result::Result<RedisLease, Refusal>> {
        let outcome = (self.attempt)()?;
        if outcome.is_err() {
            self.wakeups.follow_slot();
        }
        Ok(outcome)
    }

    fn subscribe(&mut self, until: Instant) -> Result<()> {
        self.wakeups.subscribe(until).map(drop)
    }

    fn clear(&self) {
        self.wakeups.clear();
    }

    fn wait(&self, until: Instant) {
        let _woken = self.wakeups.wait(until);
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
        // The first attempt is the cheap uncontended one; after a refusal a fair waiter queues,
        // a non-fair one asks the script too (its refusal says when the holder's lease ends)
        // but never joins the queue.
        let first = Route::Uncontended { waiting: self.inner.fair, until: deadline };
        self.wait_for_mutex(name, &self.keys(name), owner, ttl, first)
    }
}

impl RedisBackend {
    /// Waits for the mutex of `keys` (a lock's, or an election's: see `election.rs`) until
    /// `first`'s deadline, making `first` and then its [`Route::next`] attempts, and leaves the
    /// queue if it gives up.
    pub(super) fn wait_for_mutex(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        first: Route<'_>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        let (waiting, deadline) = (first.waiting(), first.until());
        let mut route = first;
        // Whether an answered attempt refused the lock: the waiter may have a place in the queue.
        let mut queued = false;
        let attempt = || {
            let this = route;
            route = route.next();
            Ok(match self.attempt(name, keys, owner, ttl, this)? {
                Attempt::Acquired(lease) => Ok(lease),
                Attempt::Held { retry_in } => {
                    queued |= waiting;
                    Err(Refusal { retry_in, back_off: None })
                }
            })
        };
        let mut waiter = NodeWaiter { wakeups: Wakeups::new(self, keys, keys.channel(), owner), attempt };
        let outcome = wait_loop::wait_until(&mut waiter, deadline);
        drop(waiter);
        match &outcome {
            Ok(Some(_)) => {}
            // The server just failed to answer: asking it again would cost the caller another
            // timeout. The failed attempt undid its own part already (`undo_failed_attempt`);
            // a place an earlier, answered attempt left in the queue is taken out by the
            // clean-up thread (a repeat is harmless), rather than left to lapse and get a turn
            // meanwhile.
            Err(error) if error.is_retryable() => {
                if queued {
                    cleanup::leave_queue_in_background(self, keys, owner.to_hex(), "the wait failed");
                }
            }
            // Gave up, or a non-I/O error: do not keep a place in the queue that holds up
            // everyone behind (one call to a server that just answered).
            _ => self.leave_queue(keys, owner),
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
