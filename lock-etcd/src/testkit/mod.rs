//! Test support (feature `testkit`, not semver-stable): the etcd backend as a conformance-suite
//! and workload target, on the shared harness server (or the server or cluster
//! `DISTLOCK_ETCD_URL` names).
//!

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Txn, TxnOp};
use lock_core::{Error, LockName};
use lock_testkit::harness::shared::{self, ETCD_URL_VARIABLE};
use lock_testkit::harness::EtcdServer;
use lock_testkit::suite::{Abilities, NotApplicable, OwnServers, RestartableServers, SuiteTarget};
use lock_testkit::workload::RoundTripProbe;

use crate::{EtcdBackend, EtcdLockBuilder};

mod interop;
mod keep_alive;
mod leader_kill;
mod lease_loss;
mod lock_service;

pub use leader_kill::{serve_e02_child_if_asked, CHILD_VARIABLE as E02_CHILD_VARIABLE};
pub use lock_service::LockServicePairs;

/// The etcd scenarios of `docs/scenarios.md`: E01 (interop with `etcdctl lock`), E02 (a 3-member
/// cluster's leader killed under contention from 2 processes), E03 (the client's lease revoked,
/// expired behind a cut network, or unconfirmable with the server dead), E04 (2,000 holds, one
/// keep-alive stream). Each starts harness servers of its own.
pub fn scenarios() -> Vec<lock_testkit::BackendScenario> {
    use lock_testkit::BackendScenario;
    vec![
        BackendScenario::new("E01", "interop with etcdctl lock, both ways", || {
            interop::a_distlock_waiter_gets_the_lock_when_etcdctl_lets_go();
            interop::etcdctl_waits_for_a_distlock_holder();
            interop::etcdctl_and_distlock_contending_never_overlap_and_both_progress();
            interop::names_with_a_slash_are_encoded_and_etcdctl_can_name_them();
        }),
        BackendScenario::new("E02", "the cluster's leader killed under 8 threads in 2 processes", || {
            // In the second process, this is where it does its part.
            serve_e02_child_if_asked();
            leader_kill::a_hold_survives_the_leader_s_death();
            leader_kill::contention_through_a_leader_kill();
        }),
        BackendScenario::new(
            "E03",
            "the client's lease revoked or expired: every hold told lost first",
            || {
                lease_loss::a_revoked_lease_loses_every_hold_of_the_client();
                lease_loss::a_hold_on_a_revoked_lease_stays_in_doubt_under_the_client_s_new_lease();
                lease_loss::a_cut_off_holder_is_told_before_a_rival_gets_the_lock();
                lease_loss::a_killed_server_puts_holds_in_doubt_then_loses_them_on_time();
            },
        ),
        BackendScenario::new(
            "E04",
            "2,000 holds on one client: one keep-alive stream",
            keep_alive::two_thousand_holds_use_one_keep_alive_stream,
        ),
    ]
}

/// The connect and I/O timeouts of every client the target makes: short, so S13's
/// unreachable-server check is quick, and far above a loopback round trip.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The lease TTL of the target's clients: what a crashed holder (S04) keeps its locks for.
/// Short for quick tests (etcd's minimum on the single-node harness is 2 s), yet several
/// keep-alives (one every third of it) long on a loaded two-core machine.
pub const SESSION_TTL: Duration = Duration::from_secs(4);

/// The namespace of the target's locks, unless the URL names one.
const NAMESPACE: &str = "distlock-suite";

/// S13: the password the wrong-password client presents.
const WRONG_PASSWORD: &str = "wrong-password";

/// S15: the timeouts of the client of the server the scenario stops.
const OWN_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// S16: the lease TTL of the client whose connections the scenario cuts — the scenario's lease
/// (3 s), which for a session hold is how long its keep-alives may fail: etcd then expires the
/// cut client's lease by itself that long after it last heard from it.
pub const ROUTED_SESSION_TTL: Duration = Duration::from_secs(3);

/// How many put + delete pairs measure the write round trip.
const WRITE_PAIRS: usize = 2_000;

/// The etcd backend on a server or cluster.
#[derive(Clone)]
pub struct EtcdTarget {
    /// `etcd://…` or `etcds://…`, as given (a child process is given it too).
    url: String,
    /// The URL's settings (endpoints, credentials, TLS) and the suite's namespace, TTL and
    /// timeouts.
    base: EtcdLockBuilder,
}

impl EtcdTarget {
    /// The shared harness server (or the server or cluster `DISTLOCK_ETCD_URL` names).
    ///
    /// # Panics
    /// When the shared server cannot be started (the harness error says why), or its URL does
    /// not parse.
    pub fn new() -> Self {
        let server = shared::etcd().expect("the shared etcd server for the etcd suite target");
        Self::from_url(server.address()).expect("the shared etcd server's URL")
    }

    /// The server or cluster a user's `etcd://[user:password@]host:port[,host:port…][/namespace]`
    /// URL names (or `etcds://…`), parsed as [`EtcdLockBuilder::from_url`] parses it; locks live
    /// under the URL's namespace, or `distlock-suite` without one.
    ///
    /// # Errors
    /// As [`EtcdLockBuilder::from_url`].
    pub fn from_url(url: &str) -> lock_core::Result<Self> {
        let parsed = EtcdLockBuilder::from_url(url)?;
        let namespace =
            if parsed.namespace.is_empty() { NAMESPACE.to_owned() } else { parsed.namespace.clone() };
        let base =
            parsed.namespace(namespace).session_ttl(SESSION_TTL).connect_timeout(TIMEOUT).io_timeout(TIMEOUT);
        Ok(Self { url: url.to_owned(), base })
    }

    /// A builder with the target's settings: the URL's endpoints, credentials and TLS, the
    /// namespace, [`SESSION_TTL`] and short timeouts.
    pub fn builder(&self) -> EtcdLockBuilder {
        self.base.clone()
    }

    /// The target's builder aimed at `endpoints` instead (`host:port,…`).
    fn builder_at(&self, endpoints: String) -> EtcdLockBuilder {
        let mut builder = self.builder();
        builder.settings.endpoints = endpoints;
        builder
    }

    /// A builder for a harness server of the scenario's own: no credentials or TLS.
    fn own_builder(&self, server: &EtcdServer, timeout: Duration) -> EtcdLockBuilder {
        EtcdBackend::builder(server.endpoint())
            .namespace(&self.base.namespace)
            .session_ttl(SESSION_TTL)
            .connect_timeout(timeout)
            .io_timeout(timeout)
    }
}

impl std::fmt::Debug for EtcdTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The builder's Debug never shows the password; the URL may hold it.
        f.debug_struct("EtcdTarget").field("builder", &self.base).finish_non_exhaustive()
    }
}

impl Default for EtcdTarget {
    fn default() -> Self {
        Self::new()
    }
}

/// The harness error as a lock error.
fn harness_error(error: impl std::fmt::Display) -> Error {
    Error::backend("harness", error.to_string())
}

impl SuiteTarget for EtcdTarget {
    type Backend = EtcdBackend;

    fn label(&self) -> String {
        "etcd".into()
    }

    fn abilities(&self) -> Abilities {
        // Create-revision fencing tokens, watch wake-ups, read-write locks (etcd's
        // `recipe.RWMutex` layout), semaphores, and elections (`concurrency.Election`).
        Abilities::ALL.with_shared(true, true).with_elections()
    }

    fn fenced_store(&self) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, NotApplicable> {
        Ok(self.backend().map(|backend| Box::new(crate::EtcdFencedStore::new(backend)) as _))
    }

    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<EtcdBackend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(guard.with_lease(|backend, lease| backend.put_if_held(lease, &guarded_key(backend, key), value)))
    }

    fn read_guarded(
        &self,
        _name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.get_guarded(&guarded_key(&backend, key))))
    }

    fn backend(&self) -> lock_core::Result<EtcdBackend> {
        self.builder().build()
    }

    fn remaining_lease(
        &self,
        _name: &LockName,
    ) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        Err(NotApplicable(
            "a session hold: the key lives as long as its client's lease, renewed by keep-alives",
        ))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.backend().and_then(|backend| backend.break_lock(name)))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(ETCD_URL_VARIABLE.to_owned(), self.url.clone())])
    }

    fn free_after_crash_within(&self, _lease: Duration) -> Duration {
        // etcd expires the dead holder's lease one TTL after its last keep-alive, checked every
        // 500 ms, and deletes its keys in the same step.
        SESSION_TTL + Duration::from_secs(2)
    }

    fn backend_at(&self, addresses: &[SocketAddr]) -> Result<lock_core::Result<EtcdBackend>, NotApplicable> {
        let endpoints = addresses.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
        Ok(self.builder_at(endpoints).build())
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<EtcdBackend>, NotApplicable> {
        // The shared server has no auth (etcd, as Go's client, ignores credentials then): a
        // server of its own with auth enabled, kept until the attempt is over.
        let server = match EtcdServer::start_with_auth() {
            Ok(server) => server,
            Err(error) => return Ok(Err(harness_error(error))),
        };
        let user = server.credentials().map_or(EtcdServer::ROOT_USER, |(user, _)| user);
        let built = self.own_builder(&server, TIMEOUT).credentials(user, WRONG_PASSWORD).build();
        drop(server);
        Ok(built)
    }

    fn unreachable_report_bound(&self) -> Duration {
        TIMEOUT + Duration::from_secs(3)
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<EtcdBackend>>, NotApplicable> {
        let server = match EtcdServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(harness_error(error))),
        };
        let backend = self.own_builder(&server, OWN_SERVER_TIMEOUT).build();
        let call_bound = 2 * OWN_SERVER_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers: Box::new(vec![server]), call_bound }))
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<EtcdBackend>>, NotApplicable> {
        // etcd persists leases and their keys: restarted, the server keeps the holds of every
        // client whose keep-alives resume within its TTL (a new leader extends every lease).
        let server = match EtcdServer::start() {
            Ok(server) => server,
            Err(error) => return Ok(Err(harness_error(error))),
        };
        let clients: lock_core::Result<Vec<_>> =
            (0..clients).map(|_| self.own_builder(&server, TIMEOUT).build()).collect();
        Ok(clients.map(|clients| RestartableServers { clients, servers: Box::new(vec![server]) }))
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        _holds: u32,
    ) -> Result<lock_core::Result<EtcdBackend>, NotApplicable> {
        // Every hold of a client is a key on its one lease, over one connection per endpoint:
        // `holds` needs no room.
        let endpoints = match self.builder().settings.endpoint_list().and_then(|list| routed(&list, route)) {
            Ok(endpoints) => endpoints,
            Err(error) => return Ok(Err(error)),
        };
        Ok(self
            .builder_at(endpoints)
            .session_ttl(ROUTED_SESSION_TTL)
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .build())
    }

    fn many_holds_not_applicable(&self) -> lock_core::Result<Option<&'static str>> {
        // Every hold of a client is a key on its one lease.
        Ok(None)
    }

    fn round_trip(&self, backend: &EtcdBackend) -> Option<RoundTripProbe> {
        let backend = backend.clone();
        Some(RoundTripProbe::new(
            format!(
                "round trip = half a put + delete pair (one txn each) on the lock's client, to {} \
                 (a lock pair's write limit is 1/(2 × this))",
                self.base.settings.endpoints
            ),
            WRITE_PAIRS,
            move || {
                let backend = backend.clone();
                Ok(Box::new(move || backend.write_round_trip().map_err(|e| e.to_string())))
            },
        ))
    }
}

/// GW01: where the suite's guarded writes of `key` go: under the namespace, apart from locks.
fn guarded_key(backend: &EtcdBackend, key: &str) -> String {
    let key = format!("%guarded/{}", crate::keys::encode_name(key));
    match backend.namespace() {
        "" => key,
        namespace => format!("{namespace}/{key}"),
    }
}

/// `endpoints` (`host:port` each) with every one replaced by the address `route` gives for it,
/// comma-separated.
fn routed(
    endpoints: &[String],
    route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
) -> lock_core::Result<String> {
    let routed = endpoints
        .iter()
        .map(|endpoint| {
            let bad = |why: String| Error::invalid_config(format!("endpoint {endpoint:?}: {why}"));
            let address = std::net::ToSocketAddrs::to_socket_addrs(endpoint.as_str())
                .map_err(|error| bad(error.to_string()))?
                .next()
                .ok_or_else(|| bad("resolves to no address".into()))?;
            Ok(route(address).to_string())
        })
        .collect::<lock_core::Result<Vec<_>>>()?;
    Ok(routed.join(","))
}

impl EtcdBackend {
    /// Times one put and one delete (a transaction each) of a fresh key under the namespace on
    /// this backend's client, and gives half of it: the write round trip a lock pair (enqueue
    /// and guarded delete, two transactions) is measured against, with no lock logic.
    ///
    /// # Errors
    /// As any request; [`Error::Unsupported`] from a tokio async task.
    pub fn write_round_trip(&self) -> lock_core::Result<Duration> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        crate::blocking::refuse_async_context()?;
        let session = &self.inner.session;
        let key = format!(
            "{}/round-trip-{}-{}",
            self.namespace(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let started = Instant::now();
        let put = Txn::new().and_then([TxnOp::put(key.as_str(), "", None)]);
        session
            .txn(self.io_deadline(), put)
            .map_err(|failure| failure.into_error("measure the write round trip"))?;
        let delete = Txn::new().and_then([TxnOp::delete(key.as_str(), None)]);
        session
            .txn(self.io_deadline(), delete)
            .map_err(|failure| failure.into_error("measure the write round trip"))?;
        Ok(started.elapsed() / 2)
    }
}
