//! The lock-table kind's wake-ups: one `LISTEN` connection per backend (shared by its clones)
//! on a channel of its own, which the backend's waiters leave in the lock row's queue. A
//! release's statement `NOTIFY`s the oldest waiting client's channel with the lock's name; that
//! client's listener wakes its longest-waiting thread for the name (one thread: one release can
//! be taken once). A woken thread that stops waiting passes the wake-up on.
//!
//! The connection lives on a thread of its own ([`LISTENER_THREAD_NAME`]), started by the first
//! wait and stopped when the backend is dropped: a connection's socket is only read while some
//! thread drives it. Notifications are best effort (a listener reconnecting misses some), so
//! waiters also re-check at the holder's expiry — an expiry sends no `NOTIFY` — and at least
//! every [`FALLBACK_RECHECK`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::pool::PgPool;

/// The longest a waiter sleeps without a notification before it re-checks on its own.
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// The name of the listening thread (one per backend that has waited).
pub const LISTENER_THREAD_NAME: &str = "distlock-pglisten";

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
    waiters: Mutex<HashMap<String, Vec<Weak<Slot>>>>,
    /// Whether `LISTEN` is in force on a live connection.
    listening: Mutex<bool>,
    changed: Condvar,
    started: AtomicBool,
    stop: AtomicBool,
}

impl Listener {
    /// A listener on a new channel of its own (`distlock_w_` and 16 random hex digits).
    pub(crate) fn new(pool: PgPool) -> Self {
        let channel = format!("distlock_w_{}", &lock_core::OwnerToken::random().to_hex()[..16]);
        Self {
            shared: Arc::new(Shared {
                pool,
                listen: format!("LISTEN \"{channel}\""),
                channel,
                waiters: Mutex::default(),
                listening: Mutex::new(false),
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

    /// Whether `LISTEN` is in force now.
    pub(crate) fn is_listening(&self) -> bool {
        *self.shared.listening.lock()
    }

    /// Registers a waiter for `name`, starting the listening thread on first use.
    pub(crate) fn register(&self, name: &str) -> Registration<'_> {
        let slot = Arc::new(Slot::default());
        self.shared.waiters.lock().entry(name.to_owned()).or_default().push(Arc::downgrade(&slot));
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
        Registration { listener: self, name: name.to_owned(), slot }
    }

    /// Waits until `LISTEN` is in force, or `until`.
    pub(crate) fn wait_listening(&self, until: Instant) {
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
        let waiters = Arc::downgrade(shared);
        let sink = Box::new(move |notification: tokio_postgres::Notification| {
            if let Some(shared) = waiters.upgrade() {
                wake(&shared, notification.payload());
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
        wake_all(shared);
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

/// Wakes the longest-waiting thread for `name`.
fn wake(shared: &Shared, name: &str) {
    let mut waiters = shared.waiters.lock();
    if let Some(slots) = waiters.get_mut(name) {
        slots.retain(|slot| slot.strong_count() > 0);
        if let Some(slot) = slots.first().and_then(Weak::upgrade) {
            slot.wake();
        }
        if slots.is_empty() {
            waiters.remove(name);
        }
    }
}

fn wake_all(shared: &Shared) {
    for slot in shared.waiters.lock().values().flatten().filter_map(Weak::upgrade) {
        slot.wake();
    }
}

/// One waiting thread's wake-up flag.
#[derive(Default)]
pub(crate) struct Slot {
    woken: Mutex<bool>,
    changed: Condvar,
}

impl Slot {
    fn wake(&self) {
        *self.woken.lock() = true;
        self.changed.notify_all();
    }
}

/// A waiter's registration; dropping it unregisters.
pub(crate) struct Registration<'a> {
    listener: &'a Listener,
    name: String,
    slot: Arc<Slot>,
}

impl Registration<'_> {
    /// Forgets notifications received so far.
    pub(crate) fn clear(&self) {
        *self.slot.woken.lock() = false;
    }

    /// Whether other threads of this client wait for the same name (then the client stays in
    /// the lock's queue when this one takes the lock).
    pub(crate) fn others_waiting(&self) -> bool {
        let waiters = self.listener.shared.waiters.lock();
        waiters.get(&self.name).is_some_and(|slots| {
            slots
                .iter()
                .any(|slot| slot.strong_count() > 0 && !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(&self.slot)))
        })
    }

    /// Sleeps until notified or `until`.
    pub(crate) fn wait(&self, until: Instant) {
        let mut woken = self.slot.woken.lock();
        while !*woken {
            if self.slot.changed.wait_until(&mut woken, until).timed_out() {
                break;
            }
        }
    }
}

impl Drop for Registration<'_> {
    /// Unregisters; a wake-up this thread took and did not act on goes to the next thread.
    fn drop(&mut self) {
        let unanswered = *self.slot.woken.lock();
        let mut waiters = self.listener.shared.waiters.lock();
        if let Some(slots) = waiters.get_mut(&self.name) {
            slots.retain(|slot| {
                slot.strong_count() > 0 && !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(&self.slot))
            });
            if unanswered {
                if let Some(next) = slots.first().and_then(Weak::upgrade) {
                    next.wake();
                }
            }
            if slots.is_empty() {
                waiters.remove(&self.name);
            }
        }
    }
}
