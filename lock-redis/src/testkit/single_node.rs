//! [`RedisTarget`]: the Redis backend ([`crate`]) as a conformance-suite and workload
//! target, on the shared harness server (or the one `DISTLOCK_REDIS_URL` names).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::redis;
use crate::{RedisBackend, RedisKeys, RedisLockKind};
use lock_core::{Error, LockName};

use lock_testkit::harness::shared::{self, REDIS_URL_VARIABLE};
use lock_testkit::harness::{RedisOptions, RedisServer};
use lock_testkit::suite::{NotApplicable, OwnServers, RestartableServers, SuiteTarget};
use lock_testkit::workload::RoundTripProbe;

use crate::connection::ConnectionPool;

/// The connect timeout of every client the target makes: short, so S13's unreachable-server
/// check is quick, and far above a loopback connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// S15: the connect and read timeouts of the client of the server the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// The password of the private server behind [`SuiteTarget::wrong_password_backend`].
const PASSWORD: &str = "correct-horse-battery-staple";

/// One [`RedisLockKind`] of the Redis backend, on the shared Redis server.
#[derive(Clone)]
pub struct RedisTarget {
    kind: RedisLockKind,
    /// Waiters served in arrival order ([`crate::RedisLockBuilder::fair`]).
    fair: bool,
    url: String,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may be a user's, with a password.
        f.debug_struct("RedisTarget")
            .field("kind", &self.kind)
            .field("fair", &self.fair)
            .field("url", &lock_core::redact_url(&self.url))
            .finish()
    }
}

impl RedisTarget {
    /// The `SetNx` kind.
    ///
    /// # Panics
    /// When the shared Redis server cannot be started (the harness error says why).
    pub fn set_nx() -> Self {
        Self::new(RedisLockKind::SetNx)
    }

    /// The `ReentrantHash` kind.
    ///
    /// # Panics
    /// When the shared Redis server cannot be started.
    pub fn reentrant_hash() -> Self {
        Self::new(RedisLockKind::ReentrantHash)
    }

    /// `kind` on the shared server.
    ///
    /// # Panics
    /// When the shared Redis server cannot be started.
    pub fn new(kind: RedisLockKind) -> Self {
        let server = shared::redis().expect("the shared redis-server for the Redis suite target");
        Self::at(kind, server.address())
    }

    /// `kind` on the server at `url` (a user's own server: the suite and workloads use fresh
    /// random names under the backend's key prefix).
    pub fn at(kind: RedisLockKind, url: impl Into<String>) -> Self {
        Self { kind, fair: true, url: url.into() }
    }

    /// The same target with non-fair waiters (`fair(false)`): a released lock goes to whoever
    /// asks first.
    pub fn non_fair(mut self) -> Self {
        self.fair = false;
        self
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The keys of `name` (the backend's default prefix).
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new("distlock", name)
    }

    /// A plain connection to the server, for probes that go around the backend.
    ///
    /// # Errors
    /// When connecting fails.
    pub fn probe(&self) -> redis::RedisResult<redis::Connection> {
        probe(&self.url)
    }

    fn probe_query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> lock_core::Result<T> {
        let mut connection = self.probe().map_err(|e| Error::backend("redis probe", e))?;
        command.query(&mut connection).map_err(|e| Error::backend("redis probe", e))
    }
}

impl SuiteTarget for RedisTarget {
    type Backend = RedisBackend;

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        lock_testkit::suite::Abilities::ALL.with_shared(true, true).with_elections()
    }

    fn label(&self) -> String {
        let layout = match self.kind {
            RedisLockKind::ReentrantHash => "redis reentrant-hash",
            _ => "redis set-nx",
        };
        if self.fair {
            layout.into()
        } else {
            format!("{layout} non-fair")
        }
    }

    fn fenced_store(
        &self,
    ) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().map(|backend| Box::new(crate::RedisFencedStore::new(backend)) as _))
    }

    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<RedisBackend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, lock_testkit::suite::NotApplicable> {
        Ok(guard.with_lease(|backend, lease| backend.set_if_held(lease, key, value)))
    }

    fn read_guarded(
        &self,
        name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, lock_testkit::suite::NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.get_guarded(name, key)))
    }

    fn backend(&self) -> lock_core::Result<RedisBackend> {
        RedisBackend::builder(self.url.as_str())
            .kind(self.kind)
            .fair(self.fair)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let keys = self.keys(name);
        Ok(self
            .probe()
            .map_err(|e| Error::backend("redis probe", e))
            .and_then(|mut connection| server_lease(self.kind, &keys, &mut connection)))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.probe_query::<i64>(redis::cmd("DEL").arg(self.keys(name).lock())).map(drop))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(REDIS_URL_VARIABLE.to_owned(), self.url.clone())])
    }

    fn backend_at(&self, addresses: &[SocketAddr]) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        let Some(address) = addresses.first() else {
            return Ok(Err(Error::invalid_config("no server address")));
        };
        Ok(RedisBackend::builder(format!("redis://{address}/"))
            .kind(self.kind)
            .fair(self.fair)
            .connect_timeout(CONNECT_TIMEOUT)
            .io_timeout(CONNECT_TIMEOUT)
            .build())
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        _holds: u32,
    ) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        // Holds own no connection (a lease is a key): the default pool fits any number of them.
        // A call checks out one connection (at most one connect timeout) and exchanges one
        // request (one I/O timeout): the default call bound holds.
        Ok(routed_url(&self.url, route).and_then(|url| {
            RedisBackend::builder(url)
                .kind(self.kind)
                .fair(self.fair)
                .connect_timeout(timeout)
                .io_timeout(timeout)
                .build()
        }))
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<RedisBackend>, NotApplicable> {
        static SERVER: OnceLock<Result<RedisServer, String>> = OnceLock::new();
        let server = SERVER.get_or_init(|| {
            RedisServer::start_with(RedisOptions::new().password(PASSWORD)).map_err(|e| format!("{e:?}"))
        });
        let port = match server {
            Ok(server) => server.port(),
            Err(error) => return Ok(Err(Error::backend("harness", error.clone()))),
        };
        Ok(RedisBackend::builder(format!("redis://:wrong-password@127.0.0.1:{port}/"))
            .kind(self.kind)
            .fair(self.fair)
            .connect_timeout(CONNECT_TIMEOUT)
            .build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        CONNECT_TIMEOUT + Duration::from_secs(3)
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<RedisBackend>>, NotApplicable> {
        let _ = clients;
        Err(NotApplicable(
            "the harness's Redis keeps no persistence: a restart forgets every key, so a waiter gets a held \
             lock at once (R02 shows it on a Redlock node); only `appendonly yes` with `appendfsync always` \
             keeps the keys and their expiries across a restart",
        ))
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<RedisBackend>>, NotApplicable> {
        let server = match RedisServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(Error::backend("harness", error.to_string()))),
        };
        let backend = RedisBackend::builder(server.url())
            .kind(self.kind)
            .fair(self.fair)
            .connect_timeout(OWN_SERVER_TIMEOUT)
            .io_timeout(OWN_SERVER_TIMEOUT)
            .build();
        // A call may check out a connection (connect) and then wait for a reply (read).
        let call_bound = 2 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers: Box::new(vec![server]), call_bound }))
    }

    fn round_trip(&self, backend: &RedisBackend) -> Option<RoundTripProbe> {
        let backend = backend.clone();
        Some(RoundTripProbe::new(
            format!(
                "round trip = a PING on a pooled connection of the lock's backend, to {}",
                lock_core::redact_url(&self.url)
            ),
            PINGS,
            move || Ok(backend.ping_probe()),
        ))
    }

    fn clean_up(&self, prefix: &str) -> Result<u64, String> {
        delete_keys_of_names(&self.url, "distlock", prefix)
    }
}

/// S05's probe: the lease the server has on the lock of `keys` (`None` when it is not held), read
/// on `connection`, a plain connection to the node serving it.
///
/// # Errors
/// When the server does not answer.
pub(super) fn server_lease(
    kind: RedisLockKind,
    keys: &RedisKeys,
    connection: &mut redis::Connection,
) -> lock_core::Result<Option<Duration>> {
    let probe = |e: redis::RedisError| Error::backend("redis probe", e);
    // A free `SetNx` lock reserved for the wait queue's head (`turn:<token>`) has no holder.
    if kind == RedisLockKind::SetNx {
        let value: Option<String> = redis::cmd("GET").arg(keys.lock()).query(connection).map_err(probe)?;
        if value.is_some_and(|value| value.starts_with("turn:")) {
            return Ok(None);
        }
    }
    let ms: i64 = redis::cmd("PTTL").arg(keys.lock()).query(connection).map_err(probe)?;
    Ok(match ms {
        -2 => None,
        // A key without expiry: an immortal lock, reported as an endless lease.
        -1 => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
    })
}

/// `url` with its `host:port` replaced by the address `route` gives for the server it names
/// (credentials, database and scheme kept).
///
/// # Errors
/// [`Error::InvalidConfig`] for a URL that does not parse or name a TCP server that resolves.
pub fn routed_url(url: &str, route: &mut dyn FnMut(SocketAddr) -> SocketAddr) -> lock_core::Result<String> {
    let bad = |why: String| Error::invalid_config(format!("{why}: {}", lock_core::redact_url(url)));
    let client = redis::Client::open(url).map_err(|e| bad(e.to_string()))?;
    let (host, port) = match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        _ => return Err(bad("not a TCP server".into())),
    };
    let server = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .map_err(|e| bad(format!("cannot resolve {host}:{port}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("{host}:{port} resolves to no address")))?;
    // The authority's `host[:port]`: after the scheme and any `user:password@`, up to the path.
    let start = url.find("://").ok_or_else(|| bad("no scheme".into()))? + 3;
    let end = url[start..].find(['/', '?']).map_or(url.len(), |end| start + end);
    let start = url[start..end].rfind('@').map_or(start, |at| start + at + 1);
    Ok(format!("{}{}{}", &url[..start], route(server), &url[end..]))
}

/// How many PINGs measure the round trip (after as many again to warm up).
pub(super) const PINGS: usize = 10_000;

/// Times one `PING` on a connection checked out of `pool` (the checkout is not timed).
pub(crate) fn time_ping(pool: &ConnectionPool) -> Result<Duration, String> {
    let mut connection = pool.get().map_err(|e| e.to_string())?;
    let started = Instant::now();
    connection
        .run(|connection| redis::cmd("PING").query::<()>(connection))
        .map_err(|e| format!("PING: {e}"))?;
    Ok(started.elapsed())
}

/// A plain connection to `url` with short timeouts, for probes that go around the backend.
///
/// # Errors
/// When connecting fails.
pub fn probe(url: &str) -> redis::RedisResult<redis::Connection> {
    let client = crate::tls::open_client(url).map_err(|reason| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "probe", reason))
    })?;
    let connection = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    connection.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    connection.set_write_timeout(Some(CONNECT_TIMEOUT))?;
    Ok(connection)
}

/// Deletes every key of the locks whose names start with `name_prefix` (lock, fencing counter,
/// queue), on the server at `url`; returns how many. SCAN, not KEYS: it never blocks the server.
///
/// # Errors
/// When the server cannot be reached.
pub fn delete_keys_of_names(url: &str, key_prefix: &str, name_prefix: &str) -> Result<u64, String> {
    let mut connection = probe(url).map_err(|e| format!("{}: {e}", lock_core::redact_url(url)))?;
    delete_keys_on(&mut connection, key_prefix, name_prefix)
}

/// [`delete_keys_of_names`] on one open connection.
///
/// # Errors
/// When the server does not answer.
pub(crate) fn delete_keys_on(
    connection: &mut redis::Connection,
    key_prefix: &str,
    name_prefix: &str,
) -> Result<u64, String> {
    let name = LockName::new(name_prefix).map_err(|e| e.to_string())?;
    // `<key prefix>:{<escaped name>}:lock`, cut after the escaped prefix; glob characters quoted.
    let lock_key = RedisKeys::new(key_prefix, &name).lock().to_owned();
    let stem = lock_key.strip_suffix("}:lock").unwrap_or(&lock_key);
    let mut pattern = String::with_capacity(stem.len() + 1);
    for c in stem.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    let connection = &mut *connection;
    let (mut cursor, mut deleted) = (0u64, 0u64);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(connection)
            .map_err(|e| e.to_string())?;
        if !keys.is_empty() {
            deleted += redis::cmd("DEL").arg(&keys).query::<u64>(connection).map_err(|e| e.to_string())?;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
