//! [`PgConnection`]: a tokio-postgres client driven by the calling thread, each call bounded by
//! the I/O timeout (the pool is in `pool.rs`).
//!
//! A connection whose call timed out or failed below SQL is marked broken and dropped by the pool:
//! its reply may still be on the way, so it never serves another pool user. (A session hold keeps
//! using its own connection for liveness checks: tokio-postgres matches replies to requests in
//! order, so a late reply is not mistaken for the next one's.)
//!
//! Calls made on a thread that is inside a tokio runtime (an async task, or `spawn_blocking`)
//! cannot drive a runtime of their own there — tokio panics — so they are run on a short-lived
//! helper thread instead (see [`block_on`]); async callers should still use `spawn_blocking`,
//! since the call blocks their thread either way.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use lock_core::{Error, Result};
use tokio::runtime::Runtime;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Notification, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::{self, PgFailure};
use super::pool::PgSettings;
use super::runtime;
use super::undo::{self, FollowUp};
use crate::restart_delay::SessionsAge;

/// A statement parameter with its SQL type.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Where a connection's notifications go (only the wait listener's connection has one).
pub(crate) type NotificationSink = Box<dyn Fn(Notification) + Send + Sync>;

/// The socket half of a client, which a call polls while it waits (TLS or plaintext, as the
/// mode and the server decided).
type Socket = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// One connection: its [`Wire`], and whether it broke.
///
/// As in the blocking `postgres` crate, the calling thread drives the socket itself (no I/O
/// thread, no cross-thread hand-off per reply); unlike it, every call has a deadline.
pub(crate) struct PgConnection {
    /// `None` only while dropping (see `Drop`).
    wire: Option<Wire>,
    /// Statements to send behind a call that got no reply, when the connection is dropped
    /// (`undo.rs`).
    pub(super) follow_up: RefCell<Option<FollowUp>>,
    notifications: Option<NotificationSink>,
    io_timeout: Duration,
    broken: Cell<bool>,
    /// Set by [`end`](Self::end): every later call fails as if the connection had closed.
    ended: Cell<bool>,
    /// Whether the last call got no reply in time (cleared by the next answered call).
    stalled: Cell<bool>,
    /// Statements prepared on this connection, by text: a statement is parsed and planned once
    /// per connection, then each call is one Bind/Execute round trip.
    statements: RefCell<HashMap<String, Statement>>,
    /// Statements prepared with SQL `PREPARE` on this connection, by name: run by `EXECUTE`
    /// inside simple queries (see [`prepare_by_name`](Self::prepare_by_name)).
    named: RefCell<std::collections::HashSet<&'static str>>,
    /// Behind a pooler: no named statements; each is parsed with its call, unnamed
    /// (`pooler.rs`).
    unnamed: bool,
    /// The age of the server's sessions, once a session lock asked ([`crate::restart_delay`]).
    sessions_age: Cell<SessionsAge>,
    /// Behind a pooler: the age is asked inside each grant instead (`PgSettings::settle_in_grant`).
    settle_in_grant: bool,
}

impl PgConnection {
    /// Connects (TCP connect, TLS handshake, startup and authentication all within
    /// `connect_timeout`), through TLS as `config`'s SSL mode and `tls` say.
    pub(crate) fn open(
        config: &tokio_postgres::Config,
        tls: &MakeRustlsConnect,
        settings: &PgSettings,
        notifications: Option<NotificationSink>,
    ) -> std::result::Result<Self, PgFailure> {
        let runtime = runtime::new().map_err(PgFailure::Runtime)?;
        let connect =
            async { tokio::time::timeout(settings.connect_timeout, config.connect(tls.clone())).await };
        let connected = block_on(&runtime, connect);
        let (client, socket) = connected
            .map_err(PgFailure::Runtime)?
            .map_err(|_| PgFailure::Timeout { operation: "connect", timeout: settings.connect_timeout })?
            .map_err(|source| PgFailure::statement("connect", source))?;
        let connection = Self {
            wire: Some(Wire { client, socket: RefCell::new(socket), runtime: Some(runtime) }),
            follow_up: RefCell::new(None),
            notifications,
            io_timeout: settings.io_timeout,
            broken: Cell::new(false),
            ended: Cell::new(false),
            stalled: Cell::new(false),
            statements: RefCell::default(),
            named: RefCell::default(),
            unnamed: settings.unnamed_statements,
            sessions_age: Cell::new(SessionsAge::new(settings.restart_delay)),
            settle_in_grant: settings.settle_in_grant,
        };
        if settings.warn_plaintext {
            connection.warn_if_plaintext();
        }
        Ok(connection)
    }

    /// Logs a warning when this connection is plaintext: `prefer` fell back to it (the driver
    /// does so in silence). One more round trip per new connection, with `prefer` only.
    fn warn_if_plaintext(&self) {
        match self.rows("check TLS", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]) {
            Ok(rows) if rows.first().is_some_and(|row| !row.get::<_, bool>(0)) => {
                tracing::warn!("the server offers no TLS: connected in plaintext (sslmode=prefer)");
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "could not tell whether the connection uses TLS"),
        }
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
        F: Future<Output = std::result::Result<T, tokio_postgres::Error>> + Send + 'c,
        T: Send,
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
        F: Future<Output = std::result::Result<T, tokio_postgres::Error>> + Send + 'c,
        T: Send,
    {
        if self.ended.get() {
            return Err(CallFailure::Closed);
        }
        let outcome = self.drive(timeout, call(&self.wire().client));
        self.stalled.set(matches!(outcome, Err(Stalled::Timeout)));
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                // A pooler sharing server sessions: this connection's statements may be gone
                // from (or clash on) whatever session it has next; never reuse it.
                if error.code().is_none()
                    || error::session_ended(&error)
                    || super::pooler::is_shared_session_symptom(&error)
                {
                    self.broken.set(true);
                }
                Err(CallFailure::Driver(error))
            }
            Err(failure) => {
                self.broken.set(true);
                Err(match failure {
                    Stalled::Timeout => CallFailure::Timeout(PgFailure::Timeout { operation, timeout }),
                    Stalled::Closed => CallFailure::Closed,
                    Stalled::NoThread(error) => CallFailure::Timeout(PgFailure::Runtime(error)),
                })
            }
        }
    }

    /// Prepares `statement` (`(types) AS query`) as `name` on this connection with SQL `PREPARE`,
    /// once, so that a simple query can run it with `EXECUTE name(…)` — parsed and planned once
    /// per connection where the simple query would plan it each time. `false` behind a pooler,
    /// whose server sessions keep no named statements: send the query whole.
    ///
    /// # Errors
    /// As [`run_for`](Self::run_for).
    pub(crate) fn prepare_by_name(
        &self,
        name: &'static str,
        statement: &str,
    ) -> std::result::Result<bool, CallFailure> {
        if self.unnamed {
            return Ok(false);
        }
        if !self.named.borrow().contains(name) {
            let sql = format!("PREPARE {name} {statement}");
            let sql = sql.as_str();
            self.run_for(
                "prepare",
                self.io_timeout,
                |client| async move { client.batch_execute(sql).await },
            )?;
            self.named.borrow_mut().insert(name);
        }
        Ok(true)
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
    ///
    /// # Errors
    /// As [`run_for`](Self::run_for).
    pub(crate) fn query(
        &self,
        operation: &'static str,
        timeout: Duration,
        begin: bool,
        sql: &str,
        params: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, CallFailure> {
        let statement = self.statement(sql, params)?;
        let statement = &statement;
        self.run_for(operation, timeout, |client| async move {
            if begin {
                let (begun, rows) = tokio::join!(client.batch_execute("BEGIN"), statement.query(client));
                begun?;
                rows
            } else {
                statement.query(client).await
            }
        })
    }

    /// `sql` with `params`, ready to send: prepared once per connection, or unnamed behind a
    /// pooler.
    fn statement<'s>(
        &self,
        sql: &'s str,
        params: &'s [Param<'s>],
    ) -> std::result::Result<Ready<'s>, CallFailure> {
        if self.unnamed {
            return Ok(Ready::Unnamed(sql, params));
        }
        let statement = self.prepared(sql, params)?;
        Ok(Ready::Prepared(statement, params.iter().map(|(value, _)| *value).collect()))
    }

    /// Makes `sql` ready to send with `params` (prepared once per connection, a round trip the
    /// first time), for [`run_ready`](Self::run_ready): a failure here means the statement
    /// never left, which [`rows`](Self::rows) alone cannot tell from one that left and got no
    /// answer.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub(crate) fn ready<'s>(&self, sql: &'s str, params: &'s [Param<'s>]) -> Result<Ready<'s>> {
        self.statement(sql, params).map_err(|failure| failure.into_error("prepare"))
    }

    /// Runs a statement [`ready`](Self::ready) made, like [`rows`](Self::rows).
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub(crate) fn run_ready(&self, operation: &'static str, ready: &Ready<'_>) -> Result<Vec<Row>> {
        self.run_for(operation, self.io_timeout, |client| ready.query(client))
            .map_err(|failure| failure.into_error(operation))
    }

    /// Like [`query`](Self::query) without `BEGIN`, bounded by the I/O timeout, errors mapped.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub(crate) fn rows(&self, operation: &'static str, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.query(operation, self.io_timeout, false, sql, params)
            .map_err(|failure| failure.into_error(operation))
    }

    /// Runs `sql` like [`query`](Self::query) (no `BEGIN`, bounded by the I/O timeout), with a
    /// second, simple statement `then` pipelined after it: one round trip for both, whose
    /// failure is the call's failure.
    ///
    /// # Errors
    /// As [`run_for`](Self::run_for).
    pub(crate) fn query_then(
        &self,
        operation: &'static str,
        sql: &str,
        params: &[Param<'_>],
        then: &str,
    ) -> std::result::Result<Vec<Row>, CallFailure> {
        let statement = self.statement(sql, params)?;
        let statement = &statement;
        self.run_for(operation, self.io_timeout, |client| async move {
            let (rows, done) = tokio::join!(statement.query(client), client.batch_execute(then));
            let rows = rows?;
            done.map(|()| rows)
        })
    }

    /// Sends `steps` back to back in one round trip (each waits in the server only for the ones
    /// before it) and returns each step's rows, in order; a simple step has none. The first
    /// failing step's error is the call's: inside a transaction every later step then fails as
    /// "transaction aborted", which the caller's `ROLLBACK` ends.
    ///
    /// # Errors
    /// As [`run_for`](Self::run_for).
    pub(crate) fn pipeline(
        &self,
        operation: &'static str,
        timeout: Duration,
        steps: &[Step<'_>],
    ) -> std::result::Result<Vec<Vec<Row>>, CallFailure> {
        // Prepared before the round trip (once per connection), so that the pipeline is one.
        let ready = steps
            .iter()
            .map(|step| match step {
                Step::Simple(_) => Ok(None),
                Step::Query(sql, params) => self.statement(sql, params).map(Some),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let ready = &ready;
        self.run_for(operation, timeout, |client| async move {
            // `join_all` polls in order, and each call sends its request on its first poll:
            // the requests leave in the steps' order.
            let calls = steps.iter().zip(ready).map(|(step, ready)| async move {
                match (step, ready) {
                    (_, Some(statement)) => statement.query(client).await,
                    (Step::Simple(sql), None) => client.batch_execute(sql).await.map(|()| Vec::new()),
                    (Step::Query(..), None) => unreachable!("every query step is ready"),
                }
            });
            futures_util::future::join_all(calls).await.into_iter().collect()
        })
    }

    /// Polls `future` and the socket together until the future is done, the socket closes, or
    /// `timeout` passes. Notifications that arrive meanwhile go to the sink.
    fn drive<O: Send>(
        &self,
        timeout: Duration,
        future: impl Future<Output = O> + Send,
    ) -> std::result::Result<O, Stalled> {
        self.wire().drive(self.notifications.as_ref(), timeout, future)
    }

    fn wire(&self) -> &Wire {
        self.wire.as_ref().expect("present until dropped")
    }

    /// Waits up to `timeout` for notifications (the listener's idle loop).
    ///
    /// # Errors
    /// [`CallFailure::Closed`] when the connection is gone.
    pub(crate) fn wait_for_notifications(&self, timeout: Duration) -> std::result::Result<(), CallFailure> {
        match self.drive(timeout, std::future::pending::<()>()) {
            Err(Stalled::Timeout) => Ok(()),
            Ok(()) | Err(Stalled::Closed | Stalled::NoThread(_)) => {
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

    /// Ends the connection for its holder too: every later call fails as closed
    /// ([`CallFailure::Closed`], which reads as "the session ended") without reaching the
    /// server, and the pool drops it. For a session whose transaction must never commit — a
    /// guarded write reported as not made whose savepoint step got no answer: a later renewal
    /// that got an answer, then a release's `COMMIT`, would make it permanent. The socket closes
    /// when the connection is dropped, and the server then rolls the transaction back.
    pub(crate) fn end(&self) {
        self.broken.set(true);
        self.ended.set(true);
    }

    /// Whether the server closed this connection while it sat idle (see
    /// [`Wire::closed_while_idle`]); then it serves no more calls.
    pub(crate) fn closed_while_idle(&self) -> bool {
        let closed = self.wire().closed_while_idle();
        if closed {
            self.broken.set(true);
        }
        closed
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken.get() || self.wire().client.is_closed()
    }

    /// Whether the last call on this connection got no reply in time: asking again would most
    /// likely cost another I/O timeout.
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled.get()
    }

    /// What this connection learned about its server's sessions' age.
    pub(crate) fn sessions_age(&self) -> &Cell<SessionsAge> {
        &self.sessions_age
    }

    /// Whether the server's age is asked inside each grant (behind a pooler, with the restart
    /// delay) rather than once per connection.
    pub(crate) fn settles_in_grant(&self) -> bool {
        self.settle_in_grant
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }
}

/// One statement of a [`PgConnection::pipeline`].
#[derive(Debug, Clone)]
pub(crate) enum Step<'s> {
    /// A statement without parameters or rows (`BEGIN`, `SAVEPOINT …`), sent as a simple query.
    Simple(&'s str),
    /// A statement with parameters: prepared once per connection (unnamed behind a pooler).
    Query(&'s str, &'s [Param<'s>]),
}

/// A statement ready to run: prepared by name, with its values; or its text and typed values,
/// sent unnamed (parsed and run in one round trip, nothing left on the server session).
pub(crate) enum Ready<'s> {
    Prepared(Statement, Vec<&'s (dyn ToSql + Sync)>),
    Unnamed(&'s str, &'s [Param<'s>]),
}

impl Ready<'_> {
    async fn query(&self, client: &Client) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        match self {
            Ready::Prepared(statement, values) => client.query(statement, values).await,
            Ready::Unnamed(sql, params) => client.query_typed(sql, params).await,
        }
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

impl Drop for PgConnection {
    /// Hands the wire to a thread that sends the follow-up first, if there is one.
    fn drop(&mut self) {
        if let (Some(wire), Some(follow_up)) = (self.wire.take(), self.follow_up.take()) {
            undo::send_behind(wire, follow_up);
        }
    }
}

/// A connection's client, its socket half, and the runtime that drives both during a call.
pub(super) struct Wire {
    pub(super) client: Client,
    socket: RefCell<Socket>,
    /// `None` only while dropping (see `Drop`).
    runtime: Option<Runtime>,
}

impl Wire {
    /// Polls `future` and the socket together until the future is done, the socket closes, or
    /// `timeout` passes. Notifications that arrive meanwhile go to `notifications`.
    pub(super) fn drive<O: Send>(
        &self,
        notifications: Option<&NotificationSink>,
        timeout: Duration,
        future: impl Future<Output = O> + Send,
    ) -> std::result::Result<O, Stalled> {
        let mut socket = self.socket.borrow_mut();
        let socket = &mut *socket;
        let mut future = std::pin::pin!(future);
        let both = std::future::poll_fn(move |cx| {
            loop {
                match socket.poll_message(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(notification)))) => {
                        if let Some(sink) = notifications {
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
        let runtime = self.runtime.as_ref().expect("present until dropped");
        match block_on(runtime, async { tokio::time::timeout(timeout, both).await }) {
            Ok(outcome) => outcome.unwrap_or(Err(Stalled::Timeout)),
            Err(error) => Err(Stalled::NoThread(error)),
        }
    }
}

impl Wire {
    /// Whether the server closed the connection (or ended its session with a `FATAL`) while no
    /// call was running. Turns the runtime's I/O driver once without waiting (`yield_now`), so
    /// that a close that arrived meanwhile is seen before anything is sent: no round trip.
    fn closed_while_idle(&self) -> bool {
        let mut socket = self.socket.borrow_mut();
        let socket = &mut *socket;
        let mut turned = std::pin::pin!(tokio::task::yield_now());
        let check = std::future::poll_fn(move |cx| loop {
            match socket.poll_message(cx) {
                // An idle session may get notices; they say nothing of its end.
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(true),
                Poll::Pending => return turned.as_mut().poll(cx).map(|()| false),
            }
        });
        let runtime = self.runtime.as_ref().expect("present until dropped");
        block_on(runtime, check).unwrap_or(false)
    }
}

impl Drop for Wire {
    /// Without waiting for the runtime's blocking threads (a host-name lookup at most): dropping a
    /// runtime the ordinary way panics when done inside another runtime.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Why [`Wire::drive`] gave up.
pub(super) enum Stalled {
    Timeout,
    Closed,
    /// Inside a tokio runtime, and no helper thread could be started.
    NoThread(std::io::Error),
}

/// `runtime.block_on(future)`, on a helper thread when this thread is inside a tokio runtime
/// (where `block_on` panics: "Cannot start a runtime from within a runtime").
///
/// `Handle::try_current` cannot tell an async task (which must not block) from `spawn_blocking`
/// (which may), and both are refused by `block_on` only in the first case: the helper serves
/// both, so a call from `spawn_blocking` — the way the docs advise — works, and a call from an
/// async task blocks its worker instead of panicking.
///
/// # Errors
/// When the helper thread cannot be started.
fn block_on<F>(runtime: &Runtime, future: F) -> std::io::Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name(runtime::HELPER_THREAD_NAME.into())
            .spawn_scoped(scope, || runtime.block_on(future))?;
        Ok(helper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// Against the shared harness server.
#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use std::time::Duration;

    use lock_core::{DistributedLock, OwnerToken};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use crate::postgres::PostgresLockKind;
    use crate::testkit::PostgresTarget;

    /// Calls from inside a tokio runtime — an async task, `spawn_blocking` — work instead of
    /// panicking ("Cannot start a runtime from within a runtime"), and so does dropping the
    /// backend and its connections there.
    #[test]
    fn calls_and_drops_inside_a_tokio_runtime_do_not_panic() {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        for kind in [PostgresLockKind::Advisory, PostgresLockKind::Table] {
            let target = PostgresTarget::new(kind);
            runtime.block_on(async {
                let locks = target.backend().unwrap();
                let name = unique_name("in-runtime");
                let lease = locks.try_acquire(&name, &OwnerToken::random(), Duration::from_secs(10)).unwrap();
                assert!(locks.release(lease.expect("free")).unwrap());
                let in_blocking = tokio::task::spawn_blocking(move || {
                    let lease = locks.try_acquire(&name, &OwnerToken::random(), Duration::from_secs(10));
                    assert!(locks.release(lease.unwrap().expect("free")).unwrap());
                    locks
                });
                let locks = in_blocking.await.unwrap();
                drop(locks);
            });
        }
        let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        current.block_on(async {
            let locks = PostgresTarget::new(PostgresLockKind::Row).backend().unwrap();
            let lease =
                locks.try_acquire(&unique_name("in-runtime"), &OwnerToken::random(), Duration::from_secs(10));
            // Dropped with its connection inside the runtime, without a release.
            drop(lease.unwrap().expect("free"));
            drop(locks);
        });
    }
}
