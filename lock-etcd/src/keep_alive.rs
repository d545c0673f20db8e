//! [`ClientLease`]: the one lease of a client (etcd's `concurrency.Session`) and the one
//! keep-alive stream that renews it, on the backend's runtime.
//!
//! Every lock key of the client is attached to this lease, so renewal costs one keep-alive
//! request every third of the TTL (Go's `clientv3` cadence) whether the client holds one lock or
//! 10,000 — plus one request per renewal batch of lock-core, which asks for a confirmation sent
//! after the batch began (see [`ClientLease::confirmed_since`]).
//!
//! The lease's life, as this client knows it ([`LeaseView`]):
//! - **confirmed**: a keep-alive (or the grant) sent at `confirmed_at` was answered with a TTL;
//!   etcd expires the lease no earlier than that TTL after it received the request, so the
//!   lease is vouched for until `confirmed_at + TTL` (by this process's clock, drift aside);
//! - **in doubt**: the stream broke or a reply is overdue (`stream_up` false); the task opens a
//!   new stream, again and again, until a reply confirms the lease;
//! - **lost**: etcd answered TTL 0 or "lease not found" (revoked, or expired), or nothing was
//!   confirmed until `vouched_until` passed. Final: the session grants a new lease for later
//!   acquisitions, and every hold on this one is lost. A lease lost by the clock alone is
//!   revoked in passing, should etcd still have it, so its keys go at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use lock_core::DoubtSignal;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, timeout_at};

use crate::error::Failure;

/// How long a failed attempt to reopen the stream waits before the next one.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// What this client knows of its lease right now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseView {
    /// When the last request etcd confirmed (a keep-alive, or the grant) was sent.
    pub(crate) confirmed_at: Instant,
    /// Until when that confirmation vouches for the lease: `confirmed_at` plus the TTL etcd
    /// answered.
    pub(crate) vouched_until: Instant,
    /// Whether the keep-alive stream is open and its replies on time.
    pub(crate) stream_up: bool,
    /// Whether the lease is gone for good.
    pub(crate) lost: bool,
}

/// One lease of a client and what is known of it.
pub(crate) struct ClientLease {
    pub(crate) id: i64,
    /// The TTL etcd granted (whole seconds; at least its minimum).
    pub(crate) ttl: Duration,
    view: watch::Sender<LeaseView>,
    /// Raised while this lease is in doubt or lost (the view's `!stream_up`), for the holds on
    /// it ([`DistributedLock::doubt_signal`](lock_core::DistributedLock::doubt_signal)): a hold
    /// on a lease found lost stays in doubt until its own check reports it lost, also once the
    /// session has granted the client a new lease.
    pub(crate) doubt: DoubtSignal,
    /// A confirmation is wanted of a keep-alive sent at or after this instant.
    wanted: Mutex<Option<Instant>>,
    poke: Notify,
}

impl ClientLease {
    /// A lease just granted (by a request sent at `sent_at`) whose keep-alive stream is open.
    pub(crate) fn new(id: i64, ttl: Duration, sent_at: Instant) -> Self {
        let view =
            LeaseView { confirmed_at: sent_at, vouched_until: sent_at + ttl, stream_up: true, lost: false };
        let (view, doubt) = (watch::Sender::new(view), DoubtSignal::new());
        Self { id, ttl, view, doubt, wanted: Mutex::new(None), poke: Notify::new() }
    }

    /// A stand-in before the first grant: lost, so nothing uses or revokes it.
    pub(crate) fn placeholder() -> Self {
        let lease = Self::new(0, Duration::ZERO, Instant::now());
        lease.update(|view| {
            view.lost = true;
            view.stream_up = false;
            true
        });
        lease
    }

    /// Changes the view with `change` (which says whether it changed anything), and the doubt
    /// signal with it, under the view's lock: raised while the stream is not up.
    fn update(&self, change: impl FnOnce(&mut LeaseView) -> bool) {
        self.view.send_if_modified(|view| {
            let changed = change(view);
            if !view.stream_up {
                self.doubt.raise();
            } else if self.doubt.is_raised() {
                self.doubt.clear_since(self.doubt.mark());
            }
            changed
        });
    }

    /// What is known now (no I/O).
    pub(crate) fn view(&self) -> LeaseView {
        *self.view.borrow()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.view.borrow().lost
    }

    /// Waits until a keep-alive sent at or after `since` is answered (asking the keep-alive task
    /// to send one now unless one is on its way); `Err(LeaseLost)` if the lease is lost first.
    /// Callers bound the wait.
    pub(crate) async fn confirmed_since(&self, since: Instant) -> Result<(), Failure> {
        {
            let mut wanted = self.wanted.lock();
            *wanted = Some(wanted.map_or(since, |earlier| earlier.max(since)));
        }
        self.poke.notify_one();
        let mut view = self.view.subscribe();
        let settled = view.wait_for(|view| view.lost || view.confirmed_at >= since).await;
        match settled.map(|view| view.lost) {
            Ok(false) => Ok(()),
            // Lost, or (never: we hold the sender) the sender gone.
            _ => Err(Failure::LeaseLost),
        }
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn lost(&self) {
        let mut view = self.view.subscribe();
        let _ = view.wait_for(|view| view.lost).await;
    }

    /// Records that etcd answered a keep-alive sent at `sent_at` with `ttl`.
    fn confirm(&self, sent_at: Instant, ttl: Duration) {
        self.update(|view| {
            if !view.lost {
                view.confirmed_at = view.confirmed_at.max(sent_at);
                view.vouched_until = view.vouched_until.max(sent_at + ttl);
                view.stream_up = true;
            }
            true
        });
    }

    /// The stream broke or a reply is overdue: in doubt until a reply confirms the lease.
    fn suspend(&self) {
        self.update(|view| std::mem::replace(&mut view.stream_up, false));
    }

    /// Marks the lease lost for good.
    pub(crate) fn mark_lost(&self, why: &str) {
        let was_lost = self.view.borrow().lost;
        self.update(|view| {
            view.lost = true;
            view.stream_up = false;
            true
        });
        if !was_lost {
            tracing::warn!(lease = %format_args!("{:x}", self.id), why, "etcd lease lost: every lock of this client on it is lost");
        }
    }
}

/// The keep-alive task's timing and counters.
#[derive(Clone)]
pub(crate) struct KeepAliveTiming {
    /// How long a reply may take before the stream counts as broken.
    pub(crate) reply_timeout: Duration,
    /// Keep-alive requests sent by the backend (every stream, every lease).
    pub(crate) requests: Arc<AtomicU64>,
}

/// Keeps `lease` alive over `stream` (opened by the grant) until it is lost: a request every
/// third of the TTL, and whenever [`ClientLease::confirmed_since`] asks for one; a broken or
/// silent stream is reopened until a reply confirms the lease, or it can no longer be vouched
/// for. Runs on the backend's runtime until the lease is lost or the runtime stops.
pub(crate) async fn keep_alive(
    lease: Arc<ClientLease>,
    mut client: LeaseClient,
    stream: (LeaseKeeper, LeaseKeepAliveStream),
    timing: KeepAliveTiming,
) {
    let interval = lease.ttl / 3;
    let mut stream = Some(stream);
    // Send times of the requests not answered yet, oldest first: etcd answers one stream's
    // requests in order.
    let mut unanswered: VecDeque<Instant> = VecDeque::new();
    let mut last_sent = lease.view().confirmed_at;
    loop {
        let Some((_, replies)) = stream.as_mut() else {
            let Some(reopened) = reopen(&lease, &mut client, &timing).await else { return };
            (stream, last_sent) = (Some(reopened), lease.view().confirmed_at);
            unanswered.clear();
            continue;
        };
        let next_due = tokio::time::Instant::from_std(last_sent + interval);
        let reply_due =
            unanswered.front().map(|sent| tokio::time::Instant::from_std(*sent + timing.reply_timeout));
        let event = tokio::select! {
            reply = replies.message() => Event::Reply(reply.ok().flatten().map(|reply| reply.ttl())),
            () = sleep_until(reply_due.unwrap_or(next_due)), if reply_due.is_some() => Event::Overdue,
            () = sleep_until(next_due) => Event::Due,
            () = lease.poke.notified() => Event::Wanted,
        };
        match event {
            Event::Reply(Some(ttl)) if ttl > 0 => {
                if let Some(sent) = unanswered.pop_front() {
                    lease.confirm(sent, Duration::from_secs(ttl.unsigned_abs()));
                }
            }
            Event::Reply(Some(_)) => {
                lease.mark_lost("etcd answered the keep-alive with TTL 0: the lease was revoked or expired");
                return;
            }
            Event::Reply(None) | Event::Overdue => {
                tracing::debug!(lease = %format_args!("{:x}", lease.id), "etcd keep-alive stream broken or silent; reopening");
                lease.suspend();
                stream = None;
            }
            Event::Due | Event::Wanted => {
                let wanted = lease.wanted.lock().take();
                let needed = matches!(event, Event::Due) || wanted.is_some_and(|since| since > last_sent);
                if !needed {
                    continue;
                }
                let Some((keeper, _)) = stream.as_mut() else { continue };
                let sent = Instant::now();
                let deadline = tokio::time::Instant::from_std(sent + timing.reply_timeout);
                match timeout_at(deadline, keeper.keep_alive()).await {
                    Ok(Ok(())) => {
                        timing.requests.fetch_add(1, Ordering::Relaxed);
                        unanswered.push_back(sent);
                        last_sent = sent;
                    }
                    _ => {
                        lease.suspend();
                        stream = None;
                    }
                }
            }
        }
    }
}

enum Event {
    /// A reply with its TTL, or the stream's end (`None`).
    Reply(Option<i64>),
    /// The oldest request went unanswered for the reply timeout.
    Overdue,
    /// A third of the TTL since the last request.
    Due,
    /// A renewal batch wants a fresh confirmation.
    Wanted,
}

/// A new keep-alive stream for `lease`, its first reply confirming the lease; `None` once the
/// lease is lost (etcd says so, or nothing confirmed it until it could no longer be vouched
/// for — then it is revoked in passing, in case etcd still has it).
async fn reopen(
    lease: &ClientLease,
    client: &mut LeaseClient,
    timing: &KeepAliveTiming,
) -> Option<(LeaseKeeper, LeaseKeepAliveStream)> {
    lease.suspend();
    loop {
        let vouched_until = lease.view().vouched_until;
        let now = Instant::now();
        if now >= vouched_until {
            lease.mark_lost("no keep-alive was answered within the lease's TTL");
            let revoke = client.revoke(lease.id);
            let _ = timeout_at((now + timing.reply_timeout).into(), revoke).await;
            return None;
        }
        let deadline = (now + timing.reply_timeout).min(vouched_until);
        timing.requests.fetch_add(1, Ordering::Relaxed);
        match timeout_at(deadline.into(), client.keep_alive(lease.id)).await {
            Ok(Ok(stream)) => {
                lease.confirm(now, lease.ttl);
                return Some(stream);
            }
            Ok(Err(error)) => {
                let failure = Failure::from(error);
                if failure.is_lease_gone() {
                    lease.mark_lost("etcd no longer knows the lease: it was revoked or expired");
                    return None;
                }
                tracing::debug!(?failure, "reopening the etcd keep-alive stream failed");
                let pause = (Instant::now() + REOPEN_PAUSE).min(vouched_until);
                tokio::time::sleep_until(pause.into()).await;
            }
            // Timed out: go round (the loop checks whether the lease can still be vouched for).
            Err(_) => {}
        }
    }
}
