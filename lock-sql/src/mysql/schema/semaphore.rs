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
    /// the next acquirer may have counted on. The one row returned: (granted, fence, the
    /// holders' count, how many hold).
    pub(crate) fn acquire_permit(&self, name: &str, owner: &str, permits: u32, ttl: Duration) -> String {
        let sem = &self.sem;
        let us = micros(ttl);
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) VALUES ({name}, X'', {permits}, 0, {NOW}) \
               ON DUPLICATE KEY UPDATE fence = fence; \
             SELECT COUNT(*) INTO @distlock_live FROM {sem} \
               WHERE name = {name} AND owner <> X'' AND expires_at >= {NOW} FOR UPDATE; \
             SELECT permits INTO @distlock_held FROM {sem} WHERE name = {name} AND owner = X''; \
             SET @distlock_takes = (@distlock_live = 0 OR (@distlock_held = {permits} AND @distlock_live < {permits})); \
             DELETE FROM {sem} WHERE name = {name} AND owner <> X'' AND expires_at < {NOW}; \
             UPDATE {sem} SET permits = IF(@distlock_takes, {permits}, permits), \
               fence = fence + IF(@distlock_takes, 1, 0) WHERE name = {name} AND owner = X''; \
             INSERT INTO {sem} (name, owner, permits, fence, expires_at) \
               SELECT {name}, {owner}, {permits}, 0, {NOW} + INTERVAL {us} MICROSECOND FROM DUAL WHERE @distlock_takes; \
             SELECT @distlock_takes + 0, fence, @distlock_held, @distlock_live FROM {sem} \
               WHERE name = {name} AND owner = X''; \
             COMMIT"
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

    /// Semaphore: releases `owner`'s valid permit (affected rows: 1 when it did).
    pub(crate) fn release_permit(&self, name: &str, owner: &str) -> String {
        format!(
            "DELETE FROM {} WHERE name = {name} AND owner = {owner} AND owner <> X'' AND expires_at >= {NOW}",
            self.sem
        )
    }
}
