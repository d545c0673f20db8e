//! The etcd kind: `etcd` (etcd's own `concurrency.Mutex` layout, shared with `etcdctl lock`).

use distlock::etcd::testkit::EtcdTarget;
use lock_testkit::harness::shared;
use lock_testkit::suite::SuiteTarget as _;

use super::{Opened, Servers};

pub(super) fn mutex(servers: Servers<'_>) -> Result<Opened, String> {
    let target = match servers {
        // `etcd://127.0.0.1:PORT` (or the server or cluster `DISTLOCK_ETCD_URL` names, as in an
        // S04 child).
        Servers::Harness => {
            let server = shared::etcd().map_err(|e| format!("starting etcd: {e}"))?;
            EtcdTarget::from_url(server.address()).map_err(|e| e.to_string())?
        }
        Servers::HarnessTls => return Err("the harness starts no TLS-only etcd server".into()),
        // `etcd://[user:password@]hosts[/namespace]` or `etcds://…`, parsed as the facade's
        // `parse_url` parses it.
        Servers::Url(url) => {
            super::check_url(url, distlock::BackendKind::Etcd)?;
            EtcdTarget::from_url(url).map_err(|e| e.to_string())?
        }
    };
    let reference = target.clone();
    let mut opened = Opened::new(target);
    opened.time_breakdown = Some(Box::new(move || {
        let backend = reference.backend().map_err(|e| e.to_string())?;
        Ok(backend.lock_service_pairs(SERVICE_PAIRS).map_err(|e| e.to_string())?.to_string())
    }));
    Ok(opened)
}

/// Uncontended pairs of each kind (the lock's, etcd's Lock service's) timed beside each other.
const SERVICE_PAIRS: usize = 1_000;

/// E01–E04 (harness servers of their own: single servers, a 3-member cluster, `etcdctl`).
pub(super) fn scenarios() -> Vec<lock_testkit::BackendScenario> {
    distlock::etcd::testkit::scenarios()
}

/// E02's second process, when this binary is re-run as one (see [`super::serve_scenario_child`]).
pub(super) fn serve_scenario_child() {
    distlock::etcd::testkit::serve_e02_child_if_asked();
}
