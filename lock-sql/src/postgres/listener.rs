//! The lock-table kind's wake-ups: one `LISTEN` connection per backend (shared by its clones)
//! multiplexes every waited name. A release's statement `NOTIFY`s the channel with the lock's
//! name; the listener wakes the threads waiting for that name.
//!
//! Notifications are best effort (a listener reconnecting misses some), so waiters also re-check
//! at the holder's expiry — an expiry sends no `NOTIFY` — and at least every
//! [`FALLBACK_RECHECK`].

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lock_core::Result;
use parking_lot::{Condvar, Mutex};

use super::connection::{PgConnection, PgPool};

/// The longest a waiter sleeps without a notification before it re-checks on its own.
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

type Waiters = Arc<Mutex<HashMap<String, Vec<Weak<Slot>>>>>;

/// The listening connection and the waiters by name.
pub(crate) struct Listener {
    pool: PgPool,
    listen: String,
    connection: Mutex<Option<PgConnection>>,
    waiters: Waiters,
}

impl Listener {
    pub(crate) fn new(pool: PgPool, table: &str) -> Self {
        Self {
            pool,
            listen: format!("LISTEN \"distlock_{table}\""),
            connection: Mutex::new(None),
            waiters: Arc::default(),
        }
    }

    /// Registers a waiter for `name`, opening the listening connection if there is none (or it
    /// broke). A listener that cannot connect is logged and retried at the next registration;
    /// its waiters still re-check on their own.
    pub(crate) fn register(&self, name: &str) -> Registration<'_> {
        let slot = Arc::new(Slot::default());
        self.waiters.lock().entry(name.to_owned()).or_default().push(Arc::downgrade(&slot));
        if let Err(error) = self.ensure_listening() {
            tracing::debug!(%error, "the postgres LISTEN connection failed; waiters re-check on their own");
        }
        Registration { listener: self, name: name.to_owned(), slot }
    }

    fn ensure_listening(&self) -> Result<()> {
        let mut connection = self.connection.lock();
        if connection.as_ref().is_some_and(|connection| !connection.is_broken()) {
            return Ok(());
        }
        *connection = None;
        let waiters = Arc::clone(&self.waiters);
        let opened = self.pool.open_unpooled(Some(Box::new(move |notification| {
            wake(&waiters, notification.payload());
        })))?;
        let listen = self.listen.as_str();
        opened.run("listen", |client| async move { client.batch_execute(listen).await })?;
        *connection = Some(opened);
        Ok(())
    }
}

fn wake(waiters: &Waiters, name: &str) {
    let mut waiters = waiters.lock();
    if let Some(slots) = waiters.get_mut(name) {
        slots.retain(|slot| match slot.upgrade() {
            Some(slot) => {
                slot.wake();
                true
            }
            None => false,
        });
        if slots.is_empty() {
            waiters.remove(name);
        }
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
    fn drop(&mut self) {
        let mut waiters = self.listener.waiters.lock();
        if let Some(slots) = waiters.get_mut(&self.name) {
            slots.retain(|slot| {
                slot.strong_count() > 0 && !std::ptr::eq(slot.as_ptr(), Arc::as_ptr(&self.slot))
            });
            if slots.is_empty() {
                waiters.remove(&self.name);
            }
        }
    }
}
