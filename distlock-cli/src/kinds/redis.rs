//! The Redis kinds: `redis` (SET NX PX), `redis-hash` (reentrant hash) and `redlock`.

use std::time::Duration;

use distlock::redis::testkit::{RedisTarget, RedlockTarget};
use distlock::redis::RedisLockKind;
use lock_testkit::workload;

use super::{Opened, Servers};

pub(super) fn set_nx(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::SetNx, servers)
}

pub(super) fn reentrant_hash(servers: Servers<'_>) -> Result<Opened, String> {
    single_node(RedisLockKind::ReentrantHash, servers)
}

fn single_node(kind: RedisLockKind, servers: Servers<'_>) -> Result<Opened, String> {
    let target = match servers {
        Servers::Harness => RedisTarget::new(kind),
        Servers::Url(url) => RedisTarget::at(kind, url),
    };
    Ok(Opened { target: Box::new(target), single_node_w1_p50: None })
}

/// Redlock, with its yardstick measured first: single-node W1 on a server of its own.
pub(super) fn redlock(servers: Servers<'_>) -> Result<Opened, String> {
    // The single-node reference runs on the first node (a server of its own in the harness).
    let (target, single) = match servers {
        Servers::Harness => (RedlockTarget::shared(), RedisTarget::set_nx()),
        Servers::Url(urls) => {
            let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
            let first = urls.first().cloned().ok_or("no Redlock node URLs")?;
            (RedlockTarget::new(urls), RedisTarget::at(RedisLockKind::SetNx, first))
        }
    };
    let report = workload::w1_uncontended(&single, workload::Scale::FULL)
        .map_err(|e| format!("single-node W1: {e}"))?;
    let p50 = Duration::from_nanos(report.latency().p50);
    Ok(Opened { target: Box::new(target), single_node_w1_p50: Some(p50) })
}

/// The docs' broken Redis recipes (N01–N04 against S05/S06, N06 against R02).
pub(super) fn broken_recipes() -> Vec<lock_testkit::negative::BrokenRecipe> {
    distlock::redis::testkit::broken_recipes()
}
