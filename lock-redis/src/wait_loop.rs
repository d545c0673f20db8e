//! The wait loop of every Redis waiter (the mutex's on one node or Redlock's nodes, the
//! read-write lock's and the semaphore's): try; on the first refusal subscribe to release
//! messages and try again (a release between the refusal and the subscription would otherwise be
//! missed); then sleep until a wake-up, the re-check time or the deadline, and try again.
//!
//! What differs between them — how an attempt is made, how wake-ups are registered (the hub of
//! the node serving the lock, following its slot in a cluster, or every Redlock node), how soon
//! a refusal is re-checked, whether it calls for a random back-off — is the [`Waiter`]
//! implementation.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Acquired, Result};

use crate::error;

/// The longest a waiter waits for a release message before it re-checks on its own.
///
/// Release messages are fire-and-forget, so this bounds the delay a lost one can cause. It is
/// deliberately not shorter: a hand-off must come from the message, and polling faster would only
/// load the server (conformance scenario S11 checks hand-offs are faster than this).
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// How soon an attempt refused because a slot migration split its keys (`TRYAGAIN`) is tried
/// again: a migration of a slot's few keys takes milliseconds, a slow one seconds.
const MIGRATION_RECHECK: Duration = Duration::from_millis(100);

/// Why an attempt did not get the lock, and what the loop should do about it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Refusal {
    /// Re-check within this long at the latest (the soonest the holder's lease can end).
    pub(crate) retry_in: Option<Duration>,
    /// Sleep this long, ignoring wake-ups, before the next attempt (Redlock's random back-off
    /// after a split vote).
    pub(crate) back_off: Option<Duration>,
}

/// One waiting acquisition of one kind.
pub(crate) trait Waiter {
    /// The lease an attempt returns.
    type Lease;

    /// One acquisition attempt.
    fn attempt(&mut self) -> Result<std::result::Result<Self::Lease, Refusal>>;

    /// Registers for release messages, then waits until the subscription is confirmed or `until`.
    /// An error ends the wait: registering asked the server something, and it did not answer
    /// (the next attempt would only cost the caller another timeout).
    fn subscribe(&mut self, until: Instant) -> Result<()>;

    /// Forgets the wake-ups received so far (the next attempt answers them).
    fn clear(&self);

    /// Sleeps until a wake-up arrives or `until`.
    fn wait(&self, until: Instant);
}

/// Runs `waiter` until it acquires (`Some`) or `deadline` passes (`None`). Errors of an attempt
/// end the loop at once (what they leave behind is the caller's to clean up), except a cluster's
/// `TRYAGAIN`, which says the attempt was not run: the loop waits for the migration instead.
pub(crate) fn wait_until<W: Waiter>(
    waiter: &mut W,
    deadline: Option<Instant>,
) -> Result<Option<Acquired<W::Lease>>> {
    let mut subscribed = false;
    let mut waited = false;
    loop {
        waiter.clear();
        let sent_at = Instant::now();
        let refusal = match waiter.attempt() {
            Ok(Ok(lease)) => return Ok(Some(Acquired::new(lease, sent_at).contended_if(waited))),
            Ok(Err(refusal)) => refusal,
            // The attempt was not run: its keys are split by a slot migration, which may last
            // longer than the attempt's own retries. A refusal for now, tried again soon.
            Err(error) if error::is_split_by_migration(&error) => {
                Refusal { retry_in: Some(MIGRATION_RECHECK), back_off: None }
            }
            Err(error) => return Err(error),
        };
        waited = true;
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(None);
        }
        let bound = |wait: Duration| deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
        // The re-check is due by the refusal's hint (the soonest the holder's lease can end, or
        // a read-write waiter's backoff, which keeps a writer's place in line fresh), and by
        // the fallback at the latest — the wait for the subscription included.
        let recheck = refusal.retry_in.map_or(FALLBACK_RECHECK, |hint| hint.min(FALLBACK_RECHECK));
        if !subscribed {
            waiter.subscribe(bound(recheck))?;
            subscribed = true;
        } else if let Some(pause) = refusal.back_off {
            thread::sleep(bound(pause).saturating_duration_since(now));
        } else {
            waiter.wait(bound(recheck));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Refuses `refusals` times, then grants; records what the loop asked of it.
    struct Scripted {
        refusals: u32,
        refusal: Refusal,
        attempts: u32,
        subscribed: u32,
        waits: Cell<u32>,
        /// Subscribing fails with a timeout.
        silent_on_subscribe: bool,
    }

    impl Waiter for Scripted {
        type Lease = u32;

        fn attempt(&mut self) -> Result<std::result::Result<u32, Refusal>> {
            self.attempts += 1;
            Ok(if self.attempts > self.refusals { Ok(self.attempts) } else { Err(self.refusal) })
        }

        fn subscribe(&mut self, _until: Instant) -> Result<()> {
            self.subscribed += 1;
            if self.silent_on_subscribe {
                return Err(lock_core::Error::Timeout {
                    backend: "test",
                    operation: "subscribe",
                    source: None,
                });
            }
            Ok(())
        }

        fn clear(&self) {}

        fn wait(&self, _until: Instant) {
            self.waits.set(self.waits.get() + 1);
        }
    }

    fn scripted(refusals: u32, refusal: Refusal) -> Scripted {
        Scripted {
            refusals,
            refusal,
            attempts: 0,
            subscribed: 0,
            waits: Cell::new(0),
            silent_on_subscribe: false,
        }
    }

    #[test]
    fn subscribes_once_then_re_checks_before_waiting() {
        let mut waiter = scripted(3, Refusal { retry_in: Some(Duration::from_millis(1)), back_off: None });
        let acquired = wait_until(&mut waiter, None).unwrap().expect("granted on the fourth attempt");
        assert_eq!(acquired.lease, 4);
        assert_eq!(waiter.subscribed, 1);
        // Refusal 1 → subscribe, refusals 2 and 3 → wait.
        assert_eq!(waiter.waits.get(), 2);
    }

    #[test]
    fn a_back_off_sleeps_instead_of_waiting_for_wake_ups() {
        let mut waiter = scripted(3, Refusal { retry_in: None, back_off: Some(Duration::from_millis(1)) });
        assert!(wait_until(&mut waiter, None).unwrap().is_some());
        assert_eq!(waiter.waits.get(), 0);
    }

    #[test]
    fn a_subscription_the_server_did_not_answer_ends_the_wait_without_another_attempt() {
        let mut waiter = Scripted { silent_on_subscribe: true, ..scripted(u32::MAX, Refusal::default()) };
        assert!(matches!(wait_until(&mut waiter, None), Err(lock_core::Error::Timeout { .. })));
        assert_eq!((waiter.attempts, waiter.subscribed), (1, 1));
    }

    /// Refuses with a cluster's `TRYAGAIN` `refusals` times, then grants.
    struct Migrating {
        refusals: u32,
        attempts: u32,
    }

    impl Waiter for Migrating {
        type Lease = u32;

        fn attempt(&mut self) -> Result<std::result::Result<u32, Refusal>> {
            self.attempts += 1;
            if self.attempts > self.refusals {
                return Ok(Ok(self.attempts));
            }
            let reply = redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
                "Multiple keys request during rehashing of slot",
            ));
            Err(error::map("acquire", reply))
        }

        fn subscribe(&mut self, _until: Instant) -> Result<()> {
            Ok(())
        }

        fn clear(&self) {}

        fn wait(&self, _until: Instant) {}
    }

    #[test]
    fn a_migration_refusal_is_waited_out_within_the_deadline() {
        let mut waiter = Migrating { refusals: 3, attempts: 0 };
        let acquired = wait_until(&mut waiter, Some(Instant::now() + Duration::from_secs(60))).unwrap();
        assert_eq!(acquired.expect("granted once the migration let it").lease, 4);

        let mut waiter = Migrating { refusals: u32::MAX, attempts: 0 };
        let deadline = Instant::now() + MIGRATION_RECHECK * 3;
        assert!(
            wait_until(&mut waiter, Some(deadline)).unwrap().is_none(),
            "no error: a refusal at the deadline"
        );
        assert!(waiter.attempts >= 2, "tried again within the deadline");
    }

    #[test]
    fn a_passed_deadline_ends_after_one_attempt() {
        let mut waiter = scripted(u32::MAX, Refusal::default());
        assert!(wait_until(&mut waiter, Some(Instant::now())).unwrap().is_none());
        assert_eq!((waiter.attempts, waiter.subscribed), (1, 0));
    }
}
