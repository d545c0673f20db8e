//! Semaphores on every kind: the permits table (`schema.rs`), one row per name holding the count
//! and the permits, each a lease with its own expiry on the database clock — the lock table's
//! design, so a crashed holder's permit comes back when its lease runs out. One statement
//! acquires (pruning expired permits, checking the count), extends or releases, each bound to
//! the permit's owner token. A release `NOTIFY`s the semaphores' channel with the name, and each
//! listening client wakes one more of its waiters for it (`listener.rs`), which re-checks; a
//! waiter also re-checks when the earliest permit's lease runs out (an expiry sends nothing) and
//! at least every [`FALLBACK_RECHECK`]. Through transaction pooling, where nothing listens,
//! waiters poll with the client's backoff ([`lock_core::poll_until`]). A re-check that finds no
//! permit free reads the row without locking or writing it, so waiters on a full semaphore cost
//! the server reads, not writes.
//!
//! On the row and advisory kinds too: a session-bound semaphore (N slot keys or rows tried in
//! turn) would need the count kept somewhere that outlives no session and is checked atomically
//! with the grant; the table gives that in one statement, and a permit lease then behaves the way
//! the session kinds' holds do (lost once no renewal succeeded for a whole lease).

use std::time::{Duration, Instant};

use lock_core::{check_lease, poll_until, Acquired, Deadline, Error, LockName, OwnerToken, Request, Result};
use tokio_postgres::types::Type;

use super::connection::Param;
use super::lease::{Hold, PostgresLease};
use super::listener::FALLBACK_RECHECK;
use super::session::unsigned;
use super::table::millis;
use super::PostgresBackend;

/// What one attempt found.
enum Attempted {
    /// Boxed: a lease is large, a refusal small.
    Granted(Box<PostgresLease>),
    /// No permit free; the earliest live permit's lease ends this soon (none held: `None`).
    Refused { frees_in: Option<Duration> },
}

impl Attempted {
    fn granted(self) -> Option<PostgresLease> {
        match self {
            Self::Granted(lease) => Some(*lease),
            Self::Refused { .. } => None,
        }
    }
}

/// Which statement an attempt runs (`schema.rs`).
#[derive(Clone, Copy)]
enum Attempt {
    /// Waits for a releaser's row lock, so a permit freed meanwhile is handed over at once.
    First,
    /// A waiter's poll: refused without a lock or a write while the semaphore looks full.
    Recheck,
}

impl PostgresBackend {
    /// [`Permits::acquire_permit`](lock_core::Permits::acquire_permit).
    pub(crate) fn wait_for_permit(
        &self,
        request: &Request<'_>,
        permits: u32,
    ) -> Result<Option<Acquired<PostgresLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        let count = i32::try_from(permits)
            .map_err(|_| Error::invalid_config(format!("at most {} permits per semaphore", i32::MAX)))?;
        let listener = &self.inner.listener;
        let deadline = match request.deadline {
            Deadline::At(at) => Some(at),
            Deadline::Never => None,
            Deadline::Now => return self.permit_poll(request, count),
        };
        if !listener.wakes() {
            return self.permit_poll(request, count);
        }
        // A first attempt before listening: an uncontended semaphore needs no LISTEN connection.
        let sent_at = Instant::now();
        let (name, owner, ttl) = (request.name, request.owner, request.ttl);
        if let Attempted::Granted(lease) = self.permit_once(name, owner, ttl, count, Attempt::First)? {
            return Ok(Some(Acquired::new(*lease, sent_at)));
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
        // Registered, and LISTEN in force, before the re-check whose refusal the wait answers:
        // a release after it is heard.
        let registration = listener.register_permit(name.as_str());
        let now = Instant::now();
        listener.wait_listening(deadline.map_or(now + FALLBACK_RECHECK, |d| d.min(now + FALLBACK_RECHECK)));
        loop {
            registration.clear();
            let sent_at = Instant::now();
            let frees_in = match self.permit_once(name, owner, ttl, count, Attempt::Recheck)? {
                Attempted::Granted(lease) => {
                    return Ok(Some(Acquired::new(*lease, sent_at).contended_if(true)))
                }
                Attempted::Refused { frees_in } => frees_in,
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            // A released permit is announced; an expired one is not: re-check at its expiry.
            let wait = frees_in.map_or(FALLBACK_RECHECK, |frees_in| frees_in.min(FALLBACK_RECHECK));
            registration.wait(deadline.map_or(now + wait, |deadline| deadline.min(now + wait)));
        }
    }

    /// Waits by polling with the client's backoff (no `LISTEN`), or tries once.
    fn permit_poll(&self, request: &Request<'_>, count: i32) -> Result<Option<Acquired<PostgresLease>>> {
        let mut first = true;
        poll_until(request, |_| {
            let attempt = if std::mem::take(&mut first) { Attempt::First } else { Attempt::Recheck };
            Ok(self.permit_once(request.name, request.owner, request.ttl, count, attempt)?.granted())
        })
    }

    fn permit_once(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        permits: i32,
        attempt: Attempt,
    ) -> Result<Attempted> {
        let connection = self.inner.pool.get()?;
        let token = owner.to_hex();
        let (name_text, token_text, ms) = (name.as_str(), token.as_str(), millis(ttl));
        let params: &[Param<'_>] =
            &[(&name_text, Type::TEXT), (&token_text, Type::TEXT), (&ms, Type::INT8), (&permits, Type::INT4)];
        // The undo of an unanswered acquisition (`undo.rs`): the owner-checked release.
        let undo = || {
            vec![(
                self.inner.tables.permits.release.clone(),
                vec![name_text.to_owned(), token_text.to_owned()],
            )]
        };
        let statements = &self.inner.tables.permits;
        let sql = match attempt {
            Attempt::First => &statements.acquire,
            Attempt::Recheck => &statements.recheck,
        };
        let rows = connection.acquire_rows("acquire a permit", (sql, params), ttl, undo)?;
        // No row: the semaphore has no row yet, so nothing is held.
        let Some(row) = rows.first() else { return Ok(Attempted::Refused { frees_in: None }) };
        if row.get::<_, bool>(1) {
            return Ok(Attempted::Granted(Box::new(PostgresLease::new(
                name,
                unsigned(row.get(0)),
                ttl,
                Hold::Permit { owner: token },
            ))));
        }
        let (held_with, holding) = (row.get::<_, i32>(2), row.get::<_, i32>(3));
        if holding > 0 && held_with != permits {
            return Err(Error::PermitsMismatch {
                name: name.clone(),
                asked: permits.unsigned_abs(),
                held_with: held_with.unsigned_abs(),
            });
        }
        let frees_in = row.get::<_, Option<i64>>(4).map(|ms| Duration::from_millis(ms.max(0).unsigned_abs()));
        Ok(Attempted::Refused { frees_in })
    }

    pub(crate) fn permit_extend(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let connection = self.inner.pool.get()?;
        let (name, owner, ms) = (lease.name.as_str(), owner.as_str(), millis(ttl));
        let extended = !connection
            .rows(
                "extend a permit",
                &self.inner.tables.permits.extend,
                &[(&name, Type::TEXT), (&owner, Type::TEXT), (&ms, Type::INT8)],
            )?
            .is_empty();
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    pub(crate) fn permit_release(&self, lease: &PostgresLease) -> Result<bool> {
        let Hold::Permit { owner } = &lease.hold else { unreachable!("a permit lease") };
        let (name, owner) = (lease.name.as_str(), owner.as_str());
        let sql = self.inner.tables.permits.release.as_str();
        let rows = self.run_release("release a permit", sql, (name, owner), lease.ttl)?;
        Ok(!rows.is_empty())
    }
}

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use std::time::Instant;

    use lock_core::{DistributedLock as _, Permits as _};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::postgres::PostgresLockKind;
    use crate::testkit::PostgresTarget;

    const TTL: Duration = Duration::from_secs(30);

    /// The row's version and lock marks (`xmin`, `xmax`, `ctid`): they change when a statement
    /// writes or locks the row.
    fn row_marks(locks: &PostgresBackend, name: &LockName) -> String {
        // The semaphores' channel is their table's name.
        let table = &locks.inner.tables.permits.channel;
        let sql = format!(
            "SELECT xmin::text || ' ' || xmax::text || ' ' || ctid::text FROM \"{table}\" WHERE name = $1"
        );
        let connection = locks.inner.pool.get().unwrap();
        let name = name.as_str();
        let rows = connection.rows("test", &sql, &[(&name, Type::TEXT)]).unwrap();
        rows[0].get(0)
    }

    /// SEM: a waiter's re-check on a full semaphore neither writes nor locks the permits row, so
    /// waiters cost the server reads; a permit freed is still taken at the next poll.
    #[test]
    fn sem_a_poll_on_a_full_semaphore_writes_nothing() {
        let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
        let name = unique_name("sem-full-poll");
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let owner = OwnerToken::random();
                locks
                    .permit_once(&name, &owner, TTL, 2, Attempt::First)
                    .unwrap()
                    .granted()
                    .expect("a free permit")
            })
            .collect();
        let before = row_marks(&locks, &name);
        let waiter = OwnerToken::random();
        for _ in 0..10 {
            assert!(
                locks.permit_once(&name, &waiter, TTL, 2, Attempt::Recheck).unwrap().granted().is_none(),
                "over-admitted"
            );
        }
        // A poll that asks for another count is refused without a write too, and told why.
        assert!(matches!(
            locks.permit_once(&name, &waiter, TTL, 3, Attempt::Recheck),
            Err(Error::PermitsMismatch { .. })
        ));
        assert_eq!(row_marks(&locks, &name), before, "a refused poll wrote or locked the row");
        let mut holders = holders.into_iter();
        assert!(locks.release(holders.next().unwrap()).unwrap());
        let taken = locks.permit_once(&name, &waiter, TTL, 2, Attempt::Recheck).unwrap().granted();
        assert!(taken.is_some(), "a re-check did not take a freed permit");
    }

    // SEM: a permit waiter is woken by the release's `NOTIFY`, and re-checks at the earliest
    // permit's expiry, not at its poll pace (the backoff here is far longer than either).

    /// Longer than any wait below: a waiter that polls would be seen.
    const BACKOFF: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(3));

    /// Waits for one permit of `name` (of 1) on a thread; returns when it got it.
    fn waiter(locks: &PostgresBackend, name: &LockName) -> std::thread::JoinHandle<Instant> {
        let (locks, name) = (locks.clone(), name.clone());
        std::thread::spawn(move || {
            let owner = OwnerToken::random();
            let request = Request::new(
                &name,
                &owner,
                TTL,
                Deadline::At(Instant::now() + Duration::from_secs(10)),
                BACKOFF,
            );
            let acquired = locks.acquire_permit(&request, 1).unwrap().expect("a permit within 10 s");
            let at = Instant::now();
            locks.release(acquired.lease).unwrap();
            at
        })
    }

    #[test]
    fn sem_a_permit_waiter_is_woken_by_the_release() {
        let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
        let mut hand_offs = Vec::new();
        for _ in 0..3 {
            let name = unique_name("sem-woken");
            let owner = OwnerToken::random();
            let held = locks.permit_once(&name, &owner, TTL, 1, Attempt::First).unwrap().granted().unwrap();
            let waiting = waiter(&locks, &name);
            std::thread::sleep(Duration::from_millis(300));
            assert!(!waiting.is_finished(), "a second permit of one");
            assert!(locks.release(held).unwrap());
            let released = Instant::now();
            hand_offs.push(waiting.join().unwrap().saturating_duration_since(released));
        }
        // Unwoken, the waiter would re-check a second after its last look (700 ms later).
        let woken = hand_offs.iter().filter(|hand_off| **hand_off < Duration::from_millis(200)).count();
        assert!(woken >= 2, "hand-offs {hand_offs:?}: the waiter was not woken by the release");
    }

    #[test]
    fn sem_a_permit_waiter_re_checks_when_the_holder_s_lease_ends() {
        let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
        let name = unique_name("sem-expiry");
        let lease = Duration::from_millis(600);
        let taken = Instant::now();
        // Never released nor renewed: a crashed holder.
        let _crashed = locks
            .permit_once(&name, &OwnerToken::random(), lease, 1, Attempt::First)
            .unwrap()
            .granted()
            .unwrap();
        let acquired_after = waiter(&locks, &name).join().unwrap() - taken;
        // Re-checked at the expiry (the fallback would be a second after the first look).
        assert!(
            acquired_after >= lease && acquired_after < lease + Duration::from_millis(250),
            "the waiter got the crashed holder's permit {acquired_after:?} after it was taken with a {lease:?} lease"
        );
    }
}
