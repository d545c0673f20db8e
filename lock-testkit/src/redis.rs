//! [`RedisTarget`]: the Redis backend ([`lock_redis`]) as a conformance-suite and workload
//! target, on the shared harness server (or the one `DISTLOCK_REDIS_URL` names).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{Error, LockName};
use lock_redis::redis;
use lock_redis::{RedisBackend, RedisKeys, RedisLockKind};

use crate::harness::shared::{self, REDIS_URL_VARIABLE};
use crate::harness::{RedisOptions, RedisServer};
use crate::suite::{NotApplicable, SuiteTarget};

/// The connect timeout of every client the target makes: short, so S13's unreachable-server
/// check is quick, and far above a loopback connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The password of the private server behind [`SuiteTarget::wrong_password_backend`].
const PASSWORD: &str = "correct-horse-battery-staple";

/// One [`RedisLockKind`] of the Redis backend, on the shared Redis server.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    kind: RedisLockKind,
    url: String,
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
        Self { kind, url: server.address().to_owned() }
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
        let connection =
            redis::Client::open(self.url.as_str())?.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        connection.set_read_timeout(Some(CONNECT_TIMEOUT))?;
        connection.set_write_timeout(Some(CONNECT_TIMEOUT))?;
        Ok(connection)
    }

    fn probe_query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> lock_core::Result<T> {
        let mut connection = self.probe().map_err(|e| Error::backend("redis probe", e))?;
        command.query(&mut connection).map_err(|e| Error::backend("redis probe", e))
    }
}

impl SuiteTarget for RedisTarget {
    type Backend = RedisBackend;

    fn label(&self) -> String {
        match self.kind {
            RedisLockKind::ReentrantHash => "redis reentrant-hash".into(),
            _ => "redis set-nx".into(),
        }
    }

    fn backend(&self) -> lock_core::Result<RedisBackend> {
        RedisBackend::builder(self.url.as_str()).kind(self.kind).connect_timeout(CONNECT_TIMEOUT).build()
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let pttl = self.probe_query::<i64>(redis::cmd("PTTL").arg(self.keys(name).lock()));
        Ok(pttl.map(|ms| match ms {
            -2 => None,
            // A key without expiry: an immortal lock, reported as an endless lease.
            -1 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
        }))
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
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(CONNECT_TIMEOUT)
            .build())
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
            .connect_timeout(CONNECT_TIMEOUT)
            .build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        CONNECT_TIMEOUT + Duration::from_secs(3)
    }
}
