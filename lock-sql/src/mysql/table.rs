//! The lock-table kind: acquire, fencing and expiry in one `INSERT … ON DUPLICATE KEY UPDATE`
//! on the database clock; extend and release compare the owner in the same statement; a
//! release marks the row free and rings the oldest waiter's doorbell (`doorbell.rs`).

use std::collections::HashSet;
use std::time::Duration;

use lock_core::{Extension, LockName, OwnerToken, Result};

use super::error::MyFailure;
use super::lease::{Hold, MySqlLease};
use super::schema::hex;
use super::MySqlBackend;

/// Leases per renewal statement: keeps one statement well under `max_allowed_packet`.
const BATCH: usize = 2_000;

impl MySqlBackend {
    pub(crate) fn table_try(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<MySqlLease>> {
        let mut connection = self.inner.pool.get()?;
        let owner = hex(owner.to_hex().as_bytes());
        let sql = self.inner.tables.acquire(&hex(name.as_str().as_bytes()), &owner, ttl);
        let results = connection.run("acquire", &sql)?;
        // The insert's affected rows (the statement before the last, which reads the fence): 0,
        // the row is someone else's and nothing changed — contention, not an error. 1: inserted;
        // 2: taken over (expired) or re-entered.
        if results.affected(results.sets.len().saturating_sub(2)) == 0 {
            return Ok(None);
        }
        let fence: u64 = results
            .last_value()
            .ok_or_else(|| MyFailure::Reply { operation: "acquire", detail: "no fence".into() })?;
        Ok(Some(MySqlLease::new(name, fence, ttl, Hold::Table { owner })))
    }

    pub(crate) fn table_extend(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.extend(&hex(lease.name.as_str().as_bytes()), owner, ttl);
        let extended = connection.run("extend", &sql)?.affected(0) == 1;
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    /// One round trip per [`BATCH`] leases.
    pub(crate) fn table_extend_many(&self, batch: &mut [Extension<'_, MySqlLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| lock_core::check_lease(item.ttl).err().map(Err)).collect();
        let valid: Vec<usize> = (0..batch.len()).filter(|&index| outcomes[index].is_none()).collect();
        for chunk in valid.chunks(BATCH) {
            let items: Vec<(String, String, Duration)> = chunk
                .iter()
                .map(|&index| {
                    let item = &batch[index];
                    let Hold::Table { owner } = &item.lease.hold else { unreachable!("a lock-table lease") };
                    (hex(item.lease.name.as_str().as_bytes()), owner.clone(), item.ttl)
                })
                .collect();
            let sql = self.inner.tables.extend_many(&items);
            let held = self.inner.pool.get().and_then(|mut connection| connection.run("extend", &sql));
            match held {
                Ok(results) => {
                    let held: HashSet<(Vec<u8>, Vec<u8>)> = results
                        .sets
                        .last()
                        .map(|set| set.1.iter().filter_map(|row| Some((row.get(0)?, row.get(1)?))).collect())
                        .unwrap_or_default();
                    for &index in chunk {
                        let Hold::Table { owner } = &batch[index].lease.hold else { unreachable!() };
                        let key = (batch[index].lease.name.as_str().as_bytes().to_vec(), unhex(owner));
                        let ok = held.contains(&key);
                        if ok {
                            batch[index].lease.ttl = batch[index].ttl;
                        }
                        outcomes[index] = Some(Ok(ok));
                    }
                }
                Err(error) => {
                    let message = error.to_string();
                    for &index in chunk {
                        outcomes[index] = Some(Err(if error.is_retryable() {
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
        outcomes.into_iter().map(|outcome| outcome.unwrap_or(Ok(false))).collect()
    }

    pub(crate) fn table_release(&self, lease: &MySqlLease) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.release(&hex(lease.name.as_str().as_bytes()), owner);
        let results = connection.run("release", &sql)?;
        ring(&mut connection, &results);
        Ok(results.affected(1) == 1)
    }

    /// A waiter's attempt: takes the lock, or puts this client in the lock's queue (renewing
    /// its entry, which then lives `note`) and returns the holder's remaining lease (zero when
    /// the lock is free but the queue's head may take it first); `None` when the lock has no
    /// row yet (the caller makes a plain attempt). `others_waiting`: other threads of this
    /// client wait for the name, so the client stays queued when this one wins.
    pub(crate) fn table_try_or_queue(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        waiter: u32,
        note: Duration,
        others_waiting: bool,
    ) -> Result<Option<std::result::Result<MySqlLease, Duration>>> {
        let mut connection = self.inner.pool.get()?;
        let owner = hex(owner.to_hex().as_bytes());
        let sql = self.inner.tables.acquire_or_queue(
            &hex(name.as_str().as_bytes()),
            &owner,
            ttl,
            waiter,
            note,
            others_waiting,
        );
        let results = match connection.try_run(&sql) {
            Ok(results) => results,
            Err(error) => {
                // The batch stopped inside its transaction: end the session, which rolls it
                // back, rather than pool a connection in an open transaction.
                connection.poison();
                return Err(super::error::map("acquire", error));
            }
        };
        let Some(row) = results.sets.last().and_then(|set| set.1.first()) else { return Ok(None) };
        let value = |index: usize| row.get::<Option<i64>, _>(index).flatten().unwrap_or(0);
        if value(0) == 0 {
            return Ok(None);
        }
        if value(1) != 0 {
            let fence = u64::try_from(value(2)).unwrap_or(0);
            return Ok(Some(Ok(MySqlLease::new(name, fence, ttl, Hold::Table { owner }))));
        }
        Ok(Some(Err(Duration::from_millis(u64::try_from(value(3)).unwrap_or(0)))))
    }

    /// Takes waiter `waiter` out of `name`'s queue; when the lock is free, rings the next
    /// waiter (this one may have been rung for it).
    pub(crate) fn table_leave_queue(&self, name: &LockName, waiter: u32) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        let sql = self.inner.tables.leave_queue(&hex(name.as_str().as_bytes()), waiter);
        match connection.try_run(&sql) {
            Ok(results) => {
                ring(&mut connection, &results);
                Ok(())
            }
            Err(error) => {
                connection.poison();
                Err(super::error::map("leave the queue", error))
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
        let results = connection.run("clean up", &self.inner.tables.delete_prefixed(prefix.as_bytes()))?;
        Ok(results.sets.iter().map(|(affected, _)| affected).sum())
    }

    pub(crate) fn table_mark_free(&self, name: &LockName) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        let results =
            connection.run("break the lock", &self.inner.tables.mark_free(&hex(name.as_str().as_bytes())))?;
        ring(&mut connection, &results);
        Ok(())
    }
}

/// Rings the doorbell of the waiter that a statement's last result names, if any. A ring the
/// server refuses (another user's connection, one gone since) is left to the waiter's re-check.
fn ring(connection: &mut super::connection::MyConnection, results: &super::connection::Results) {
    let Some(waiter) = results
        .sets
        .last()
        .and_then(|set| set.1.first())
        .and_then(|row| row.get::<Option<u64>, _>(0).flatten())
    else {
        return;
    };
    if let Err(error) = connection.try_run(&format!("KILL QUERY {waiter}")) {
        tracing::debug!(%error, waiter, "could not ring a waiter's doorbell; it re-checks on its own");
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
