//! The Redis kinds: `redis` (SET NX PX), `redis-hash` (reentrant hash), both also with non-fair
//! waiters (`-nonfair`), and `redlock`.

use distlock::redis::testkit::{
    plain_pair, plain_recipe, server_time, Deployment, DeploymentTarget, RedisTarget, RedlockTarget, NODES,
};
use distlock::redis::RedisLockKind;
use lock_testkit::harness::{shared, RedisServer};
use lock_testkit::negative::BrokenRecipe;
use lock_testkit::suite::SuiteTarget;

use super::{KindTarget, Opened, Servers, SingleNodeReference};

pub(super) fn set_nx(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::SetNx, true, servers)
}

pub(super) fn reentrant_hash(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::ReentrantHash, true, servers)
}

pub(super) fn set_nx_non_fair(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::SetNx, false, servers)
}

pub(super) fn reentrant_hash_non_fair(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::ReentrantHash, false, servers)
}

fn single_node(kind: RedisLockKind, fair: bool, servers: Servers<'_>) -> Result<Opened, String> {
    // On a user's server (`--url`) the bench runs the lock only: the plain recipe would write
    // keys of its own and open eight more connections there.
    let harness = matches!(servers, Servers::Harness);
    let url = match servers {
        Servers::Harness => {
            shared::redis().map_err(|e| format!("starting redis-server: {e}"))?.address().to_owned()
        }
        Servers::HarnessTls => {
            let server = shared::redis_tls().map_err(|e| format!("starting TLS-only redis-server: {e}"))?;
            let target = RedisTarget::at(kind, server.address());
            // The time breakdown's probes speak plaintext.
            return Ok(Opened::new(if fair { target } else { target.non_fair() }));
        }
        Servers::Url(url) => {
            let any_kind = match kind {
                RedisLockKind::ReentrantHash => distlock::BackendKind::RedisHash,
                _ => distlock::BackendKind::Redis,
            };
            super::check_url(url, any_kind)?;
            url.to_owned()
        }
    };
    let target = RedisTarget::at(kind, url.clone());
    let target = if fair { target } else { target.non_fair() };
    let mut opened = Opened::new(target.clone());
    let plain_url = url.clone();
    opened.w2_reference = harness.then(|| super::W2Reference {
        label: "plain SET NX PX, retried after 1 ms (rslock's loop)",
        run: Box::new(move |scale| plain_recipe::run_contended(&plain_url, scale)),
        min_ratio: (!fair).then_some(1.0),
    });
    opened.time_breakdown = Some(Box::new(move || {
        let backend = target.backend().map_err(|e| e.to_string())?;
        let server_time =
            server_time::measure(&backend, std::slice::from_ref(&url), SERVER_TIME_OPS, SERVER_TIME_ROUNDS)?;
        let pairs = plain_pair::measure(&backend, &url, PLAIN_PAIRS)?;
        Ok(format!("{server_time}\n{pairs}"))
    }));
    Ok(opened)
}

/// Operations per phase and rounds of the server-time measurement: 2,000 × 5 × 6 phases, a few
/// seconds on loopback.
const SERVER_TIME_OPS: usize = 2_000;
const SERVER_TIME_ROUNDS: usize = 5;

/// Uncontended pairs of each kind (the lock's, the plain recipe's) timed beside each other.
const PLAIN_PAIRS: usize = 2_000;

/// Redlock, with its yardstick for `distlock bench`: the single-node kind on its first node.
pub(super) fn redlock(servers: Servers<'_>) -> Result<Opened, String> {
    let urls: Vec<String> = match servers {
        Servers::Harness => shared::redis_nodes(NODES)
            .map_err(|e| format!("starting {NODES} redis-server nodes: {e}"))?
            .iter()
            .map(|node| node.address().to_owned())
            .collect(),
        Servers::HarnessTls => return Err(NO_TLS_TWIN.into()),
        Servers::Url(urls) => {
            super::check_url(urls, distlock::BackendKind::Redlock)?;
            distlock::split_url_list(urls).into_iter().map(str::to_owned).collect()
        }
    };
    let first = urls.first().cloned().ok_or("no Redlock node URLs")?;
    let target = RedlockTarget::new(urls.clone());
    let mut opened = Opened::new(target.clone());
    opened.time_breakdown = Some(Box::new(move || {
        let backend = target.backend().map_err(|e| e.to_string())?;
        Ok(server_time::measure(&backend, &urls, SERVER_TIME_OPS, SERVER_TIME_ROUNDS)?.to_string())
    }));
    opened.single_node_reference = Some(SingleNodeReference {
        make: Box::new(move || {
            Box::new(RedisTarget::at(RedisLockKind::SetNx, first.clone())) as Box<dyn KindTarget>
        }),
        max_ratio: 2.0,
    });
    Ok(opened)
}

/// The docs' broken single-node Redis recipes (N01–N04 and N07, against S05, S06 and SEM01).
pub(super) fn single_node_recipes() -> Vec<BrokenRecipe> {
    distlock::redis::testkit::broken_recipes().into_iter().filter(|recipe| recipe.id != "N06").collect()
}

/// N06: Redlock without fencing, against R02.
pub(super) fn redlock_recipes() -> Vec<BrokenRecipe> {
    distlock::redis::testkit::broken_recipes().into_iter().filter(|recipe| recipe.id == "N06").collect()
}

/// The Redis scenarios, each under the kind it is about: R02 under `redlock`, R03 (failover and
/// `WAIT`) under `redis`, R04 under `redis-hash`.
fn own(id: &str) -> Vec<lock_testkit::BackendScenario> {
    distlock::redis::testkit::scenarios().into_iter().filter(|scenario| scenario.id == id).collect()
}

pub(super) fn set_nx_scenarios() -> Vec<lock_testkit::BackendScenario> {
    own("R03")
}

pub(super) fn reentrant_hash_scenarios() -> Vec<lock_testkit::BackendScenario> {
    own("R04")
}

pub(super) fn redlock_scenarios() -> Vec<lock_testkit::BackendScenario> {
    own("R02")
}

/// The replicated deployments' scenarios with these ids.
fn deployment(ids: &[&str]) -> Vec<lock_testkit::BackendScenario> {
    distlock::redis::testkit::deployment_scenarios()
        .into_iter()
        .filter(|scenario| ids.contains(&scenario.id))
        .collect()
}

/// R05 (slot migration) and R06 (failover) under `redis-cluster`.
pub(super) fn cluster_scenarios() -> Vec<lock_testkit::BackendScenario> {
    deployment(&["R05", "R06"])
}

/// R07 (Sentinel failover) under `redis-sentinel`.
pub(super) fn sentinel_scenarios() -> Vec<lock_testkit::BackendScenario> {
    deployment(&["R07"])
}

/// `redis-cluster`: the shared throwaway cluster, or a user's. Its yardstick for `distlock
/// bench` is the single-node kind on a throwaway server with a replica
/// ([`replicated_single_node`]); its time breakdown is how the workloads' names spread over
/// the primaries.
pub(super) fn cluster(servers: Servers<'_>) -> Result<Opened, String> {
    let (url, harness) = deployment_url(servers, || {
        shared::redis_cluster()
            .map(|cluster| cluster.address())
            .map_err(|e| format!("starting a Redis Cluster: {e}"))
    })?;
    let target = DeploymentTarget::at(Deployment::Cluster, RedisLockKind::SetNx, url);
    let mut opened = Opened::new(target.clone());
    opened.time_breakdown = Some(Box::new(move || {
        Ok(format!("names over the primaries (10,000 fresh names): {}", target.primary_share(10_000)?))
    }));
    if harness {
        opened.single_node_reference = Some(SingleNodeReference {
            make: Box::new(|| match replicated_single_node() {
                Ok(url) => Box::new(RedisTarget::at(RedisLockKind::SetNx, url)) as Box<dyn KindTarget>,
                // The reference's W1 then fails and says why.
                Err(error) => {
                    Box::new(RedisTarget::at(RedisLockKind::SetNx, format!("redis://unavailable/{error}")))
                }
            }),
            max_ratio: W1_WITHIN,
        });
    }
    Ok(opened)
}

/// A throwaway server with one replica, as each cluster primary has: the single-node yardstick
/// of `redis-cluster` (a cluster node answers only for its own slots, so the single-node client
/// cannot run on one of the primaries; this one costs the server the same replication).
fn replicated_single_node() -> Result<String, String> {
    static PAIR: std::sync::OnceLock<Result<(RedisServer, RedisServer), String>> = std::sync::OnceLock::new();
    let pair = PAIR.get_or_init(|| {
        let primary = RedisServer::start().map_err(|e| e.to_string())?;
        let replica = RedisServer::start_replica_of(&primary).map_err(|e| e.to_string())?;
        Ok((primary, replica))
    });
    pair.as_ref().map(|(primary, _)| primary.url()).map_err(Clone::clone)
}

/// `redis-sentinel`: the shared throwaway Sentinel group, or a user's. Its yardstick for
/// `distlock bench` is the single-node kind on the primary itself (harness deployments).
pub(super) fn sentinel(servers: Servers<'_>) -> Result<Opened, String> {
    let (url, harness) = deployment_url(servers, || {
        shared::redis_sentinel()
            .map(|group| group.address())
            .map_err(|e| format!("starting a Sentinel group: {e}"))
    })?;
    let target = DeploymentTarget::at(Deployment::Sentinel, RedisLockKind::SetNx, url);
    let mut opened = Opened::new(target.clone());
    if harness {
        let primary = target.primary_url()?;
        opened.single_node_reference = Some(SingleNodeReference {
            make: Box::new(move || {
                Box::new(RedisTarget::at(RedisLockKind::SetNx, primary.clone())) as Box<dyn KindTarget>
            }),
            max_ratio: W1_WITHIN,
        });
    }
    Ok(opened)
}

/// Why the multi-server kinds have no `-tls` twin.
const NO_TLS_TWIN: &str = "the harness starts no TLS-only Redis Cluster, Sentinel group or Redlock nodes";

/// The goal of `redis-cluster` and `redis-sentinel` against their single-node yardstick: W1 at
/// least 0.9 × the single node's, so a pair p50 at most 1/0.9 × its.
const W1_WITHIN: f64 = 1.0 / 0.9;

/// The URL of a replicated deployment: the harness's (`true`), or the user's, checked.
fn deployment_url(
    servers: Servers<'_>,
    harness: impl FnOnce() -> Result<&'static str, String>,
) -> Result<(String, bool), String> {
    match servers {
        Servers::Harness => Ok((harness()?.to_owned(), true)),
        Servers::HarnessTls => Err(NO_TLS_TWIN.into()),
        Servers::Url(url) => {
            super::check_url(url, distlock::BackendKind::Redis)?;
            Ok((url.to_owned(), false))
        }
    }
}
