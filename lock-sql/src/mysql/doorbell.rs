//! The wake-ups of the lock-table kind's waiters and of every kind's semaphore waiters on
//! MariaDB, which has no `LISTEN`: a doorbell. Each backend
//! (shared by its clones) keeps one connection of its own that waits a second at a time while
//! any of its threads waits (a *nap*, below); its waiters' queue entries name that connection's
//! id. A release that frees a lock with a queue rings the oldest waiter's doorbell with
//! `KILL QUERY <id>`, sent by the releasing client's ringer thread ([`RINGER_THREAD_NAME`]: the
//! release does not wait for it), which ends the nap at once; the doorbell then wakes its
//! client's longest-waiting thread of each name ([`Waiters`]), which re-checks. (A ring that
//! lands on another connection's statement instead — the restart case below — makes that
//! statement fail: a row or advisory hold whose check it was reports itself lost.)
//!
//! The nap is `GET_LOCK` of a user lock that a second connection of the doorbell holds (its
//! *anchor*): a wait that times out after a second, and that `KILL QUERY` ends (`NULL`, or error
//! 1317). Not `SELECT SLEEP(1)`: every `SLEEP` of a MariaDB server takes one server-wide mutex,
//! and a `KILL QUERY` of a sleeping connection retries that mutex with pauses. With a hundred
//! doorbells and two busy cores, a `KILL` then took 2 s and every `SLEEP(1)` on the server ran
//! 1.3–3 s, so rings came late or not at all (conformance `mysql::table` beside two CPU hogs:
//! 52 naps over 1.1 s and 10 `KILL`s of 2 s in six runs, one LE04 hand-off failure in six;
//! with `GET_LOCK`, none in eight runs). A user lock's wait has a mutex of its own. When the
//! anchor's session ends, the doorbell's wait takes the lock; it gives it back and naps on a new
//! anchor under the same bell. Where no anchor can be had — it cannot connect or lock (Galera
//! refuses `GET_LOCK`), or it reached another server than the doorbell (user locks are a
//! server's own) — the doorbell naps in `SLEEP`.
//!
//! `KILL QUERY` needs the same user, or `CONNECTION ADMIN`; a ring the server refuses, or one
//! that lands between two naps, is lost, and the waiters' own re-check (at the holder's
//! expiry, at least every [`FALLBACK_RECHECK`]) serves instead.
//!
//! A connection id means something only on its server, and a releaser may reach another server
//! than the waiter's doorbell did (Galera nodes, a virtual IP after a failover). So an entry
//! names a *bell* ([`Bell`]): the connection id in the low 32 bits and, above them, a tag of the
//! doorbell's server — `CRC32` of `@@hostname:@@port:@@server_id`, which Galera nodes do not
//! share (they may share `@@server_id`; MariaDB has no `@@server_uuid`). The ringer rings only
//! bells of the server its own connection reached; an entry without a tag (an older client's)
//! or of another server is not rung, and its waiter re-checks on its own. On one server a
//! connection id is not reused while its entries live (ids only grow), so a ring never
//! interrupts a stranger's statement — except across a server restart shorter than an entry's
//! life (2 s plus the I/O timeout), after which ids start again from 1 (the tag does not change
//! with a restart): a ring may then interrupt a statement of another connection of the same
//! user.

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

/// How long a waiter's queue entry (a lock table's or a semaphore's) lasts beyond one I/O
/// timeout: it is renewed at the waiter's re-checks, once at least [`RENEW_EVERY`] has passed
/// since it was written (about once a second when nobody rings); an entry that lapses under a waiter costs that
/// waiter its place (it queues again at its next re-check).
pub(crate) const WAITER_NOTE: Duration = Duration::from_secs(2);

/// How soon after writing its queue entry a waiter renews it at a re-check: well within the
/// entry's life, whatever the I/O timeout.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(500);

/// The name of the doorbell thread (one per backend that has waited).
pub const DOORBELL_THREAD_NAME: &str = "distlock-mybell";

/// The name of the thread that rings other clients' doorbells: one per server URL in the
/// process, while a backend that rang through it lives.
pub const RINGER_THREAD_NAME: &str = "distlock-myring";

/// One nap of the doorbell connection.
const NAP: Duration = Duration::from_secs(1);

/// How often an idle doorbell thread looks up to see whether it should stop, and how long it
/// waits before reconnecting.
const TICK: Duration = Duration::from_millis(250);

/// `ER_QUERY_INTERRUPTED`: MariaDB's answer to a `SLEEP` (or `GET_LOCK`) that `KILL QUERY`
/// ended.
const QUERY_INTERRUPTED: u16 = 1317;

/// The tag of the server a connection reached (see the module docs), `1` at least: `0` is an
/// untagged entry's.
const SERVER_TAG: &str = "SELECT GREATEST(1, CRC32(CONCAT_WS(':', @@hostname, @@port, @@server_id)))";

/// A doorbell as queue entries name it: its server's tag (high 32 bits) and connection id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bell(u64);

impl Bell {
    fn new(server: u32, connection: u32) -> Self {
        Self((u64::from(server) << 32) | u64::from(connection))
    }

    /// What the queue and lock tables store.
    pub(crate) fn value(self) -> u64 {
        self.0
    }

    /// A bell as read back from the tables.
    pub(crate) fn from_value(value: u64) -> Self {
        Self(value)
    }

    fn server(self) -> u32 {
        u32::try_from(self.0 >> 32).unwrap_or(0)
    }

    fn connection(self) -> u32 {
        u32::try_from(self.0 & u64::from(u32::MAX)).unwrap_or(0)
    }
}

/// The tag of the server `conn` reached.
fn server_tag(conn: &mut Conn) -> Result<u32, MySqlError> {
    Ok(conn.query_first::<u32, _>(SERVER_TAG)?.unwrap_or(0))
}

/// A waiter's entry in a queue that releases ring from: the bell it names (once written) and
/// when it was last written.
#[derive(Debug, Default)]
pub(crate) struct QueueEntry {
    /// The bell the entry names, once written.
    pub(crate) bell: Option<Bell>,
    written_at: Option<Instant>,
    /// The bell of the entry a winning attempt deleted in its own transaction (semaphores).
    left: Option<Bell>,
}

impl QueueEntry {
    /// Marks the entry written now.
    pub(crate) fn written(&mut self) {
        self.written_at = Some(Instant::now());
    }

    /// Marks the entry deleted (by the winning attempt's transaction).
    pub(crate) fn deleted(&mut self) {
        self.left = self.bell.take();
    }

    /// The bell of the entry [`deleted`](Self::deleted), if it was.
    pub(crate) fn left(&self) -> Option<Bell> {
        self.left
    }

    /// Marks the entry for rewriting at the next turn (a ring spent on a lost race).
    pub(crate) fn stale(&mut self) {
        self.written_at = None;
    }
}

/// A queue entry to write now ([`Doorbell::entry_due`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryDue {
    /// The bell to write.
    pub(crate) bell: Bell,
    /// The bell of the client's earlier doorbell connection, whose entry this one takes the
    /// place of (the doorbell reconnected under a new id).
    pub(crate) replaces: Option<Bell>,
    /// Whether the entry is written for the first time under this bell (joining the queue, not
    /// renewing a place in it).
    pub(crate) joining: bool,
}

/// The doorbell of one backend (and its clones), and its ringer.
pub(crate) struct Doorbell {
    shared: Arc<Shared>,
    /// Which server and user this backend's rings go through (its URL; never shown).
    server: String,
    /// The ringer, found or started by the first ring.
    ringer: parking_lot::Mutex<Option<Arc<Ringer>>>,
    /// Held by a background update of this client's queue entries (a semaphore waiter that
    /// gave up), so that two run one after the other, each deciding at its turn.
    pub(crate) entry_updates: parking_lot::Mutex<()>,
}

/// A ringer thread's inbox: doorbell ids to ring, so that a release returns without waiting for
/// its ring's round trip. The thread ends when the last backend holding this drops it.
struct Ringer {
    rings: parking_lot::Mutex<Sender<Bell>>,
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
    /// The doorbell connection's bell while it is connected.
    id: Mutex<Option<Bell>>,
    changed: Condvar,
    started: AtomicBool,
    stop: AtomicBool,
}

impl Doorbell {
    /// A doorbell connecting as `connector` does (the pool's, for `server`: the URL and the TLS
    /// settings), its reads allowed a nap beyond `io_timeout`.
    pub(crate) fn new(server: String, connector: Connector, io_timeout: Duration) -> Self {
        let connector = connector.map(|opts| opts.read_timeout(Some(NAP + io_timeout)));
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
            entry_updates: parking_lot::Mutex::new(()),
        }
    }

    /// Rings `bell` (another client's doorbell, or this one's), from the ringer thread.
    pub(crate) fn ring(&self, bell: Bell) {
        let mut ringer = self.ringer.lock();
        if ringer.is_none() {
            *ringer = Ringer::of(&self.server, &self.shared.connector);
        }
        if let Some(ringer) = ringer.as_ref() {
            let _ = ringer.rings.lock().send(bell);
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

    /// Whether `entry` is to be written now, and how ([`EntryDue`]): when first queued, after a
    /// reconnection, or every `renew_every`. `None` when the entry is fresh, the doorbell has not
    /// connected by `ready_by`, or `deadline` has passed (the call's time is up; the entry lives
    /// on until it lapses or the caller leaves). Sets `entry.bell`.
    pub(crate) fn entry_due(
        &self,
        entry: &mut QueueEntry,
        ready_by: Instant,
        deadline: Option<Instant>,
        renew_every: Duration,
    ) -> Option<EntryDue> {
        let bell = self.wait_ready(ready_by)?;
        let replaces = entry.bell.filter(|&old| old != bell);
        if entry.bell != Some(bell) {
            entry.written_at = None;
        }
        let joining = entry.written_at.is_none();
        let due = entry.written_at.is_none_or(|at| at.elapsed() >= renew_every)
            && deadline.is_none_or(|deadline| Instant::now() < deadline);
        due.then(|| {
            entry.bell = Some(bell);
            EntryDue { bell, replaces, joining }
        })
    }

    /// The doorbell connection's bell, waiting until `until` for it to connect.
    pub(crate) fn wait_ready(&self, until: Instant) -> Option<Bell> {
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

/// The doorbell thread: (re)connects, and naps on the connection while anyone waits.
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
        let server = match server_tag(&mut conn) {
            Ok(server) => server,
            Err(error) => {
                tracing::debug!(%error, "the mysql doorbell could not read its server's tag; reconnecting");
                thread::sleep(TICK);
                continue;
            }
        };
        let mut nap = Nap::new(&shared.connector, server);
        set_id(shared, Some(Bell::new(server, conn.connection_id())));
        // Rings sent while nobody napped are lost: everyone re-checks.
        shared.waiters.wake_all();
        while !shared.stop.load(Ordering::Acquire) {
            if !shared.waiters.wait_for_any(Instant::now() + TICK) {
                continue;
            }
            match nap.take(&mut conn) {
                Ok(Napped::Quiet) => {}
                Ok(Napped::Rung) => shared.waiters.wake_each_name(),
                Ok(Napped::AnchorGone(name)) => {
                    // The doorbell took the lock: it gives it back and naps on a new anchor,
                    // under the same bell (its waiters' entries stay good). A ring meanwhile is
                    // lost: everyone re-checks.
                    tracing::debug!("the mysql doorbell's anchor session ended; opening another");
                    if let Err(error) = conn.query_drop(format!("DO RELEASE_LOCK('{name}')")) {
                        tracing::debug!(%error, "the mysql doorbell connection broke; reconnecting");
                        break;
                    }
                    nap = Nap::new(&shared.connector, server);
                    shared.waiters.wake_all();
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

/// What a doorbell connection naps in: a wait that ends after [`NAP`], or at once when rung.
enum Nap {
    /// `GET_LOCK` of the user lock that the anchor connection holds (see the module docs).
    Lock {
        /// Holds the lock while the doorbell naps; closed with it.
        _anchor: Conn,
        name: String,
        statement: String,
    },
    /// `SLEEP`, where no anchor could be had.
    Sleep(String),
}

/// How a nap ended.
enum Napped {
    /// It lasted [`NAP`]: nobody rang.
    Quiet,
    /// Rung.
    Rung,
    /// The doorbell took its anchor's lock (named here): the anchor's session ended.
    AnchorGone(String),
}

impl Nap {
    /// A nap on a fresh anchor on the doorbell's server (tagged `server`), or `SLEEP` when there
    /// is none (a user lock is a server's own: an anchor that reached another server — Galera
    /// nodes behind one address — would leave the doorbell's lock free).
    fn new(connector: &Connector, server: u32) -> Self {
        match anchor(connector, server) {
            Ok((anchor, name)) => Nap::Lock {
                _anchor: anchor,
                statement: format!("SELECT GET_LOCK('{name}', {})", NAP.as_secs_f64()),
                name,
            },
            Err(error) => {
                // Once per doorbell connection or lost anchor: expected on Galera (no user
                // locks), otherwise a sign that rings may come late under load (SLEEP's
                // server-wide mutex).
                tracing::info!(%error, "no anchor for the mysql doorbell; it naps in SLEEP, whose rings may lag under load");
                Nap::Sleep(format!("SELECT SLEEP({})", NAP.as_secs_f64()))
            }
        }
    }

    /// One nap on `conn`; `Err` when the connection broke.
    fn take(&self, conn: &mut Conn) -> Result<Napped, MySqlError> {
        let (statement, anchor) = match self {
            Nap::Lock { statement, name, .. } => (statement, Some(name)),
            Nap::Sleep(statement) => (statement, None),
        };
        match (conn.query_first::<Option<i64>, _>(statement.as_str()), anchor) {
            (Ok(Some(Some(0))), _) => Ok(Napped::Quiet),
            (Ok(Some(Some(1))), Some(name)) => Ok(Napped::AnchorGone(name.clone())),
            // A killed `GET_LOCK` answers `NULL` (MariaDB) or error 1317, a killed `SLEEP` 1
            // (MySQL) or error 1317 (MariaDB).
            (Ok(_), _) => Ok(Napped::Rung),
            (Err(MySqlError::MySqlError(error)), _) if error.code == QUERY_INTERRUPTED => Ok(Napped::Rung),
            (Err(error), _) => Err(error),
        }
    }
}

/// A connection to the server tagged `server` holding a user lock of its own, and the lock's
/// name: `distlock-doorbell-` and the connection's id, unique on its server while the connection
/// lives, and never an advisory lock's key (those have a `:`).
fn anchor(connector: &Connector, server: u32) -> Result<(Conn, String), String> {
    let mut anchor = connector.connect().map_err(|error| error.to_string())?;
    if server_tag(&mut anchor).map_err(|error| error.to_string())? != server {
        return Err("the anchor reached another server".into());
    }
    let name = format!("distlock-doorbell-{}", anchor.connection_id());
    match anchor.query_first::<Option<i64>, _>(format!("SELECT GET_LOCK('{name}', 0)")) {
        Ok(Some(Some(1))) => Ok((anchor, name)),
        Ok(other) => Err(format!("GET_LOCK of its own lock answered {other:?}")),
        Err(error) => Err(error.to_string()),
    }
}

fn set_id(shared: &Shared, id: Option<Bell>) {
    *shared.id.lock() = id;
    shared.changed.notify_all();
}

/// The ringer thread: `KILL QUERY` for each bell received that is of the server its own
/// connection reached, on that connection, until its [`Ringer`] is dropped. Rings are best
/// effort and idempotent: the bells waiting together are rung once each, and when the connection
/// cannot be (re)opened the pending ones are dropped (their waiters re-check on their own) rather
/// than each trying to connect in turn.
fn ringer(connector: &Connector, rings: &Receiver<Bell>) {
    let mut conn: Option<(Conn, u32)> = None;
    while let Ok(first) = rings.recv() {
        let mut bells = vec![first.value()];
        bells.extend(rings.try_iter().map(Bell::value));
        bells.sort_unstable();
        bells.dedup();
        if conn.is_none() {
            conn = connector
                .connect()
                .and_then(|mut open| server_tag(&mut open).map(|server| (open, server)))
                .inspect_err(
                    |error| tracing::debug!(%error, "the mysql ringer could not connect; rings dropped"),
                )
                .ok();
        }
        let Some((open, server)) = conn.as_mut() else { continue };
        for bell in bells.into_iter().map(Bell::from_value) {
            if bell.server() != *server {
                // Another server's connection id (or an untagged entry): never rung here.
                tracing::debug!("a waiter's doorbell is on another server; it re-checks on its own");
                continue;
            }
            match open.query_drop(format!("KILL QUERY {}", bell.connection())) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bell_keeps_its_server_and_connection_apart() {
        let bell = Bell::new(0xdead_beef, 42);
        assert_eq!((bell.server(), bell.connection()), (0xdead_beef, 42));
        assert_eq!(Bell::from_value(bell.value()), bell);
        // An untagged entry (a bare connection id) is of no server.
        assert_eq!(Bell::from_value(42).server(), 0);
    }
}
