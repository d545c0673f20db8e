//! The MySQL/MariaDB kinds: `mysql-table` (lock table; `mysql-table-nonfair` with non-fair
//! waiters), `mysql-row` (`SELECT … FOR UPDATE`) and `mysql-advisory` (`GET_LOCK`).

use distlock::mysql::testkit::MySqlTarget;
use distlock::mysql::MySqlLockKind;
use lock_testkit::harness::shared;

use distlock::mysql::testkit::scenarios::{q01, q02, q03};
use lock_testkit::BackendScenario;

use super::{Opened, Servers};

pub(super) fn table(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Table, servers)
}

pub(super) fn table_non_fair(servers: Servers<'_>) -> Result<Opened, String> {
    open_target(MySqlLockKind::Table, servers, false)
}

pub(super) fn row(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Row, servers)
}

pub(super) fn advisory(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Advisory, servers)
}

fn open(kind: MySqlLockKind, servers: Servers<'_>) -> Result<Opened, String> {
    open_target(kind, servers, true)
}

fn open_target(kind: MySqlLockKind, servers: Servers<'_>, fair: bool) -> Result<Opened, String> {
    let target = match servers {
        Servers::Harness => {
            let server = shared::mariadb().map_err(|e| format!("starting MariaDB: {e}"))?;
            MySqlTarget::at(kind, server.address()).without_restart_delay()
        }
        Servers::HarnessTls => {
            let server = shared::mariadb_tls().map_err(|e| format!("starting TLS-only MariaDB: {e}"))?;
            MySqlTarget::at(kind, server.address()).without_restart_delay()
        }
        Servers::Url(url) => {
            let any_kind = match kind {
                MySqlLockKind::Row => distlock::BackendKind::MySqlRow,
                MySqlLockKind::Advisory => distlock::BackendKind::MySqlAdvisory,
                _ => distlock::BackendKind::MySqlTable,
            };
            super::check_url(url, any_kind)?;
            MySqlTarget::at(kind, url)
        }
    };
    Ok(Opened::new(if fair { target } else { target.non_fair() }))
}

/// The docs' broken SQL recipe N05 (a primary-key lock without expiry, against S04).
pub(super) fn broken_recipes() -> Vec<lock_testkit::negative::BrokenRecipe> {
    distlock::mysql::testkit::broken_recipes()
}

/// S04's holder process for N05, when this binary is re-run as one (see [`super::hold_for_s04`]).
pub(super) fn hold_for_s04(test_name: &str) {
    use distlock::mysql::testkit::{primary_key_lock::PrimaryKeyLockTarget, N05_TEST};
    if test_name == N05_TEST {
        let _ = lock_testkit::suite::run(&PrimaryKeyLockTarget::new(), "S04", test_name);
    }
}

/// Q01 (lock table), Q02 (row lock), Q03 (advisory lock), each under its kind's column.
pub(super) fn table_scenarios() -> Vec<BackendScenario> {
    vec![q01(MySqlLockKind::Table)]
}

pub(super) fn row_scenarios() -> Vec<BackendScenario> {
    vec![q02(MySqlLockKind::Row)]
}

pub(super) fn advisory_scenarios() -> Vec<BackendScenario> {
    vec![q03(MySqlLockKind::Advisory)]
}
