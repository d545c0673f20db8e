//! The lock-table kind (source 003's primary-key insert, made safe): acquire, fencing and expiry
//! in one statement on the database clock; extend and release compare the owner in the same
//! statement; a release marks the row free and `NOTIFY`s the oldest waiter (`waiter_queue.rs`).

use std::collections::HashSet;
use std::time::Duration;

use lock_core::{Extension, OwnerToken, Result};
use tokio_postgres::types::Type;

use super::connection::Param;
use super::error::PgFailure;
use super::lease::{Hold, PostgresLease};
use super::session::unsigned;
use super::PostgresBackend;
use crate::lock_key::LockKey;

/// Milliseconds as the `bigint` the statements take.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl PostgresBackend {
    pub(crate) fn table_try(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<PostgresLease>> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.acquire.as_str();
        let token = owner.to_hex();
        let ms = millis(ttl);
        let (name_text, token_text) = (name.as_str(), token.as_str());
        let params: &[Param<'_>] = &[(&name_text, Type::TEXT), (&token_text, Type::TEXT), (&ms, Type::INT8)];
        let rows = connection
            .acquire_rows("acquire", (sql, params), ttl, || vec![self.table_undo(name_text, token_text)])?;
        // A row comes back only when this statement won the lock; a conflict that the WHERE
        // refused is contention, not an error.
        Ok(rows
            .first()
            .map(|row| PostgresLease::keyed(name, unsigned(row.get(0)), ttl, Hold::Table { owner: token })))
    }

    /// The undo of an unanswered acquisition under `owner` (`undo.rs`): the owner-checked release.
    fn table_undo(&self, name: &str, owner: &str) -> (String, Vec<String>) {
        (self.inner.tables.release.clone(), vec![name.to_owned(), owner.to_owned()])
    }

    pub(crate) fn table_extend(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.extend.as_str();
        let key = lease.lock_key();
        let name = key.as_str();
        let ms = millis(ttl);
        let extended = !connection
            .rows("extend", sql, &[(&name, Type::TEXT), (&owner.as_str(), Type::TEXT), (&ms, Type::INT8)])?
            .is_empty();
        if extended {
            lease.ttl = ttl;
        }
        Ok(extended)
    }

    /// One statement for the batch's lock-table leases (10,000 leases cost one round trip) and
    /// one for its permits. After a failure that says the server is not answering, the rest of
    /// the batch fails with it rather than wait again.
    pub(crate) fn table_extend_many(&self, batch: &mut [Extension<'_, PostgresLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| lock_core::check_lease(item.ttl).err().map(Err)).collect();
        let mut stalled = false;
        let timeout = || -> lock_core::Error {
            PgFailure::Timeout { operation: "extend", timeout: self.inner.pool.settings().io_timeout }.into()
        };
        for permits in [false, true] {
            let valid: Vec<usize> = (0..batch.len())
                .filter(|&index| {
                    outcomes[index].is_none() && row_owner(&batch[index].lease.hold, permits).is_some()
                })
                .collect();
            if valid.is_empty() {
                continue;
            }
            let mut names = Vec::with_capacity(valid.len());
            let mut owners = Vec::with_capacity(valid.len());
            let mut ms = Vec::with_capacity(valid.len());
            for &index in &valid {
                let item = &batch[index];
                let Some(owner) = row_owner(&item.lease.hold, permits) else { continue };
                names.push(item.lease.lock_key().as_str().to_owned());
                owners.push(owner.to_owned());
                ms.push(millis(item.ttl));
            }
            if stalled {
                for &index in &valid {
                    outcomes[index] = Some(Err(timeout()));
                }
                continue;
            }
            let sql = if permits {
                self.inner.tables.permits.extend_many.as_str()
            } else {
                self.inner.tables.extend_many.as_str()
            };
            let extended = self.inner.pool.get().and_then(|connection| {
                let (names, owners, ms) = (&names, &owners, &ms);
                connection.rows(
                    "extend",
                    sql,
                    &[(names, Type::TEXT_ARRAY), (owners, Type::TEXT_ARRAY), (ms, Type::INT8_ARRAY)],
                )
            });
            match extended {
                Ok(rows) => {
                    let renewed: HashSet<(String, String)> =
                        rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, String>(1))).collect();
                    for (position, &index) in valid.iter().enumerate() {
                        let key = (names[position].clone(), owners[position].clone());
                        let ok = renewed.contains(&key);
                        if ok {
                            batch[index].lease.ttl = batch[index].ttl;
                        }
                        outcomes[index] = Some(Ok(ok));
                    }
                }
                Err(error) => {
                    let message = error.to_string();
                    stalled = error.is_retryable();
                    for &index in &valid {
                        outcomes[index] = Some(Err(if stalled {
                            timeout()
                        } else {
                            PgFailure::Reply { operation: "extend", detail: message.clone() }.into()
                        }));
                    }
                }
            }
        }
        // Any other lease is extended on its own (none on this kind today: it has no read-write
        // locks), unless the server stopped answering.
        for (item, outcome) in batch.iter_mut().zip(&mut outcomes) {
            if outcome.is_none() {
                *outcome = Some(match stalled {
                    true => Err(timeout()),
                    false => lock_core::DistributedLock::extend(self, item.lease, item.ttl),
                });
            }
        }
        outcomes.into_iter().map(|outcome| outcome.unwrap_or(Ok(false))).collect()
    }

    pub(crate) fn table_release(&self, lease: &PostgresLease) -> Result<bool> {
        let Hold::Table { owner } = &lease.hold else { unreachable!("a lock-table lease") };
        let sql = self.inner.tables.release.as_str();
        let key = lease.lock_key();
        let name = key.as_str();
        let rows = self.run_release("release", sql, (name, owner), lease.ttl)?;
        Ok(rows.first().is_some_and(|row| row.get::<_, i64>(0) == 1))
    }

    /// A waiter's attempt: takes the lock, or puts this client in the lock's queue (renewing
    /// its entry, which then lives `note`) and returns the holder's remaining lease (zero when
    /// the lock is free but the queue's head may take it first). `others_waiting`: other
    /// threads of this client wait for the name, so the client stays queued when this one wins.
    pub(crate) fn table_try_or_queue(
        &self,
        name: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
        note: Duration,
        others_waiting: bool,
    ) -> Result<std::result::Result<PostgresLease, Duration>> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.acquire_or_queue.as_str();
        let token = owner.to_hex();
        let (ms, note_ms) = (millis(ttl), millis(note));
        let (name_text, token_text, channel) = (name.as_str(), token.as_str(), self.inner.listener.channel());
        let params: &[Param<'_>] = &[
            (&name_text, Type::TEXT),
            (&token_text, Type::TEXT),
            (&ms, Type::INT8),
            (&channel, Type::TEXT),
            (&note_ms, Type::INT8),
            (&others_waiting, Type::BOOL),
        ];
        let rows = connection.acquire_rows("acquire", (sql, params), ttl, || {
            let mut undo = vec![self.table_undo(name_text, token_text)];
            // The client's queue entry is its other waiting threads' too: they keep it.
            if !others_waiting {
                undo.push((
                    self.inner.tables.leave_queue.clone(),
                    vec![name_text.to_owned(), channel.to_owned()],
                ));
            }
            undo
        })?;
        let row =
            rows.first().ok_or_else(|| PgFailure::Reply { operation: "acquire", detail: "no row".into() })?;
        if row.get::<_, bool>(1) {
            return Ok(Ok(PostgresLease::keyed(
                name,
                unsigned(row.get(0)),
                ttl,
                Hold::Table { owner: token },
            )));
        }
        Ok(Err(Duration::from_millis(u64::try_from(row.get::<_, i64>(2)).unwrap_or(0))))
    }

    /// Takes this client out of `name`'s queue; when the lock is free, wakes the next waiter
    /// (this client may have been woken for it).
    pub(crate) fn table_leave_queue(&self, name: &LockKey) -> Result<()> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.leave_queue.as_str();
        let (name, channel) = (name.as_str(), self.inner.listener.channel());
        connection.rows("leave the queue", sql, &[(&name, Type::TEXT), (&channel, Type::TEXT)]).map(drop)
    }

    pub(crate) fn table_remaining(&self, name: &lock_core::LockName) -> Result<Option<Duration>> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.remaining.as_str();
        let name = name.as_str();
        let rows = connection.rows("read the lease", sql, &[(&name, Type::TEXT)])?;
        Ok(rows.first().map(|row| Duration::from_millis(u64::try_from(row.get::<_, i64>(0)).unwrap_or(1))))
    }

    /// Deletes the rows of names that start with `prefix` (lock, row, semaphore and read-write tables), of the
    /// elections of such names too (their locks' rows and their records, together: a record
    /// kept beside a deleted lock row would outrank the restarted fence of the next leader).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn delete_prefixed(&self, prefix: &str) -> Result<u64> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.delete_prefixed.as_str();
        let mut deleted = 0;
        for prefix in [prefix.to_owned(), LockKey::election_prefix(prefix)] {
            let rows = connection.rows("clean up", sql, &[(&prefix, Type::TEXT)])?;
            deleted += rows.first().map_or(0, |row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
        }
        let records = self.inner.tables.election.delete_prefixed.as_str();
        connection.rows("clean up the elections", records, &[(&prefix, Type::TEXT)])?;
        Ok(deleted)
    }

    pub(crate) fn table_mark_free(&self, name: &LockKey) -> Result<()> {
        let connection = self.inner.pool.get()?;
        let sql = self.inner.tables.mark_free.as_str();
        let name = name.as_str();
        connection.rows("break the lock", sql, &[(&name, Type::TEXT)]).map(drop)
    }
}

/// The owner token of a lease renewed by [`PostgresBackend::table_extend_many`]'s statement for
/// lock-table leases (`permits` false) or for permits.
fn row_owner(hold: &Hold, permits: bool) -> Option<&str> {
    match (hold, permits) {
        (Hold::Table { owner }, false) | (Hold::Permit { owner }, true) => Some(owner),
        _ => None,
    }
}
