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
//! concurrent grants share one flush (as group commit does).

use std::time::Instant;

use lock_core::Result;
use parking_lot::Mutex;

/// The flush connection of one client, and when the last flush that completed was sent.
pub(crate) struct FenceFlush<C> {
    state: Mutex<State<C>>,
}

struct State<C> {
    connection: Option<C>,
    last_sent: Option<Instant>,
}

impl<C> Default for FenceFlush<C> {
    fn default() -> Self {
        Self { state: Mutex::new(State { connection: None, last_sent: None }) }
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
    /// `open`'s or `flush`'s.
    pub(crate) fn after(
        &self,
        taken: Instant,
        open: impl FnOnce() -> Result<C>,
        flush: impl FnOnce(&mut C) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.state.lock();
        if state.last_sent.is_some_and(|sent| sent >= taken) {
            return Ok(());
        }
        let sent = Instant::now();
        let mut connection = match state.connection.take() {
            Some(connection) => connection,
            None => open()?,
        };
        flush(&mut connection)?;
        state.connection = Some(connection);
        state.last_sent = Some(sent);
        Ok(())
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
        flush.after(taken, open, |_| Ok(())).unwrap();
        // Covered by the flush just done: nothing runs.
        flush.after(taken, open, |_| panic!("covered")).unwrap();
        let failed = flush.after(Instant::now(), open, |_| {
            Err(lock_core::Error::InvalidConfig { reason: "a failed flush".into() })
        });
        assert!(failed.is_err());
        flush
            .after(Instant::now(), open, |connection| {
                assert_eq!(*connection, 2, "a new connection after a failure");
                Ok(())
            })
            .unwrap();
    }
}
