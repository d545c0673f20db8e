//! The PostgreSQL kinds: `pg-table` (lock table; `pg-table-nonfair` with non-fair waiters),
//! `pg-row` (`SELECT … FOR UPDATE`) and `pg-advisory` (`pg_advisory_lock`).

use distlock::postgres::testkit::PostgresTarget;
use distlock::postgres::PostgresLockKind;
use lock_testkit::harness::shared;

use distlock::postgres::testkit::pooler::{pb01, pb02};
use distlock::postgres::testkit::scenarios::{q01, q02, q03};
use lock_testkit::BackendScenario;

use super::{Opened, Servers};

pub(super) fn table(servers: Servers<'_>) -> Result<Opened, String> {
    open(PostgresLockKind::Table, servers)
}

pub(super) fn table_non_fair(servers: Servers<'_>) -> Result<Opened, String> {
    open_target(PostgresLockKind::Table, servers, false)
}

pub(super) fn row(servers: Servers<'_>) -> Result<Opened, String> {
    open(PostgresLockKind::Row, servers)
}

pub(super) fn advisory(servers: Servers<'_>) -> Result<Opened, String> {
    open(PostgresLockKind::Advisory, servers)
}

fn open(kind: PostgresLockKind, servers: Servers<'_>) -> Result<Opened, String> {
    open_target(kind, servers, true)
}

fn open_target(kind: PostgresLockKind, servers: Servers<'_>, fair: bool) -> Result<Opened, String> {
    let target = match servers {
        Servers::Harness => {
            let server = shared::postgres().map_err(|e| format!("starting PostgreSQL: {e}"))?;
            PostgresTarget::at(kind, server.address()).without_restart_delay()
        }
        Servers::HarnessTls => {
            let server = shared::postgres_tls().map_err(|e| format!("starting TLS-only PostgreSQL: {e}"))?;
            PostgresTarget::at(kind, server.address()).without_restart_delay()
        }
        Servers::Url(url) => {
            let any_kind = match kind {
                PostgresLockKind::Row => distlock::BackendKind::PgRow,
                PostgresLockKind::Advisory => distlock::BackendKind::PgAdvisory,
                _ => distlock::BackendKind::PgTable,
            };
            super::check_url(url, any_kind)?;
            PostgresTarget::at(kind, url)
        }
    };
    Ok(Opened::new(if fair { target } else { target.non_fair() }))
}

/// Q01 (lock table), Q02 (row lock), Q03 (advisory lock), each under its kind's column, and
/// PB01/PB02 (through PgBouncer) under each; their holder processes re-run this binary as the
/// kind's S04 holder (`compare/<kind>`), on the pooled URL the parent passes.
pub(super) fn table_scenarios() -> Vec<BackendScenario> {
    let kind = PostgresLockKind::Table;
    vec![q01(kind), pb01(kind, "compare/pg-table"), pb02(kind, "compare/pg-table")]
}

pub(super) fn row_scenarios() -> Vec<BackendScenario> {
    let kind = PostgresLockKind::Row;
    vec![q02(kind), pb01(kind, "compare/pg-row"), pb02(kind, "compare/pg-row")]
}

pub(super) fn advisory_scenarios() -> Vec<BackendScenario> {
    let kind = PostgresLockKind::Advisory;
    vec![q03(kind), pb01(kind, "compare/pg-advisory"), pb02(kind, "compare/pg-advisory")]
}
