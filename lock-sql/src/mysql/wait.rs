//! [`NativeWait`] for the three kinds: lock-table waiters queue in the queue table and sleep
//! until their doorbell rings (a release), the holder's expiry or a one-second re-check; row and
//! advisory waiters queue in the server's lock manager (InnoDB's row-lock queue, `GET_LOCK`'s
//! queue). A timed wait is one statement, which keeps its
//! place in the queue until the deadline (to the microsecond: `GET_LOCK` takes fractions of a
//! second, and `max_statement_time` cuts a row-lock wait); a wait without one re-queues every
//! I/O timeout (at least [`MIN_WAIT_SLICE`]). The socket's read timeout is stretched to each
//! statement's wait plus the I/O timeout, so no wait is cut short or turned into polling by a
//! short I/O timeout.

use std::time::{Duration, Instant};

use lock_core::{check_lease, Acquired, LockName, NativeWait, OwnerToken, Result};

use crate::lock_key::LockKey;

use super::doorbell::{Bell, QueueEntry, FALLBACK_RECHECK, RENEW_EVERY, WAITER_NOTE};
use super::{MySqlBackend, MySqlLease, MySqlLockKind};
use crate::queue_wait::{queued_grant, Wait};
use crate::waiters::Registration;

#[cfg(doc)]
use crate::queue_wait::MIN_WAIT_SLICE;

impl NativeWait for MySqlBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        check_lease(ttl)?;
        self.acquire_key_until(&LockKey::mutex(name), owner, ttl, deadline)
    }
}

impl MySqlBackend {
    /// [`NativeWait::acquire_until`] for a mutex's or an election's key.
    pub(crate) fn acquire_key_until(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        if self.inner.kind == MySqlLockKind::Table {
            return self.table_wait(name, owner, ttl, deadline);
        }
        let mut retried = false;
        loop {
            let wait = Wait::next(deadline, self.inner.pool.io_timeout());
            let granted = match self.inner.kind {
                MySqlLockKind::Row => self.row_acquire(name, ttl, wait)?,
                _ => self.advisory_acquire(name, ttl, wait)?,
            };
            if let Some((lease, grant)) = granted {
                return Ok(Some(queued_grant(lease, grant, retried)));
            }
            retried = true;
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
        }
    }

    fn table_wait(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let doorbell = &self.inner.doorbell;
        // A first attempt that does not queue (one light statement): an uncontended lock, or
        // one that a non-fair caller takes at once, needs no doorbell. But a fair lock whose
        // last release by this client rang a waiter is that waiter's: with the doorbell up,
        // this caller queues at once (its light attempt would be refused), which spares the
        // woken waiter one statement on the lock's row before its own.
        let queue_first = self.inner.fair
            && self.inner.rang.take(name.as_str())
            && doorbell.wait_ready(Instant::now()).is_some()
            && deadline.is_none_or(|deadline| Instant::now() < deadline);
        if !queue_first {
            let sent_at = Instant::now();
            if let Some(lease) = self.table_try(name, owner, ttl)? {
                return Ok(Some(Acquired::new(lease, sent_at)));
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
        }
        let registration = doorbell.register(name.as_str());
        let mut entry = QueueEntry::default();
        let outcome =
            self.table_wait_queued(&registration, (name, owner, ttl), deadline, !queue_first, &mut entry);
        let joined = registration.joined_since();
        let last = registration.finish();
        // Out of the queue once done: a fair lock serves nobody behind an entry whose waiter
        // stopped waiting, until it lapses. A win left the queue in its own transaction (or
        // moved the client to the tail while other threads of it waited), before the lock is
        // returned: its release would otherwise ring this client, the head, and keep a fair
        // lock for it. Out of time, it leaves in the background: the call's time is up. After
        // an error the entry lapses on its own.
        if let Ok(acquired) = &outcome {
            match (acquired.is_some(), entry.bell, entry.left()) {
                // Other threads of this client began waiting after the win left the queue (it
                // may have taken their entry with it): back to the tail for them.
                (true, None, Some(waiter)) if !last => {
                    if let Err(error) = self.table_dequeue(name, waiter, Some(self.waiter_note()), None) {
                        tracing::debug!(%error, "could not queue again; the other waiters queue at their next turn");
                    }
                    // They may have finished meanwhile: then nobody renews the entry.
                    if !self.inner.doorbell.is_waiting(name.as_str()) {
                        self.leave_in_background(name, waiter);
                    }
                }
                // Other threads of this client came and went since the win's attempt: the entry
                // one of them wrote may have outlived its waiter.
                (true, None, Some(waiter)) if joined => self.leave_in_background(name, waiter),
                // Moved to the tail for other threads of this client, which have finished since.
                (true, Some(waiter), _) if !self.inner.doorbell.is_waiting(name.as_str()) => {
                    self.leave_in_background(name, waiter);
                }
                (false, Some(waiter), _) if last => self.leave_in_background(name, waiter),
                _ => {}
            }
        }
        outcome
    }

    /// Takes waiter `waiter` out of `name`'s queue on a short-lived thread: the caller's time is
    /// up, and a failure only leaves an entry that lapses on its own.
    fn leave_in_background(&self, name: &LockKey, waiter: Bell) {
        let backend = self.clone();
        let name = name.clone();
        let spawned = std::thread::Builder::new().name("distlock-leave".into()).spawn(move || {
            if let Err(error) = backend.table_dequeue(&name, waiter, None, None) {
                tracing::debug!(%error, "could not leave the lock's queue; the entry lapses on its own");
            }
        });
        if let Err(error) = spawned {
            tracing::debug!(%error, "could not start a clean-up thread; the entry lapses on its own");
        }
    }

    /// How long a queue entry lives unless renewed.
    pub(super) fn waiter_note(&self) -> Duration {
        WAITER_NOTE + self.inner.pool.io_timeout()
    }

    /// Attempts, queueing after the first refusal (and renewing the entry every
    /// [`RENEW_EVERY`]), then sleeping until the doorbell rings, the holder's lease ends or a
    /// second passes. Without a connected doorbell (it could not connect, or reconnects) the
    /// waiter does not queue and re-checks at the holder's expiry and every second; it queues
    /// as soon as the doorbell is back, under the doorbell's current id. `entry.bell`: the id
    /// this client's entry names, once queued. `refused`: the caller's own first attempt was
    /// refused (every win then waited; else only one after a sleep did).
    fn table_wait_queued(
        &self,
        registration: &Registration<'_>,
        (name, owner, ttl): (&LockKey, &OwnerToken, Duration),
        deadline: Option<Instant>,
        refused: bool,
        entry: &mut QueueEntry,
    ) -> Result<Option<Acquired<MySqlLease>>> {
        let doorbell = &self.inner.doorbell;
        let mut waited = refused;
        // The caller's first attempt was just refused (or would be): queue before the next.
        let mut attempt = false;
        loop {
            let mut remaining = Duration::ZERO;
            if attempt {
                // Wake-ups so far are answered by this attempt.
                registration.clear();
                let sent_at = Instant::now();
                let attempt = match entry.bell {
                    // A win leaves the queue, or moves to its tail while other threads of the
                    // client wait: fair, in the attempt's own transaction (the head is rung to
                    // win); non-fair, in another after a win (a rung waiter often loses to a
                    // caller that came first, and a light attempt costs the server less).
                    Some(bell) => {
                        let requeue = registration.others_waiting().then(|| self.waiter_note());
                        let attempt = if self.inner.fair {
                            self.table_try_queued(name, owner, ttl, bell, requeue)?
                        } else {
                            let attempt = self.table_recheck(name, owner, ttl)?;
                            if attempt.is_ok() {
                                if let Err(error) = self.table_dequeue(name, bell, requeue, None) {
                                    tracing::debug!(%error, "could not leave the lock's queue; the entry lapses on its own");
                                }
                            }
                            attempt
                        };
                        match (&attempt, requeue) {
                            (Ok(_), None) => entry.deleted(),
                            (Ok(_), Some(_)) => entry.written(),
                            (Err(_), _) => {}
                        }
                        attempt
                    }
                    None => self.table_recheck(name, owner, ttl)?,
                };
                remaining = match attempt {
                    Ok(lease) => return Ok(Some(Acquired::new(lease, sent_at).contended_if(waited))),
                    Err(remaining) => remaining,
                };
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return Ok(None);
                }
            }
            // The first time, give the doorbell a moment to connect (its id is what a release
            // rings); later, take it as it is.
            let now = Instant::now();
            let ready_by = if attempt {
                now
            } else {
                deadline.map_or(now + FALLBACK_RECHECK, |d| d.min(now + FALLBACK_RECHECK))
            };
            attempt = true;
            // Join the queue, or renew the entry: a release after this rings the client; one
            // before it left the lock free, which the answer says.
            if let Some(due) = doorbell.entry_due(entry, ready_by, deadline, RENEW_EVERY) {
                match self.table_queue(name, due.bell, due.replaces, self.waiter_note(), deadline)? {
                    // No row yet: the next attempt creates it.
                    None => continue,
                    Some(Ok(left)) if left.is_zero() => continue,
                    Some(Ok(left)) => remaining = left,
                    Some(Err(())) => remaining = Duration::ZERO,
                }
                entry.written();
            }
            let now = Instant::now();
            // The holder's expiry rings nobody: re-check then. A free lock that is the queue
            // head's is announced by its next release.
            let wait = if remaining.is_zero() { FALLBACK_RECHECK } else { remaining.min(FALLBACK_RECHECK) };
            waited = true;
            if registration.wait(deadline.map_or(now + wait, |deadline| deadline.min(now + wait)))
                && !self.inner.fair
            {
                // A non-fair ring is spent on its release: queue again after this attempt if it
                // loses, or no release rings this client again.
                entry.stale();
            }
        }
    }
}

/// The names whose last release by this client rang a waiter (at most [`RANG_NAMES`], the most
/// recent): a fair lock's next acquisition by this client queues at once ([`MySqlBackend`]'s
/// `table_wait`). A hint only: a stale one costs a queue transaction before the win.
#[derive(Debug, Default)]
pub(crate) struct RangNames(parking_lot::Mutex<std::collections::VecDeque<String>>);

/// How many names [`RangNames`] remembers.
const RANG_NAMES: usize = 16;

impl RangNames {
    /// Notes that a release of `name` rang a waiter.
    pub(crate) fn note(&self, name: &str) {
        let mut names = self.0.lock();
        if let Some(index) = names.iter().position(|noted| noted == name) {
            names.remove(index);
        } else if names.len() == RANG_NAMES {
            names.pop_front();
        }
        names.push_back(name.to_owned());
    }

    /// Whether a release of `name` rang a waiter since the last call for it (which forgets it).
    pub(crate) fn take(&self, name: &str) -> bool {
        let mut names = self.0.lock();
        match names.iter().position(|noted| noted == name) {
            Some(index) => names.remove(index).is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rang_names_are_taken_once_and_only_the_most_recent_are_kept() {
        let rang = RangNames::default();
        assert!(!rang.take("a"));
        rang.note("a");
        rang.note("a");
        assert!(rang.take("a"));
        assert!(!rang.take("a"), "taken once");
        for index in 0..RANG_NAMES {
            rang.note(&index.to_string());
        }
        // Noted again: now the most recent, so the next note forgets "1".
        rang.note("0");
        rang.note("new");
        assert!(!rang.take("1"), "the oldest is forgotten");
        assert!(rang.take("0") && rang.take("2") && rang.take("new"));
    }
}
