//! Semaphores on every kind: a header row per name and a row per permit (see `semaphore.rs`).

use std::time::Duration;

use super::*;

impl Tables {
    /// Semaphore: one permit of `permits` for `owner` (hex literals), in one transaction that
    /// the header row's lock orders per name against other acquirers. Renewals and releases are
    /// single statements on their own permit's row (no header lock, so a renewal batch locks no
    /// header): the count is a locking read, which waits for any renewal or release of a permit
    /// in progress and then reads the committed row (READ COMMITTED). A non-locking count once
    /// saw a permit whose renewal was evaluated at its expiry but not yet committed as expired,
    /// and admitted a second holder beside it. The fence is read before `COMMIT`: after it,
    /// the next acquirer may have counted on. `key`: the semaphore's queue key; `leaves`: the
    /// caller's entry in it (its bell), deleted in the same transaction when it takes a permit
    /// (queue statements never lock a header row, so this makes no lock cycle). The one row
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
        leaves: Option<u64>,
    ) -> String {
        let Self { sem, queue, .. } = self;
        let us = micros(ttl);
        let leave = leaves.map_or(String::new(), |waiter| {
            format!("DELETE FROM {queue} WHERE name = {key} AND waiter = {waiter} AND @distlock_takes; ")
        });
        let others = leaves.map_or(String::new(), |waiter| format!(" AND waiter <> {waiter}"));
        let next = format!(
            "IF(@distlock_takes AND @distlock_live + 1 < {permits}, (SELECT waiter FROM {queue} \
             WHERE name = {key} AND until >= {NOW}{others} ORDER BY seq LIMIT 1), NULL)"
        );
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) VALUES ({name}, X'', {permits}, 0, {NOW}) \
               ON DUPLICATE KEY UPDATE fence = fence; \
             SELECT COUNT(*), MIN(expires_at) INTO @distlock_live, @distlock_first FROM {sem} \
               WHERE name = {name} AND owner <> X'' AND expires_at >= {NOW} FOR UPDATE; \
             SELECT permits INTO @distlock_held FROM {sem} WHERE name = {name} AND owner = X''; \
             SET @distlock_takes = (@distlock_live = 0 OR (@distlock_held = {permits} AND @distlock_live < {permits})); \
             DELETE FROM {sem} WHERE name = {name} AND owner <> X'' AND expires_at < {NOW}; \
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
        let rename = replaces.map_or(String::new(), |old| {
            format!("UPDATE {queue} SET waiter = {waiter} WHERE name = {key} AND waiter = {old}; ")
        });
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             DELETE FROM {queue} WHERE name = {key} AND until < {NOW}; {rename}\
             INSERT INTO {queue} (name, waiter, until) VALUES ({key}, {waiter}, {NOW} + INTERVAL {} MICROSECOND) \
               ON DUPLICATE KEY UPDATE until = VALUES(until); \
             COMMIT",
            micros(note)
        )
    }

    /// Semaphore: moves waiter `waiter` to the tail of the queue under `key`, with an entry that
    /// lives `note` (a client that won a permit while other threads of it still wait: the
    /// releases' rings go to other clients first).
    pub(crate) fn requeue_permit(&self, key: &str, waiter: u64, note: Duration) -> String {
        let queue = &self.queue;
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             DELETE FROM {queue} WHERE name = {key} AND waiter = {waiter}; \
             INSERT INTO {queue} (name, waiter, until) VALUES ({key}, {waiter}, {NOW} + INTERVAL {} MICROSECOND); \
             COMMIT",
            micros(note)
        )
    }

    /// Semaphore: takes waiter `waiter` out of the queue under `key`.
    pub(crate) fn dequeue_permit(&self, key: &str, waiter: u64) -> String {
        format!("DELETE FROM {} WHERE name = {key} AND waiter = {waiter}", self.queue)
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
