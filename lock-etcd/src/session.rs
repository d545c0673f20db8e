//! [`Session`]: one etcd client and its lease behind blocking, bounded calls — the private
//! runtime that drives them, the lease replaced after it was lost, and a clean close.
//!
//! The traps of etcd-client (tonic) this answers:
//! - all endpoints sit behind one load-balanced channel that waits, without an error, for an
//!   endpoint to come up: every call here has a deadline ([`Session::call_until`]), and a
//!   connect whose endpoints all refuse connections fails at once, not at its deadline;
//! - a member that refuses connections fails the requests the channel sends it, rather than
//!   the channel trying another: such requests are sent again ([`crate::requests`]);
//! - without credentials, `Client::connect` sends nothing: the first lease grant is what proves
//!   the cluster answers;
//! - credentials for a cluster without auth are refused ("authentication is not enabled"),
//!   where Go's client ignores them: the connect is retried without them, with a warning;
//! - the keep-alive is not automatic: [`crate::keep_alive`] runs it, on the runtime's one worker
//!   thread, so it goes on between calls.
//!
//! Calls block their thread ([`crate::blocking`]); inside a tokio async task they are refused.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, Error as EtcdError};
use lock_core::{Error, Result};
use parking_lot::{Mutex, RwLock};
use tokio::runtime::Runtime;
use tokio::task::{AbortHandle, JoinSet};

use crate::blocking::{self, in_async_context};
use crate::builder::Settings;
use crate::error::{is_auth_not_enabled, Failure, BACKEND};
use crate::keep_alive::{keep_alive, ClientLease, KeepAliveTiming};
use crate::requests::retry_unsent;

/// The name of each backend's runtime worker thread (one per backend and its clones).
pub const ETCD_THREAD_NAME: &str = "distlock-etcd";

/// How long closing waits for etcd to revoke the lease (at most the request timeout): past it
/// the lease expires on its own, one TTL later.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The name of the thread that closes a session dropped inside a tokio async task.
const CLOSE_THREAD_NAME: &str = "distlock-etcd-close";

pub(crate) struct Session {
    settings: Settings,
    /// `None` only while dropping.
    runtime: Option<Runtime>,
    /// `None` only while dropping.
    client: Option<Client>,
    /// The current lease; replaced (under the write lock, for a moment) after it was lost.
    lease: RwLock<Arc<ClientLease>>,
    /// The current lease's keep-alive task.
    keep_alive_task: Mutex<Option<AbortHandle>>,
    /// Held while a new lease is granted: one thread grants, the others wait for it, each no
    /// longer than its connect timeout.
    granting: Mutex<()>,
    timing: KeepAliveTiming,
    /// Clean-ups left running in the background (deletes whose outcome is unknown), stopped
    /// before the lease is revoked.
    background: Mutex<JoinSet<()>>,
}

impl Session {
    /// Starts the runtime, connects, and grants the first lease.
    ///
    /// # Errors
    /// As [`EtcdLockBuilder::build`](crate::EtcdLockBuilder::build).
    pub(crate) fn open(settings: Settings) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name(ETCD_THREAD_NAME)
            .enable_all()
            .build()
            .map_err(|e| Error::backend(BACKEND, e))?;
        let deadline = Instant::now() + settings.connect_timeout;
        let reply_timeout = keep_alive_reply_timeout(&settings);
        let timing = KeepAliveTiming { reply_timeout, requests: Arc::new(AtomicU64::new(0)) };
        let mut session = Self {
            settings,
            runtime: Some(runtime),
            client: None,
            // Replaced below, before anyone can see it.
            lease: RwLock::new(Arc::new(ClientLease::placeholder())),
            keep_alive_task: Mutex::new(None),
            granting: Mutex::new(()),
            timing,
            background: Mutex::new(JoinSet::new()),
        };
        session.client = Some(session.connect(deadline)?);
        let lease = session.grant(deadline)?;
        *session.lease.get_mut() = lease;
        session.check_anonymous_access(deadline)?;
        Ok(session)
    }

    /// Without credentials nothing has been refused yet: etcd 3.4 grants leases to anyone. A
    /// read shows whether the cluster has authentication enabled ("user name is empty"), so that
    /// a missing password is reported here rather than by the first lock. (A refused read of a
    /// key outside one's permissions is not that: locks elsewhere may still be allowed.)
    fn check_anonymous_access(&self, deadline: Instant) -> Result<()> {
        if self.settings.credentials.is_some() {
            return Ok(());
        }
        let probe = etcd_client::GetOptions::new().with_count_only().with_serializable();
        match self.get(deadline, "distlock-auth-probe", Some(probe)) {
            Err(failure @ Failure::Etcd(EtcdError::GRpcStatus(_))) => {
                let error = failure.into_error("check access");
                match error {
                    Error::Authentication { .. } if !error.to_string().contains("permission denied") => {
                        Err(error)
                    }
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("present until dropped")
    }

    /// The client (cheap to clone: handles on one channel).
    pub(crate) fn client(&self) -> &Client {
        self.client.as_ref().expect("present until dropped")
    }

    /// The client's connection, by `deadline`: authenticated if credentials are set (against a
    /// cluster without auth, connected without them).
    fn connect(&self, deadline: Instant) -> Result<Client> {
        let endpoints = self.settings.endpoint_list()?;
        let with_user = self.connect_options(true)?;
        let without_user = self.connect_options(false)?;
        let credentials = self.settings.credentials.is_some();
        let connect = async {
            match Client::connect(&endpoints, Some(with_user)).await {
                Err(error) if credentials && is_auth_not_enabled(&error) => {
                    tracing::warn!("etcd has authentication disabled: connecting without the credentials");
                    Client::connect(&endpoints, Some(without_user)).await.map_err(Failure::from)
                }
                connected => connected.map_err(Failure::from),
            }
        };
        self.call_until(deadline, refused_or(&endpoints, connect))
            .map_err(|failure| failure.into_error("connect"))
    }

    /// etcd-client's options: per-endpoint connect timeout, HTTP/2 pings that find a dead
    /// connection within the I/O timeout, requests refused by a member without a leader (instead
    /// of waiting on a partitioned member), tokens renewed once when refused.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming a TLS file that cannot be read.
    fn connect_options(&self, with_user: bool) -> Result<ConnectOptions> {
        let settings = &self.settings;
        let ping = (settings.io_timeout / 2).max(Duration::from_millis(500));
        let mut options = ConnectOptions::new()
            .with_connect_timeout(settings.connect_timeout)
            .with_keep_alive(ping, settings.io_timeout)
            .with_require_leader(true)
            .with_auto_token_refresh(true);
        if let (true, Some((user, password))) = (with_user, &settings.credentials) {
            options = options.with_user(user.clone(), password.clone());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &settings.tls {
            options = options.with_tls(crate::tls::client_options(tls)?);
        }
        Ok(options)
    }

    /// A new lease with its keep-alive stream and task, by `deadline`.
    fn grant(&self, deadline: Instant) -> Result<Arc<ClientLease>> {
        let client = self.client().lease_client();
        let ttl = self.settings.ttl_secs();
        let endpoints = self.settings.endpoint_list()?;
        let granted = self.call_until(
            deadline,
            refused_or(&endpoints, async {
                let sent_at = Instant::now();
                let granted = retry_unsent(deadline, || {
                    let mut client = client.clone();
                    async move { client.grant(ttl, None).await }
                })
                .await?;
                let id = granted.id();
                let stream = retry_unsent(deadline, || {
                    let mut client = client.clone();
                    async move { client.keep_alive(id).await }
                })
                .await?;
                Ok::<_, Failure>((sent_at, granted, stream))
            }),
        );
        let (sent_at, granted, stream) = granted.map_err(|failure| failure.into_error("grant the lease"))?;
        if !granted.error().is_empty() {
            return Err(Error::backend(BACKEND, format!("grant the lease: {}", granted.error())));
        }
        let ttl = Duration::from_secs(granted.ttl().unsigned_abs());
        let lease = Arc::new(ClientLease::new(granted.id(), ttl, sent_at));
        tracing::debug!(lease = %format_args!("{:x}", lease.id), ?ttl, "etcd lease granted");
        let task = keep_alive(Arc::clone(&lease), self.client().lease_client(), stream, self.timing.clone());
        let task = self.runtime().spawn(task).abort_handle();
        if let Some(previous) = self.keep_alive_task.lock().replace(task) {
            previous.abort();
        }
        Ok(lease)
    }

    /// The current lease, whatever its state (no I/O).
    pub(crate) fn current_lease(&self) -> Arc<ClientLease> {
        Arc::clone(&self.lease.read())
    }

    /// A lease that is not lost: the current one, or a new one if it was lost.
    ///
    /// # Errors
    /// As a grant; [`Error::Timeout`] when another thread's grant did not finish within the
    /// connect timeout.
    pub(crate) fn lease(&self) -> Result<Arc<ClientLease>> {
        let current = self.current_lease();
        if !current.is_lost() {
            return Ok(current);
        }
        // One connect timeout in all, waiting for another thread's grant included.
        let deadline = Instant::now() + self.settings.connect_timeout;
        let timed_out = || Error::Timeout { backend: BACKEND, operation: "grant the lease", source: None };
        let Some(_granting) = self.granting.try_lock_until(deadline) else { return Err(timed_out()) };
        let current = self.current_lease();
        if !current.is_lost() {
            return Ok(current);
        }
        tracing::info!(lease = %format_args!("{:x}", current.id), "etcd lease lost; granting a new one");
        let lease = self.grant(deadline)?;
        *self.lease.write() = Arc::clone(&lease);
        Ok(lease)
    }

    /// Keep-alive requests sent so far, every lease of this session counted.
    pub(crate) fn keep_alive_requests(&self) -> u64 {
        self.timing.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `future` on the runtime from this (blocking) thread, until `deadline` at the latest.
    /// Refused inside a tokio async task (see [`crate::blocking`]).
    pub(crate) fn call_until<T, E: Into<Failure>>(
        &self,
        deadline: Instant,
        future: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Failure> {
        blocking::block_until(self.runtime(), deadline, future)?.map_err(Into::into)
    }

    /// Waits on the runtime for `future` until `deadline`; `None` if it did not finish by then
    /// (or at once inside a tokio async task, which callers have refused before).
    pub(crate) fn wait_until<T>(&self, deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
        blocking::block_until(self.runtime(), deadline, future).ok()
    }

    /// Leaves `future` (whose requests are already sent, or a clean-up) to finish in the
    /// background.
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        let mut background = self.background.lock();
        while background.try_join_next().is_some() {}
        background.spawn_on(future, self.runtime().handle());
    }
}

/// `work`, unless every endpoint refuses TCP connections first: then that refusal, at once.
/// (tonic's balanced channel would wait, silently, for an endpoint to come up.)
async fn refused_or<T>(
    endpoints: &[String],
    work: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::select! {
        done = work => done,
        refused = all_refused(endpoints) => Err(Failure::Etcd(EtcdError::IoError(refused))),
    }
}

/// Resolves with the last error once a TCP connect to every endpoint has failed; never if one
/// succeeds.
async fn all_refused(endpoints: &[String]) -> std::io::Error {
    let mut attempts = JoinSet::new();
    for endpoint in endpoints {
        let endpoint = endpoint.clone();
        attempts.spawn(async move {
            tokio::net::TcpStream::connect(endpoint.as_str())
                .await
                .map_err(|error| std::io::Error::new(error.kind(), format!("connect to {endpoint}: {error}")))
        });
    }
    let mut last = None;
    while let Some(attempt) = attempts.join_next().await {
        match attempt {
            Ok(Err(error)) => last = Some(error),
            // Reachable (or the attempt could not run): the real request decides.
            _ => return std::future::pending().await,
        }
    }
    last.unwrap_or_else(|| std::io::Error::other("no endpoint"))
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else { return };
        let lease = self.lease.get_mut().clone();
        let parts = Closing {
            runtime,
            client: self.client.take(),
            lease: (!lease.is_lost()).then_some(lease.id),
            keep_alive: self.keep_alive_task.get_mut().take(),
            background: std::mem::take(self.background.get_mut()),
            wait: self.settings.io_timeout.min(CLOSE_TIMEOUT),
        };
        if !in_async_context() {
            return parts.close();
        }
        // An async task may neither wait nor drop a runtime: a thread of its own revokes the
        // lease and stops the runtime, and this drop returns at once.
        let parts = Arc::new(Mutex::new(Some(parts)));
        let for_thread = Arc::clone(&parts);
        let spawned = std::thread::Builder::new().name(CLOSE_THREAD_NAME.into()).spawn(move || {
            if let Some(parts) = for_thread.lock().take() {
                parts.close();
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no thread to revoke the etcd lease: it expires after its TTL");
            if let Some(parts) = parts.lock().take() {
                drop(parts.client);
                parts.runtime.shutdown_background();
            }
        }
    }
}

/// What closing a session needs, taken out of it.
struct Closing {
    runtime: Runtime,
    client: Option<Client>,
    /// The lease to revoke, if not lost.
    lease: Option<i64>,
    keep_alive: Option<AbortHandle>,
    background: JoinSet<()>,
    wait: Duration,
}

impl Closing {
    /// Stops the clean-ups and the keep-alive, revokes the lease (so that every key of the
    /// client goes at once, as Go's `Session.Close` does), waiting up to `wait`, then stops the
    /// runtime.
    fn close(self) {
        let Closing { runtime, client, lease, keep_alive, mut background, wait } = self;
        blocking::block_on(&runtime, async move {
            background.abort_all();
            while background.join_next().await.is_some() {}
            if let Some(task) = keep_alive {
                task.abort();
            }
            if let (Some(client), Some(lease)) = (client, lease) {
                let mut leases = client.lease_client();
                let _ = tokio::time::timeout(wait, leases.revoke(lease)).await;
            }
        });
        runtime.shutdown_background();
    }
}

/// How long a keep-alive may go unanswered before the stream counts as broken (and is reopened
/// on another member): a third of the TTL, whatever the I/O timeout — with the I/O timeout alone
/// (5 s of a 10 s TTL by default) a stalled member left under 2 s to reopen before etcd expires
/// the lease. A third of the TTL asked for (whole seconds), not of a sub-second `session_ttl`:
/// 333 µs of a 1 ms one would fail keep-alives that any network delays.
fn keep_alive_reply_timeout(settings: &Settings) -> Duration {
    settings.io_timeout.min(settings.asked_ttl() / 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EtcdLockBuilder;

    #[test]
    fn keep_alive_replies_get_a_third_of_the_ttl_etcd_is_asked_for() {
        let settings = |ttl| EtcdLockBuilder::new("h:2379").session_ttl(ttl).settings;
        let sub_second = keep_alive_reply_timeout(&settings(Duration::from_millis(1)));
        assert_eq!(sub_second, Duration::from_secs(1) / 3);
        let default = keep_alive_reply_timeout(&settings(Duration::from_secs(10)));
        assert_eq!(default, Duration::from_secs(10) / 3);
        let long = keep_alive_reply_timeout(&settings(Duration::from_secs(60)));
        assert_eq!(long, EtcdLockBuilder::new("h:2379").settings.io_timeout, "capped by the I/O timeout");
    }
}
