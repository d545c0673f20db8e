//! [`MySqlTarget`]: one [`MySqlLockKind`] on the shared harness MariaDB server (or the one
//! `DISTLOCK_MYSQL_URL` names).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_core::{Error, LockName};
use lock_testkit::harness::shared::{self, MYSQL_URL_VARIABLE};
use lock_testkit::harness::MariaDbServer;
use lock_testkit::suite::{NotApplicable, OwnServers, SuiteTarget};
use lock_testkit::workload::RoundTripProbe;

use super::TIMEOUT;
use crate::mysql::{MySqlBackend, MySqlLockKind};

/// S15: the timeouts of the client of the server the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// How many `SELECT 1`s measure the round trip (after as many again to warm up).
const ROUND_TRIPS: usize = 2_000;

/// One kind of the MySQL backend on a server.
#[derive(Debug, Clone)]
pub struct MySqlTarget {
    kind: MySqlLockKind,
    url: String,
}

impl MySqlTarget {
    /// `kind` on the shared server.
    ///
    /// # Panics
    /// When the shared MariaDB server cannot be started (the harness error says why).
    pub fn new(kind: MySqlLockKind) -> Self {
        let server = shared::mariadb().expect("the shared MariaDB server for the mysql suite target");
        Self::at(kind, server.address())
    }

    /// `kind` on the server at `url` (tables are created on first use).
    pub fn at(kind: MySqlLockKind, url: impl Into<String>) -> Self {
        Self { kind, url: url.into() }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn build(&self, url: &str, timeout: Duration) -> lock_core::Result<MySqlBackend> {
        let backend = MySqlBackend::builder(url)
            .kind(self.kind)
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .build()?;
        // Once per server and process: the tables exist from then on.
        static READY: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        let ready = READY.get_or_init(Mutex::default);
        if !ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(url) {
            backend.ensure_schema()?;
            ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(url.to_owned());
        }
        Ok(backend)
    }
}

impl SuiteTarget for MySqlTarget {
    type Backend = MySqlBackend;

    fn label(&self) -> String {
        self.kind.label().into()
    }

    fn backend(&self) -> lock_core::Result<MySqlBackend> {
        self.build(&self.url, TIMEOUT)
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        match self.kind {
            MySqlLockKind::Table => Ok(self.backend().and_then(|backend| backend.remaining_lease(name))),
            _ => Err(NotApplicable("a session hold has no server-side lease: it ends with its connection")),
        }
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.break_lock(name)))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(MYSQL_URL_VARIABLE.to_owned(), self.url.clone())])
    }

    fn backend_at(&self, addresses: &[SocketAddr]) -> Result<lock_core::Result<MySqlBackend>, NotApplicable> {
        let Some(address) = addresses.first() else {
            return Ok(Err(Error::invalid_config("no server address")));
        };
        Ok(MySqlBackend::builder(format!("mysql://distlock:distlock@{address}/distlock"))
            .kind(self.kind)
            .connect_timeout(TIMEOUT)
            .io_timeout(TIMEOUT)
            .build())
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<MySqlBackend>, NotApplicable> {
        let url = match self.url.rfind('@') {
            Some(at) => format!("mysql://{}:wrong-password{}", MariaDbServer::USER, &self.url[at..]),
            None => return Err(NotApplicable("the server's URL carries no credentials")),
        };
        Ok(MySqlBackend::builder(url).kind(self.kind).connect_timeout(TIMEOUT).io_timeout(TIMEOUT).build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        // Connect, then the handshake's read.
        2 * TIMEOUT + Duration::from_secs(3)
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<MySqlBackend>>, NotApplicable> {
        let server = match MariaDbServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(Error::backend("harness", error.to_string()))),
        };
        let backend = self.build(&server.url(), OWN_SERVER_TIMEOUT);
        // A call may open a connection (connect and handshake), then wait for its reply.
        let call_bound = 3 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers: Box::new(vec![server]), call_bound }))
    }

    fn round_trip(&self) -> Option<RoundTripProbe> {
        let target = self.clone();
        Some(RoundTripProbe::new(
            format!("round trip = p50 of {ROUND_TRIPS} `SELECT 1` on one connection to {}", target.url),
            move || {
                let backend = target.backend().map_err(|e| e.to_string())?;
                backend.select_one_round_trip(ROUND_TRIPS)
            },
        ))
    }
}
