//! The lock-table kind: acquire, fencing and expiry in one `INSERT … ON DUPLICATE KEY UPDATE`
//! on the database clock; extend and release compare the owner in the same statement; a
//! release marks the row free and rings the oldest waiter's doorbell (`doorbell.rs`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lock_core::{Extension, LockName, OwnerToken, Result};

use crate::lock_key::{semaphore_queue_prefix, LockKey};

use super::doorbell::Bell;
use super::error::MyFailure;
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;

/// Leases per renewal statement: keeps one statement well under `max_allowed_packet`.
const BATCH: usize = 2_000;

/// How often a queue transaction chosen as a deadlock's victim is tried again (within the
/// caller's deadline): under heavy contention on neighbouring names InnoDB may pick the same
/// victim a few times in a row.
const DEADLOCK_RETRIES: u32 = 20;

/// The longest pause before retrying a deadlock's victim; each retry waits a random part of
/// `retry × 2 ms` up to this, so two victims do not collide again in step.
const MAX_DEADLOCK_PAUSE: Duration = Duration::from_millis(50);

impl MySqlBackend {
    pub(crate) fn table_try(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<MySqlLease>> {
        Ok(self.attempt(name, owner, ttl, false)?.ok())
    }

    /// A waiter's attempt that leaves its queue entry, if any, alone. Refused: the holder's
    /// remaining lease (zero: free, but the queue head's turn).
    pub(crate) fn table_recheck(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<std::result::Result<MySqlLease, Duration>> {
        self.attempt(name, owner, ttl, true)
    }

    /// A fair lock's queued waiter's attempt (`waiter`: its doorbell's bell, which lets it take
    /// the lock at the head of the queue), which leaves the queue when it wins (or moves to its
    /// tail: `requeue`, the entry's life, when other threads of this client still wait).
    /// Refused: the holder's remaining lease (zero: free, but the queue head's turn; a few ms
    /// when InnoDB gave the transaction up, a deadlock's victim or out of lock-wait time).
    pub(crate) fn table_try_queued(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        waiter: Bell,
        requeue: Option<Duration>,
    ) -> Result<std::result::Result<MySqlLease, Duration>> {
        let mut connection = self.inner.pool.get()?;
        let owner = hex(owner.to_hex().as_bytes());
        let hex_name = hex(name.as_str().as_bytes());
        let sql = self.inner.tables.acquire_queued(&hex_name, &owner, ttl, waiter.value(), requeue);
        let release = (self.inner.tables.release(&hex_name, &owner), ttl);
        let Some(results) = self.run_acquisition(&mut connection, "acquire", &sql, release)? else {
            // Contention: the waiter tries again after a short pause.
            return Ok(Err(Duration::from_millis(rand::random_range(1..=10))));
        };
        let row = results
            .sets
            .last()
            .and_then(|set| set.1.first())
            .ok_or_else(|| MyFailure::Reply { operation: "acquire", detail: "no row".into() })?;
        let value = |index: usize| row.get::<Option<i64>, _>(index).flatten();
        if value(0) != Some(1) {
            return Ok(Err(Duration::from_millis(value(2).map_or(0, |ms| u64::try_from(ms).unwrap_or(0)))));
        }
        let fence = value(1)
            .and_then(|fence| u64::try_from(fence).ok())
            .ok_or_else(|| MyFailure::Reply { operation: "acquire", detail: "no fence".into() })?;
        Ok(Ok(MySqlLease::keyed(name, fence, ttl, Hold::Table { owner })))
    }

    fn attempt(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        with_remaining: bool,
    ) -> Result<std::result::Result<MySqlLease, Duration>> {
        let mut connection = self.inner.pool.get()?;
        let owner = hex(owner.to_hex().as_bytes());
        let hex_name = hex(name.as_str().as_bytes());
        let sql = self.inner.tables.acquire(&hex_name, &owner, ttl, with_remaining);
        let results = connection.run("acquire", &sql).inspect_err(|_| {
            let release = self.inner.tables.release(&hex_name, &owner);
            self.undo_unanswered(&mut connection, ttl, release);
        })?;
        // The insert's affected rows (the statement before the last, which reads the fence): 0,
        // the row is someone else's and nothing changed — contention, not an error. 1: inserted;
        // 2: taken over (expired) or re-entered.
        if results.affected(results.sets.len().saturating_sub(2)) == 0 {
            let remaining: Option<i64> = results
                .sets
                .last()
                .and_then(|set| set.1.first())
                .and_then(|row| row.get::<Option<i64>, _>(1).flatten());
            return Ok(Err(Duration::from_millis(remaining.map_or(0, |ms| u64::try_from(ms).unwrap_or(0)))));
        }
        let fence: u64 = results
            .last_value()
            .ok_or_else(|| MyFailure::Reply { operation: "acquire", detail: "no fence".into() })?;
        Ok(Ok(MySqlLease::keyed(name, fence, ttl, Hold::Table { owner })))
    }

    pub(crate) fn table_extend(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.extend(&hex(lease.lock_key().as_str().as_bytes()), owner, ttl);
        let extended = connection.run("extend", &sql)?.affected(0) == 1;
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    /// One round trip per [`BATCH`] lock-table leases, and one per [`BATCH`] permits (the
    /// permits table's rows, renewed the same way). After a failure that says the server is
    /// not answering, the rest of the batch fails with it rather than wait again.
    pub(crate) fn table_extend_many(&self, batch: &mut [Extension<'_, MySqlLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| lock_core::check_lease(item.ttl).err().map(Err)).collect();
        let mut stalled: Option<String> = None;
        for permits in [false, true] {
            let valid: Vec<usize> = (0..batch.len())
                .filter(|&index| {
                    outcomes[index].is_none() && row_owner(&batch[index].lease.hold, permits).is_some()
                })
                .collect();
            for chunk in valid.chunks(BATCH) {
                let mut items: Vec<(String, String, Duration)> = chunk
                    .iter()
                    .filter_map(|&index| {
                        let item = &batch[index];
                        let owner = row_owner(&item.lease.hold, permits)?;
                        Some((hex(item.lease.lock_key().as_str().as_bytes()), owner.to_owned(), item.ttl))
                    })
                    .collect();
                // In key order, the order a semaphore's acquirer locks its permits in (a locking
                // count over the name's range): the two never wait for each other in a cycle.
                items.sort();
                let held = match &stalled {
                    Some(message) => Err(message.clone()),
                    None => {
                        let sql = self.inner.tables.extend_many(&items, permits);
                        match self.inner.pool.get().and_then(|mut connection| connection.run("extend", &sql))
                        {
                            Ok(results) => Ok(results),
                            Err(error) => {
                                let message = error.to_string();
                                if error.is_retryable() {
                                    stalled = Some(message.clone());
                                }
                                Err(message)
                            }
                        }
                    }
                };
                match held {
                    Ok(results) => {
                        let held: HashSet<(Vec<u8>, Vec<u8>)> = results
                            .sets
                            .last()
                            .map(|set| {
                                set.1.iter().filter_map(|row| Some((row.get(0)?, row.get(1)?))).collect()
                            })
                            .unwrap_or_default();
                        for &index in chunk {
                            let Some(owner) = row_owner(&batch[index].lease.hold, permits) else { continue };
                            let key =
                                (batch[index].lease.lock_key().as_str().as_bytes().to_vec(), unhex(owner));
                            let ok = held.contains(&key);
                            if ok {
                                batch[index].lease.ttl = batch[index].ttl;
                            }
                            outcomes[index] = Some(Ok(ok));
                        }
                    }
                    Err(message) => {
                        let retryable = stalled.is_some();
                        for &index in chunk {
                            outcomes[index] = Some(Err(if retryable {
                                lock_core::Error::Timeout {
                                    backend: super::error::BACKEND,
                                    operation: "extend",
                                    source: Some(message.clone().into()),
                                }
                            } else {
                                MyFailure::Reply { operation: "extend", detail: message.clone() }.into()
                            }));
                        }
                    }
                }
            }
        }
        // Anything else of this client (none on this kind today) one by one.
        for (item, outcome) in batch.iter_mut().zip(&mut outcomes) {
            if outcome.is_none() {
                *outcome = Some(lock_core::DistributedLock::extend(self, item.lease, item.ttl));
            }
        }
        outcomes.into_iter().map(|outcome| outcome.unwrap_or(Ok(false))).collect()
    }

    pub(crate) fn table_release(&self, lease: &MySqlLease) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let sql = self.inner.tables.release(&hex(lease.lock_key().as_str().as_bytes()), owner);
        let results = self.run_release("release", sql, lease.ttl)?;
        if self.inner.fair && ring_target(&results).is_some() {
            self.inner.rang.note(lease.lock_key().as_str());
        }
        Ok(results.affected(0) == 1)
    }

    /// Puts waiter `waiter` in `name`'s queue (or renews its entry, which then lives `note`;
    /// `replaces`: the entry of this client's earlier doorbell bell, which keeps its place).
    /// `None`: the lock has no row yet (an attempt creates it); else the holder's remaining
    /// lease, zero when the lock is free for this waiter now, `Err` when it is free for the
    /// queue's head only.
    pub(crate) fn table_queue(
        &self,
        name: &LockKey,
        waiter: Bell,
        replaces: Option<Bell>,
        note: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<std::result::Result<Duration, ()>>> {
        let sql = self.inner.tables.queue(
            &hex(name.as_str().as_bytes()),
            waiter.value(),
            replaces.map(Bell::value),
            note,
        );
        // A victim of InnoDB's deadlock verdicts until the retries ran out: not queued this
        // time, as if the row were missing; the waiter tries again at its next turn.
        let Some(results) = self.in_transaction("queue", &sql, deadline)? else { return Ok(None) };
        let Some(row) = results.sets.last().and_then(|set| set.1.first()) else { return Ok(None) };
        if row.get::<Option<i64>, _>(0).flatten().unwrap_or(0) == 0 {
            return Ok(None);
        }
        Ok(Some(match row.get::<Option<i64>, _>(1).flatten().unwrap_or(0) {
            ms if ms < 0 => Err(()),
            ms => Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        }))
    }

    /// Takes waiter `waiter` out of `name`'s queue, or (`requeue`: its entry's life) moves it
    /// to the tail; when the lock is free, rings the next waiter (this one may have been rung
    /// for it).
    pub(crate) fn table_dequeue(
        &self,
        name: &LockKey,
        waiter: Bell,
        requeue: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let sql = self.inner.tables.dequeue(&hex(name.as_str().as_bytes()), waiter.value(), requeue);
        let results = self.in_transaction("leave the queue", &sql, deadline)?.ok_or_else(|| {
            lock_core::Error::backend(super::error::BACKEND, "leaving the queue lost to deadlocks every time")
        })?;
        self.ring(&results);
        Ok(())
    }

    /// Runs a batch that opens a transaction: on failure the session is ended, which rolls it
    /// back, rather than a connection in an open transaction pooled. A deadlock (InnoDB picked
    /// this transaction as the victim: queue entries of neighbouring names share index gaps) is
    /// retried, at most [`DEADLOCK_RETRIES`] times and not past `deadline`; `Ok(None)` when
    /// every try was a deadlock's victim.
    pub(super) fn in_transaction(
        &self,
        operation: &'static str,
        sql: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<super::connection::Results>> {
        let mut retries = 0;
        loop {
            let mut connection = self.inner.pool.get()?;
            match connection.try_run(sql) {
                Ok(results) => return Ok(Some(results)),
                Err(error) => {
                    connection.poison();
                    let time_left = deadline.is_none_or(|deadline| Instant::now() < deadline);
                    if super::error::is_deadlock(&error) && retries < DEADLOCK_RETRIES && time_left {
                        retries += 1;
                        let most = (Duration::from_millis(2) * retries).min(MAX_DEADLOCK_PAUSE);
                        let pause = most.mul_f64(rand::random_range(0.5..=1.0));
                        let pause = deadline.map_or(pause, |deadline| {
                            pause.min(deadline.saturating_duration_since(Instant::now()))
                        });
                        std::thread::sleep(pause);
                        continue;
                    }
                    if super::error::is_deadlock(&error) {
                        tracing::debug!(
                            operation,
                            retries,
                            "InnoDB chose this transaction as a deadlock's victim every time"
                        );
                        return Ok(None);
                    }
                    return Err(super::error::map(operation, error));
                }
            }
        }
    }

    pub(crate) fn table_remaining(&self, name: &LockName) -> Result<Option<Duration>> {
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.remaining(&hex(name.as_str().as_bytes()));
        let ms: Option<i64> = connection.run("read the lease", &sql)?.last_value();
        Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(1))))
    }

    /// Deletes the rows of names that start with `prefix` (lock table and row table).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn delete_prefixed(&self, prefix: &str) -> Result<u64> {
        let mut connection = self.inner.pool.get()?;
        let mut deleted = 0;
        // The elections of such names too: their locks' rows and their records, together (a
        // record kept beside a deleted lock row would outrank the next leader's restarted fence).
        // Semaphores' waiters queue under keys of their own.
        for prefix in [prefix.to_owned(), LockKey::election_prefix(prefix), semaphore_queue_prefix(prefix)] {
            let results =
                connection.run("clean up", &self.inner.tables.delete_prefixed(prefix.as_bytes()))?;
            deleted += results.sets.iter().map(|(affected, _)| affected).sum::<u64>();
        }
        connection
            .run("clean up the elections", &self.inner.tables.delete_records_prefixed(prefix.as_bytes()))?;
        Ok(deleted)
    }

    pub(crate) fn table_mark_free(&self, name: &LockKey) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        let results =
            connection.run("break the lock", &self.inner.tables.mark_free(&hex(name.as_str().as_bytes())))?;
        self.ring(&results);
        Ok(())
    }
}

impl MySqlBackend {
    /// Rings the doorbell of the waiter that a statement's last result names, if any (from the
    /// ringer thread: the caller does not wait for it).
    pub(super) fn ring(&self, results: &super::connection::Results) {
        if let Some(waiter) = ring_target(results) {
            self.inner.doorbell.ring(waiter);
        }
    }
}

/// The waiter whose doorbell a statement's last result names, if any.
fn ring_target(results: &super::connection::Results) -> Option<Bell> {
    let row = results.sets.last().and_then(|set| set.1.first())?;
    row.get::<Option<u64>, _>(0).flatten().map(Bell::from_value)
}

/// The owner (a hex literal) of a lease renewed by [`MySqlBackend::table_extend_many`]'s
/// statement for lock-table leases (`permits` false) or for permits.
fn row_owner(hold: &Hold, permits: bool) -> Option<&str> {
    match (hold, permits) {
        (Hold::Table { owner }, false) | (Hold::Permit { owner }, true) => Some(owner),
        _ => None,
    }
}

/// The bytes of a hex literal `X'…'` (as written by [`hex`]).
fn unhex(literal: &str) -> Vec<u8> {
    let digits = literal.trim_start_matches("X'").trim_end_matches('\'');
    (0..digits.len() / 2).filter_map(|at| u8::from_str_radix(&digits[2 * at..2 * at + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhex_inverts_hex() {
        assert_eq!(unhex(&hex(b"abc\x00\xff")), b"abc\x00\xff");
    }
}
