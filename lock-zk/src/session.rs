//! [`Session`]: one ZooKeeper session behind blocking, bounded calls — the private runtime that
//! drives it, the client rebuilt after the session expires, and a clean close.
//!
//! The traps of `zookeeper-client` this answers (measured on this machine's servers):
//! - requests sent while disconnected queue until the connection is back: every call here has a
//!   deadline ([`Session::call`]);
//! - `Expired` is final: the next call after it connects a new session ([`Session::client`]);
//! - dropping the client and the runtime together sends no `CloseSession`, so the nodes would
//!   linger a whole session timeout: [`Drop`] drops the client first, waits for `Closed`, and only
//!   then the runtime;
//! - a `current_thread` runtime idle outside `block_on` lets the session expire: the runtime has
//!   one worker thread of its own that keeps the session's pings going.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;
use zookeeper_client as zk;

use crate::builder::Settings;
use crate::error::{Failure, BACKEND};
use lock_core::{Error, Result};

/// The name of each backend's runtime worker thread (one per backend and its clones).
pub const ZK_THREAD_NAME: &str = "distlock-zk";

/// How long closing waits for the server to confirm the end of the session.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) struct Session {
    settings: Settings,
    /// `None` only while dropping.
    runtime: Option<Runtime>,
    /// The current session's client; replaced when the session has ended. Locked while a new
    /// session connects.
    client: Mutex<Option<zk::Client>>,
    /// The current session's state, readable without waiting for a connect in progress.
    state: RwLock<Option<zk::StateWatcher>>,
    /// The negotiated session timeout of the current session, in ms.
    negotiated_ms: AtomicU64,
    /// Tasks left running in the background — clean-ups of deletes whose reply was lost, and the
    /// watches on held nodes — stopped before the session is closed, so that none holds a client
    /// or waits on a watch when the runtime goes.
    background: Mutex<JoinSet<()>>,
}

impl Session {
    /// Starts the runtime and connects the first session.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`Error::Backend`] when the runtime cannot start.
    pub(crate) fn open(settings: Settings) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name(ZK_THREAD_NAME)
            .enable_time()
            .build()
            .map_err(|e| Error::backend(BACKEND, e))?;
        let session = Self {
            settings,
            runtime: Some(runtime),
            client: Mutex::new(None),
            state: RwLock::new(None),
            negotiated_ms: AtomicU64::new(0),
            background: Mutex::new(JoinSet::new()),
        };
        let client = session.connect()?;
        session.install(client);
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
    /// As [`connect`](Self::connect).
    pub(crate) fn client(&self) -> Result<zk::Client> {
        let mut current = self.client.lock();
        if let Some(client) = current.as_ref() {
            if !is_terminal(client.state()) {
                return Ok(client.clone());
            }
            tracing::info!(session = ?client.session_id(), state = ?client.state(), "ZooKeeper session ended; connecting a new one");
        }
        let client = self.connect()?;
        *self.state.write() = Some(client.state_watcher());
        *current = Some(client.clone());
        Ok(client)
    }

    fn install(&self, client: zk::Client) {
        *self.state.write() = Some(client.state_watcher());
        *self.client.lock() = Some(client);
    }

    /// The current session's client, whatever its state (no new session is connected).
    pub(crate) fn current(&self) -> Option<zk::Client> {
        self.client.lock().clone()
    }

    /// The current session's client, if that session is `session` and has not ended.
    pub(crate) fn client_of(&self, session: i64) -> Option<zk::Client> {
        self.client.lock().as_ref().filter(|client| client.session_id().0 == session).cloned()
    }

    /// Whether the current session is disconnected right now (no I/O).
    pub(crate) fn is_disconnected(&self) -> bool {
        self.state.read().as_ref().is_some_and(|state| state.peek_state() == zk::SessionState::Disconnected)
    }

    /// The negotiated timeout of the current session.
    pub(crate) fn negotiated_timeout(&self) -> Duration {
        Duration::from_millis(self.negotiated_ms.load(Ordering::Relaxed))
    }

    /// A new session, within the connect timeout.
    ///
    /// # Errors
    /// [`Error::Connection`] when no server accepts, [`Error::Timeout`] when none answers in time,
    /// [`Error::Authentication`] when the server rejects the credentials.
    fn connect(&self) -> Result<zk::Client> {
        let settings = &self.settings;
        let mut connector =
            zk::Client::connector().with_session_timeout(settings.session_timeout).with_fail_eagerly();
        if let Some(credentials) = &settings.digest {
            connector = connector.with_auth("digest", credentials.as_bytes());
        }
        let connect_string = settings.connect_string.as_str();
        let client = self
            .call(settings.connect_timeout, connector.connect(connect_string))
            .map_err(|failure| failure.into_error("connect"))?;
        self.negotiated_ms.store(client.session_timeout().as_millis() as u64, Ordering::Relaxed);
        Ok(client)
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
    pub(crate) fn call_until<T>(
        &self,
        deadline: Instant,
        future: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, Failure> {
        // The timer must be made inside the runtime: `block_on` enters it.
        let bounded = async { tokio::time::timeout_at(deadline.into(), future).await };
        match self.runtime().block_on(bounded) {
            Ok(outcome) => outcome.map_err(Failure::Zk),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }

    /// Waits on the runtime for `future` until `deadline`; `None` if it did not finish by then.
    pub(crate) fn wait_until<T>(&self, deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
        self.runtime().block_on(async { tokio::time::timeout_at(deadline.into(), future).await }).ok()
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
        let client = self.client.get_mut().take();
        let mut tasks = std::mem::take(self.background.get_mut());
        // `block_on` panics inside another runtime; there, skip the orderly close (the server
        // then ends the session after its timeout).
        if tokio::runtime::Handle::try_current().is_err() {
            runtime.block_on(async move {
                // Clean-ups hold clients: stop every task, so that dropping ours closes the session
                // (and no watch is left waiting on a session that is gone).
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
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, closed).await;
                }
            });
        }
        runtime.shutdown_background();
    }
}
