//! Semaphores on every kind: the permits table (`schema.rs`): per name a header row with the
//! count and the fence counter, and one row per permit with its expiry on the database clock —
//! the lock table's design, so a crashed holder's permit comes back when its lease runs out. An
//! acquisition is one transaction in one round trip, ordered per name by the header row's lock,
//! that counts the live permits with a locking read; extend and release are one statement each
//! on their permit's row, bound to the permit's owner token — so an acquirer's count waits for a
//! renewal or release in progress and never sees a permit expired that its renewal keeps.
//!
//! Waiters do not poll: after a refused attempt a waiter joins the semaphore's queue in the
//! lock table's queue table (under [`semaphore_queue_key`]: its client's doorbell bell, renewed
//! at its re-checks once [`RENEW_EVERY`] has passed) and sleeps; a release that frees a permit rings the oldest live
//! entry's doorbell (`doorbell.rs`), and that client's longest-waiting thread attempts again. A
//! release rings one waiter, so a win that leaves another permit free rings the next one. A
//! waiter also re-checks on its own when the first live permit's lease runs out (a crashed
//! holder's expiry rings nobody) and at least every [`FALLBACK_RECHECK`] (a ring the server
//! refused, one that fell between two sleeps, one spent on an entry whose client stopped
//! waiting); the client's backoff is not used. A win leaves the queue in the same transaction,
//! or, while other threads of the client still wait, moves the client to the tail there; the
//! last waiter of a client that gives up leaves in the background.
//!
//! The semaphore is not fair: a caller's first attempt does not queue, so a holder that
//! releases and asks again at once usually wins before the waiter its release rang (benchmark
//! W6, in `docs/benchmarks.md`).
//!
//! On the row and advisory kinds too: `GET_LOCK` slots would need the count kept and checked
//! atomically with the grant somewhere no session owns; the table does that in one transaction.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, Deadline, Error, LockName, Request, Result};

use super::doorbell::{Bell, QueueEntry, FALLBACK_RECHECK, RENEW_EVERY};
use super::error::MyFailure;
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;
use crate::lock_key::semaphore_queue_key;
use crate::queue_wait::Checkout;
use crate::waiters::Registration;

/// What one attempt found: a permit, or none (with the time until the first live permit's lease
/// runs out, when one is held).
type Attempt = std::result::Result<MySqlLease, Option<Duration>>;

/// The permits a caller asks for, their owner and the semaphore's queue key, as the statements
/// need them.
struct Ask<'a> {
    name: &'a LockName,
    owner: String,
    ttl: Duration,
    permits: u32,
    /// [`semaphore_queue_key`] as a hex literal.
    key: String,
}

impl MySqlBackend {
    /// [`Permits::acquire_permit`](lock_core::Permits::acquire_permit).
    pub(crate) fn acquire_permit_waiting(
        &self,
        request: &Request<'_>,
        permits: u32,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        if i32::try_from(permits).is_err() {
            return Err(Error::invalid_config(format!("at most {} permits per semaphore", i32::MAX)));
        }
        let key = semaphore_queue_key(request.name);
        let ask = Ask {
            name: request.name,
            owner: hex(request.owner.to_hex().as_bytes()),
            ttl: request.ttl,
            permits,
            key: hex(key.as_bytes()),
        };
        let sent_at = Instant::now();
        let checkout = match request.deadline {
            Deadline::Now => Checkout::Now,
            Deadline::At(at) => Checkout::Wait(Some(at)),
            Deadline::Never => Checkout::Wait(None),
        };
        let first = self.permit_attempt(&ask, None, checkout)?;
        let deadline = match request.deadline {
            Deadline::Now => return Ok(first.ok().map(|lease| Acquired::new(lease, sent_at))),
            Deadline::At(at) => Some(at),
            Deadline::Never => None,
        };
        let expires_in = match first {
            Ok(lease) => return Ok(Some(Acquired::new(lease, sent_at))),
            Err(expires_in) => expires_in,
        };
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
        let registration = self.inner.doorbell.register(&key);
        let mut entry = QueueEntry::default();
        let outcome = self.permit_wait_queued(&registration, &ask, deadline, expires_in, &mut entry);
        let joined = registration.joined_since();
        let last = registration.finish();
        // The client's entry as the client now needs it, in the background (the call's time is
        // up; a failure only leaves an entry that lapses on its own): after the last of the
        // client's waiters stopped (out), and after a win that deleted the entry while another
        // thread started to wait (back in; out again if it has stopped since, as the entry it
        // wrote may have outlived it). A win while others waited moved it to the tail in its
        // own transaction.
        let won = matches!(outcome, Ok(Some(_)));
        let stale = match (entry.bell, entry.left()) {
            (Some(bell), _) if last => Some(bell),
            (None, Some(bell)) if won && (!last || joined) => Some(bell),
            _ => None,
        };
        if let Some(bell) = stale {
            self.sync_entry_in_background(key, ask.key, bell);
        }
        outcome
    }

    /// Attempts, queueing after the first refusal (renewing the entry every [`RENEW_EVERY`]),
    /// then sleeping until the doorbell rings, the first live permit's lease ends or
    /// [`FALLBACK_RECHECK`] passes. Without a connected doorbell the waiter does not queue and
    /// re-checks at those times. `entry.bell`: the bell this client's entry names, once queued
    /// and until a win deletes it.
    fn permit_wait_queued(
        &self,
        registration: &Registration<'_>,
        ask: &Ask<'_>,
        deadline: Option<Instant>,
        mut expires_in: Option<Duration>,
        entry: &mut QueueEntry,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let doorbell = &self.inner.doorbell;
        let mut first = true;
        loop {
            // The first time, give the doorbell a moment to connect (its bell is what a release
            // rings); later, take it as it is.
            let now = Instant::now();
            let ready_by = if first {
                let wait = expires_in.map_or(FALLBACK_RECHECK, |left| left.min(FALLBACK_RECHECK));
                deadline.map_or(now + wait, |d| d.min(now + wait))
            } else {
                now
            };
            first = false;
            let mut joined = false;
            if let Some(due) = doorbell.entry_due(entry, ready_by, deadline, RENEW_EVERY) {
                let sql = self.inner.tables.queue_permit(
                    &ask.key,
                    due.bell.value(),
                    due.replaces.map(Bell::value),
                    self.waiter_note(),
                );
                // Every try a deadlock's victim: not queued this time; re-checks serve.
                if self.in_transaction("join the semaphore's queue", &sql, deadline)?.is_some() {
                    entry.written();
                    joined = due.joining;
                }
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Ok(None);
                }
            }
            // Joined just now: a release before the entry committed rang nobody, so attempt
            // before sleeping. Otherwise sleep first: the caller's last attempt was refused.
            if !joined {
                let now = Instant::now();
                let wait = expires_in.map_or(FALLBACK_RECHECK, |left| left.min(FALLBACK_RECHECK));
                let until = deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
                registration.wait(until);
            }
            // Wake-ups so far are answered by this attempt.
            registration.clear();
            // A win leaves the queue, or moves to its tail while other threads of the client wait.
            let queued =
                entry.bell.map(|bell| (bell, registration.others_waiting().then(|| self.waiter_note())));
            let sent_at = Instant::now();
            expires_in = match self.permit_attempt(ask, queued, Checkout::Wait(deadline))? {
                Ok(lease) => {
                    match queued {
                        Some((_, None)) => entry.deleted(),
                        Some((_, Some(_))) => entry.written(),
                        None => {}
                    }
                    return Ok(Some(Acquired::new(lease, sent_at).contended_if(true)));
                }
                Err(expires_in) => expires_in,
            };
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
        }
    }

    /// Makes the client's entry under `key` (`hex_key` as a literal; `bell`: the bell it was
    /// written under) what the client needs when the job runs: at the tail under the doorbell's
    /// current bell while a thread of the client waits for the semaphore, else none. The
    /// client's jobs run one at a time (`Doorbell::entry_updates`), each deciding at its turn.
    fn sync_entry_in_background(&self, key: String, hex_key: String, bell: Bell) {
        let backend = self.clone();
        let spawned = std::thread::Builder::new().name("distlock-queue".into()).spawn(move || {
            let doorbell = &backend.inner.doorbell;
            let _turn = doorbell.entry_updates.lock();
            let current = doorbell.wait_ready(Instant::now());
            let keep = doorbell.is_waiting(&key).then(|| backend.waiter_note());
            let sql = backend.inner.tables.sync_permit_entry(
                &hex_key,
                bell.value(),
                current.map(Bell::value),
                keep,
            );
            if let Err(error) = backend.in_transaction("update the semaphore's queue", &sql, None) {
                tracing::debug!(%error, "could not update the semaphore's queue; its entries lapse on their own");
            }
        });
        if let Err(error) = spawned {
            tracing::debug!(%error, "could not start a clean-up thread; the entry lapses on its own");
        }
    }

    /// One attempt; `queued`: this client's queue entry, which a win deletes (or, with the
    /// entry's life, moves to the tail); `checkout`: how long to wait for a pooled connection.
    fn permit_attempt(
        &self,
        ask: &Ask<'_>,
        queued: Option<(Bell, Option<Duration>)>,
        checkout: Checkout,
    ) -> Result<Attempt> {
        let mut connection = self.inner.pool.get_for(checkout)?;
        let hex_name = hex(ask.name.as_str().as_bytes());
        let sql = self.inner.tables.acquire_permit(
            &hex_name,
            &ask.owner,
            (ask.permits, ask.ttl),
            &ask.key,
            queued.map(|(bell, to_tail)| (bell.value(), to_tail)),
        );
        let release = (self.inner.tables.release_permit(&hex_name, &ask.owner, &ask.key), ask.ttl);
        let Some(results) = self.run_acquisition(&mut connection, "acquire a permit", &sql, release)? else {
            // Refused by InnoDB: contention; a waiter tries again after a short pause, not at its
            // next ring.
            return Ok(Err(Some(Duration::from_millis(rand::random_range(1..=10)))));
        };
        // The only statement that returns rows (the fence is read inside the transaction).
        let row = results.first_row().ok_or_else(|| {
            Error::from(MyFailure::Reply { operation: "acquire a permit", detail: "no row".into() })
        })?;
        let value = |index: usize| row.get::<Option<i64>, _>(index).flatten();
        if value(0) == Some(1) {
            // Another permit is free: the next waiter is rung too.
            if let Some(next) = row.get::<Option<u64>, _>(5).flatten() {
                self.inner.doorbell.ring(Bell::from_value(next));
            }
            let fence = u64::try_from(value(1).unwrap_or(0)).unwrap_or(0);
            return Ok(Ok(MySqlLease::new(
                ask.name,
                fence,
                ask.ttl,
                Hold::Permit { owner: ask.owner.clone() },
            )));
        }
        let (held_with, holding) = (value(2).unwrap_or(0), value(3).unwrap_or(0));
        if holding > 0 && held_with != i64::from(ask.permits) {
            return Err(Error::PermitsMismatch {
                name: ask.name.clone(),
                asked: ask.permits,
                held_with: u32::try_from(held_with).unwrap_or(0),
            });
        }
        Ok(Err(value(4).map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(1)))))
    }

    pub(crate) fn permit_extend(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.extend_permit(&hex(lease.name.as_str().as_bytes()), owner, ttl);
        let extended = connection.run("extend a permit", &sql)?.affected(0) == 1;
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    pub(crate) fn permit_release(&self, lease: &MySqlLease) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let key = hex(semaphore_queue_key(&lease.name).as_bytes());
        let sql = self.inner.tables.release_permit(&hex(lease.name.as_str().as_bytes()), owner, &key);
        Ok(self.run_release("release a permit", sql, lease.ttl)?.affected(0) == 1)
    }
}

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use std::time::{Duration, Instant};

    use lock_core::{Deadline, OwnerToken, Permits as _, Request};
    use lock_testkit::suite::unique_name;

    use super::*;
    use crate::mysql::MySqlLockKind;
    use crate::testkit::MySqlTarget;

    const TTL: Duration = Duration::from_secs(10);
    const TABLE: &str = "distlock_sem_wait";

    fn backend() -> MySqlBackend {
        let kind = MySqlLockKind::Row;
        let backend = MySqlBackend::builder(MySqlTarget::new(kind).url())
            .kind(kind)
            .restart_delay(false)
            .table(TABLE)
            .connect_timeout(Duration::from_secs(2))
            .io_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        backend.ensure_schema().unwrap();
        backend
    }

    /// The semaphore queue's entries for `name`.
    fn queued(backend: &MySqlBackend, name: &LockName) -> u64 {
        let key = hex(semaphore_queue_key(name).as_bytes());
        let sql = format!("SELECT COUNT(*) FROM `{TABLE}_queue` WHERE name = {key}");
        backend.inner.pool.get().unwrap().run("count", &sql).unwrap().last_value().unwrap()
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A doorbell that reconnected renames its client's entry to its new bell; when another
    /// thread of the client already queued under the new bell, the old entry goes instead of the
    /// rename failing on the duplicate key (seen as `ERROR 1062` under load).
    #[test]
    fn sem_a_renamed_entry_meets_the_new_bell_s_own() {
        let backend = backend();
        let name = unique_name("sem-rename");
        let key = hex(semaphore_queue_key(&name).as_bytes());
        let note = Duration::from_secs(5);
        let queue = |waiter, replaces| {
            let sql = backend.inner.tables.queue_permit(&key, waiter, replaces, note);
            backend.in_transaction("queue", &sql, None)
        };
        queue(1, None).unwrap().expect("queued under the old bell");
        queue(2, None).unwrap().expect("queued under the new bell");
        queue(2, Some(1)).expect("the rename meets the new bell's entry").expect("queued");
        assert_eq!(queued(&backend, &name), 1, "one entry, the new bell's");
    }

    /// How long after the releases of `waiters` permits (of as many) started the same number of
    /// queued waiters, each on a client of its own, all had theirs, and how long the releases
    /// took. Each release rings one waiter once it has committed.
    fn wake_up_after_release(backend: &MySqlBackend, waiters: usize) -> (Duration, Duration) {
        let name = unique_name("sem-ring");
        let permits = u32::try_from(waiters).unwrap();
        let ask = |backend: &MySqlBackend, owner: &OwnerToken, deadline| {
            let request = Request::new(&name, owner, TTL, deadline, (TTL, TTL));
            backend.acquire_permit(&request, permits)
        };
        let held: Vec<_> = (0..waiters)
            .map(|_| ask(backend, &OwnerToken::random(), Deadline::Now).unwrap().expect("free").lease)
            .collect();
        let clients: Vec<_> = (0..waiters).map(|_| self::backend()).collect();
        std::thread::scope(|scope| {
            let threads: Vec<_> = clients
                .iter()
                .map(|client| {
                    scope.spawn(|| {
                        let won =
                            ask(client, &OwnerToken::random(), Deadline::At(Instant::now() + TTL)).unwrap();
                        (won.expect("the waiter's deadline is the lease"), Instant::now())
                    })
                })
                .collect();
            wait_for("the waiters queue", || queued(backend, &name) == waiters as u64);
            // Their attempts after queueing (a round trip each) are refused meanwhile, and they
            // sleep. (Were a release to come first, an attempt would win: a pass, not a failure.)
            std::thread::sleep(FALLBACK_RECHECK / 5);
            let releasing_at = Instant::now();
            for lease in &held {
                assert!(backend.permit_release(lease).unwrap());
            }
            let released_at = Instant::now();
            let wins: Vec<_> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
            assert_eq!(queued(backend, &name), 0, "the winners left the queue");
            for (won, _) in &wins {
                assert!(backend.permit_release(&won.lease).unwrap());
            }
            let after = wins.iter().map(|(_, at)| *at - releasing_at).max().unwrap();
            (after, released_at - releasing_at)
        })
    }

    /// The best of two rounds of [`wake_up_after_release`] whose releases the server answered
    /// promptly (a ring lost on a loaded machine is a slow hand-off, not a fault), out of at most
    /// six: a release the server was slow to answer delays the ring as much, and may outlast the
    /// waiter's own re-check, so its round shows nothing either way.
    fn best_wake_up(backend: &MySqlBackend, waiters: usize) -> Duration {
        let (mut rounds, mut prompt) = (Vec::new(), Vec::new());
        while prompt.len() < 2 {
            assert!(
                rounds.len() < 6,
                "the releases were slow in {} rounds: {rounds:?}",
                rounds.len() - prompt.len()
            );
            let (after, took) = wake_up_after_release(backend, waiters);
            rounds.push((after, took));
            if took < FALLBACK_RECHECK / 4 {
                prompt.push(after);
            }
        }
        prompt.into_iter().min().unwrap()
    }

    /// SEM: a waiter does not poll: it queues, and the release of a permit rings it. It wins
    /// well before its own re-check ([`FALLBACK_RECHECK`]; the holder's lease is longer), which
    /// only the ring explains. Its win takes it out of the queue. (The best of two rounds:
    /// [`best_wake_up`].)
    #[test]
    fn sem_a_released_permit_rings_the_queued_waiter() {
        let backend = backend();
        let after = best_wake_up(&backend, 1);
        assert!(after < FALLBACK_RECHECK / 2, "won {after:?} after the release: not rung");
    }

    /// SEM: two permits released together ring the head of the queue twice over (one release,
    /// one ring, and the head stays the head until its win commits); its win, finding the other
    /// permit free, rings the next waiter, which does not wait for its own re-check.
    #[test]
    fn sem_a_win_that_leaves_a_permit_free_rings_the_next_waiter() {
        let backend = backend();
        let after = best_wake_up(&backend, 2);
        assert!(after < FALLBACK_RECHECK / 2, "the last waiter won {after:?} after the releases: not rung");
    }

    /// SEM: two threads of one client wait: the first to win keeps the client queued (the
    /// other still waits), and the last one out takes the entry away.
    #[test]
    fn sem_a_client_stays_queued_while_one_of_its_threads_waits() {
        let backend = backend();
        let name = unique_name("sem-threads");
        let ask = |owner: &OwnerToken, deadline| {
            backend.acquire_permit(&Request::new(&name, owner, TTL, deadline, (TTL, TTL)), 1)
        };
        let held = ask(&OwnerToken::random(), Deadline::Now).unwrap().expect("free").lease;
        std::thread::scope(|scope| {
            let (won, wins) = std::sync::mpsc::channel();
            for _ in 0..2 {
                let won = won.clone();
                let ask = &ask;
                scope.spawn(move || {
                    let lease = ask(&OwnerToken::random(), Deadline::At(Instant::now() + TTL)).unwrap();
                    won.send(lease.expect("the waiter's deadline is the lease").lease).unwrap();
                });
            }
            wait_for("the client queues", || queued(&backend, &name) == 1);
            assert!(backend.permit_release(&held).unwrap());
            let first = wins.recv().unwrap();
            // The other thread still waits: the entry stays (moved to the tail).
            std::thread::sleep(FALLBACK_RECHECK / 5);
            assert_eq!(queued(&backend, &name), 1, "the client left the queue while a thread waits");
            assert!(backend.permit_release(&first).unwrap());
            let second = wins.recv().unwrap();
            wait_for("the last thread out leaves", || queued(&backend, &name) == 0);
            assert!(backend.permit_release(&second).unwrap());
        });
    }

    /// SEM: a waiter that gives up leaves the queue.
    #[test]
    fn sem_a_waiter_that_gives_up_leaves_the_queue() {
        let backend = backend();
        let name = unique_name("sem-leave");
        let holder = OwnerToken::random();
        let request = Request::new(&name, &holder, TTL, Deadline::Now, (TTL, TTL));
        let held = backend.acquire_permit(&request, 1).unwrap().expect("free").lease;
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let owner = OwnerToken::random();
                let deadline = Deadline::At(Instant::now() + Duration::from_secs(5));
                backend.acquire_permit(&Request::new(&name, &owner, TTL, deadline, (TTL, TTL)), 1).unwrap()
            });
            wait_for("the waiter queues", || queued(&backend, &name) == 1);
            assert!(waiter.join().unwrap().is_none(), "the permit is held");
        });
        wait_for("the waiter leaves", || queued(&backend, &name) == 0);
        assert!(backend.permit_release(&held).unwrap());
    }
}
