//! [`Session`]: one ZooKeeper session behind blocking, bounded calls — the private runtime that
//! drives it, the client rebuilt after the session expires, and a clean close.
//!
//! The traps of `zookeeper-client` this answers (measured on this machine's servers):
//! - requests sent while disconnected queue until the connection is back: every call here has a
//!   deadline ([`Session::call`]);
//! - `Expired` is final: the next call after it connects a new session ([`Session::client`]);
//! - dropping the client and the runtime together sends no `CloseSession`, so the nodes would
//!   linger a whole session timeout: [`Drop`] drops the client first, waits for `Closed`, and only
//!   then the runtime — on a thread of its own when dropped inside a tokio async task, where
//!   neither waiting nor dropping a runtime is allowed;
//! - a `current_thread` runtime idle outside `block_on` lets the session expire: the runtime has
//!   one worker thread of its own that keeps the session's pings going.
//!
//! Calls block their thread ([`crate::blocking`]); inside a tokio async task they are refused.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;
use tracing::instrument::WithSubscriber;
use tracing::Dispatch;
use zookeeper_client as zk;

use crate::blocking::{self, in_async_context};
use crate::builder::Settings;
use crate::error::{Failure, BACKEND};
use lock_core::{DoubtSignal, Error, Result};

thread_local! {
    /// On a runtime thread of a client whose hosts may hold part of a password: the scope in
    /// which the thread logs nothing, from its start to its end.
    static QUIET: std::cell::Cell<Option<tracing::dispatcher::DefaultGuard>> = const { std::cell::Cell::new(None) };
}

/// The name of each backend's runtime worker thread (one per backend and its clones).
pub const ZK_THREAD_NAME: &str = "distlock-zk";

/// How long closing waits for the server to confirm the end of the session (at most the request
/// timeout): past it the servers end the session on their own, a session timeout later.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The name of the thread that closes a session dropped inside a tokio async task.
const CLOSE_THREAD_NAME: &str = "distlock-zk-close";

pub(crate) struct Session {
    settings: Settings,
    /// `None` only while dropping.
    runtime: Option<Runtime>,
    /// The current session's client, read by every call; replaced (under the write lock, for a
    /// moment) when a new session has connected.
    current: RwLock<Option<zk::Client>>,
    /// Held while a new session connects: one thread connects, the others wait for it, each no
    /// longer than its connect timeout.
    connecting: Mutex<()>,
    /// The negotiated session timeout of the current session, in ms.
    negotiated_ms: AtomicU64,
    /// The current session's id and the doubt signal of its holds, raised for good when a new
    /// session replaces it: the holds on an ended session stay in doubt until their own checks
    /// find them lost, whatever state the client's new session is in.
    doubt: Mutex<(i64, DoubtSignal)>,
    /// Clean-ups left running in the background (deletes whose outcome is unknown), stopped
    /// before the session is closed so that none holds a client when the runtime goes.
    background: Mutex<JoinSet<()>>,
}

impl Session {
    /// Starts the runtime and connects the first session.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`Error::Backend`] when the runtime cannot start.
    pub(crate) fn open(settings: Settings) -> Result<Self> {
        let mut runtime = tokio::runtime::Builder::new_multi_thread();
        runtime.worker_threads(1).max_blocking_threads(1).thread_name(ZK_THREAD_NAME).enable_time();
        if settings.hidden {
            // zookeeper-client logs its hosts (connects, reconnects), which may hold part of a
            // password here: the runtime's threads, where its session runs, log nothing while
            // they run.
            runtime
                .on_thread_start(|| QUIET.set(Some(tracing::dispatcher::set_default(&Dispatch::none()))))
                .on_thread_stop(|| drop(QUIET.take()));
        }
        let runtime = runtime.build().map_err(|e| Error::backend(BACKEND, e))?;
        let session = Self {
            settings,
            runtime: Some(runtime),
            current: RwLock::new(None),
            connecting: Mutex::new(()),
            negotiated_ms: AtomicU64::new(0),
            doubt: Mutex::new((0, DoubtSignal::new())),
            background: Mutex::new(JoinSet::new()),
        };
        let client = session.connect(Instant::now() + session.settings.connect_timeout)?;
        *session.doubt.lock() = (client.session_id().0, DoubtSignal::new());
        *session.current.write() = Some(client);
        Ok(session)
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("present until dropped")
    }

    /// The client of a live session: the current one, or a new session if it has ended.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`Error::Timeout`] when another thread's connect did not
    /// finish within the connect timeout.
    pub(crate) fn client(&self) -> Result<zk::Client> {
        if let Some(client) = self.live() {
            return Ok(client);
        }
        // One connect timeout in all, waiting for another thread's connect included: a call that
        // connects stays within one connect and one request timeout.
        let deadline = Instant::now() + self.settings.connect_timeout;
        let timed_out = || Error::Timeout { backend: BACKEND, operation: "connect", source: None };
        let Some(_connecting) = self.connecting.try_lock_until(deadline) else { return Err(timed_out()) };
        // Another thread may have connected while this one waited.
        if let Some(client) = self.live() {
            return Ok(client);
        }
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        if let Some(ended) = self.current.read().as_ref() {
            tracing::info!(session = ?ended.session_id(), state = ?ended.state(), "ZooKeeper session ended; connecting a new one");
        }
        let client = self.connect(deadline)?;
        // Before any call can use the new session: its holds get its signal, not the old one's.
        let (_, ended) =
            std::mem::replace(&mut *self.doubt.lock(), (client.session_id().0, DoubtSignal::new()));
        ended.raise();
        *self.current.write() = Some(client.clone());
        Ok(client)
    }

    /// The doubt signal of the holds of session `session`: raised for good once that session is
    /// not the current one any more (see [`Session::client`]).
    pub(crate) fn doubt_of(&self, session: i64) -> DoubtSignal {
        let current = self.doubt.lock();
        if current.0 == session {
            return current.1.clone();
        }
        let ended = DoubtSignal::new();
        ended.raise();
        ended
    }

    /// The current session's client if that session has not ended.
    fn live(&self) -> Option<zk::Client> {
        self.current.read().as_ref().filter(|client| !is_terminal(client.state())).cloned()
    }

    /// The current session's client, whatever its state (never connects).
    pub(crate) fn current(&self) -> Option<zk::Client> {
        self.current.read().clone()
    }

    /// The current session's client, if that session is `session` (never connects).
    pub(crate) fn client_of(&self, session: i64) -> Option<zk::Client> {
        self.current.read().as_ref().filter(|client| client.session_id().0 == session).cloned()
    }

    /// Whether the current session is not connected right now (disconnected, or over and not
    /// replaced yet); no I/O.
    pub(crate) fn is_suspended(&self) -> bool {
        self.current.read().as_ref().is_some_and(|client| client.state() != zk::SessionState::SyncConnected)
    }

    /// The negotiated timeout of the current session.
    pub(crate) fn negotiated_timeout(&self) -> Duration {
        Duration::from_millis(self.negotiated_ms.load(Ordering::Relaxed))
    }

    /// A new session, by `deadline`.
    ///
    /// # Errors
    /// [`Error::Connection`] when no server accepts, [`Error::Timeout`] when none answers in time,
    /// [`Error::Authentication`] when the server rejects the credentials.
    fn connect(&self, deadline: Instant) -> Result<zk::Client> {
        let settings = &self.settings;
        let connector =
            zk::Client::connector().with_session_timeout(settings.session_timeout).with_fail_eagerly();
        let connect_string = settings.connect_string.as_str();
        let connected = match &settings.tls {
            #[cfg(feature = "tls")]
            Some(tls) => {
                let connector = connector.with_tls(crate::tls::client_options(tls)?);
                self.call_until(deadline, connector.secure_connect(connect_string))
            }
            _ => self.call_until(deadline, connector.connect(connect_string)),
        };
        let client = connected.map_err(|failure| self.explain_connect_failure(failure, deadline))?;
        if let Some(credentials) = &settings.digest {
            // Sent once the session is up, not with the connect request (`with_auth`): a server
            // on Netty (as every TLS port is) may answer an auth request that came with the
            // connect request first, and zookeeper-client 0.11 then reads that reply as the
            // connect response ("insufficient buf"; measured: 6 to 10 connects in 30 failed
            // over TLS). The Java client, too, sends nothing before the connect response. When
            // zookeeper-client reconnects the session it sends the auth with the connect
            // request again, and retries a reconnect that fails so by itself.
            self.call_until(deadline, client.auth("digest", credentials.as_bytes()))
                .map_err(|failure| failure.into_error("authenticate"))?;
        }
        self.negotiated_ms.store(client.session_timeout().as_millis() as u64, Ordering::Relaxed);
        Ok(client)
    }

    /// The error for a connect that failed with `failure`. When no server gave a session at once
    /// (refused, closed, or — with TLS — failed the handshake, which `zookeeper-client` reports
    /// as a lost connection only), the servers are asked why, until `deadline`: a TLS handshake
    /// done here gives rustls's error ([`Error::Tls`]); a plaintext server that accepts TCP
    /// connections yet closed ours may be a TLS-only port, and the error says so.
    fn explain_connect_failure(&self, failure: Failure, deadline: Instant) -> Error {
        let Failure::Zk(cause @ (zk::Error::NoHosts | zk::Error::ConnectionLoss)) = &failure else {
            return failure.into_error("connect");
        };
        if self.settings.hidden {
            // The diagnosis names the hosts, which may hold part of a password.
            return failure.into_error("connect");
        }
        let connect_string = &self.settings.connect_string;
        let explained = match &self.settings.tls {
            #[cfg(feature = "tls")]
            Some(tls) => crate::tls::diagnose(connect_string, tls, deadline),
            _ => crate::tls::closed_before_session(connect_string, cause, deadline),
        };
        explained.unwrap_or_else(|| failure.into_error("connect"))
    }

    /// Runs `future` on the runtime from this (blocking) thread, for at most `timeout`.
    pub(crate) fn call<T>(
        &self,
        timeout: Duration,
        future: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, Failure> {
        self.call_until(Instant::now() + timeout, future)
    }

    /// Runs `future` on the runtime from this (blocking) thread, until `deadline` at the latest.
    /// Refused inside a tokio async task (see [`crate::blocking`]).
    pub(crate) fn call_until<T>(
        &self,
        deadline: Instant,
        future: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, Failure> {
        blocking::block_until(self.runtime(), deadline, self.quiet_if_hidden(future))?.map_err(Failure::Zk)
    }

    /// Waits on the runtime for `future` until `deadline`; `None` if it did not finish by then
    /// (or at once inside a tokio async task, which callers have refused before).
    pub(crate) fn wait_until<T>(&self, deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
        blocking::block_until(self.runtime(), deadline, self.quiet_if_hidden(future)).ok()
    }

    /// `future`, logging nothing while it is polled on the caller's thread when the hosts may
    /// hold part of a password (see [`open`](Self::open)).
    fn quiet_if_hidden<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        let hidden = self.settings.hidden;
        async move {
            match hidden {
                true => future.with_subscriber(Dispatch::none()).await,
                false => future.await,
            }
        }
    }

    /// Leaves `future` (whose requests are already sent) to finish in the background.
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        let mut background = self.background.lock();
        while background.try_join_next().is_some() {}
        background.spawn_on(future, self.runtime().handle());
    }
}

/// Whether a session in this state is over for good.
pub(crate) fn is_terminal(state: zk::SessionState) -> bool {
    matches!(state, zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed)
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else { return };
        let parts = (runtime, self.current.get_mut().take(), std::mem::take(self.background.get_mut()));
        let wait = self.settings.io_timeout.min(CLOSE_TIMEOUT);
        if !in_async_context() {
            return close(parts, wait);
        }
        // An async task may neither wait nor drop a runtime: a thread of its own closes the
        // session, in the same order, and this drop returns at once.
        let parts = Arc::new(Mutex::new(Some(parts)));
        let for_thread = Arc::clone(&parts);
        let spawned = std::thread::Builder::new().name(CLOSE_THREAD_NAME.into()).spawn(move || {
            if let Some(parts) = for_thread.lock().take() {
                close(parts, wait);
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no thread to close the ZooKeeper session: the servers end it after its timeout");
            if let Some((runtime, client, tasks)) = parts.lock().take() {
                drop((client, tasks));
                runtime.shutdown_background();
            }
        }
    }
}

/// Closes a session in order: stops the background clean-ups (each holds a client), drops the
/// client — which sends `CloseSession` — and waits up to `wait` for the servers to confirm, then
/// stops the runtime.
fn close((runtime, client, mut tasks): (Runtime, Option<zk::Client>, JoinSet<()>), wait: Duration) {
    blocking::block_on(&runtime, async move {
        // Clean-ups hold clients: stop every task, so that dropping ours closes the session (and
        // no watch is left waiting on a session that is gone).
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        if let Some(client) = client {
            let mut state = client.state_watcher();
            drop(client);
            let closed = async {
                while !is_terminal(state.peek_state()) {
                    state.changed().await;
                }
            };
            let _ = tokio::time::timeout(wait, closed).await;
        }
    });
    runtime.shutdown_background();
}
