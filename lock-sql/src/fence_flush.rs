//! Makes fencing tokens that a holding transaction took durable, on a connection of its own.
//!
//! The row kinds take their token (`nextval`, `NEXTVAL`) inside the transaction that holds the
//! lock, so that it is taken under the lock; but that transaction stays open until the release,
//! and the sequence's update is not flushed to the log until something commits after it. A
//! server that crashed meanwhile hands the token out again. So each grant, before it returns,
//! waits for a commit with a log write that was sent after the grant's reply: that commit
//! flushes the log past the sequence's update.
//!
//! The flushes run on one connection outside the pool (the pool may be all held locks), one at
//! a time; a grant that finds a flush sent after its own reply already done returns at once, so
//! concurrent grants share one flush (as group commit does). Likewise a grant that finds a
//! flush sent after its own reply failed fails at once: grants queued behind a stalled flush
//! would otherwise each try again in turn, each for a whole connect and I/O timeout.

use std::time::Instant;

use lock_core::{Error, Result};
use parking_lot::Mutex;

/// The flush connection of one client, and when the last flush that completed was sent.
pub(crate) struct FenceFlush<C> {
    state: Mutex<State<C>>,
}

struct State<C> {
    connection: Option<C>,
    last_sent: Option<Instant>,
    /// When the last failed flush was sent, and why it failed.
    last_failed: Option<(Instant, String)>,
}

impl<C> Default for FenceFlush<C> {
    fn default() -> Self {
        Self { state: Mutex::new(State { connection: None, last_sent: None, last_failed: None }) }
    }
}

impl<C> std::fmt::Debug for FenceFlush<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceFlush").finish_non_exhaustive()
    }
}

impl<C> FenceFlush<C> {
    /// Returns once a flush sent at or after `taken` (when the grant's reply arrived) has
    /// completed: runs `flush` on the connection (opened with `open` when there is none) unless
    /// one already did. A failed flush drops its connection; the next opens another.
    ///
    /// # Errors
    /// `open`'s or `flush`'s; [`Error::Timeout`] of `backend` at once when a flush sent at or
    /// after `taken` failed.
    pub(crate) fn after(
        &self,
        backend: &'static str,
        taken: Instant,
        open: impl FnOnce() -> Result<C>,
        flush: impl FnOnce(&mut C) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.state.lock();
        if state.last_sent.is_some_and(|sent| sent >= taken) {
            return Ok(());
        }
        if let Some((_, why)) = state.last_failed.as_ref().filter(|(sent, _)| *sent >= taken) {
            return Err(Error::Timeout {
                backend,
                operation: "make the fence durable",
                source: Some(format!("a flush sent after this grant failed: {why}").into()),
            });
        }
        let sent = Instant::now();
        let flushed = match state.connection.take() {
            Some(connection) => Ok(connection),
            None => open(),
        }
        .and_then(|mut connection| flush(&mut connection).map(|()| connection));
        match flushed {
            Ok(connection) => {
                state.connection = Some(connection);
                state.last_sent = Some(sent);
                Ok(())
            }
            Err(error) => {
                state.last_failed = Some((sent, error.to_string()));
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_sent_after_the_grant_covers_it_and_a_failed_one_drops_its_connection() {
        let flush = FenceFlush::<u32>::default();
        let opened = std::cell::Cell::new(0);
        let open = || {
            opened.set(opened.get() + 1);
            Ok(opened.get())
        };
        let taken = Instant::now();
        flush.after("test", taken, open, |_| Ok(())).unwrap();
        // Covered by the flush just done: nothing runs.
        flush.after("test", taken, open, |_| panic!("covered")).unwrap();
        let before_the_failure = Instant::now();
        let failed = flush.after("test", Instant::now(), open, |_| {
            Err(lock_core::Error::InvalidConfig { reason: "a failed flush".into() })
        });
        assert!(failed.is_err());
        // A grant from before the failed flush fails at once: no second try for it.
        let covered = flush.after("test", before_the_failure, open, |_| panic!("covered by the failure"));
        assert!(matches!(covered, Err(Error::Timeout { .. })), "{covered:?}");
        flush
            .after("test", Instant::now(), open, |connection| {
                assert_eq!(*connection, 2, "a new connection after a failure");
                Ok(())
            })
            .unwrap();
    }
}
