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
    /// The current session's client, read by every call; replaced (under the write lock, for a
    /// moment) when a new session has connected.
    current: RwLock<Option<zk::Client>>,
    /// Held while a new session connects: one thread connects, the others wait for it, each no
    /// longer than its connect timeout.
    connecting: Mutex<()>,
    /// The negotiated session timeout of the current session, in ms.
    negotiated_ms: AtomicU64,
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
            current: RwLock::new(None),
            connecting: Mutex::new(()),
            negotiated_ms: AtomicU64::new(0),
            background: Mutex::new(JoinSet::new()),
        };
        let client = session.connect()?;
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
        let timeout = self.settings.connect_timeout;
        let Some(_connecting) = self.connecting.try_lock_for(timeout) else {
            return Err(Error::Timeout { backend: BACKEND, operation: "connect", source: None });
        };
        // Another thread may have connected while this one waited.
        if let Some(client) = self.live() {
            return Ok(client);
        }
        if let Some(ended) = self.current.read().as_ref() {
            tracing::info!(session = ?ended.session_id(), state = ?ended.state(), "ZooKeeper session ended; connecting a new one");
        }
        let client = self.connect()?;
        *self.current.write() = Some(client.clone());
        Ok(client)
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
        let client = self.current.get_mut().take();
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
