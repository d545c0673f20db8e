//! The lock-table kind's wake-ups: one `LISTEN` connection per backend (shared by its clones)
//! on a channel of its own, which the backend's waiters leave in the lock row's queue. A
//! release's statement `NOTIFY`s the oldest waiting client's channel with the lock's name; that
//! client's listener wakes its longest-waiting thread for the name ([`Waiters`]). The same
//! connection also `LISTEN`s on the elections' channel (`<table>_lead`, shared by every client;
//! see `election.rs`) and wakes every watcher of the election a notice names.
//!
//! The connection lives on a thread of its own ([`LISTENER_THREAD_NAME`]), started by the first
//! wait and stopped when the backend is dropped: a connection's socket is only read while some
//! thread drives it. Notifications are best effort (a listener reconnecting misses some), so
//! waiters also re-check at the holder's expiry — an expiry sends no `NOTIFY` — and at least
//! every [`FALLBACK_RECHECK`].
//!
//! Through transaction pooling there is no listening at all (a `LISTEN` would stay on a server
//! connection that other clients get next, and this one would hear nothing): waiters re-check on
//! their own, from [`POLLED_RECHECK_FIRST`] doubling up to [`POLLED_RECHECK_MAX`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::pool::PgPool;
use crate::waiters::{Registration, Waiters};

/// The longest a waiter sleeps without a notification before it re-checks on its own.
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// Without `LISTEN` (transaction pooling): a waiter's first re-check comes this soon after its
/// attempt, and each next one twice as late, up to [`POLLED_RECHECK_MAX`] — a hand-off costs
/// up to that much more than with a wake-up; each re-check is one statement.
pub(crate) const POLLED_RECHECK_FIRST: Duration = Duration::from_millis(4);

/// The longest a waiter sleeps between re-checks without `LISTEN`.
pub(crate) const POLLED_RECHECK_MAX: Duration = Duration::from_millis(25);

/// The name of the listening thread (one per backend that has waited).
pub const LISTENER_THREAD_NAME: &str = "distlock-pgwake";

/// How often the listening thread looks up from its socket to see whether it should stop, and
/// how long it waits before reconnecting.
const TICK: Duration = Duration::from_millis(250);

/// The listener of one backend (and its clones).
pub(crate) struct Listener {
    shared: Arc<Shared>,
}

struct Shared {
    pool: PgPool,
    channel: String,
    listen: String,
    waiters: Waiters,
    /// The channel every client of the lock tables' elections is told on (payload: the
    /// election's name), and the watchers of this client, by election.
    elections_channel: String,
    elections: Waiters,
    /// Whether `LISTEN` is in force on a live connection.
    listening: Mutex<bool>,
    /// Whether this client may `LISTEN` (not through transaction pooling).
    can_listen: bool,
    changed: Condvar,
    started: AtomicBool,
    stop: AtomicBool,
}

impl Listener {
    /// A listener on a new channel of its own (`distlock_w_` and 16 random hex digits), and on
    /// `elections_channel` (a validated identifier), the channel of the elections' notices;
    /// one that never listens unless `can_listen`.
    pub(crate) fn new(pool: PgPool, elections_channel: &str, can_listen: bool) -> Self {
        let channel = format!("distlock_w_{}", &lock_core::OwnerToken::random().to_hex()[..16]);
        Self {
            shared: Arc::new(Shared {
                pool,
                listen: format!("LISTEN \"{channel}\"; LISTEN \"{elections_channel}\""),
                channel,
                waiters: Waiters::default(),
                elections_channel: elections_channel.to_owned(),
                elections: Waiters::default(),
                listening: Mutex::new(false),
                can_listen,
                changed: Condvar::new(),
                started: AtomicBool::new(false),
                stop: AtomicBool::new(false),
            }),
        }
    }

    /// The channel this listener's client waits on (its waiters' queue entries name it).
    pub(crate) fn channel(&self) -> &str {
        &self.shared.channel
    }

    /// Registers a waiter for `name`, starting the listening thread on first use.
    pub(crate) fn register(&self, name: &str) -> Registration<'_> {
        let registration = self.shared.waiters.register(name);
        self.start();
        registration
    }

    /// Registers a watcher of the election `name`, starting the listening thread on first use.
    pub(crate) fn register_election(&self, name: &str) -> Registration<'_> {
        let registration = self.shared.elections.register(name);
        self.start();
        registration
    }

    /// Whether `LISTEN` is in force now.
    pub(crate) fn is_listening(&self) -> bool {
        *self.shared.listening.lock()
    }

    /// Whether this client's waiters are woken by notifications at all (not through
    /// transaction pooling).
    pub(crate) fn wakes(&self) -> bool {
        self.shared.can_listen
    }

    /// How long a waiter sleeps before its `round`th re-check (from 0) when no notification
    /// comes: [`FALLBACK_RECHECK`] with `LISTEN`; without, a quick pace that slows down.
    pub(crate) fn recheck_after(&self, round: u32) -> Duration {
        if self.shared.can_listen {
            return FALLBACK_RECHECK;
        }
        POLLED_RECHECK_FIRST.saturating_mul(1 << round.min(16)).min(POLLED_RECHECK_MAX)
    }

    fn start(&self) {
        if !self.shared.can_listen {
            return;
        }
        if !self.shared.started.swap(true, Ordering::AcqRel) {
            let shared = Arc::clone(&self.shared);
            let spawned =
                thread::Builder::new().name(LISTENER_THREAD_NAME.into()).spawn(move || listen(&shared));
            if let Err(error) = spawned {
                // Waiters still re-check on their own.
                tracing::warn!(%error, "could not start the postgres LISTEN thread");
                self.shared.started.store(false, Ordering::Release);
            }
        }
    }

    /// Waits until `LISTEN` is in force, or `until` (at once for a client that never listens).
    pub(crate) fn wait_listening(&self, until: Instant) {
        if !self.shared.can_listen {
            return;
        }
        let mut listening = self.shared.listening.lock();
        while !*listening {
            if self.shared.changed.wait_until(&mut listening, until).timed_out() {
                break;
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// The listening thread: (re)connects, `LISTEN`s, and reads notifications until told to stop.
fn listen(shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        let weak = Arc::downgrade(shared);
        let sink = Box::new(move |notification: tokio_postgres::Notification| {
            if let Some(shared) = weak.upgrade() {
                if notification.channel() == shared.elections_channel {
                    shared.elections.wake_every(notification.payload());
                } else {
                    shared.waiters.wake(notification.payload());
                }
            }
        });
        let listen = shared.listen.as_str();
        let opened = shared.pool.open_unpooled(Some(sink)).and_then(|connection| {
            connection.run("listen", |client| async move { client.batch_execute(listen).await })?;
            Ok(connection)
        });
        let connection = match opened {
            Ok(connection) => connection,
            Err(error) => {
                tracing::debug!(%error, "the postgres LISTEN connection failed; waiters re-check on their own");
                thread::sleep(TICK);
                continue;
            }
        };
        set_listening(shared, true);
        // A notification sent while nobody listened is lost: wake everyone to re-check.
        shared.waiters.wake_all();
        shared.elections.wake_all();
        while !shared.stop.load(Ordering::Acquire) {
            if connection.wait_for_notifications(TICK).is_err() {
                break;
            }
        }
        set_listening(shared, false);
    }
}

fn set_listening(shared: &Shared, listening: bool) {
    *shared.listening.lock() = listening;
    shared.changed.notify_all();
}
