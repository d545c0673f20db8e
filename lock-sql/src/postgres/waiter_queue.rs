//! SQL fragments over the lock row's waiter queue: `waiters text[]`, oldest first, one entry
//! `<until, ms since the epoch>:<channel>` per waiting client, where `channel` is the client's
//! own `LISTEN` channel. A release `NOTIFY`s the head only, so one hand-off wakes one client, not
//! every waiting one. An entry lapses at its `until` unless its client renews it (at each
//! re-check): a crashed waiter leaves the queue on its own.
//!
//! The queue lives in the lock row itself, not in a table of its own: statements that change the
//! lock serialize on that row, and an `UPDATE` that waited for the row reads the row's newest
//! version (a separate table would be read at the statement's older snapshot, and a release
//! could miss a waiter queued just before it).
//!
//! Each function returns an SQL expression; `queue` is the column (or an expression of it),
//! `now` a `timestamptz` expression, `me` the waiter's channel, `note` the entry's life in ms.

/// `FROM` items of the queue's live entries at `now`, as `q(e, i)` (`i` = position).
fn live(queue: &str, now: &str) -> String {
    format!(
        "unnest({queue}) WITH ORDINALITY AS q(e, i) \
         WHERE split_part(q.e, ':', 1)::bigint >= extract(epoch FROM {now}) * 1000"
    )
}

/// The channel of the oldest live waiter, or `NULL`.
pub(crate) fn head(queue: &str, now: &str) -> String {
    format!("(SELECT split_part(q.e, ':', 2) FROM {} ORDER BY q.i LIMIT 1)", live(queue, now))
}

/// The live entries without `me`'s.
pub(crate) fn without(queue: &str, now: &str, me: &str) -> String {
    format!("ARRAY(SELECT q.e FROM {} AND split_part(q.e, ':', 2) <> {me} ORDER BY q.i)", live(queue, now))
}

/// `me`'s entry, living `note` ms from `now`.
pub(crate) fn entry(now: &str, me: &str, note: &str) -> String {
    format!("(round(extract(epoch FROM {now}) * 1000)::bigint + {note})::text || ':' || {me}")
}

/// The live entries with `me`'s renewed in its place, or appended when it had none (or only a
/// lapsed one: a waiter that stopped renewing lost its place).
pub(crate) fn noted(queue: &str, now: &str, me: &str, note: &str) -> String {
    let live = live(queue, now);
    let entry = entry(now, me, note);
    format!(
        "ARRAY(SELECT CASE WHEN split_part(q.e, ':', 2) = {me} THEN {entry} ELSE q.e END \
         FROM {live} ORDER BY q.i) \
         || CASE WHEN EXISTS (SELECT 1 FROM {live} AND split_part(q.e, ':', 2) = {me}) \
            THEN '{{}}'::text[] ELSE ARRAY[{entry}] END"
    )
}

/// Whether `me`'s entry is in the queue (live or not).
pub(crate) fn contains(queue: &str, me: &str) -> String {
    format!("EXISTS (SELECT 1 FROM unnest({queue}) AS q(e) WHERE split_part(q.e, ':', 2) = {me})")
}
