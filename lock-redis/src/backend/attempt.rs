//! One acquisition attempt on the node that serves the lock's keys: the uncontended
//! transaction or the acquire script, what a refusal or an error leaves to undo, and the lease
//! of a grant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, LockName, OwnerToken, Primitive, Result};

use super::lease::LeaseWatch;
use super::uncontended::{self, Uncontended};
use super::{RedisBackend, RedisLease, RedisLockKind, QUEUE_ENTRY_TTL};
use crate::cleanup::{self, Undo};
use crate::connection::PooledConnection;
use crate::error;
use crate::keys::RedisKeys;
use crate::millis;
use crate::topology::Hop;

/// Which request an acquisition attempt sends ([`RedisBackend::attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route<'a> {
    /// A first attempt: a transaction of plain commands where the kind allows (`SetNx`).
    /// `waiting`: whether the caller queues if the queue turns out to decide.
    Uncontended { waiting: bool, until: Option<Instant> },
    /// The acquire script, which consults the wait queue; `waiting` joins it on a refusal.
    Queued { waiting: bool, until: Option<Instant> },
    /// A campaign for an election's lock (the keys are [`RedisKeys::election`]'s): the kind's
    /// acquire script inside the campaign script, which writes the leader record with `value`
    /// in the step that wins, and announces the win (`election.rs`).
    Campaign { waiting: bool, until: Option<Instant>, value: &'a [u8] },
}

impl Route<'_> {
    /// The caller's deadline, if it has one: redirects are not retried past it (see
    /// [`RedisBackend::routed_until`]).
    pub(super) fn until(self) -> Option<Instant> {
        match self {
            Route::Uncontended { until, .. }
            | Route::Queued { until, .. }
            | Route::Campaign { until, .. } => until,
        }
    }

    /// Whether the caller joins the queue on a refusal.
    pub(super) fn waiting(self) -> bool {
        match self {
            Route::Uncontended { waiting, .. }
            | Route::Queued { waiting, .. }
            | Route::Campaign { waiting, .. } => waiting,
        }
    }

    /// The route of the attempt after a refusal: the queued one (a campaign stays a campaign).
    pub(super) fn next(self) -> Self {
        match self {
            Route::Uncontended { waiting, until } => Route::Queued { waiting, until },
            other => other,
        }
    }
}

/// The outcome of one acquisition attempt.
// Unboxed: an attempt lives for one call, and boxing the lease would add an allocation to every
// acquisition.
#[allow(clippy::large_enum_variant)]
pub(super) enum Attempt {
    Acquired(RedisLease),
    /// Someone else holds the lock (or it is another waiter's turn); retry within this long at
    /// the latest (`None`: no bound known).
    Held {
        retry_in: Option<Duration>,
    },
}

impl RedisBackend {
    /// One acquisition attempt, one round trip when uncontended.
    ///
    /// How it goes to the server:
    /// - [`Route::Uncontended`] (`SetNx` only; every other case is [`Route::Queued`]): the plain
    ///   commands `EXISTS queue`, `SET lock <token> NX PX <lease>`, `INCR fence` in one
    ///   `MULTI`/`EXEC` transaction, which costs the server a fraction of a script. A refusal
    ///   costs a fencing number, which is harmless: tokens still increase with every grant.
    ///   Only an uncontended attempt is one round trip; the rest follow the queue:
    ///   - refused, a waiter makes the queued attempt next, which joins the queue: right after
    ///     it subscribed to wake-ups if that is immediate (another waiter of this backend
    ///     already did), else at once, before subscribing, so its place never waits for the
    ///     subscription's round trips;
    ///   - granted while waiters were queued (the lock was free but not the newcomer's: a
    ///     holder's lease ran out under the queue, or a dead head's turn ended), the lock is
    ///     handed back at once, as a release does, and the queued attempt follows: three round
    ///     trips, on a path that needs a holder to have died or lost its lease.
    /// - [`Route::Queued`]: the kind's acquire script. A `waiting` caller joins (or stays in) the
    ///   wait queue when it does not get the lock; a non-waiting one never touches the queue.
    pub(super) fn attempt(
        &self,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        route: Route<'_>,
    ) -> Result<Attempt> {
        self.routed_until(keys, route.until(), |hop| self.attempt_on(hop, name, keys, owner, ttl, route))
    }

    /// [`attempt`](Self::attempt) on one node.
    fn attempt_on(
        &self,
        hop: &Hop,
        name: &LockName,
        keys: &RedisKeys,
        owner: &OwnerToken,
        ttl: Duration,
        route: Route<'_>,
    ) -> Result<Attempt> {
        let token = owner.to_hex();
        let mut connection = hop.connection()?;
        let fence = match route {
            Route::Uncontended { waiting, until } if self.kind() == RedisLockKind::SetNx => {
                let reply = uncontended::acquire(&mut connection, keys, &token, ttl).map_err(|e| {
                    self.undo_failed_attempt(&mut connection, name, keys, &token, ttl, false, e)
                })?;
                match reply {
                    // A waiter whose wake-ups are already subscribed makes its queued attempt
                    // right after subscribing, which is immediate; one that must subscribe first
                    // (round trips) queues now, so its place does not wait for them.
                    Uncontended::Refused
                        if !waiting
                            || self
                                .inner
                                .nodes
                                .hub(hop, &self.inner.prefix)
                                .is_subscribed(keys.channel()) =>
                    {
                        return Ok(Attempt::Held { retry_in: None });
                    }
                    Uncontended::Refused => {}
                    Uncontended::Acquired(fence) => {
                        return self.granted(
                            hop,
                            &mut connection,
                            name,
                            keys,
                            token,
                            fence,
                            (ttl, Primitive::Mutex),
                        )
                    }
                    Uncontended::OutOfTurn(fence) => {
                        let lease = RedisLease::granted(name, keys, token.clone(), fence, ttl);
                        if let Err(e) = self.release_on(&mut connection, &lease) {
                            // The grant is certain: whatever the error, the hold must not stay
                            // in the queue's way for a whole lease.
                            cleanup::release_in_background(
                                self,
                                lease,
                                "handing a lock taken out of turn back failed",
                            );
                            // Detached: a redirect here must not send the attempt again under
                            // the same token, which the clean-up above would then release.
                            let error = error::map("hand a lock taken out of turn to the queue", e);
                            return Err(error::detached(&error));
                        }
                    }
                }
                drop(connection);
                return self.attempt(name, keys, owner, ttl, Route::Queued { waiting, until });
            }
            Route::Uncontended { .. } | Route::Queued { .. } | Route::Campaign { .. } => {
                let waiting = route.waiting();
                let lock_keys = [keys.lock(), keys.fence(), keys.queue(), keys.queue_timeouts()];
                let (script, mut command) = match route {
                    // The campaign script takes the lock's keys and the leader record.
                    Route::Campaign { .. } => {
                        let script = self.campaign_script();
                        let record = keys.leader_record();
                        let [lock, fence, queue, timeouts] = lock_keys;
                        (script, script.invoke(&[lock, fence, queue, timeouts, &record]))
                    }
                    _ => (&self.scripts().acquire, self.scripts().acquire.invoke(&lock_keys)),
                };
                command
                    .arg(&token)
                    .arg(millis(ttl))
                    .arg(if waiting { millis(QUEUE_ENTRY_TTL) } else { 0 })
                    .arg(keys.channel());
                if let Route::Campaign { value, .. } = route {
                    command.arg(value);
                }
                let reply = script.exchange::<i64>(&mut connection, &command).map_err(|e| {
                    self.undo_failed_attempt(&mut connection, name, keys, &token, ttl, waiting, e)
                })?;
                match reply {
                    fence if fence >= 0 => fence,
                    -1 => return Ok(Attempt::Held { retry_in: None }),
                    refusal => {
                        let ms = refusal.unsigned_abs() - 1;
                        return Ok(Attempt::Held { retry_in: Some(Duration::from_millis(ms.max(1))) });
                    }
                }
            }
        };
        let primitive =
            if matches!(route, Route::Campaign { .. }) { Primitive::Leader } else { Primitive::Mutex };
        self.granted(hop, &mut connection, name, keys, token, fence, (ttl, primitive))
    }

    /// An acquisition request under `token` failed with `failure`: undoes what the server may
    /// still do with it — grant the lock (kept for a whole lease by nobody) and, when `joined`,
    /// queue the caller (an entry nobody refreshes, whose turn would hold the lock up) — and
    /// returns the caller's error at once.
    ///
    /// A request that went out and timed out is followed on its own connection by the undo,
    /// which the server runs right after it whenever it catches up (a stalled server runs both
    /// on resuming: the lock is usable again at once, not after the orphan's lease and a turn
    /// per abandoned waiter). Any other failure that may have reached the server leaves the undo
    /// to the clean-up thread (`cleanup.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn undo_failed_attempt(
        &self,
        connection: &mut PooledConnection,
        name: &LockName,
        keys: &RedisKeys,
        token: &str,
        ttl: Duration,
        joined: bool,
        failure: redis::RedisError,
    ) -> Error {
        let error = error::map("acquire", failure);
        let mut undos = vec![(Undo::Release, keys, token)];
        if joined {
            undos.push((Undo::LeaveQueue, keys, token));
        }
        let (request, replies) = cleanup::undo_request(self.scripts(), &undos);
        if connection.follow_unanswered(&request) {
            return error;
        }
        // The server answered, with an error that may come from inside the transaction after
        // its `SET` took the lock (a `WRONGTYPE` fence key someone else wrote): undone on this
        // connection, whose replies are all read — the release compares the token, so it is a
        // no-op when nothing was taken.
        if !error.is_retryable() && connection.exchange(&request, replies).is_ok() {
            return error;
        }
        // The request may have reached the server, and nothing can follow it there.
        let why = "the acquisition's reply did not come";
        cleanup::release_in_background(
            self,
            RedisLease::possible_grant(name, keys, token.to_owned(), ttl),
            why,
        );
        if joined {
            cleanup::leave_queue_in_background(self, keys, token.to_owned(), why);
        }
        error
    }

    /// The lease of a grant, once the replicas have it if the backend waits for them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn granted(
        &self,
        hop: &Hop,
        connection: &mut PooledConnection,
        name: &LockName,
        keys: &RedisKeys,
        token: String,
        fence: i64,
        (ttl, primitive): (Duration, Primitive),
    ) -> Result<Attempt> {
        let mut lease = RedisLease::granted(name, keys, token, fence, ttl).with_primitive(primitive);
        if let Some(wait) = self.inner.replicas {
            self.confirm_replicated(connection, &lease, wait)?;
        }
        if self.inner.nodes.replicated() {
            let signal = self.inner.heartbeat.watch(&hop.node);
            lease.watch = Some(LeaseWatch { signal, node: Arc::clone(&hop.node) });
        }
        Ok(Attempt::Acquired(lease))
    }
}
