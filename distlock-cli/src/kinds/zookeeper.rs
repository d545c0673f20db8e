//! The ZooKeeper kind: `zookeeper` (the ephemeral-sequential lock of Curator's
//! `InterProcessMutex`).

use distlock::zookeeper::testkit::ZooKeeperTarget;
use lock_testkit::harness::shared;
use lock_testkit::suite::SuiteTarget as _;

use super::{Opened, Servers};

/// Pairs of each kind the request floor times (after as many to warm up).
const FLOOR_PAIRS: usize = 1_000;

pub(super) fn curator_mutex(servers: Servers<'_>) -> Result<Opened, String> {
    let target = match servers {
        // A connect string, or (in an S04 child of a TLS twin) the `zk+tls://` URL.
        Servers::Harness => {
            let server = shared::zookeeper().map_err(|e| format!("starting ZooKeeper: {e}"))?;
            ZooKeeperTarget::from_url(server.address()).map_err(|e| e.to_string())?
        }
        // A `zk+tls://…?cacert=…` URL.
        Servers::HarnessTls => {
            let server = shared::zookeeper_tls().map_err(|e| format!("starting TLS-only ZooKeeper: {e}"))?;
            ZooKeeperTarget::from_url(server.address()).map_err(|e| e.to_string())?
        }
        // `zk://[user:password@]hosts[/namespace]`, parsed as the facade's `parse_url` parses it.
        Servers::Url(url) => {
            super::check_url(url, distlock::BackendKind::ZooKeeper)?;
            ZooKeeperTarget::from_url(url).map_err(|e| e.to_string())?
        }
    };
    let floor_target = target.clone();
    let mut opened = Opened::new(target);
    opened.time_breakdown = Some(Box::new(move || {
        let backend = floor_target.backend().map_err(|e| e.to_string())?;
        Ok(backend.request_floor(FLOOR_PAIRS).map_err(|e| e.to_string())?.to_string())
    }));
    Ok(opened)
}

/// Z01–Z05 (harness servers of their own: the shared standalone server, an ensemble, a Curator
/// client).
pub(super) fn scenarios() -> Vec<lock_testkit::BackendScenario> {
    distlock::zookeeper::testkit::scenarios()
}
