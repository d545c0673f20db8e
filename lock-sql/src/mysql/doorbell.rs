//! The lock-table kind's wake-ups on MariaDB, which has no `LISTEN`: a doorbell. Each backend
//! (shared by its clones) keeps one connection of its own that sleeps in `SELECT SLEEP(1)` while
//! any of its threads waits; its waiters' queue entries name that connection's id. A release
//! that frees a lock with a queue rings the oldest waiter's doorbell with `KILL QUERY <id>`,
//! sent by the releasing client's ringer thread ([`RINGER_THREAD_NAME`]: the release does not
//! wait for it), which ends the sleep at once (MariaDB: error 1317; MySQL: `SLEEP` returns 1); the doorbell
//! then wakes its client's longest-waiting thread of each name ([`Waiters`]), which re-checks.
//!
//! `KILL QUERY` needs the same user, or `CONNECTION ADMIN`; a ring the server refuses, or one
//! that lands between two sleeps, is lost, and the waiters' own re-check (at the holder's
//! expiry, at least every [`FALLBACK_RECHECK`]) serves instead. A connection id is not reused
//! while its entries live (ids only grow), so a ring never interrupts a stranger's statement —
//! except across a server restart shorter than an entry's life (2 s plus the I/O timeout),
//! after which ids start again from 1: a ring may then interrupt a statement of another
//! connection of the same user.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable as _;
use mysql::{Conn, Error as MySqlError};
use parking_lot::{Condvar, Mutex};

use super::tls::Connector;

use crate::waiters::{Registration, Waiters};

/// The longest a waiter sleeps without a ring before it re-checks on its own.
pub(crate) const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// The name of the doorbell thread (one per backend that has waited).
pub const DOORBELL_THREAD_NAME: &str = "distlock-mybell";

/// The name of the thread that rings other clients' doorbells: one per server URL in the
/// process, while a backend that rang through it lives.
pub const RINGER_THREAD_NAME: &str = "distlock-myring";

/// One sleep of the doorbell connection.
const SLEEP: Duration = Duration::from_secs(1);

/// How often an idle doorbell thread looks up to see whether it should stop, and how long it
/// waits before reconnecting.
const TICK: Duration = Duration::from_millis(250);

/// `ER_QUERY_INTERRUPTED`: MariaDB's answer to a `SLEEP` that `KILL QUERY` ended.
const QUERY_INTERRUPTED: u16 = 1317;

/// The doorbell of one backend (and its clones), and its ringer.
pub(crate) struct Doorbell {
    shared: Arc<Shared>,
    /// Which server and user this backend's rings go through (its URL; never shown).
    server: String,
    /// The ringer, found or started by the first ring.
    ringer: parking_lot::Mutex<Option<Arc<Ringer>>>,
}

/// A ringer thread's inbox: doorbell ids to ring, so that a release returns without waiting for
/// its ring's round trip. The thread ends when the last backend holding this drops it.
struct Ringer {
    rings: parking_lot::Mutex<Sender<u64>>,
}

/// The process's ringers, by URL: all the backends of a process with one URL ring through one
/// connection, one `KILL QUERY` at a time. (Many concurrent `KILL`s starve the
/// server's new connections: MariaDB 10.11 here stopped completing handshakes for seconds under
/// eight ringers at a few thousand rings a second.)
static RINGERS: parking_lot::Mutex<Option<HashMap<String, Weak<Ringer>>>> = parking_lot::Mutex::new(None);

impl Ringer {
    /// The ringer of `server`, started if there is none.
    fn of(server: &str, connector: &Connector) -> Option<Arc<Ringer>> {
        let mut ringers = RINGERS.lock();
        let ringers = ringers.get_or_insert_with(HashMap::new);
        ringers.retain(|_, ringer| ringer.strong_count() > 0);
        if let Some(ringer) = ringers.get(server).and_then(Weak::upgrade) {
            return Some(ringer);
        }
        let (sender, receiver) = mpsc::channel();
        let connector = connector.clone();
        let spawned = thread::Builder::new()
            .name(RINGER_THREAD_NAME.into())
            .spawn(move || ringer(&connector, &receiver));
        if let Err(error) = spawned {
            // Rung waiters re-check on their own.
            tracing::warn!(%error, "could not start the mysql ringer thread");
            return None;
        }
        let ringer = Arc::new(Ringer { rings: parking_lot::Mutex::new(sender) });
        ringers.insert(server.to_owned(), Arc::downgrade(&ringer));
        Some(ringer)
    }
}

struct Shared {
    connector: Connector,
    waiters: Waiters,
    /// The doorbell connection's id while it is connected.
    id: Mutex<Option<u32>>,
    changed: Condvar,
    started: AtomicBool,
    stop: AtomicBool,
}

impl Doorbell {
    /// A doorbell connecting as `connector` does (the pool's, for `server`: the URL and the TLS
    /// settings), its reads allowed a sleep beyond `io_timeout`.
    pub(crate) fn new(server: String, connector: Connector, io_timeout: Duration) -> Self {
        let connector = connector.map(|opts| opts.read_timeout(Some(SLEEP + io_timeout)));
        Self {
            shared: Arc::new(Shared {
                connector,
                waiters: Waiters::default(),
                id: Mutex::new(None),
                changed: Condvar::new(),
                started: AtomicBool::new(false),
                stop: AtomicBool::new(false),
            }),
            server,
            ringer: parking_lot::Mutex::new(None),
        }
    }

    /// Rings the doorbell `id` (another client's, or this one's), from the ringer thread.
    pub(crate) fn ring(&self, id: u64) {
        let mut ringer = self.ringer.lock();
        if ringer.is_none() {
            *ringer = Ringer::of(&self.server, &self.shared.connector);
        }
        if let Some(ringer) = ringer.as_ref() {
            let _ = ringer.rings.lock().send(id);
        }
    }

    /// Registers a waiter for `name`, starting the doorbell thread on first use.
    pub(crate) fn register(&self, name: &str) -> Registration<'_> {
        let registration = self.shared.waiters.register(name);
        if !self.shared.started.swap(true, Ordering::AcqRel) {
            let shared = Arc::clone(&self.shared);
            let spawned =
                thread::Builder::new().name(DOORBELL_THREAD_NAME.into()).spawn(move || ring_loop(&shared));
            if let Err(error) = spawned {
                // Waiters still re-check on their own.
                tracing::warn!(%error, "could not start the mysql doorbell thread");
                self.shared.started.store(false, Ordering::Release);
            }
        }
        registration
    }

    /// Whether some thread of this client waits for `name`.
    pub(crate) fn is_waiting(&self, name: &str) -> bool {
        self.shared.waiters.is_waiting(name)
    }

    /// The doorbell connection's id, waiting until `until` for it to connect.
    pub(crate) fn wait_ready(&self, until: Instant) -> Option<u32> {
        let mut id = self.shared.id.lock();
        while id.is_none() {
            if self.shared.changed.wait_until(&mut id, until).timed_out() {
                break;
            }
        }
        *id
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// The doorbell thread: (re)connects, and sleeps on the connection while anyone waits.
fn ring_loop(shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        if !shared.waiters.wait_for_any(Instant::now() + TICK) {
            continue;
        }
        let mut conn = match shared.connector.connect() {
            Ok(conn) => conn,
            Err(error) => {
                tracing::debug!(%error, "the mysql doorbell connection failed; waiters re-check on their own");
                thread::sleep(TICK);
                continue;
            }
        };
        set_id(shared, Some(conn.connection_id()));
        // Rings sent while nobody slept are lost: everyone re-checks.
        shared.waiters.wake_all();
        let sleep = format!("SELECT SLEEP({})", SLEEP.as_secs_f64());
        while !shared.stop.load(Ordering::Acquire) {
            if !shared.waiters.wait_for_any(Instant::now() + TICK) {
                continue;
            }
            match conn.query_first::<i64, _>(sleep.as_str()) {
                // Slept the whole second: nobody rang.
                Ok(Some(0)) => {}
                // MySQL ends a killed SLEEP with 1, MariaDB with error 1317.
                Ok(_) => shared.waiters.wake_each_name(),
                Err(MySqlError::MySqlError(error)) if error.code == QUERY_INTERRUPTED => {
                    shared.waiters.wake_each_name();
                }
                Err(error) => {
                    tracing::debug!(%error, "the mysql doorbell connection broke; reconnecting");
                    break;
                }
            }
        }
        set_id(shared, None);
    }
}

fn set_id(shared: &Shared, id: Option<u32>) {
    *shared.id.lock() = id;
    shared.changed.notify_all();
}

/// The ringer thread: `KILL QUERY` for each id received, on a connection of its own, until its
/// [`Ringer`] is dropped. Rings are best effort and idempotent: the ids waiting together are rung
/// once each, and when the connection cannot be (re)opened the pending ones are dropped (their
/// waiters re-check on their own) rather than each trying to connect in turn.
fn ringer(connector: &Connector, rings: &Receiver<u64>) {
    let mut conn: Option<Conn> = None;
    while let Ok(first) = rings.recv() {
        let mut ids = vec![first];
        ids.extend(rings.try_iter());
        ids.sort_unstable();
        ids.dedup();
        if conn.is_none() {
            conn = connector
                .connect()
                .inspect_err(
                    |error| tracing::debug!(%error, "the mysql ringer could not connect; rings dropped"),
                )
                .ok();
        }
        let Some(open) = conn.as_mut() else { continue };
        for id in ids {
            match open.query_drop(format!("KILL QUERY {id}")) {
                // Refused (another user's connection, one gone since): the waiter re-checks.
                Ok(()) | Err(MySqlError::MySqlError(_)) => {}
                Err(error) => {
                    tracing::debug!(%error, "the mysql ringer's connection broke; reconnecting");
                    conn = None;
                    break;
                }
            }
        }
    }
}
