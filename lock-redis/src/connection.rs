//! Connections: an r2d2 pool with a connection manager of our own.
//!
//! redis-rs ships an r2d2 manager, but it connects without a timeout, and its `has_broken` only
//! asks `is_open()`. After a read timeout a connection still looks open while a late reply is on
//! its way. redis-rs 1.8 does skip one late reply by itself after a timed-out single command; we
//! do not rely on that: after a timed-out *pipeline* (renewal batches) several replies are owed,
//! after a failed write part of a request may have gone out, and Redlock reads replies through
//! its own deadline loop. So here every connection carries a `broken` flag, set on any error
//! other than a complete server reply, and a broken connection is discarded when it goes back to
//! the pool: a connection is only ever reused in step with the server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Client, Connection, ConnectionLike as _, RedisError, RedisResult};
use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use crate::error::{self, RedisFailure};
use crate::topology::Connector;

/// A connection unused for this long is pinged before it is handed out: the server may have
/// closed it (restart, idle timeout) in the meantime. Busier connections skip the round trip.
const STALE_AFTER: Duration = Duration::from_secs(2);

/// How often a caller waiting for a connection checks whether a connection attempt failed, so
/// that a refused connection or a wrong password is reported at once instead of after the whole
/// connect timeout.
const FAILURE_POLL: Duration = Duration::from_millis(20);

/// The shortest read wait of [`RedisConnection::recv_until`], even past its deadline: a reply
/// that is already in the socket buffer is still taken.
const MIN_READ_WAIT: Duration = Duration::from_millis(1);

/// How much longer than a reply's remaining wait the socket's read timeout may stay: setting it
/// is a system call, and the replies of one pipeline or transaction mostly arrive together, so
/// one setting serves them all. A reply may be waited for this much past its deadline.
const TIMEOUT_SLACK: Duration = Duration::from_millis(2);

/// Threads that open connections for one pool. Two, so a connect that hangs on an unresponsive
/// server does not hold up the next attempt entirely.
const CONNECTOR_THREADS: usize = 2;

/// The name of those threads, two per pool: per backend, or per primary of a cluster (Linux
/// shows 15 bytes of a thread name).
pub const CONNECTOR_THREAD_NAME: &str = "distlock-rconn";

/// Timeouts and limits of a pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolSettings {
    pub(crate) max_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) write_timeout: Duration,
}

/// A pooled connection with the bookkeeping that lets the pool discard it when it breaks.
pub(crate) struct RedisConnection {
    inner: Connection,
    broken: bool,
    last_used: Instant,
    read_timeout: Duration,
    /// The read timeout the socket has now ([`read_timeout`](Self::read_timeout) but while
    /// [`recv_until`](Self::recv_until) waits).
    socket_timeout: Duration,
    /// Set when a request went out in full and its replies did not all come in time: the server
    /// may still run it, whenever it catches up (see [`follow_unanswered`](Self::follow_unanswered)).
    unanswered: bool,
}

impl RedisConnection {
    /// Runs `command` on the connection, marking the connection broken if it fails in a way that
    /// may leave it out of step with the server.
    pub(crate) fn run<T>(
        &mut self,
        command: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let result = command(&mut self.inner);
        if let Err(error) = &result {
            if !error::leaves_connection_usable(error) {
                self.broken = true;
            }
        }
        self.last_used = Instant::now();
        result
    }

    /// Writes an already packed request (one command or a pipeline) without reading a reply;
    /// [`recv_until`](Self::recv_until) reads the replies. A failed write marks the connection
    /// broken: part of the request may have gone out.
    pub(crate) fn send_packed(&mut self, request: &[u8]) -> RedisResult<()> {
        let result = self.inner.send_packed_command(request);
        if result.is_err() {
            self.broken = true;
        }
        self.last_used = Instant::now();
        result
    }

    /// Reads one reply, waiting until `deadline` at the latest (but always long enough to pick
    /// up a reply that has already arrived). A server's error reply is a
    /// [`Value::ServerError`](redis::Value::ServerError), not an `Err`; a timeout or an I/O error
    /// marks the connection broken, since the reply may still be on its way.
    ///
    /// The socket keeps the read timeout of the last wait: a connection read this way is either
    /// only ever read this way (Redlock's pools), or has its read timeout restored afterwards
    /// ([`exchange`](Self::exchange)) before [`run`](Self::run) uses it again.
    pub(crate) fn recv_until(&mut self, deadline: Instant) -> RedisResult<redis::Value> {
        let left = deadline.saturating_duration_since(Instant::now()).max(MIN_READ_WAIT);
        let result = self.set_socket_timeout(left, TIMEOUT_SLACK).and_then(|()| self.inner.recv_response());
        if let Err(error) = &result {
            if !error::leaves_connection_usable(error) {
                self.broken = true;
            }
        }
        self.last_used = Instant::now();
        result
    }

    /// Sends a packed pipeline and reads its `replies` replies with ONE deadline, one read
    /// timeout from now, for the whole exchange: redis-rs's own pipeline read waits the full read
    /// timeout for every reply, so a stopped server would cost a timeout per command. Stops at the
    /// first timeout or I/O error (the connection is then broken, and discarded by the pool).
    /// A server's error reply to one command is that reply's
    /// [`Value::ServerError`](redis::Value::ServerError).
    ///
    /// When the request went out in full and a reply timed out, the connection remembers it:
    /// [`follow_unanswered`](Self::follow_unanswered) can then write a request that the server
    /// runs right after this one.
    pub(crate) fn exchange(&mut self, request: &[u8], replies: usize) -> RedisResult<Vec<redis::Value>> {
        self.exchange_within(request, replies, self.read_timeout)
    }

    /// [`exchange`](Self::exchange) with `wait` instead of the read timeout for the replies.
    pub(crate) fn exchange_within(
        &mut self,
        request: &[u8],
        replies: usize,
        wait: Duration,
    ) -> RedisResult<Vec<redis::Value>> {
        self.exchange_until(request, replies, Instant::now() + wait)
    }

    /// When a reply asked for now is due: one read timeout from now.
    pub(crate) fn reply_deadline(&self) -> Instant {
        Instant::now() + self.read_timeout
    }

    /// [`exchange`](Self::exchange) with the replies due by `deadline` (for a request that
    /// continues an earlier exchange under the same deadline).
    pub(crate) fn exchange_until(
        &mut self,
        request: &[u8],
        replies: usize,
        deadline: Instant,
    ) -> RedisResult<Vec<redis::Value>> {
        self.send_packed(request)?;
        let mut values = Vec::with_capacity(replies);
        for _ in 0..replies {
            match self.recv_until(deadline) {
                Ok(value) => values.push(value),
                Err(error) => {
                    self.unanswered = error.is_timeout();
                    return Err(error);
                }
            }
        }
        // `recv_until` left the socket with the last wait's timeout.
        let restored = self.set_socket_timeout(self.read_timeout, Duration::ZERO);
        if restored.is_err() {
            self.broken = true;
        }
        restored.map(|()| values)
    }

    /// Gives the socket a read timeout of `wait`, unless the one it has is no shorter and at most
    /// `slack` longer (a system call saved).
    fn set_socket_timeout(&mut self, wait: Duration, slack: Duration) -> RedisResult<()> {
        if self.socket_timeout < wait || self.socket_timeout > wait + slack {
            self.inner.set_read_timeout(Some(wait))?;
            self.socket_timeout = wait;
        }
        Ok(())
    }

    /// Marks the connection broken: the pool discards it instead of taking it back (for a
    /// connection that still owes replies).
    pub(crate) fn discard(&mut self) {
        self.broken = true;
    }

    /// Writes `request` behind the request of the last [`exchange`](Self::exchange), if that
    /// one went out in full and its reply timed out, without waiting for anything; returns
    /// whether it was written. The server runs the two in order on this one connection, whenever
    /// it catches up (a stalled server, a slow network): the way to undo what an unanswered
    /// request may still do, which a request on another connection could overtake. The
    /// connection stays marked broken, so the pool discards it.
    pub(crate) fn follow_unanswered(&mut self, request: &[u8]) -> bool {
        if !self.unanswered {
            return false;
        }
        // Once only: a failed write may have put out part of it.
        self.unanswered = false;
        self.broken = true;
        match self.inner.send_packed_command(request) {
            Ok(()) => true,
            Err(error) => {
                tracing::debug!(%error, "writing a follow-up behind an unanswered redis request failed");
                false
            }
        }
    }

    /// Like [`run`](Self::run), with the read timeout raised to `read_timeout` for this command
    /// (for `WAIT`, which the server answers only after its own timeout).
    pub(crate) fn run_with_read_timeout<T>(
        &mut self,
        read_timeout: Duration,
        command: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let normal = self.read_timeout;
        let result = self.run(|connection| {
            connection.set_read_timeout(Some(read_timeout))?;
            let result = command(connection);
            connection.set_read_timeout(Some(normal))?;
            result
        });
        // Unknown after an error: zero makes the next `recv_until` set it again.
        self.socket_timeout = if result.is_ok() { normal } else { Duration::ZERO };
        result
    }
}

/// Opens connections with timeouts and remembers the latest failure, so that a caller waiting
/// for the pool learns *why* no connection came (refused, wrong password, timeout).
pub(crate) struct ConnectionManager {
    connector: Connector,
    settings: PoolSettings,
    failures: Arc<Mutex<Failures>>,
}

#[derive(Default)]
struct Failures {
    count: u64,
    latest: Option<RedisError>,
    /// When the latest failure happened.
    latest_at: Option<Instant>,
    /// When the latest connection attempt that succeeded finished.
    connected_at: Option<Instant>,
}

/// Connection failures, counted, with the latest kept: shared by the manager (which records them
/// on the pool's connector threads) and the pool's callers (who report them).
#[derive(Default)]
struct FailureLog {
    failures: Arc<Mutex<Failures>>,
}

impl FailureLog {
    fn count(&self) -> u64 {
        self.failures.lock().count
    }

    /// The latest failure, if there was one after `seen` failures.
    fn since(&self, seen: u64) -> Option<RedisError> {
        let failures = self.failures.lock();
        (failures.count > seen).then(|| failures.latest.clone()).flatten()
    }

    /// The latest failure, if no connection attempt has succeeded since.
    fn unresolved(&self) -> Option<RedisError> {
        let failures = self.failures.lock();
        match (failures.latest_at, failures.connected_at) {
            (Some(failed), Some(connected)) if connected >= failed => None,
            (Some(_), _) => failures.latest.clone(),
            (None, _) => None,
        }
    }
}

impl ConnectionManager {
    /// Opens one connection, with the connect timeout for the TCP/TLS handshake and the setup
    /// commands (`AUTH`, `SELECT`), and the read and write timeouts for everything after.
    pub(crate) fn open(client: &Client, settings: &PoolSettings) -> RedisResult<Connection> {
        let connection = client
            .get_connection_with_timeout(settings.connect_timeout)
            .map_err(|error| crate::tls::explain_setup_failure(client.get_connection_info().addr(), error))?;
        connection.set_read_timeout(Some(settings.read_timeout))?;
        connection.set_write_timeout(Some(settings.write_timeout))?;
        Ok(connection)
    }
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = RedisConnection;
    type Error = RedisError;

    fn connect(&self) -> Result<RedisConnection, RedisError> {
        match self.connector.open(&self.settings) {
            Ok(inner) => {
                let now = Instant::now();
                self.failures.lock().connected_at = Some(now);
                Ok(RedisConnection {
                    inner,
                    broken: false,
                    last_used: now,
                    read_timeout: self.settings.read_timeout,
                    socket_timeout: self.settings.read_timeout,
                    unanswered: false,
                })
            }
            Err(error) => {
                let mut failures = self.failures.lock();
                failures.count += 1;
                failures.latest = Some(error.clone());
                failures.latest_at = Some(Instant::now());
                Err(error)
            }
        }
    }

    fn is_valid(&self, connection: &mut RedisConnection) -> Result<(), RedisError> {
        connection.run(|c| redis::cmd("PING").query::<()>(c))
    }

    fn has_broken(&self, connection: &mut RedisConnection) -> bool {
        connection.broken || !connection.inner.is_open()
    }
}

/// Logs connection failures at debug level: callers get them as errors already.
#[derive(Debug)]
struct QuietErrors;

impl r2d2::HandleError<RedisError> for QuietErrors {
    fn handle_error(&self, error: RedisError) {
        tracing::debug!(%error, "redis connection attempt failed");
    }
}

/// Times each checkout for the pool-wait metric (a no-op without distlock's `metrics` feature).
#[derive(Debug)]
struct CheckoutTimer(lock_core::metrics::PoolWait);

impl r2d2::HandleEvent for CheckoutTimer {
    fn handle_checkout(&self, event: r2d2::event::CheckoutEvent) {
        self.0.record(event.duration());
    }
}

/// The pool of one backend value and its clones.
pub(crate) struct ConnectionPool {
    pool: r2d2::Pool<ConnectionManager>,
    /// The manager's, for connections outside the pool.
    connector: Connector,
    settings: PoolSettings,
    failures: FailureLog,
}

/// A connection checked out of the pool; back into the pool (or discarded if broken) on drop.
pub(crate) type PooledConnection = r2d2::PooledConnection<ConnectionManager>;

impl ConnectionPool {
    /// A pool that connects lazily, on first use.
    pub(crate) fn new(connector: Connector, settings: PoolSettings) -> Self {
        let failures = FailureLog::default();
        let manager = ConnectionManager {
            connector: connector.clone(),
            settings,
            failures: Arc::clone(&failures.failures),
        };
        let connectors = ScheduledThreadPool::builder()
            .num_threads(CONNECTOR_THREADS)
            .thread_name_pattern(CONNECTOR_THREAD_NAME)
            // A dropped pool's pending reconnection attempts are moot: let its threads go now.
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build();
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_size)
            // Connect on demand: a lock client must be creatable while Redis is still starting,
            // and most clients need a handful of connections, not max_size.
            .min_idle(Some(0))
            // Checked-out connections are validated by `get` only when idle for a while; a PING
            // per checkout would double the round trips of every lock operation.
            .test_on_check_out(false)
            .connection_timeout(settings.connect_timeout)
            .error_handler(Box::new(QuietErrors))
            .event_handler(Box::new(CheckoutTimer(lock_core::metrics::PoolWait::new(crate::error::BACKEND))))
            .thread_pool(Arc::new(connectors))
            .build_unchecked(manager);
        Self { pool, connector, settings, failures }
    }

    /// Opens the first connection and `PING`s the server: `build()`'s check (r2d2's rule), so
    /// that an unreachable server or a wrong password is reported there, within the connect
    /// timeout. The `PING` is what finds a missing password: a server with `requirepass` accepts
    /// the connection and refuses commands.
    ///
    /// # Errors
    /// As [`get`](Self::get); the server's refusal of `PING`.
    pub(crate) fn check_server(&self) -> lock_core::Result<()> {
        self.get()?
            .run(|c| redis::cmd("PING").query::<()>(c))
            .map_err(|error| RedisFailure::command("connect", error))?;
        Ok(())
    }

    /// An idle connection if there is one, without waiting; otherwise starts opening one in the
    /// background (unless one is being opened already) and returns `None`.
    ///
    /// Unlike [`get`](Self::get), an idle connection is not pinged, however long it was idle:
    /// callers that must not add a round trip detect a dead connection on use.
    pub(crate) fn try_get(&self) -> Option<PooledConnection> {
        self.pool.get_timeout(Duration::ZERO).ok()
    }

    /// An idle connection if there is one; never opens one (so polling it does not pile up
    /// connection attempts to a server that does not answer).
    pub(crate) fn idle(&self) -> Option<PooledConnection> {
        self.pool.try_get()
    }

    /// Closes every idle connection: after one of them turned out dead (the server restarted),
    /// the others, opened before, are suspect too.
    pub(crate) fn discard_idle(&self) {
        // Bounded: connections other threads give back meanwhile need not all be caught.
        for _ in 0..self.settings.max_size {
            let Some(mut connection) = self.pool.try_get() else { break };
            connection.discard();
        }
    }

    /// How the pool's connections are opened.
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The pool's limits and timeouts.
    pub(crate) fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// A new connection outside the pool, opened like the pool's (with its timeouts).
    ///
    /// # Errors
    /// The connection attempt's failure.
    pub(crate) fn open_unpooled(&self) -> RedisResult<Connection> {
        self.connector.open(&self.settings)
    }

    /// How many connection attempts have failed so far.
    pub(crate) fn failure_count(&self) -> u64 {
        self.failures.count()
    }

    /// The latest failed connection attempt, if there was one after `seen` failures.
    pub(crate) fn failure_since(&self, seen: u64) -> Option<RedisError> {
        self.failures.since(seen)
    }

    /// The latest failed connection attempt if none has succeeded since: the server is known
    /// to be down (or to refuse us) until a background attempt gets through.
    pub(crate) fn known_down(&self) -> Option<RedisError> {
        self.failures.unresolved()
    }

    /// A connection, within the connect timeout.
    ///
    /// # Errors
    /// The failure of a connection attempt made while waiting (refused, wrong password, timed
    /// out), or [`RedisFailure::PoolTimeout`] when none came and none failed.
    pub(crate) fn get(&self) -> Result<PooledConnection, RedisFailure> {
        let deadline = Instant::now() + self.settings.connect_timeout;
        let seen = self.failures.count();
        loop {
            let now = Instant::now();
            let slice = FAILURE_POLL.min(deadline.saturating_duration_since(now));
            if let Ok(mut connection) = self.pool.get_timeout(slice) {
                if connection.last_used.elapsed() < STALE_AFTER {
                    return Ok(connection);
                }
                match connection.run(|c| redis::cmd("PING").query::<()>(c)) {
                    Ok(()) => return Ok(connection),
                    // A server that does not answer is reported, not waited out again.
                    Err(error) if error.is_timeout() => return Err(RedisFailure::command("connect", error)),
                    // Closed underneath us: it is marked broken, and dropping it discards it.
                    // A server error reply instead (LOADING, NOPERM on PING…) leaves it in
                    // step and not marked broken: it goes back to the pool, and the next look
                    // (its last use now fresh) hands it out without another PING, so the
                    // command itself reports whatever the server has to say.
                    Err(_) => continue,
                }
            }
            if let Some(error) = self.failures.since(seen) {
                return Err(RedisFailure::command("connect", error));
            }
            if Instant::now() >= deadline {
                return Err(RedisFailure::PoolTimeout { timeout: self.settings.connect_timeout });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;
    use std::thread;

    use super::*;

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
    const UNDO: &[u8] = b"*2\r\n$4\r\nECHO\r\n$4\r\nundo\r\n";

    /// A server that answers the connection setup, then reads without ever answering; returns
    /// everything it read after the setup once the client hangs up.
    fn silent_after_setup(listener: TcpListener) -> thread::JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buffer = [0; 4096];
            // redis-rs sends its setup (CLIENT SETINFO twice) in one write and ignores the replies.
            let read = stream.read(&mut buffer).unwrap();
            assert!(String::from_utf8_lossy(&buffer[..read]).contains("SETINFO"));
            stream.write_all(b"+OK\r\n+OK\r\n").unwrap();
            let mut after = Vec::new();
            stream.read_to_end(&mut after).unwrap();
            after
        })
    }

    fn connect(listener: &TcpListener, read_timeout: Duration) -> RedisConnection {
        let client = Client::open(format!("redis://{}/", listener.local_addr().unwrap())).unwrap();
        let timeout = Duration::from_secs(2);
        let settings =
            PoolSettings { max_size: 1, connect_timeout: timeout, read_timeout, write_timeout: timeout };
        let manager = ConnectionManager {
            connector: Connector::Direct(Box::new(client)),
            settings,
            failures: Arc::default(),
        };
        r2d2::ManageConnection::connect(&manager).unwrap()
    }

    #[test]
    fn a_follow_up_goes_behind_an_unanswered_request_on_the_same_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = silent_after_setup(listener.try_clone().unwrap());
        let mut connection = connect(&listener, Duration::from_millis(50));
        assert!(!connection.follow_unanswered(UNDO), "nothing is unanswered yet");
        assert!(connection.exchange(PING, 1).unwrap_err().is_timeout());
        assert!(connection.follow_unanswered(UNDO));
        assert!(connection.broken, "the pool must discard it");
        assert!(!connection.follow_unanswered(UNDO), "once only");
        drop(connection);
        assert_eq!(server.join().unwrap(), [PING, UNDO].concat());
    }
}
