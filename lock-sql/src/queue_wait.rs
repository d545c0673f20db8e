//! What the row and advisory kinds of both databases share about one attempt on the server's
//! lock queue: how long it may wait ([`Wait`]), what to do when the pool is exhausted
//! ([`Checkout`]), and from when the hold it wins is counted ([`granted_after`]); and the loop
//! of such attempts up to a deadline ([`in_queue_until`]).

use std::time::{Duration, Instant};

use lock_core::{Acquired, Deadline, Result};

/// Waits in the server's lock queue until `deadline`: one `attempt` for [`Deadline::Now`], else
/// attempts of one [`Wait::next`] slice each (the whole wait when it has a deadline) until one
/// wins or the deadline passes. `attempt` returns the lease and its [`Grant`].
///
/// # Errors
/// The first error an attempt returns.
pub(crate) fn in_queue_until<L>(
    deadline: Deadline,
    io_timeout: Duration,
    mut attempt: impl FnMut(Wait) -> Result<Option<(L, Grant)>>,
) -> Result<Option<Acquired<L>>> {
    let deadline = match deadline {
        Deadline::Now => return Ok(attempt(Wait::No)?.map(|(lease, grant)| Acquired::new(lease, grant.at))),
        Deadline::At(at) => Some(at),
        Deadline::Never => None,
    };
    let mut retried = false;
    loop {
        if let Some((lease, grant)) = attempt(Wait::next(deadline, io_timeout))? {
            return Ok(Some(queued_grant(lease, grant, retried)));
        }
        retried = true;
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
    }
}

/// A wait in the server's lock queue without a deadline (`lock()`) is made of slices as long as
/// the I/O timeout, but no shorter than this, so that a server that stops answering is noticed
/// within a slice and an I/O timeout: the I/O timeout is how long the user lets silence last.
/// Each new slice re-queues (and may lose its place to a later waiter), so a slice much shorter
/// than a second would turn the wait into polling. A wait with a deadline is one statement: it
/// keeps its place in the queue until the deadline.
pub(crate) const MIN_WAIT_SLICE: Duration = Duration::from_secs(1);

/// The longest one statement waits in the server's lock queue: the servers cap their own
/// limits (PostgreSQL's `lock_timeout` takes at most `INT_MAX` ms, about 24.8 days; MariaDB's
/// `max_statement_time` at most a year), so a longer timed wait — any `Duration` a caller may
/// pass — re-queues once a day, which costs its place in the queue that rarely.
pub(crate) const MAX_STATEMENT_WAIT: Duration = Duration::from_secs(24 * 3600);

/// How long one attempt may wait in the server's lock queue.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all (`try_lock`): a busy lock is `None`, and an exhausted pool is
    /// [`Error::PoolExhausted`](lock_core::Error::PoolExhausted) at once.
    No,
    /// Until the deadline of a timed wait, which also bounds the wait for a pooled connection.
    Until(Instant),
    /// Until the end of a slice of a wait without a deadline.
    Slice(Instant),
}

impl Wait {
    /// The attempts of a wait until `deadline` (forever if `None`, in slices of the I/O timeout
    /// `io_timeout`, at least [`MIN_WAIT_SLICE`]), one at a time. A deadline further than
    /// [`MAX_STATEMENT_WAIT`] away is waited for in statements of that length.
    pub(crate) fn next(deadline: Option<Instant>, io_timeout: Duration) -> Self {
        let now = Instant::now();
        match deadline {
            None => Wait::Slice(now + io_timeout.max(MIN_WAIT_SLICE)),
            Some(deadline) => {
                Wait::Until(now.checked_add(MAX_STATEMENT_WAIT).map_or(deadline, |cap| deadline.min(cap)))
            }
        }
    }

    /// What the attempt does when every pooled connection is in use.
    pub(crate) fn checkout(self) -> Checkout {
        match self {
            Wait::No => Checkout::Now,
            Wait::Until(deadline) => Checkout::Wait(Some(deadline)),
            Wait::Slice(_) => Checkout::Wait(None),
        }
    }

    /// How long the statement waits in the queue, from now (at least 1 ms); `None`: not at all.
    pub(crate) fn length(self) -> Option<Duration> {
        match self {
            Wait::No => None,
            Wait::Until(end) | Wait::Slice(end) => {
                Some(end.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))
            }
        }
    }
}

/// What to do when every connection of the pool is in use.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Checkout {
    /// Fail at once with [`Error::PoolExhausted`](lock_core::Error::PoolExhausted) (a `try_`
    /// call).
    Now,
    /// Wait for one to come back until the deadline (a timed wait), or for the connect timeout.
    Wait(Option<std::time::Instant>),
}

/// The earliest moment, by this process's clock, at which the server can have granted a lock
/// whose statement was sent by `sent` and waited `waited` in the queue by the server's clock: the
/// server read the statement after `sent`, so the grant came at least the wait after it.
///
/// A hold won by a wait is counted from there, not from `sent`: a long wait in the queue must not
/// eat into the lease (with renewal off, a wait longer than the lease would otherwise hand back a
/// hold already lost), and the server's idle limit starts later still. A server clock stepped
/// forward during the wait cannot push the moment past now.
pub(crate) fn granted_after(sent: Instant, waited: Duration) -> Instant {
    sent + waited.min(sent.elapsed())
}

/// A won attempt on the server's lock queue: when its hold counts from ([`granted_after`]), and
/// how long the server measured the statement waiting in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) at: Instant,
    pub(crate) waited: Duration,
}

impl Grant {
    /// The grant of a statement sent by `sent` that waited `waited` by the server's clock.
    pub(crate) fn new(sent: Instant, waited: Duration) -> Self {
        Self { at: granted_after(sent, waited), waited }
    }
}

/// A server wait longer than this counts an acquisition as contended: an uncontended grant
/// waits microseconds.
const QUEUED: Duration = Duration::from_millis(1);

/// An acquisition won by an attempt granted as `grant` says: contended when an earlier attempt
/// lost (`retried`), or the server measured more than [`QUEUED`] in its lock queue. Only the
/// server's measure counts: the client's time around the statement also holds the wait for a
/// pooled connection, opening one (TCP, TLS, authentication), and the row kinds' first use of a
/// name (inserting the row), none of which is contention.
pub(crate) fn queued_grant<L>(lease: L, grant: Grant, retried: bool) -> Acquired<L> {
    Acquired::new(lease, grant.at).contended_if(retried || grant.waited > QUEUED)
}

/// µs as the databases return them (negative: a clock stepped back) as a [`Duration`].
pub(crate) fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_counted_from_the_wait_never_past_now() {
        let sent = Instant::now() - Duration::from_secs(2);
        let granted = granted_after(sent, Duration::from_secs(1));
        assert_eq!(granted, sent + Duration::from_secs(1));
        assert!(granted_after(sent, Duration::from_secs(60)) <= Instant::now());
        assert_eq!(micros(-5), Duration::ZERO);
    }

    #[test]
    fn a_far_deadline_is_waited_for_in_statements_a_server_takes() {
        let far = Instant::now() + Duration::from_secs(100 * 24 * 3600);
        let Wait::Until(end) = Wait::next(Some(far), Duration::from_secs(1)) else { panic!("a timed wait") };
        assert!(end <= Instant::now() + MAX_STATEMENT_WAIT);
        assert!(end.duration_since(Instant::now()) < Duration::from_millis(i32::MAX.unsigned_abs().into()));
        let near = Instant::now() + Duration::from_secs(5);
        assert!(matches!(Wait::next(Some(near), Duration::from_secs(1)), Wait::Until(end) if end == near));
    }

    #[test]
    fn only_the_server_s_queue_wait_makes_a_grant_contended() {
        // A statement sent long after the attempt started (a slow connect or checkout) that the
        // server granted at once is not contended.
        let sent = Instant::now() - Duration::from_millis(200);
        let quick = queued_grant((), Grant::new(sent, Duration::from_micros(40)), false);
        assert!(!quick.contended);
        let queued = queued_grant((), Grant::new(sent, Duration::from_millis(150)), false);
        assert!(queued.contended);
        assert_eq!(queued.sent_at, sent + Duration::from_millis(150));
        assert!(queued_grant((), Grant::new(sent, Duration::ZERO), true).contended);
    }
}
