//! The mutex's statements on every kind: the lock table's acquire, queue, extend and release,
//! the row kind's locking read, and `GET_LOCK`.

use std::time::Duration;

use super::*;

impl Tables {
    /// Acquire (or re-enter) in one statement, then read the fence it set. The `ON DUPLICATE KEY
    /// UPDATE` assignments run left to right, each seeing the columns assigned before it:
    /// `owner` is decided from the old `expires_at`, and `expires_at` is assigned last (assigned
    /// first, the later tests would see the new expiry and report a false win). A refused
    /// attempt changes nothing: 0 affected rows; a win is 1 (insert) or 2 (update). Fair: an
    /// expired lock is not free while the queue's oldest waiter (the row's `ring`) lives, except
    /// to that waiter ([`acquire_queued`](Self::acquire_queued)). The last row: the fence, and
    /// (`with_remaining`) the holder's remaining ms.
    pub(crate) fn acquire(&self, name: &str, owner: &str, ttl: Duration, with_remaining: bool) -> String {
        let remaining = match with_remaining {
            false => String::new(),
            true => format!(", {}", self.remaining_ms(name)),
        };
        format!("{}; SELECT LAST_INSERT_ID(){remaining}", self.take_or_reenter(name, owner, ttl, None))
    }

    /// The `INSERT … ON DUPLICATE KEY UPDATE` of [`acquire`](Self::acquire) (`waiter`: the
    /// caller's doorbell's bell when it is queued).
    fn take_or_reenter(&self, name: &str, owner: &str, ttl: Duration, waiter: Option<u64>) -> String {
        let us = micros(ttl);
        let valid_mine = format!("owner = VALUES(owner) AND expires_at >= {NOW}");
        let expired = match (self.fair, waiter) {
            (false, _) => format!("expires_at < {NOW}"),
            (true, None) => format!("(expires_at < {NOW} AND NOT COALESCE(ring_until >= {NOW}, FALSE))"),
            (true, Some(me)) => {
                format!("(expires_at < {NOW} AND NOT COALESCE(ring_until >= {NOW} AND ring <> {me}, FALSE))")
            }
        };
        format!(
            "INSERT INTO {} (name, owner, hold_count, fence, expires_at, acquired_at) \
             VALUES ({name}, {owner}, 1, LAST_INSERT_ID(1), {NOW} + INTERVAL {us} MICROSECOND, {NOW}) \
             ON DUPLICATE KEY UPDATE \
               hold_count = IF({valid_mine}, hold_count + 1, IF({expired}, 1, hold_count)), \
               fence = IF({valid_mine}, LAST_INSERT_ID(fence), IF({expired}, LAST_INSERT_ID(fence + 1), fence)), \
               acquired_at = IF({expired}, VALUES(acquired_at), acquired_at), \
               owner = IF({expired}, VALUES(owner), owner), \
               expires_at = IF(owner = VALUES(owner), IF({expired}, VALUES(expires_at), \
                 IF(expires_at >= {NOW}, GREATEST(expires_at, VALUES(expires_at)), expires_at)), expires_at)",
            self.locks
        )
    }

    /// The holder's remaining lease of `name` in ms (0: free), as a subquery.
    fn remaining_ms(&self, name: &str) -> String {
        format!(
            "(SELECT GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000)) \
             FROM {} WHERE name = {name})",
            self.locks
        )
    }

    /// A queued waiter's attempt (`waiter`: its bell) that, when it wins, leaves the queue in
    /// the same transaction — or, with `requeue` (other threads of its client still wait),
    /// moves to the tail with an entry living that long — and hands the ring to the next
    /// waiter: the winner of a hand-off pays one round trip, not an attempt and then a
    /// `dequeue`. A refused attempt changes nothing, except that with `requeue` an entry gone
    /// meanwhile is written again at the tail (and the ring follows the queue). The queue's
    /// changes follow the lock row's lock, as in `queue`. The last row: whether it won (1), the
    /// fence, the holder's remaining ms.
    pub(crate) fn acquire_queued(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        waiter: u64,
        requeue: Option<Duration>,
    ) -> String {
        let queue = &self.queue;
        let (requeue, refresh_when) = match requeue {
            None => (String::new(), " AND @distlock_won"),
            Some(note) => (
                format!(
                    "INSERT INTO {queue} (name, waiter, until) \
                     VALUES ({name}, {waiter}, {NOW} + INTERVAL {} MICROSECOND) \
                     ON DUPLICATE KEY UPDATE until = IF(@distlock_won, VALUES(until), until); ",
                    micros(note)
                ),
                "",
            ),
        };
        format!(
            "START TRANSACTION; {}; \
             SET @distlock_won = ROW_COUNT() > 0, @distlock_fence = LAST_INSERT_ID(); \
             DELETE FROM {queue} WHERE name = {name} AND waiter = {waiter} AND @distlock_won; \
             {requeue}{}{refresh_when}; COMMIT; \
             SELECT @distlock_won, @distlock_fence, {}",
            self.take_or_reenter(name, owner, ttl, Some(waiter)),
            self.refresh_ring(name),
            self.remaining_ms(name)
        )
    }

    /// Puts waiter `waiter` (its doorbell's bell: server tag and connection id) in `name`'s queue, or renews its
    /// entry (which keeps its place; a lapsed one goes to the tail), so that it lives `note`;
    /// lapsed entries of the name (crashed waiters') are deleted on the way. (A plain `VALUES`
    /// insert: `INSERT … SELECT` would hold the table's AUTO-INC lock to the statement's end and
    /// deadlock with the queue transactions of other names.) In
    /// one transaction that first locks the lock's row: queue changes serialize with each other
    /// and with the releases that read the head from that row. The last row: whether the lock
    /// has a row (else the caller attempts again, which creates it; the entry is harmless), and the holder's remaining ms — 0 when the lock is
    /// free for this waiter now (a release came first: attempt again, no ring will come), -1
    /// when it is free for the queue's head only (a release rings this waiter in its turn).
    pub(crate) fn queue(&self, name: &str, waiter: u64, replaces: Option<u64>, note: Duration) -> String {
        let Self { locks, queue, .. } = self;
        // A doorbell that reconnected has a new id: its entry takes it in place.
        let rename = replaces.map_or(String::new(), |old| self.rename_entry(name, old, waiter));
        let note_us = micros(note);
        let mine = if self.fair {
            format!(" AND COALESCE(ring_until < {NOW} OR ring = {waiter}, TRUE)")
        } else {
            String::new()
        };
        format!(
            "START TRANSACTION; \
             SET @distlock_found = FALSE; \
             SELECT TRUE INTO @distlock_found FROM {locks} WHERE name = {name} FOR UPDATE; \
             DELETE FROM {queue} WHERE name = {name} AND until < {NOW}; \
             {rename}\
             INSERT INTO {queue} (name, waiter, until) \
               VALUES ({name}, {waiter}, {NOW} + INTERVAL {note_us} MICROSECOND) \
               ON DUPLICATE KEY UPDATE until = VALUES(until); \
             {}; \
             COMMIT; \
             SELECT @distlock_found, IF(expires_at < {NOW}, IF(TRUE{mine}, 0, -1), \
               GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000))) \
             FROM {locks} WHERE name = {name}",
            self.refresh_ring(name)
        )
    }

    /// Takes waiter `waiter` out of `name`'s queue — or, `requeue` (other threads of its
    /// client still wait), moves it to the tail with an entry living that long — as `queue`
    /// does, in one transaction. The last row names the waiter to ring when the lock is free
    /// (a waiter that leaves may have been rung for a release it will not take).
    pub(crate) fn dequeue(&self, name: &str, waiter: u64, requeue: Option<Duration>) -> String {
        let Self { locks, queue, .. } = self;
        let requeue = requeue.map_or(String::new(), |note| {
            format!(
                "INSERT INTO {queue} (name, waiter, until) \
                 VALUES ({name}, {waiter}, {NOW} + INTERVAL {} MICROSECOND); ",
                micros(note)
            )
        });
        format!(
            "START TRANSACTION; \
             SELECT TRUE INTO @distlock_found FROM {locks} WHERE name = {name} FOR UPDATE; \
             DELETE FROM {queue} WHERE name = {name} AND waiter = {waiter}; \
             {requeue}{}; COMMIT; {}",
            self.refresh_ring(name),
            self.next_waiter(name)
        )
    }

    /// Copies the queue's oldest live entry into the lock row (inside a transaction that locked
    /// the row and changed the queue).
    fn refresh_ring(&self, name: &str) -> String {
        let Self { locks, queue, .. } = self;
        let head = format!("FROM {queue} WHERE name = {name} AND until >= {NOW} ORDER BY seq LIMIT 1");
        format!("UPDATE {locks} SET ring = (SELECT waiter {head}), ring_until = (SELECT until {head}) WHERE name = {name}")
    }

    /// The oldest live waiter for `name` when the lock is free: its doorbell id, or `NULL`.
    fn next_waiter(&self, name: &str) -> String {
        format!(
            "SELECT IF(expires_at < {NOW} AND ring_until >= {NOW}, ring, NULL) FROM {} WHERE name = {name}",
            self.locks
        )
    }

    pub(crate) fn extend(&self, name: &str, owner: &str, ttl: Duration) -> String {
        format!(
            "UPDATE {} SET expires_at = {NOW} + INTERVAL {} MICROSECOND \
             WHERE name = {name} AND owner = {owner} AND expires_at >= {NOW}",
            self.locks,
            micros(ttl)
        )
    }

    /// One round trip for a batch: extend every lease still held, then list which are held.
    /// (`items`: name, owner, lease; `permits`: the items are semaphore permits, else lock-table
    /// leases. Both are rows keyed by name and owner with an expiry, and a permit's owner is
    /// never the header's empty one.)
    pub(crate) fn extend_many(&self, items: &[(String, String, Duration)], permits: bool) -> String {
        let locks = if permits { &self.sem } else { &self.locks };
        let mut values = String::new();
        let mut pairs = String::new();
        for (index, (name, owner, ttl)) in items.iter().enumerate() {
            if index > 0 {
                values.push_str(" UNION ALL ");
                pairs.push_str(", ");
            }
            let _ = write!(values, "SELECT {name} AS name, {owner} AS owner, {} AS us", micros(*ttl));
            let _ = write!(pairs, "({name}, {owner})");
        }
        format!(
            "UPDATE {locks} AS l JOIN ({values}) AS v ON l.name = v.name AND l.owner = v.owner \
             SET l.expires_at = {NOW} + INTERVAL v.us MICROSECOND WHERE l.expires_at >= {NOW}; \
             SELECT name, owner FROM {locks} WHERE (name, owner) IN ({pairs}) AND expires_at >= {NOW}"
        )
    }

    /// `expires_at` first: it must see the hold count before the decrement. The same statement
    /// reads the waiter to ring, when the lock is now free and someone waits, from the row it
    /// updates (`ring` is assigned itself: an `UPDATE` returns no rows); the variable counts only
    /// if this statement updated the row (else it is an earlier statement's).
    pub(crate) fn release(&self, name: &str, owner: &str) -> String {
        // Non-fair: a ring is spent on the release that sends it; the rung waiter, if it loses
        // the race, queues again (which re-arms it). Else every release would ring, and many
        // `KILL`s a second slow the server down for everyone. Fair: `ring_until` also keeps the
        // free lock for the head, and the head's win moves the ring to the next waiter.
        let consume =
            if self.fair { "" } else { ", ring_until = IF(@distlock_ring IS NULL, ring_until, NULL)" };
        format!(
            "UPDATE {} SET expires_at = IF(hold_count > 1, expires_at, '1970-01-01 00:00:01'), \
             hold_count = hold_count - 1, \
             ring = COALESCE(@distlock_ring := IF(hold_count = 0 AND ring_until >= {NOW}, ring, NULL), ring){consume} \
             WHERE name = {name} AND owner = {owner} AND expires_at >= {NOW}; \
             SELECT IF(ROW_COUNT() > 0, @distlock_ring, NULL)",
            self.locks
        )
    }

    /// A guarded write's check (`guarded.rs`): opens a transaction and locks the row of `name`
    /// while `owner`'s lease runs; the last statement returns 1 then, else nothing.
    pub(crate) fn lock_if_held(&self, name: &str, owner: &str) -> String {
        format!(
            "START TRANSACTION; SELECT 1 FROM {} WHERE name = {name} AND owner = {owner} AND expires_at > {NOW} \
             FOR UPDATE",
            self.locks
        )
    }

    pub(crate) fn remaining(&self, name: &str) -> String {
        format!(
            "SELECT GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) / 1000)) \
             FROM {} WHERE name = {name} AND expires_at > {NOW}",
            self.locks
        )
    }

    /// Deletes the rows of names that start with the bytes `prefix` — lock table, row table,
    /// queue, read-write and semaphore rows (`distlock compare`'s and `bench`'s clean-up on a
    /// user's server).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn delete_prefixed(&self, prefix: &[u8]) -> String {
        let (length, literal) = (prefix.len(), hex(prefix));
        format!(
            "DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; \
             DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; DELETE FROM {} WHERE LEFT(name, {length}) = {literal}; \
             DELETE FROM {} WHERE LEFT(name, {length}) = {literal}",
            self.locks, self.rows, self.queue, self.rw, self.sem
        )
    }

    /// Deletes the election records of names that start with the bytes `prefix`.
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn delete_records_prefixed(&self, prefix: &[u8]) -> String {
        let (length, literal) = (prefix.len(), hex(prefix));
        format!("DELETE FROM {} WHERE LEFT(name, {length}) = {literal}", self.lead)
    }

    /// Frees the lock; then the waiter to ring, as [`release`](Self::release).
    pub(crate) fn mark_free(&self, name: &str) -> String {
        format!(
            "UPDATE {} SET expires_at = '1970-01-01 00:00:01' WHERE name = {name}; {}",
            self.locks,
            self.next_waiter(name)
        )
    }

    /// Creates the row of a name about to be locked for the first time, waiting at most
    /// [`INSERT_WAIT`] for a lock on its place in the index. A fresh key can meet a short-lived
    /// lock on its gap (another client's insert checking a neighbouring key for a duplicate takes
    /// one, even under READ COMMITTED), which is no holder of this lock: refused at once, a
    /// `try_lock` of a free name was reported held (seen once in CI). A row that a holder
    /// inserted and locked since this attempt looked makes the duplicate check wait for that
    /// holder, cut at the same bound: a lock-wait error then means the row exists.
    pub(crate) fn insert_row(&self, name: &str) -> String {
        format!(
            "SET STATEMENT innodb_lock_wait_timeout = 1, max_statement_time = {} FOR \
             INSERT IGNORE INTO {} (name) VALUES ({name})",
            seconds(INSERT_WAIT),
            self.rows
        )
    }

    /// Opens the holding transaction and locks the row — `NOWAIT`, or waiting up to `wait` (to
    /// the microsecond: `max_statement_time` cuts the wait that `innodb_lock_wait_timeout`, whole
    /// seconds, bounds) — then sets the session's idle limit to `idle_secs`. The session is READ
    /// COMMITTED (set when the connection opens), so a locking read of an absent key takes no gap
    /// lock. The locking `SELECT` returns the fence and the µs waited (see [`WAITED`]), so there
    /// is a row exactly when this transaction locked the row (none when the row does not exist;
    /// the caller then rolls back, which also resets the idle limit). A refused lock is an error,
    /// which stops the batch before the idle limit is set.
    pub(crate) fn lock_row(&self, name: &str, wait: Option<Duration>, idle_secs: u64) -> String {
        let Self { rows, fence, .. } = self;
        let select = match wait {
            None => format!("SELECT NEXTVAL({fence}), 0 FROM {rows} WHERE name = {name} FOR UPDATE NOWAIT"),
            Some(wait) => format!(
                "SET STATEMENT innodb_lock_wait_timeout = {}, max_statement_time = {} FOR \
                 SELECT NEXTVAL({fence}), {WAITED} FROM {rows} WHERE name = {name} FOR UPDATE",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                seconds(wait)
            ),
        };
        // The `UPDATE` never waits: after a grant the row is this transaction's; without one
        // (no row seen), a row someone inserted and locked since is contention (1205).
        format!(
            "{START_CLOCK}; START TRANSACTION; {select}; \
             SET STATEMENT innodb_lock_wait_timeout = 0 FOR \
               UPDATE {rows} SET holder = CONNECTION_ID() WHERE name = {name}; \
             {limit}",
            limit = crate::mysql::session::set_idle_limit(idle_secs)
        )
    }

    /// Whether `name`'s row is free (or absent): an error that is contention when it is locked.
    /// Leaves a transaction open for the caller to roll back.
    pub(crate) fn row_free_probe(&self, name: &str) -> String {
        format!("START TRANSACTION; SELECT 1 FROM {} WHERE name = {name} FOR UPDATE NOWAIT", self.rows)
    }

    /// The connection holding `name`'s row, read without waiting (READ UNCOMMITTED sees the
    /// holder's uncommitted `holder` column).
    pub(crate) fn row_holder(&self, name: &str) -> String {
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; SELECT holder FROM {} WHERE name = {name}",
            self.rows
        )
    }

    /// `GET_LOCK`, waiting up to `wait` (MariaDB takes fractions of a second), and when granted
    /// the fence and the session's idle limit — one round trip. The row: the fence (`NULL` when
    /// busy) and the µs waited. A grant's token is made durable in the same round trip.
    pub(crate) fn get_lock(&self, key: &str, wait: Duration, idle_secs: u64) -> String {
        format!(
            "{START_CLOCK}; \
             SELECT @distlock_fence := IF(GET_LOCK({key}, {}) = 1, NEXTVAL({}), NULL), {WAITED}; \
             SET SESSION wait_timeout = IF(@distlock_fence IS NULL, @@SESSION.wait_timeout, {idle_secs}); \
             {durable}",
            seconds(wait),
            self.fence,
            durable = self.make_durable("@distlock_fence IS NOT NULL"),
        )
    }
}
