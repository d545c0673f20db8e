//! [`MyPool`]: the connections of one client.
//!
//! Written here rather than taken from the `mysql` crate, whose pool opens new connections while
//! holding its lock (a connect to a silent server then holds up every checkout and every
//! returned connection for the handshake's timeout), waits its full timeout again after each
//! wake-up, and can only forget a connection by failing a reset on it. This one connects outside
//! its lock, waits until a deadline, drops a broken connection outright, and tells an exhausted
//! pool at once to a caller that must not wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, Result};
use mysql::Conn;
use parking_lot::{Condvar, Mutex};

use super::connection::MyConnection;
use super::error::BACKEND;
use super::tls::Connector;
use crate::queue_wait::Checkout;
use crate::restart_delay::SessionsAge;

/// Timeouts and limits of a pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MySettings {
    pub(crate) max_connections: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// Session kinds: no grants while the server's sessions are younger than the lease.
    pub(crate) restart_delay: bool,
}

/// A pool of connections to one server. Clones share it.
#[derive(Clone)]
pub(crate) struct MyPool {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    connector: Connector,
    settings: MySettings,
    state: Mutex<State>,
    returned: Condvar,
    /// Times each checkout (a no-op without distlock's `metrics` feature).
    pool_wait: lock_core::metrics::PoolWait,
}

struct State {
    /// Each with what it learned about its server's sessions' age.
    idle: Vec<(Conn, SessionsAge)>,
    /// Connections that exist or are being opened: idle, in use, connecting.
    open: u32,
}

impl MyPool {
    pub(crate) fn new(connector: Connector, settings: MySettings) -> Self {
        let state = Mutex::new(State { idle: Vec::new(), open: 0 });
        let pool_wait = lock_core::metrics::PoolWait::new(BACKEND);
        Self { shared: Arc::new(Shared { connector, settings, state, returned: Condvar::new(), pool_wait }) }
    }

    /// The I/O timeout of each statement.
    pub(crate) fn io_timeout(&self) -> Duration {
        self.shared.io_timeout()
    }

    /// A connection, waiting up to the connect timeout for one to come back when all are in use.
    ///
    /// # Errors
    /// As [`get_for`](Self::get_for) with [`Checkout::Wait`]`(None)`.
    pub(crate) fn get(&self) -> Result<MyConnection> {
        self.get_for(Checkout::Wait(None))
    }

    /// A connection: an idle one, else a new one while the pool has room (connecting within the
    /// connect timeout, handshake and login included), else — every connection in
    /// use, as when this client's session holds own them all — as `checkout` says.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when every connection stayed in use; the connect error otherwise.
    pub(crate) fn get_for(&self, checkout: Checkout) -> Result<MyConnection> {
        let started = Instant::now();
        let connection = self.checkout(checkout);
        if connection.is_ok() {
            self.shared.pool_wait.record(started.elapsed());
        }
        connection
    }

    fn checkout(&self, checkout: Checkout) -> Result<MyConnection> {
        let shared = &self.shared;
        let size = shared.settings.max_connections;
        let until = match checkout {
            Checkout::Now => None,
            Checkout::Wait(deadline) => {
                Some(deadline.unwrap_or_else(|| Instant::now() + shared.settings.connect_timeout))
            }
        };
        let mut state = shared.state.lock();
        loop {
            if let Some((conn, sessions_age)) = state.idle.pop() {
                drop(state);
                let mut connection = MyConnection::new(conn, Arc::clone(shared), sessions_age);
                if connection.still_open() {
                    return Ok(connection);
                }
                // The server ended it while it sat idle (a restart, a `KILL`, `wait_timeout`):
                // nothing is sent on it (dropped as broken: the pool forgets it), and the next
                // idle one (or a new one) is tried.
                connection.poison();
                drop(connection);
                state = shared.state.lock();
                continue;
            }
            if state.open < size {
                state.open += 1;
                drop(state);
                return match shared.connector.open() {
                    Ok(conn) => {
                        let age = SessionsAge::new(shared.settings.restart_delay);
                        Ok(MyConnection::new(conn, Arc::clone(shared), age))
                    }
                    Err(failure) => {
                        shared.forget_one();
                        Err(failure)
                    }
                };
            }
            let Some(until) = until else { return Err(Error::PoolExhausted { backend: BACKEND, size }) };
            if shared.returned.wait_until(&mut state, until).timed_out()
                && state.idle.is_empty()
                && state.open >= size
            {
                return Err(Error::PoolExhausted { backend: BACKEND, size });
            }
        }
    }
}

impl Shared {
    pub(crate) fn io_timeout(&self) -> Duration {
        self.settings.io_timeout
    }

    /// Takes back a connection that is in step with its server.
    pub(crate) fn put_back(&self, conn: Conn, sessions_age: SessionsAge) {
        self.state.lock().idle.push((conn, sessions_age));
        self.returned.notify_one();
    }

    /// Counts a connection as gone (dropped, or never opened), making room for another.
    pub(crate) fn forget_one(&self) {
        let mut state = self.state.lock();
        state.open = state.open.saturating_sub(1);
        drop(state);
        self.returned.notify_one();
    }
}
