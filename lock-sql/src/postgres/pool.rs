//! [`PgPool`]: the connections of one client, pooled with r2d2 under a connection manager of our
//! own, which opens [`PgConnection`]s on two background threads of each pool's own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, Result};
use parking_lot::Mutex;
use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::connection::{NotificationSink, PgConnection};
use super::error::{self, ConnectFailure, PgFailure};
use crate::queue_wait::Checkout;

/// The name of the threads that open pooled connections in the background (two per backend
/// value and its clones).
pub const CONNECTOR_THREAD_NAME: &str = "distlock-pgconn";

/// Threads per pool that open its connections. A pool's own: a connection attempt to a server
/// that does not answer holds its thread for the connect timeout, and threads shared by every
/// pool in the process would let one cut-off client hold up every other client's connections.
const CONNECTOR_THREADS: usize = 2;

/// A pool's background threads, gone with the pool.
fn connector_threads() -> Arc<ScheduledThreadPool> {
    Arc::new(
        ScheduledThreadPool::builder()
            .num_threads(CONNECTOR_THREADS)
            .thread_name_pattern(CONNECTOR_THREAD_NAME)
            // A dropped pool's pending reconnection attempts are moot: let its threads go now.
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build(),
    )
}

/// Timeouts and limits of a pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgSettings {
    pub(crate) max_connections: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// TLS was asked for with `prefer`: a connection that fell back to plaintext is logged as a
    /// warning.
    pub(crate) warn_plaintext: bool,
    /// Session kinds: no grants while the server's sessions are younger than the lease.
    pub(crate) restart_delay: bool,
    /// Behind a pooler: statements are sent unnamed, never prepared by name (`pooler.rs`).
    pub(crate) unnamed_statements: bool,
    /// Behind a pooler, with the restart delay: the server's age is asked inside each grant
    /// (`session::too_young_in_grant`), never remembered per connection.
    pub(crate) settle_in_grant: bool,
}

/// The r2d2 manager: opens [`PgConnection`]s and remembers the last failure to open one, so that
/// a caller who times out waiting for a connection learns why (a wrong password, a refused
/// connection) instead of only "timed out".
pub(crate) struct PgManager {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: MakeRustlsConnect,
    pub(crate) settings: PgSettings,
    pub(crate) last_failure: Arc<Mutex<Option<LastFailure>>>,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConnection;
    type Error = PgFailure;

    fn connect(&self) -> std::result::Result<PgConnection, PgFailure> {
        let opened = PgConnection::open(&self.config, &self.tls, &self.settings, None);
        match &opened {
            Ok(_) => *self.last_failure.lock() = None,
            Err(failure) => *self.last_failure.lock() = Some(LastFailure::of(failure)),
        }
        opened
    }

    fn is_valid(&self, connection: &mut PgConnection) -> std::result::Result<(), PgFailure> {
        connection
            .run("ping", |client| async move { client.simple_query("").await })
            .map(drop)
            .map_err(|error| PgFailure::Reply { operation: "ping", detail: error.to_string() })
    }

    fn has_broken(&self, connection: &mut PgConnection) -> bool {
        connection.is_broken()
    }
}

/// Why the last connection attempt failed.
#[derive(Debug, Clone)]
pub(crate) struct LastFailure {
    kind: ConnectFailure,
    message: String,
}

impl LastFailure {
    fn of(failure: &PgFailure) -> Self {
        let (kind, message) = error::connect_failure(failure);
        Self { kind, message }
    }
}

/// A pool of connections to one server.
#[derive(Clone)]
pub(crate) struct PgPool {
    pool: r2d2::Pool<PgManager>,
    last_failure: Arc<Mutex<Option<LastFailure>>>,
    settings: PgSettings,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
}

/// Times each checkout for the pool-wait metric (a no-op without distlock's `metrics` feature).
#[derive(Debug)]
struct CheckoutTimer(lock_core::metrics::PoolWait);

impl r2d2::HandleEvent for CheckoutTimer {
    fn handle_checkout(&self, event: r2d2::event::CheckoutEvent) {
        self.0.record(event.duration());
    }
}

/// A connection out of the pool.
pub(crate) type PooledPg = r2d2::PooledConnection<PgManager>;

impl PgPool {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        tls: MakeRustlsConnect,
        settings: PgSettings,
    ) -> Result<Self> {
        let last_failure = Arc::new(Mutex::new(None));
        let manager = PgManager {
            config: config.clone(),
            tls: tls.clone(),
            settings,
            last_failure: Arc::clone(&last_failure),
        };
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_connections)
            .min_idle(Some(0))
            .connection_timeout(settings.connect_timeout)
            .test_on_check_out(false)
            .thread_pool(connector_threads())
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .event_handler(Box::new(CheckoutTimer(lock_core::metrics::PoolWait::new(error::BACKEND))))
            .build_unchecked(manager);
        Ok(Self { pool, last_failure, settings, config, tls })
    }

    /// A connection, waiting up to the connect timeout for one to come back when all are in use.
    ///
    /// # Errors
    /// As [`get_for`](Self::get_for) with [`Checkout::Wait`]`(None)`.
    pub(crate) fn get(&self) -> Result<PooledPg> {
        self.get_for(Checkout::Wait(None))
    }

    /// A connection: an idle one, else a new one while the pool has room (connecting within the
    /// connect timeout), else — every connection in use, as when this client's session holds own
    /// them all — as `checkout` says.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when every connection stayed in use; [`Error::Authentication`],
    /// [`Error::Tls`] or [`Error::Timeout`] when connecting failed (the last failure is in the
    /// message).
    pub(crate) fn get_for(&self, checkout: Checkout) -> Result<PooledPg> {
        // A connection the server ended while it sat idle (a restart, an administrator,
        // `idle_session_timeout`) goes (`has_broken`); the next is tried: one more try than the
        // pool holds reaches a new one.
        for _ in 0..self.settings.max_connections {
            let connection = self.checkout(checkout)?;
            if !connection.closed_while_idle() {
                return Ok(connection);
            }
        }
        self.checkout(checkout)
    }

    fn checkout(&self, checkout: Checkout) -> Result<PooledPg> {
        if let Some(connection) = self.pool.try_get() {
            return Ok(connection);
        }
        let size = self.settings.max_connections;
        let full = self.pool.state().connections >= size;
        let wait = match (checkout, full) {
            (_, false) | (Checkout::Wait(None), true) => self.settings.connect_timeout,
            (Checkout::Now, true) => return Err(Error::PoolExhausted { backend: error::BACKEND, size }),
            (Checkout::Wait(Some(deadline)), true) => deadline.saturating_duration_since(Instant::now()),
        };
        self.pool.get_timeout(wait).map_err(|error| {
            let state = self.pool.state();
            if state.connections >= size && state.idle_connections == 0 {
                return Error::PoolExhausted { backend: error::BACKEND, size };
            }
            let timeout = self.settings.connect_timeout;
            match self.last_failure.lock().clone() {
                Some(LastFailure { kind: ConnectFailure::Authentication, message }) => {
                    Error::Authentication { backend: error::BACKEND, source: message.into() }
                }
                Some(LastFailure { kind: ConnectFailure::Tls, message }) => {
                    Error::Tls { backend: error::BACKEND, source: message.into() }
                }
                Some(LastFailure { message, .. }) => {
                    Error::from(PgFailure::Pool { timeout, detail: message })
                }
                None => Error::from(PgFailure::Pool { timeout, detail: error.to_string() }),
            }
        })
    }

    /// Opens a connection outside the pool (the wait listener's, and the check `build()` makes).
    pub(crate) fn open_unpooled(&self, notifications: Option<NotificationSink>) -> Result<PgConnection> {
        Ok(PgConnection::open(&self.config, &self.tls, &self.settings, notifications)?)
    }

    pub(crate) fn settings(&self) -> PgSettings {
        self.settings
    }
}
