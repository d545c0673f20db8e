//! Connections: tokio-postgres clients driven by the calling thread, each call bounded by the
//! I/O timeout, pooled with r2d2 under a connection manager of our own.
//!
//! A connection whose call timed out or failed below SQL is marked broken and dropped by the pool:
//! its reply may still be on the way, so it is never reused out of step with the server.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::task::Poll;
use std::time::Duration;

use lock_core::{Error, Result};
use parking_lot::Mutex;
use scheduled_thread_pool::ScheduledThreadPool;
use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification, Row, Statement};

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

/// A statement parameter with its SQL type.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Where a connection's notifications go (only the wait listener's connection has one).
pub(crate) type NotificationSink = Box<dyn Fn(Notification) + Send + Sync>;

/// The socket half of a client, which a call polls while it waits.
type Socket = tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>;

/// One connection: the client, its socket half, the runtime that drives both during a call, and
/// whether it broke.
///
/// As in the blocking `postgres` crate, the calling thread drives the socket itself (no I/O
/// thread, no cross-thread hand-off per reply); unlike it, every call has a deadline.
pub(crate) struct PgConnection {
    client: Client,
    socket: RefCell<Socket>,
    runtime: Runtime,
    notifications: Option<NotificationSink>,
    io_timeout: Duration,
    broken: Cell<bool>,
    /// Statements prepared on this connection, by text: a statement is parsed and planned once
    /// per connection, then each call is one Bind/Execute round trip.
    statements: RefCell<HashMap<String, Statement>>,
}

impl PgConnection {
    /// Connects (TCP connect, startup and authentication all within `connect_timeout`).
    pub(crate) fn open(
        config: &tokio_postgres::Config,
        settings: &PgSettings,
        notifications: Option<NotificationSink>,
    ) -> std::result::Result<Self, PgFailure> {
        let runtime = runtime::new().map_err(PgFailure::Runtime)?;
        let connect = async { tokio::time::timeout(settings.connect_timeout, config.connect(NoTls)).await };
        let (client, socket) = runtime
            .block_on(connect)
            .map_err(|_| PgFailure::Timeout { operation: "connect", timeout: settings.connect_timeout })?
            .map_err(|source| PgFailure::Statement { operation: "connect", source })?;
        Ok(Self {
            client,
            socket: RefCell::new(socket),
            runtime,
            notifications,
            io_timeout: settings.io_timeout,
            broken: Cell::new(false),
            statements: RefCell::default(),
        })
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
        self.run_for(operation, self.io_timeout, call).map_err(|failure| failure.into_error(operation))
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
        let outcome = self.drive(timeout, call(&self.client));
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if error.code().is_none() || error::session_ended(&error) {
                    self.broken.set(true);
                }
                Err(CallFailure::Driver(error))
            }
            Err(failure) => {
                self.broken.set(true);
                Err(match failure {
                    Stalled::Timeout => CallFailure::Timeout(PgFailure::Timeout { operation, timeout }),
                    Stalled::Closed => CallFailure::Closed,
                })
            }
        }
    }

    /// `sql` prepared on this connection with the parameter types of `params` (cached).
    fn prepared(&self, sql: &str, params: &[Param<'_>]) -> std::result::Result<Statement, CallFailure> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let types: Vec<Type> = params.iter().map(|(_, kind)| kind.clone()).collect();
        let types = types.as_slice();
        let statement = self.run_for("prepare", self.io_timeout, |client| async move {
            client.prepare_typed(sql, types).await
        })?;
        self.statements.borrow_mut().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `sql` (prepared once per connection) with `params`, bounded by `timeout`; `begin`
    /// sends `BEGIN` ahead of it in the same round trip.
    pub(crate) fn query(
        &self,
        operation: &'static str,
        timeout: Duration,
        begin: bool,
        sql: &str,
        params: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, CallFailure> {
        let statement = self.prepared(sql, params)?;
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        let (statement, values) = (&statement, values.as_slice());
        self.run_for(operation, timeout, |client| async move {
            if begin {
                let (begun, rows) =
                    tokio::join!(client.batch_execute("BEGIN"), client.query(statement, values));
                begun?;
                rows
            } else {
                client.query(statement, values).await
            }
        })
    }

    /// Like [`query`](Self::query) without `BEGIN`, bounded by the I/O timeout, errors mapped.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub(crate) fn rows(&self, operation: &'static str, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.query(operation, self.io_timeout, false, sql, params)
            .map_err(|failure| failure.into_error(operation))
    }

    /// Polls `future` and the socket together until the future is done, the socket closes, or
    /// `timeout` passes. Notifications that arrive meanwhile go to the sink.
    fn drive<O>(
        &self,
        timeout: Duration,
        future: impl Future<Output = O>,
    ) -> std::result::Result<O, Stalled> {
        let mut socket = self.socket.borrow_mut();
        let mut future = std::pin::pin!(future);
        let both = std::future::poll_fn(|cx| {
            loop {
                match socket.poll_message(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(notification)))) => {
                        if let Some(sink) = &self.notifications {
                            sink(notification);
                        }
                    }
                    Poll::Ready(Some(Ok(_notice))) => {}
                    // The future sees the failure as its own error, if it is still waiting.
                    Poll::Ready(Some(Err(_))) | Poll::Ready(None) => match future.as_mut().poll(cx) {
                        Poll::Ready(output) => return Poll::Ready(Ok(output)),
                        Poll::Pending => return Poll::Ready(Err(Stalled::Closed)),
                    },
                    Poll::Pending => break,
                }
            }
            future.as_mut().poll(cx).map(Ok)
        });
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, both).await })
            .unwrap_or(Err(Stalled::Timeout))
    }

    /// Waits up to `timeout` for notifications (the listener's idle loop).
    ///
    /// # Errors
    /// [`CallFailure::Closed`] when the connection is gone.
    pub(crate) fn wait_for_notifications(&self, timeout: Duration) -> std::result::Result<(), CallFailure> {
        match self.drive(timeout, std::future::pending::<()>()) {
            Err(Stalled::Timeout) => Ok(()),
            Ok(()) | Err(Stalled::Closed) => {
                self.broken.set(true);
                Err(CallFailure::Closed)
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

/// How a bounded call failed.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// No reply in time (the connection is broken).
    Timeout(PgFailure),
    /// The connection closed under the call: the server ended the session.
    Closed,
    /// The driver reported an error (a SQLSTATE from the server, or a connection failure).
    Driver(tokio_postgres::Error),
}

impl CallFailure {
    /// Whether the failure proves the session is gone, and every lock it held with it.
    pub(crate) fn session_ended(&self) -> bool {
        match self {
            CallFailure::Closed => true,
            CallFailure::Driver(error) => error::session_ended(error),
            CallFailure::Timeout(_) => false,
        }
    }

    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        match self {
            CallFailure::Timeout(failure) => failure.into(),
            CallFailure::Closed => PgFailure::Closed { operation }.into(),
            CallFailure::Driver(source) => error::map(operation, source),
        }
    }
}

/// Why [`PgConnection::drive`] gave up.
enum Stalled {
    Timeout,
    Closed,
}

/// The r2d2 manager: opens [`PgConnection`]s and remembers the last failure to open one, so that
/// a caller who times out waiting for a connection learns why (a wrong password, a refused
/// connection) instead of only "timed out".
pub(crate) struct PgManager {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) settings: PgSettings,
    pub(crate) last_failure: Arc<Mutex<Option<LastFailure>>>,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConnection;
    type Error = PgFailure;

    fn connect(&self) -> std::result::Result<PgConnection, PgFailure> {
        let opened = PgConnection::open(&self.config, &self.settings, None);
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
}

/// A connection out of the pool.
pub(crate) type PooledPg = r2d2::PooledConnection<PgManager>;

impl PgPool {
    pub(crate) fn new(config: tokio_postgres::Config, settings: PgSettings) -> Result<Self> {
        let last_failure = Arc::new(Mutex::new(None));
        let manager = PgManager { config: config.clone(), settings, last_failure: Arc::clone(&last_failure) };
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_connections)
            .min_idle(Some(0))
            .connection_timeout(settings.connect_timeout)
            .test_on_check_out(false)
            .thread_pool(connector_threads())
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        Ok(Self { pool, last_failure, settings, config })
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
        Ok(PgConnection::open(&self.config, &self.settings, notifications)?)
    }

    pub(crate) fn settings(&self) -> PgSettings {
        self.settings
    }
}
