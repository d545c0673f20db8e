//! Redlock ([`crate::RedlockBackend`]) as a conformance-suite and workload target
//! ([`RedlockTarget`], on the shared harness nodes or the ones `DISTLOCK_REDIS_NODES` names), and
//! scenario R02 as a function ([`r02`]) that any Redlock variant can be run through — the real
//! one must pass it, the negative control N06 (Redlock without fencing) must fail it.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use crate::redis;
use crate::{RedisKeys, RedlockBackend, RedlockBuilder};
use lock_core::{DistributedLock, Error, FencingToken, Lock, LockClient, LockName, LockOptions};

use crate::testkit::single_node::{routed_url, CONNECT_TIMEOUT};
use lock_testkit::harness::shared::{self, REDIS_NODES_VARIABLE};
use lock_testkit::harness::{RedisOptions, RedisServer};
use lock_testkit::suite::breach::STALE_WRITE_ACCEPTED;
use lock_testkit::suite::{
    unique_name, Failure, FencedResource, NotApplicable, OwnServers, RestartableServers, ScenarioResult,
    SuiteTarget, Verdict,
};
use lock_testkit::workload::RoundTripProbe;

/// How many nodes the Redlock target and R02 use.
pub const NODES: usize = 5;

/// The node timeout of the target's clients: above the 50 ms default, which a loaded 2-core
/// machine can miss on a healthy node; the suite does not measure Redlock's timing.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The key prefix [`r02`] expects the backends it is given to use (the builder's default).
pub const KEY_PREFIX: &str = "distlock";

/// The password of the private servers behind [`SuiteTarget::wrong_password_backend`].
const PASSWORD: &str = "correct-horse-battery-staple";

/// Redlock over independent Redis nodes.
#[derive(Clone)]
pub struct RedlockTarget {
    urls: Vec<String>,
}

impl std::fmt::Debug for RedlockTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs may be a user's, with passwords.
        let urls: Vec<String> = self.urls.iter().map(|url| lock_core::redact_url(url)).collect();
        f.debug_struct("RedlockTarget").field("urls", &urls).finish()
    }
}

impl RedlockTarget {
    /// Redlock over the [`NODES`] shared harness nodes ([`shared::redis_nodes`]), or the first
    /// of those `DISTLOCK_REDIS_NODES` names.
    ///
    /// # Panics
    /// When the nodes cannot be started (the harness error says why).
    pub fn shared() -> Self {
        let nodes = shared::redis_nodes(NODES).expect("the shared redis-server nodes for the Redlock target");
        Self::new(nodes.iter().map(|node| node.address().to_owned()).collect())
    }

    /// Redlock over the nodes at `urls`.
    pub fn new(urls: Vec<String>) -> Self {
        Self { urls }
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The keys of `name` (the backend's default prefix), the same on every node.
    pub fn keys(&self, name: &LockName) -> RedisKeys {
        RedisKeys::new(KEY_PREFIX, name)
    }

    /// A builder for a client of these nodes, with the target's settings: a node timeout of
    /// [`NODE_TIMEOUT`], so that a loaded test machine does not make healthy nodes miss it.
    pub fn builder(&self) -> RedlockBuilder {
        RedlockBackend::builder(&self.urls).io_timeout(NODE_TIMEOUT)
    }

    /// A plain connection to node `node`, for probes that go around the backend.
    ///
    /// # Errors
    /// When connecting fails; an index out of range is an invalid-client-config error.
    pub fn probe(&self, node: usize) -> redis::RedisResult<redis::Connection> {
        let url = self.urls.get(node).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no such node"))
        })?;
        probe(url)
    }

    /// Runs `command` on every node.
    fn on_every_node<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> lock_core::Result<Vec<T>> {
        self.urls
            .iter()
            .map(|url| probe(url).and_then(|mut connection| command.query(&mut connection)))
            .collect::<redis::RedisResult<Vec<T>>>()
            .map_err(|e| Error::backend("redis probe", e))
    }
}

pub use crate::testkit::single_node::probe;

/// What each node's lock key holds (the holder's owner token), `None` where it is absent.
///
/// # Errors
/// When a node cannot be asked.
pub fn holders(urls: &[String], keys: &RedisKeys) -> redis::RedisResult<Vec<Option<String>>> {
    urls.iter()
        .map(|url| {
            probe(url).and_then(|mut connection| redis::cmd("GET").arg(keys.lock()).query(&mut connection))
        })
        .collect()
}

impl SuiteTarget for RedlockTarget {
    type Backend = RedlockBackend;

    fn clean_up(&self, prefix: &str) -> Result<u64, String> {
        self.urls.iter().map(|url| super::single_node::delete_keys_of_names(url, KEY_PREFIX, prefix)).sum()
    }

    fn label(&self) -> String {
        format!("redlock ({} nodes)", self.urls.len())
    }

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        lock_testkit::suite::Abilities::ALL
    }

    fn fenced_store(&self) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, NotApplicable> {
        Err(NotApplicable(
            "Redlock's nodes are independent servers, none of them the store: fence the protected \
             store itself (a Redis or SQL fenced store of the data's server; R02 shows a stale write \
             refused)",
        ))
    }

    fn backend(&self) -> lock_core::Result<RedlockBackend> {
        self.builder().build()
    }

    /// The longest lease a quorum of nodes still holds (PTTL on every node).
    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let pttls = match self.on_every_node::<i64>(redis::cmd("PTTL").arg(self.keys(name).lock())) {
            Ok(pttls) => pttls,
            Err(error) => return Ok(Err(error)),
        };
        let mut leases: Vec<Duration> = pttls
            .into_iter()
            .filter_map(|ms| match ms {
                -2 => None,
                // A key without expiry: an immortal lock, reported as an endless lease.
                -1 => Some(Duration::MAX),
                ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
            })
            .collect();
        leases.sort_unstable_by(|a, b| b.cmp(a));
        let quorum = self.urls.len() / 2 + 1;
        Ok(Ok(leases.get(quorum - 1).copied()))
    }

    /// `DEL` of the lock key on every node.
    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        Ok(self.on_every_node::<i64>(redis::cmd("DEL").arg(self.keys(name).lock())).map(drop))
    }

    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(REDIS_NODES_VARIABLE.to_owned(), self.urls.join(","))])
    }

    fn backend_at(
        &self,
        addresses: &[SocketAddr],
    ) -> Result<lock_core::Result<RedlockBackend>, NotApplicable> {
        Ok(RedlockBackend::builder(addresses.iter().map(|address| format!("redis://{address}/"))).build())
    }

    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        _holds: u32,
    ) -> Result<lock_core::Result<RedlockBackend>, NotApplicable> {
        // Every node through its own proxy. Holds own no connection: the default pools fit.
        let urls =
            match self.urls.iter().map(|url| routed_url(url, route)).collect::<lock_core::Result<Vec<_>>>() {
                Ok(urls) => urls,
                Err(error) => return Ok(Err(error)),
            };
        Ok(RedlockBackend::builder(urls).io_timeout(timeout).connect_timeout(timeout).build())
    }

    fn wrong_password_backend(&self) -> Result<lock_core::Result<RedlockBackend>, NotApplicable> {
        static SERVERS: OnceLock<Result<Vec<RedisServer>, String>> = OnceLock::new();
        let servers = SERVERS.get_or_init(|| {
            (0..3)
                .map(|_| RedisServer::start_with(RedisOptions::new().password(PASSWORD)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{e:?}"))
        });
        let servers = match servers {
            Ok(servers) => servers,
            Err(error) => return Ok(Err(Error::backend("harness", error.clone()))),
        };
        let urls =
            servers.iter().map(|server| format!("redis://:wrong-password@127.0.0.1:{}/", server.port()));
        Ok(RedlockBackend::builder(urls).build())
    }

    fn unreachable_report_bound(&self) -> Duration {
        CONNECT_TIMEOUT + Duration::from_secs(3)
    }

    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<RedlockBackend>>, NotApplicable> {
        let _ = clients;
        Err(NotApplicable(
            "a Redlock node restarted without persistence forgets its keys: a rival then gets a majority while \
             the holder believes its hold (R02 shows it, and that fencing refuses the stale write); Redlock \
             needs such a node kept out for a lease (delayed restart) or `appendfsync always`",
        ))
    }

    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<RedlockBackend>>, NotApplicable> {
        let nodes = match RedisServer::start_many(NODES) {
            Ok(nodes) => nodes,
            Err(error) => return Ok(Err(Error::backend("harness", error.to_string()))),
        };
        let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
        let backend = RedlockBackend::builder(&urls).io_timeout(NODE_TIMEOUT).build();
        // One operation takes up to about six node timeouts (see the backend's docs).
        let call_bound = 6 * NODE_TIMEOUT + Duration::from_secs(1);
        Ok(backend.map(|backend| OwnServers { backend, servers: Box::new(nodes), call_bound }))
    }

    /// The round trip to node 1 (the nodes are alike and all on this machine in the harness).
    fn round_trip(&self, backend: &RedlockBackend) -> Option<RoundTripProbe> {
        let backend = backend.clone();
        let node = lock_core::redact_url(self.urls.first()?);
        Some(RoundTripProbe::new(
            format!("round trip = a PING on a pooled connection of the lock's backend, to node 1 ({node})"),
            super::single_node::PINGS,
            move || Ok(backend.ping_probe()),
        ))
    }
}

/// What [`r02`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct R02Report {
    /// A and B both held the lock at once: both guards believed it held, A's token was on nodes
    /// 1 and 2 and B's on nodes 3, 4 and 5.
    pub two_holders: bool,
    /// A's fencing token, if the backend issues them.
    pub token_a: Option<FencingToken>,
    /// B's fencing token, if the backend issues them.
    pub token_b: Option<FencingToken>,
    /// The fenced resource rejected A's write after B's.
    pub stale_write_rejected: bool,
}

impl R02Report {
    /// R02 passes when the two holders were demonstrated and fencing rejected A's stale write.
    ///
    /// # Errors
    /// A [`Failure`] saying which part did not hold.
    pub fn verdict(&self) -> ScenarioResult {
        if !self.two_holders {
            return Err(Failure("two simultaneous holders were not demonstrated".into()));
        }
        if self.stale_write_rejected {
            return Ok(Verdict::Pass);
        }
        Err(Failure(match (self.token_a, self.token_b) {
            (Some(a), Some(b)) => {
                format!("A's {STALE_WRITE_ACCEPTED} (token {a}) after B's (token {b}): not fenced")
            }
            _ => format!("the holders carry no fencing tokens, so A's {STALE_WRITE_ACCEPTED} after B's"),
        }))
    }
}

/// R02 (source 003): a Redlock node restarts without persistence while the lock is held.
///
/// On `nodes` (exactly [`NODES`] private servers, started without persistence, which this
/// function kills and restarts), with clients made by `connect` from the nodes' URLs (using the
/// default key prefix, [`KEY_PREFIX`]):
/// 1. nodes 4 and 5 are down while A acquires, so A holds nodes 1, 2 and 3 (they come back
///    empty);
/// 2. node 3 is killed and restarted: A's lock and the node's fencing counter are gone;
/// 3. B acquires: nodes 3, 4 and 5 grant, 1 and 2 refuse — two holders at once;
/// 4. B writes to a [`FencedResource`] with its token, then A (stale) with its own.
///
/// The source suggests pausing nodes 4 and 5 while A acquires; a paused node still receives A's
/// request and grants it when it resumes, so A would hold all five. Down nodes lose the request,
/// as a partition would.
///
/// # Errors
/// A [`Failure`] when a step that must work does not (a node cannot be restarted, A or B cannot
/// acquire, the nodes do not hold what the story says). Whether fencing caught the stale write
/// is in the report: see [`R02Report::verdict`].
pub fn r02<B, F>(nodes: &[RedisServer], connect: F) -> Result<R02Report, Failure>
where
    B: DistributedLock,
    F: Fn(&[String]) -> lock_core::Result<B>,
{
    if nodes.len() != NODES {
        return Err(Failure(format!("R02 needs {NODES} nodes, got {}", nodes.len())));
    }
    let harness = |e: lock_testkit::harness::HarnessError| Failure(format!("harness: {e}"));
    let probing = |e: redis::RedisError| Failure(format!("probing the nodes: {e}"));
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let name = unique_name("r02");
    let keys = RedisKeys::new(KEY_PREFIX, &name);
    let options = || LockOptions::builder().lease(Duration::from_secs(30)).renewal(false).build();

    // 1. A acquires while nodes 4 and 5 are down.
    for node in &nodes[3..] {
        node.process().kill9().map_err(harness)?;
    }
    let client_a = LockClient::with_options(connect(&urls)?, options()?);
    let guard_a = Lock::new(&client_a, name.clone())
        .try_lock()?
        .ok_or_else(|| Failure("A could not acquire with nodes 1, 2 and 3 up".into()))?;
    for node in &nodes[3..] {
        node.process().restart().map_err(harness)?;
    }
    let held = holders(&urls, &keys).map_err(probing)?;
    let value_a = held[0].clone();
    if value_a.is_none()
        || held[..3].iter().any(|value| *value != value_a)
        || held[3..].iter().any(Option::is_some)
    {
        return Err(Failure(format!("after A acquired, the nodes hold {held:?}, not A on nodes 1-3 only")));
    }

    // 2. Node 3 crashes and comes back without persistence.
    nodes[2].process().kill9().map_err(harness)?;
    nodes[2].process().restart().map_err(harness)?;

    // 3. B acquires on nodes 3, 4 and 5.
    let client_b = LockClient::with_options(connect(&urls)?, options()?);
    let guard_b = Lock::new(&client_b, name)
        .try_lock()?
        .ok_or_else(|| Failure("B could not acquire on nodes 3, 4 and 5".into()))?;
    let held = holders(&urls, &keys).map_err(probing)?;
    let value_b = held[2].clone();
    let two_holders = guard_a.is_held()
        && guard_b.is_held()
        && held[..2].iter().all(|value| *value == value_a)
        && value_b.is_some()
        && value_b != value_a
        && held[2..].iter().all(|value| *value == value_b);
    if !two_holders {
        return Err(Failure(format!(
            "after B acquired, the nodes hold {held:?} (A believes it holds: {}, B: {})",
            guard_a.is_held(),
            guard_b.is_held()
        )));
    }

    // 4. B writes, then A's stale write arrives.
    let resource = FencedResource::new();
    let (token_a, token_b) = (guard_a.fencing_token(), guard_b.fencing_token());
    if let Some(token) = token_b {
        resource
            .write(token, "B")
            .map_err(|e| Failure(format!("the resource rejected the current holder: {e}")))?;
    }
    // Without a token, A's write cannot be fenced: the resource takes it.
    let stale_write_rejected = token_a.is_some_and(|token| resource.write(token, "A, stale").is_err());

    let _ = guard_b.unlock();
    let _ = guard_a.unlock(); // Not held by a quorum any more: says so, harmlessly.
    Ok(R02Report { two_holders, token_a, token_b, stale_write_rejected })
}
