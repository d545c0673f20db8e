//! Connections: tokio-postgres clients driven by the shared runtime, each call bounded by the I/O
//! timeout, pooled with r2d2 under a connection manager of our own.
//!
//! A connection whose call timed out or failed below SQL is marked broken and dropped by the pool:
//! its reply may still be on the way, so it is never reused out of step with the server.

use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lock_core::{Error, Result};
use parking_lot::Mutex;
use scheduled_thread_pool::ScheduledThreadPool;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification};

use super::error::{self, PgFailure};
use super::runtime;

/// The name of the threads that open pooled connections in the background (two per process,
/// shared by every PostgreSQL backend).
pub const CONNECTOR_THREAD_NAME: &str = "distlock-pgconn";

/// The connection pools' background threads.
fn connector_threads() -> Arc<ScheduledThreadPool> {
    static THREADS: LazyLock<Arc<ScheduledThreadPool>> = LazyLock::new(|| {
        Arc::new(
            ScheduledThreadPool::builder().num_threads(2).thread_name_pattern(CONNECTOR_THREAD_NAME).build(),
        )
    });
    Arc::clone(&THREADS)
}

/// Timeouts and limits of a pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgSettings {
    pub(crate) max_connections: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// Where a connection's notifications go (only the wait listener's connection has one).
pub(crate) type NotificationSink = Box<dyn Fn(Notification) + Send + Sync>;

/// One connection: the client, the task that drives its socket, and whether it broke.
pub(crate) struct PgConnection {
    client: Client,
    task: JoinHandle<()>,
    runtime: Arc<Runtime>,
    io_timeout: Duration,
    broken: Cell<bool>,
}

impl PgConnection {
    /// Connects (TCP connect, startup and authentication all within `connect_timeout`).
    pub(crate) fn open(
        config: &tokio_postgres::Config,
        runtime: Arc<Runtime>,
        settings: &PgSettings,
        notifications: Option<NotificationSink>,
    ) -> std::result::Result<Self, PgFailure> {
        let connected = runtime::block_on(&runtime, settings.connect_timeout, config.connect(NoTls))
            .map_err(|_| PgFailure::Timeout { operation: "connect", timeout: settings.connect_timeout })?
            .map_err(|source| PgFailure::Statement { operation: "connect", source })?;
        let (client, mut connection) = connected;
        let task = runtime.spawn(async move {
            let driven = std::future::poll_fn(|cx| loop {
                match std::task::ready!(connection.poll_message(cx)) {
                    Some(Ok(AsyncMessage::Notification(notification))) => {
                        if let Some(sink) = &notifications {
                            sink(notification);
                        }
                    }
                    Some(Ok(_notice)) => {}
                    Some(Err(error)) => return std::task::Poll::Ready(Err(error)),
                    None => return std::task::Poll::Ready(Ok(())),
                }
            });
            if let Err(error) = driven.await {
                tracing::debug!(%error, "a postgres connection ended");
            }
        });
        Ok(Self { client, task, runtime, io_timeout: settings.io_timeout, broken: Cell::new(false) })
    }

    /// Runs one exchange, bounded by the I/O timeout. A timeout, or a failure of the connection
    /// itself, marks the connection broken.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the I/O timeout; the mapped driver error otherwise.
    pub(crate) fn run<'c, T, F>(
        &'c self,
        operation: &'static str,
        call: impl FnOnce(&'c Client) -> F,
    ) -> Result<T>
    where
        F: Future<Output = std::result::Result<T, tokio_postgres::Error>> + 'c,
    {
        self.run_for(operation, self.io_timeout, call).map_err(|failure| match failure {
            CallFailure::Timeout(failure) => failure.into(),
            CallFailure::Driver(source) => error::map(operation, source),
        })
    }

    /// Like [`run`](Self::run), with the driver error kept (to look at its SQLSTATE) and an
    /// explicit time limit (for statements that wait in the server's lock queue).
    pub(crate) fn run_for<'c, T, F>(
        &'c self,
        operation: &'static str,
        timeout: Duration,
        call: impl FnOnce(&'c Client) -> F,
    ) -> std::result::Result<T, CallFailure>
    where
        F: Future<Output = std::result::Result<T, tokio_postgres::Error>> + 'c,
    {
        match runtime::block_on(&self.runtime, timeout, call(&self.client)) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if error.code().is_none() || error::session_ended(&error) {
                    self.broken.set(true);
                }
                Err(CallFailure::Driver(error))
            }
            Err(_elapsed) => {
                self.broken.set(true);
                Err(CallFailure::Timeout(PgFailure::Timeout { operation, timeout }))
            }
        }
    }

    /// Marks the connection broken: the pool drops it instead of taking it back (for a connection
    /// whose session state is unknown, e.g. one that may still hold a lock).
    pub(crate) fn discard(&self) {
        self.broken.set(true);
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken.get() || self.client.is_closed()
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }
}

impl Drop for PgConnection {
    fn drop(&mut self) {
        // Dropping the client asks the task to close the socket; a server that stopped answering
        // would keep the task waiting, so stop it outright.
        self.task.abort();
    }
}

/// How a bounded call failed.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// No reply in time (the connection is broken).
    Timeout(PgFailure),
    /// The driver reported an error (a SQLSTATE from the server, or a connection failure).
    Driver(tokio_postgres::Error),
}

/// The r2d2 manager: opens [`PgConnection`]s and remembers the last failure to open one, so that
/// a caller who times out waiting for a connection learns why (a wrong password, a refused
/// connection) instead of only "timed out".
pub(crate) struct PgManager {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) settings: PgSettings,
    pub(crate) last_failure: Arc<Mutex<Option<LastFailure>>>,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConnection;
    type Error = PgFailure;

    fn connect(&self) -> std::result::Result<PgConnection, PgFailure> {
        let opened = PgConnection::open(&self.config, Arc::clone(&self.runtime), &self.settings, None);
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
    authentication: bool,
    message: String,
}

impl LastFailure {
    fn of(failure: &PgFailure) -> Self {
        let authentication =
            matches!(failure, PgFailure::Statement { source, .. } if error::is_authentication(source));
        let mut message = failure.to_string();
        let mut source = std::error::Error::source(failure);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { authentication, message }
    }
}

/// A pool of connections to one server.
#[derive(Clone)]
pub(crate) struct PgPool {
    pool: r2d2::Pool<PgManager>,
    last_failure: Arc<Mutex<Option<LastFailure>>>,
    settings: PgSettings,
    config: tokio_postgres::Config,
    runtime: Arc<Runtime>,
}

/// A connection out of the pool.
pub(crate) type PooledPg = r2d2::PooledConnection<PgManager>;

impl PgPool {
    pub(crate) fn new(config: tokio_postgres::Config, settings: PgSettings) -> Result<Self> {
        let runtime = runtime::shared()?;
        let last_failure = Arc::new(Mutex::new(None));
        let manager = PgManager {
            config: config.clone(),
            runtime: Arc::clone(&runtime),
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
            .build_unchecked(manager);
        Ok(Self { pool, last_failure, settings, config, runtime })
    }

    /// A connection, within the connect timeout.
    ///
    /// # Errors
    /// [`Error::Authentication`] or [`Error::Timeout`] (pool exhausted, or connecting failed —
    /// the last failure is in the message).
    pub(crate) fn get(&self) -> Result<PooledPg> {
        self.pool.get().map_err(|error| {
            let timeout = self.settings.connect_timeout;
            match self.last_failure.lock().clone() {
                Some(LastFailure { authentication: true, message }) => {
                    Error::Authentication { backend: error::BACKEND, source: message.into() }
                }
                Some(LastFailure { message, .. }) => {
                    Error::from(PgFailure::Pool { timeout, detail: message })
                }
                None => Error::from(PgFailure::Pool {
                    timeout,
                    detail: format!("{error}; all {} connections are in use", self.settings.max_connections),
                }),
            }
        })
    }

    /// Opens a connection outside the pool (the wait listener's, and the check `build()` makes).
    pub(crate) fn open_unpooled(&self, notifications: Option<NotificationSink>) -> Result<PgConnection> {
        Ok(PgConnection::open(&self.config, Arc::clone(&self.runtime), &self.settings, notifications)?)
    }

    pub(crate) fn settings(&self) -> PgSettings {
        self.settings
    }
}
