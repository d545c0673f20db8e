//! [`SqlTarget`]: one kind of an SQL backend on a server, for the suite and the workloads.

use std::collections::HashSet;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_core::{DistributedLock, Error, LockName};
use lock_testkit::suite::{NotApplicable, OwnServers, PausableServers, RestartableServers, SuiteTarget};
use lock_testkit::workload::{RoundTripProbe, TimeOne};

use super::TIMEOUT;

/// S15: the timeouts of the client of the server the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// How many `SELECT 1`s measure the round trip (after as many again to warm up).
const ROUND_TRIPS: usize = 2_000;

/// What [`SqlTarget`] needs of one database's kind enum.
pub trait SqlKind: Copy + Debug + Send + Sync + 'static {
    /// The backend.
    type Backend: DistributedLock + Clone;

    /// The variable naming an existing server instead of a harness one (`DISTLOCK_MYSQL_URL`).
    const URL_VARIABLE: &'static str;
    /// The URL scheme (`postgres`, `mysql`).
    const SCHEME: &'static str;
    /// The server's port when a URL names none.
    const DEFAULT_PORT: u16;
    /// URL parameters that keep a client on the TCP address it is given (S16 routes it through a
    /// proxy): empty, or `name=value&…`.
    const ROUTED_PARAMETERS: &'static str;
    /// The harness servers' user.
    const USER: &'static str;

    /// The kind's name in reports (`pg-row`).
    fn label(self) -> &'static str;

    /// Whether holds are lock-table leases (else sessions).
    fn is_table(self) -> bool;

    /// Whether the server wakes this kind's waiters ([`NativeWait`](lock_core::NativeWait)).
    fn wakes_waiters(self) -> bool;

    /// Whether this kind has read-write locks ([`ReadWrite`](lock_core::ReadWrite)) and
    /// semaphores ([`Permits`](lock_core::Permits)).
    fn shared_abilities(self) -> (bool, bool);

    /// The URL of the shared harness server (or the one [`URL_VARIABLE`](Self::URL_VARIABLE)
    /// names).
    ///
    /// # Errors
    /// When the server cannot be started.
    fn shared_url() -> Result<String, String>;

    /// A private server whose commits survive a kill of its processes (S15, S17), and its URL.
    ///
    /// # Errors
    /// When the server cannot be started.
    fn start_server() -> Result<(String, Box<dyn PausableServers>), String>;

    /// A client of `url` with these timeouts and pool size; `fair` and `restart_delay` as the
    /// builder's.
    ///
    /// # Errors
    /// As the backend's `build`.
    fn build_client(
        self,
        url: &str,
        timeout: Duration,
        max_connections: u32,
        fair: bool,
        restart_delay: bool,
    ) -> lock_core::Result<Self::Backend>;

    /// A client of `url` with these timeouts and pool size; `fair` as the builder's, the restart
    /// delay on (the builder's default).
    ///
    /// # Errors
    /// As the backend's `build`.
    fn build(
        self,
        url: &str,
        timeout: Duration,
        max_connections: u32,
        fair: bool,
    ) -> lock_core::Result<Self::Backend> {
        self.build_client(url, timeout, max_connections, fair, true)
    }

    /// The backend's `ensure_schema`.
    ///
    /// # Errors
    /// As the backend's `ensure_schema`.
    fn ensure_schema(backend: &Self::Backend) -> lock_core::Result<()>;

    /// A fenced store on the backend's server, in [`FENCED_TABLE`], created if missing.
    ///
    /// # Errors
    /// As the store's `ensure_table`.
    fn fenced_store(backend: &Self::Backend) -> lock_core::Result<Box<dyn lock_core::FencedStore>>;

    /// GW01: [`GUARDED_TABLE`] (the fenced store's layout, its fence unused), created if missing.
    ///
    /// # Errors
    /// As the store's `ensure_table`.
    fn ensure_guarded_table(backend: &Self::Backend) -> lock_core::Result<()>;

    /// GW01: an upsert of `value` under `key` in [`GUARDED_TABLE`], through the backend's
    /// `execute_if_held`.
    ///
    /// # Errors
    /// As `execute_if_held`.
    fn write_if_held(
        backend: &Self::Backend,
        lease: &mut <Self::Backend as DistributedLock>::Lease,
        key: &str,
        value: &[u8],
    ) -> lock_core::Result<()>;

    /// GW01: the value of `key` in [`GUARDED_TABLE`].
    ///
    /// # Errors
    /// As any statement.
    fn read_guarded(backend: &Self::Backend, key: &str) -> lock_core::Result<Option<Vec<u8>>>;

    /// The backend's `remaining_lease`.
    ///
    /// # Errors
    /// As the backend's `remaining_lease`.
    fn remaining_lease(backend: &Self::Backend, name: &LockName) -> lock_core::Result<Option<Duration>>;

    /// The backend's `break_lock`.
    ///
    /// # Errors
    /// As the backend's `break_lock`.
    fn break_lock(backend: &Self::Backend, name: &LockName) -> lock_core::Result<()>;

    /// The server's durability settings, as `name=value` pairs (`fsync=on …`): they bound what
    /// a commit costs, so benchmark results are printed beside them.
    ///
    /// # Errors
    /// When the server cannot be asked.
    fn durability(backend: &Self::Backend) -> Result<String, String>;

    /// Deletes the lock-table and row-table rows of names that start with `prefix`; returns how
    /// many.
    ///
    /// # Errors
    /// When the server cannot be asked.
    fn delete_prefixed(backend: &Self::Backend, prefix: &str) -> lock_core::Result<u64>;

    /// A probe timing one `SELECT 1` per call on a connection checked out of the backend's pool.
    fn round_trip(backend: &Self::Backend) -> TimeOne;
}

/// The table of the suite's fenced stores (GW02).
pub const FENCED_TABLE: &str = "distlock_fenced";

/// The table GW01's writes on the lock's own server go to.
pub const GUARDED_TABLE: &str = "distlock_guarded";

/// One kind of an SQL backend on a server.
#[derive(Clone)]
pub struct SqlTarget<K> {
    kind: K,
    /// Lock-table waiters served in arrival order ([`crate::SqlLockBuilder::fair`]).
    fair: bool,
    /// [`crate::SqlLockBuilder::restart_delay`]: off on a server the harness started for this
    /// run (no lock can predate it), on elsewhere.
    restart_delay: bool,
    url: String,
}

impl<K: Debug> Debug for SqlTarget<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may be a user's, with a password.
        f.debug_struct("SqlTarget")
            .field("kind", &self.kind)
            .field("fair", &self.fair)
            .field("restart_delay", &self.restart_delay)
            .field("url", &lock_core::redact_url(&self.url))
            .finish()
    }
}

impl<K: SqlKind> SqlTarget<K> {
    /// `kind` on the shared server.
    ///
    /// # Panics
    /// When the shared server cannot be started (the harness error says why).
    pub fn new(kind: K) -> Self {
        let url =
            K::shared_url().unwrap_or_else(|error| panic!("the shared {} server: {error:?}", K::SCHEME));
        // A server the harness started for this run has held no lock before its start.
        let restart_delay = std::env::var_os(K::URL_VARIABLE).is_some();
        Self { restart_delay, ..Self::at(kind, url) }
    }

    /// `kind` on the server at `url` (tables are created on first use).
    pub fn at(kind: K, url: impl Into<String>) -> Self {
        Self { kind, fair: true, restart_delay: true, url: url.into() }
    }

    /// The same target without the session kinds' restart delay
    /// ([`crate::SqlLockBuilder::restart_delay`]): for a server the harness started for this run,
    /// which no lock can predate (with the delay, its session locks would be granted only once
    /// it is a lease old).
    pub fn without_restart_delay(mut self) -> Self {
        self.restart_delay = false;
        self
    }

    /// The same target with non-fair lock-table waiters (`fair(false)`): a released lock goes to
    /// whoever asks first.
    pub fn non_fair(mut self) -> Self {
        self.fair = false;
        self
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client with a pool of `max_connections` and `timeout` for connecting and I/O.
    ///
    /// # Errors
    /// As the backend's `build` and `ensure_schema`.
    pub fn backend_with(&self, timeout: Duration, max_connections: u32) -> lock_core::Result<K::Backend> {
        self.build(&self.url, timeout, max_connections)
    }

    fn build(&self, url: &str, timeout: Duration, max_connections: u32) -> lock_core::Result<K::Backend> {
        self.build_with(url, timeout, max_connections, self.restart_delay)
    }

    fn build_with(
        &self,
        url: &str,
        timeout: Duration,
        max_connections: u32,
        restart_delay: bool,
    ) -> lock_core::Result<K::Backend> {
        let backend = self.kind.build_client(url, timeout, max_connections, self.fair, restart_delay)?;
        // Once per server and process: the tables exist from then on.
        static READY: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        let ready = READY.get_or_init(Mutex::default);
        if !ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(url) {
            K::ensure_schema(&backend)?;
            ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(url.to_owned());
        }
        Ok(backend)
    }
}

/// The pool size of the targets' clients (the backends' default).
const POOL: u32 = 16;

/// `url` with its `host:port` replaced by where `route` sends the server's address.
///
/// # Errors
/// [`Error::InvalidConfig`] when the URL names no host that resolves.
pub(crate) fn routed_url(
    url: &str,
    default_port: u16,
    route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
) -> lock_core::Result<String> {
    let bad = |why: &str| Error::invalid_config(format!("{why}: {}", lock_core::redact_url(url)));
    let start = url.find("://").ok_or_else(|| bad("no scheme"))? + 3;
    let start = url[start..].rfind('@').map_or(start, |at| start + at + 1);
    let end = url[start..].find(['/', '?']).map_or(url.len(), |end| start + end);
    let authority = &url[start..end];
    let with_port = if authority.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok()) {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    let server = std::net::ToSocketAddrs::to_socket_addrs(&with_port)
        .map_err(|error| bad(&format!("cannot resolve {with_port}: {error}")))?
        .next()
        .ok_or_else(|| bad("the host resolves to no address"))?;
    Ok(format!("{}{}{}", &url[..start], route(server), &url[end..]))
}

impl<K: SqlKind> SuiteTarget for SqlTarget<K> {
    type Backend = K::Backend;

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        let (read_write, permits) = self.kind.shared_abilities();
        lock_testkit::suite::Abilities::fencing_and(self.kind.wakes_waiters())
            .with_shared(read_write, permits)
            .with_elections()
    }

    fn label(&self) -> String {
        if self.fair {
            self.kind.label().into()
        } else {
            format!("{} non-fair", self.kind.label())
        }
    }

    fn fenced_store(&self) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, NotApplicable> {
        Ok(self.backend().and_then(|backend| K::fenced_store(&backend)))
    }

    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<K::Backend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, NotApplicable> {
        // Before the hold's statement: DDL would end a row kind's holding transaction.
        if let Err(error) = self.backend().and_then(|backend| K::ensure_guarded_table(&backend)) {
            return Ok(Err(error));
        }
        Ok(guard.with_lease(|backend, lease| K::write_if_held(backend, lease, key, value)))
    }

    fn read_guarded(
        &self,
        _name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, NotApplicable> {
        Ok(self.backend().and_then(|backend| K::read_guarded(&backend, key)))
    }

    fn backend(&self) -> lock_core::Result<K::Backend> {
        self.build(&self.url, TIMEOUT, POOL)
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        if !self.kind.is_table() {
            return Err(NotApplicable(
                "a session hold has no server-side lease: it ends with its connection",
            ));
        }
        Ok(self.backend().and_then(|backend| K::remaining_lease(&backend, name)))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.backend().and_then(|backend| K::break_lock(&backend, name)))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(K::URL_VARIABLE.to_owned(), self.url.clone())])
    }

    fn backend_at(&self, addresses: &[SocketAddr]) -> Result<lock_core::Result<K::Backend>, NotApplicable> {
        let Some(address) = addresses.first() else {
            return Ok(Err(Error::invalid_config("no server address")));
        };
        let url = format!("{}://distlock:distlock@{address}/distlock", K::SCHEME);
        Ok(self.kind.build_client(&url, TIMEOUT, POOL, self.fair, false))
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<K::Backend>, NotApplicable> {
        let url = match self.url.rfind('@') {
            Some(at) => format!("{}://{}:wrong-password{}", K::SCHEME, K::USER, &self.url[at..]),
            None => return Err(NotApplicable("the server's URL carries no credentials")),
        };
        Ok(self.kind.build_client(&url, TIMEOUT, POOL, self.fair, false))
    }

    fn unreachable_report_bound(&self) -> Duration {
        // Connecting, then the handshake's reply.
        2 * TIMEOUT + Duration::from_secs(3)
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        holds: u32,
    ) -> Result<lock_core::Result<K::Backend>, NotApplicable> {
        // The default bound (one connect and one I/O timeout) holds: a call opens at most one
        // connection, and a release behind a check that got no answer does not ask again.
        let mut url = match routed_url(&self.url, K::DEFAULT_PORT, route) {
            Ok(url) => url,
            Err(error) => return Ok(Err(error)),
        };
        if !K::ROUTED_PARAMETERS.is_empty() {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(K::ROUTED_PARAMETERS);
        }
        Ok(self.build(&url, timeout, holds + 2))
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<K::Backend>>, NotApplicable> {
        let (url, servers) = match K::start_server() {
            Ok(started) => started,
            Err(error) => return Ok(Err(Error::backend("harness", error))),
        };
        // A server of its own, started just now: no lock predates it.
        let backend = self.build_with(&url, OWN_SERVER_TIMEOUT, POOL, false);
        // A call may open a connection (connect and handshake), then wait for its reply.
        let call_bound = 3 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers, call_bound }))
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<K::Backend>>, NotApplicable> {
        let (url, servers) = match K::start_server() {
            Ok(started) => started,
            Err(error) => return Ok(Err(Error::backend("harness", error))),
        };
        // A session hold keeps its connection; more for a waiter's attempts. The restart delay
        // on, whatever the target's: it is what S17 checks.
        let clients: lock_core::Result<Vec<_>> =
            (0..clients).map(|_| self.build_with(&url, TIMEOUT, 4, true)).collect();
        Ok(clients.map(|clients| RestartableServers { clients, servers }))
    }

    fn clean_up(&self, prefix: &str) -> Result<u64, String> {
        self.backend().and_then(|backend| K::delete_prefixed(&backend, prefix)).map_err(|e| e.to_string())
    }

    fn round_trip(&self, backend: &Self::Backend) -> Option<RoundTripProbe> {
        let durability = K::durability(backend).unwrap_or_else(|error| format!("unknown ({error})"));
        let backend = backend.clone();
        Some(RoundTripProbe::new(
            format!(
                "round trip = a `SELECT 1` on a pooled connection of the lock's backend, to {}; durability: {durability}",
                lock_core::redact_url(&self.url)
            ),
            ROUND_TRIPS,
            move || Ok(K::round_trip(&backend)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_address_is_replaced_by_the_route() {
        let mut route = |_: SocketAddr| SocketAddr::from(([127, 0, 0, 1], 9));
        assert_eq!(
            routed_url("postgres://u:p@127.0.0.1:5433/db?x=1", 5432, &mut route).unwrap(),
            "postgres://u:p@127.0.0.1:9/db?x=1"
        );
        let mut seen = None;
        let mut note = |server: SocketAddr| {
            seen = Some(server);
            server
        };
        assert_eq!(routed_url("mysql://127.0.0.1/db", 3306, &mut note).unwrap(), "mysql://127.0.0.1:3306/db");
        assert_eq!(seen, Some(SocketAddr::from(([127, 0, 0, 1], 3306))));
    }
}
