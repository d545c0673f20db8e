//! The MySQL/MariaDB kinds: `mysql-table` (lock table), `mysql-row` (`SELECT … FOR UPDATE`) and
//! `mysql-advisory` (`GET_LOCK`).

use distlock::mysql::testkit::MySqlTarget;
use distlock::mysql::MySqlLockKind;
use lock_testkit::harness::shared;

use super::{Opened, Servers};

pub(super) fn table(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Table, servers)
}

pub(super) fn row(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Row, servers)
}

pub(super) fn advisory(servers: Servers<'_>) -> Result<Opened, String> {
    open(MySqlLockKind::Advisory, servers)
}

fn open(kind: MySqlLockKind, servers: Servers<'_>) -> Result<Opened, String> {
    let target = match servers {
        Servers::Harness => {
            let server = shared::mariadb().map_err(|e| format!("starting MariaDB: {e}"))?;
            MySqlTarget::at(kind, server.address())
        }
        Servers::Url(url) => MySqlTarget::at(kind, url),
    };
    Ok(Opened { target: Box::new(target), single_node_w1_p50: None })
}
