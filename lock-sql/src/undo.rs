//! Undoing a lock-table grant (or a permit) whose reply did not come in time, on both databases.
//!
//! A stalled server (a pause, a full disk, a network that holds packets) runs every request it
//! buffered when it resumes — after the caller gave up with a timeout. A grant made then belongs
//! to an owner token nobody will use, and would keep the lock (the permit) from everyone else
//! until its lease ends. Session kinds need none of this: their grant ends with the session the
//! caller's connection closes. So the lock-table and permit acquisitions follow an unanswered
//! request with its undo — the owner-checked release of the attempt's token, fresh for every
//! acquisition, so that it never touches another holder's lock — on a thread of their own,
//! without making the caller wait:
//! - PostgreSQL (`postgres/undo.rs`): behind the request on the same connection, which the
//!   server reads in order, so the undo runs right after a grant however late it comes;
//! - MariaDB (`mysql/undo.rs`): on another connection, once the old session is gone (`KILL`,
//!   then its absence from the process list), since a reply-less `mysql` connection cannot send
//!   again.
//!
//! Redis does the same (`lock-redis/src/cleanup.rs`). Best effort: with more than
//! [`MAX_THREADS`] undos under way in the process, or when no thread can be started, an orphan
//! grant lapses at its lease end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Result;

/// The undo threads' name (Linux shows 15 bytes of a thread name).
const THREAD_NAME: &str = "distlock-undo";

/// The most undo threads at once, per process (acquisitions' undos and releases' retries
/// together): each holds a server connection while its server does not answer.
const MAX_THREADS: usize = 64;

/// The longest an undo keeps trying (a longer lease lapses on its own).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

/// The pause after a failed try of [`retry_until`]; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

static THREADS: AtomicUsize = AtomicUsize::new(0);

/// One of the [`THREADS`], given back when its thread ends, even by a panic.
struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        THREADS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs `attempt` on a thread of its own (as [`spawn`]) until it succeeds, with back-off, or
/// until the next try would start after `until` (at most [`MAX_WAIT`] from now).
pub(crate) fn retry_until(
    until: Instant,
    what: &'static str,
    mut attempt: impl FnMut() -> Result<()> + Send + 'static,
) {
    let until = until.min(Instant::now() + MAX_WAIT);
    spawn(move || {
        let mut pause = FIRST_PAUSE;
        loop {
            match attempt() {
                Ok(()) => return tracing::debug!(what, "done in the background"),
                Err(error) => tracing::debug!(what, %error, "failed in the background; trying again"),
            }
            if Instant::now() + pause >= until {
                return tracing::debug!(what, "gave up in the background: the lease lapses on its own");
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    });
}

/// Runs `undo` on a thread of its own, unless [`MAX_THREADS`] are under way or no thread can be
/// started (then the grant lapses at its lease end).
pub(crate) fn spawn(undo: impl FnOnce() + Send + 'static) {
    if THREADS.fetch_add(1, Ordering::AcqRel) >= MAX_THREADS {
        THREADS.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!("too many undos under way: an unanswered acquisition lapses at its lease end");
        return;
    }
    let spawned = std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || {
        let _counted = Counted;
        undo();
    });
    if let Err(error) = spawned {
        THREADS.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!(%error, "no thread for an undo: an unanswered acquisition lapses at its lease end");
    }
}
