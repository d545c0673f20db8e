//! Semaphores on every kind: a header row per name and a row per permit (see `semaphore.rs`).

use std::time::Duration;

use super::*;

/// The longest one statement of a permit acquisition waits for a row lock (see
/// [`Tables::acquire_permit`]).
const PERMIT_LOCK_WAIT: Duration = Duration::from_millis(250);

impl Tables {
    /// Semaphore: one permit of `permits` for `owner` (hex literals), in one transaction that
    /// the header row's lock orders per name against other acquirers. Renewals and releases are
    /// single statements on their own permit's row (no header lock, so a renewal batch locks no
    /// header): the count is a locking read, which waits for any renewal or release of a permit
    /// in progress and then reads the committed row (READ COMMITTED). A non-locking count once
    /// saw a permit whose renewal was evaluated at its expiry but not yet committed as expired,
    /// and admitted a second holder beside it. The fence is read before `COMMIT`: after it,
    /// the next acquirer may have counted on. `key`: the semaphore's queue key; `queued`: the
    /// caller's entry in it (its bell), deleted in the same transaction when it takes a permit —
    /// or, with the entry's life (other threads of the caller's client still wait), moved to
    /// the tail (an attempt that takes nothing renews it in place). Queue statements never lock
    /// a header row, so this makes no lock cycle; two acquisitions of different semaphores may
    /// meet in the queue's index as a deadlock, whose victim rolls back and tries again. The one row
    /// returned: (granted, fence, the holders' count, how many hold, ms until the first live
    /// permit expires, and — when a permit is granted and another is still free — the oldest
    /// other live waiter, to pass the release's ring on to: a release rings one waiter however
    /// many permits are free). The queue is read without locking.
    pub(crate) fn acquire_permit(
        &self,
        name: &str,
        owner: &str,
        (permits, ttl): (u32, Duration),
        key: &str,
        queued: Option<(u64, Option<Duration>)>,
    ) -> String {
        let Self { sem, queue, .. } = self;
        let us = micros(ttl);
        let leave = queued.map_or(String::new(), |(waiter, to_tail)| {
            let tail = to_tail.map_or(String::new(), |note| self.queue_upsert(key, waiter, note));
            format!(
                "DELETE FROM {queue} WHERE name = {key} AND waiter = {waiter} AND @distlock_takes; {tail}"
            )
        });
        let others = match queued {
            Some((waiter, None)) => format!(" AND waiter <> {waiter}"),
            _ => String::new(),
        };
        let next = format!(
            "IF(@distlock_takes AND @distlock_live + 1 < {permits}, (SELECT waiter FROM {queue} \
             WHERE name = {key} AND until >= {NOW}{others} ORDER BY seq LIMIT 1), NULL)"
        );
        // The statements that wait for the header's and the permits' row locks wait at most
        // `PERMIT_LOCK_WAIT` each: a longer wait would run into the client's I/O timeout under
        // heavy contention (seen: eighteen semaphores' waiters in two processes at once), where
        // a refusal (`ER_STATEMENT_TIMEOUT`) is contention the waiter retries at once. MariaDB
        // only (`/*M! … */` runs on MariaDB and is a comment to MySQL, which has no
        // `SET STATEMENT`): MySQL waits its session's `innodb_lock_wait_timeout`.
        let bounded = format!(
            "/*M! SET STATEMENT innodb_lock_wait_timeout = 1, max_statement_time = {} FOR */",
            seconds(PERMIT_LOCK_WAIT)
        );
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             {bounded} INSERT INTO {sem} (name, owner, permits, fence, expires_at) VALUES ({name}, X'', {permits}, 0, {NOW}) \
               ON DUPLICATE KEY UPDATE fence = fence; \
             {bounded} SELECT COUNT(*), MIN(expires_at) INTO @distlock_live, @distlock_first FROM {sem} \
               WHERE name = {name} AND owner <> X'' AND expires_at >= {NOW} FOR UPDATE; \
             SELECT permits INTO @distlock_held FROM {sem} WHERE name = {name} AND owner = X''; \
             SET @distlock_takes = (@distlock_live = 0 OR (@distlock_held = {permits} AND @distlock_live < {permits})); \
             {bounded} DELETE FROM {sem} WHERE name = {name} AND owner <> X'' AND expires_at < {NOW}; \
             UPDATE {sem} SET permits = IF(@distlock_takes, {permits}, permits), \
               fence = fence + IF(@distlock_takes, 1, 0) WHERE name = {name} AND owner = X''; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) \
               SELECT {name}, {owner}, {permits}, 0, {NOW} + INTERVAL {us} MICROSECOND FROM DUAL WHERE @distlock_takes; \
             {leave}\
             SELECT @distlock_takes + 0, fence, @distlock_held, @distlock_live, \
               GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, @distlock_first) / 1000)), {next} FROM {sem} \
               WHERE name = {name} AND owner = X''; \
             COMMIT"
        )
    }

    /// Semaphore: puts waiter `waiter` (its doorbell's bell) in the queue under `key`, or renews
    /// its entry so that it lives `note` (`replaces`: the bell of the client's earlier doorbell
    /// connection, whose entry keeps its place under the new one); lapsed entries of the key
    /// (crashed waiters') are deleted on the way. No header lock: a release reads the queue
    /// after its own delete commits, and the waiter attempts after its entry commits, so one of
    /// the two always sees the other.
    pub(crate) fn queue_permit(
        &self,
        key: &str,
        waiter: u64,
        replaces: Option<u64>,
        note: Duration,
    ) -> String {
        let queue = &self.queue;
        let rename = replaces.map_or(String::new(), |old| self.rename_entry(key, old, waiter));
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             DELETE FROM {queue} WHERE name = {key} AND until < {NOW}; {rename}{}COMMIT",
            self.queue_upsert(key, waiter, note)
        )
    }

    /// Semaphore: deletes the entries of a client under `key` (`bell`, and `current`: its
    /// doorbell's bell now, when it reconnected since) and, with `keep` (the entry's life), writes
    /// one under `current` at the tail, in one transaction. A waiting thread's own renewal may
    /// come in between (the insert then renews it), or after (it renews what this wrote); a
    /// thread that starts to wait after the caller looked may find its entry deleted, and is
    /// queued again at its next re-check. The insert's duplicate check may meet another queue
    /// transaction's in a deadlock; the caller retries (`in_transaction`), as every party to
    /// one does.
    pub(crate) fn sync_permit_entry(
        &self,
        key: &str,
        bell: u64,
        current: Option<u64>,
        keep: Option<Duration>,
    ) -> String {
        let queue = &self.queue;
        let bells = current.map_or(bell.to_string(), |current| format!("{bell}, {current}"));
        let insert = match (current, keep) {
            (Some(current), Some(note)) => self.queue_upsert(key, current, note),
            _ => String::new(),
        };
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             DELETE FROM {queue} WHERE name = {key} AND waiter IN ({bells}); {insert}COMMIT"
        )
    }

    /// Writes waiter `waiter`'s entry under `key` so that it lives `note`: a new one at the tail,
    /// or the existing one renewed in place (a plain `VALUES` insert: see [`Self::queue`]).
    fn queue_upsert(&self, key: &str, waiter: u64, note: Duration) -> String {
        format!(
            "INSERT INTO {} (name, waiter, until) VALUES ({key}, {waiter}, {NOW} + INTERVAL {} MICROSECOND) \
             ON DUPLICATE KEY UPDATE until = VALUES(until); ",
            self.queue,
            micros(note)
        )
    }

    /// Semaphore: extends `owner`'s valid permit (affected rows: 1 when it did).
    pub(crate) fn extend_permit(&self, name: &str, owner: &str, ttl: Duration) -> String {
        format!(
            "UPDATE {} SET expires_at = {NOW} + INTERVAL {} MICROSECOND \
             WHERE name = {name} AND owner = {owner} AND owner <> X'' AND expires_at >= {NOW}",
            self.sem,
            micros(ttl)
        )
    }

    /// Semaphore: releases `owner`'s valid permit (the first result's affected rows: 1 when it
    /// did); the last row names the oldest live waiter under `key` to ring, when it did.
    pub(crate) fn release_permit(&self, name: &str, owner: &str, key: &str) -> String {
        let Self { sem, queue, .. } = self;
        format!(
            "DELETE FROM {sem} WHERE name = {name} AND owner = {owner} AND owner <> X'' AND expires_at >= {NOW}; \
             SELECT IF(ROW_COUNT() > 0, \
               (SELECT waiter FROM {queue} WHERE name = {key} AND until >= {NOW} ORDER BY seq LIMIT 1), NULL)"
        )
    }
}
