//! N05 — source 003's `MysqlprimaryLock`: a lock is a row inserted under the name's primary key,
//! released by deleting it. No expiry, no owner: a holder that crashes leaves its row behind,
//! and the lock is held forever. It works as a lock on the happy path (S02) and must fail S04
//! (holder crash).

use std::time::Duration;

use lock_core::{DistributedLock, Error, LockName, OwnerToken, Result};
use mysql::prelude::Queryable as _;
use mysql::{Opts, OptsBuilder, Pool};

use lock_testkit::harness::shared::{self, MYSQL_URL_VARIABLE};
use lock_testkit::suite::{NotApplicable, SuiteTarget};

use super::TIMEOUT;
use crate::mysql::schema::hex;

/// The recipe's table.
const TABLE: &str = "distlock_n05_locks";

/// `ER_DUP_ENTRY`: the name's row exists — someone holds the lock.
const DUPLICATE_KEY: u16 = 1062;

/// The broken recipe as a backend.
#[derive(Clone)]
pub struct PrimaryKeyLock {
    pool: Pool,
}

impl PrimaryKeyLock {
    /// A client of the server at `url`; creates the recipe's table if needed.
    ///
    /// # Errors
    /// When connecting or creating the table fails.
    pub fn connect(url: &str) -> Result<Self> {
        let opts = Opts::from_url(url).map_err(|e| Error::invalid_config(e.to_string()))?;
        let opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(TIMEOUT))
            .read_timeout(Some(TIMEOUT))
            .write_timeout(Some(TIMEOUT));
        let pool = Pool::new(opts).map_err(failure)?;
        let locks = Self { pool };
        locks.query(&format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} (name VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB"
        ))?;
        Ok(locks)
    }

    fn query(&self, sql: &str) -> Result<u64> {
        let mut connection = self.pool.try_get_conn(TIMEOUT).map_err(failure)?;
        connection.query_drop(sql).map_err(failure)?;
        Ok(connection.affected_rows())
    }
}

fn failure(error: mysql::Error) -> Error {
    Error::backend("mysql", error)
}

impl DistributedLock for PrimaryKeyLock {
    type Lease = LockName;

    fn backend_name(&self) -> &'static str {
        "mysql"
    }

    fn try_acquire(&self, name: &LockName, _owner: &OwnerToken, ttl: Duration) -> Result<Option<LockName>> {
        lock_core::check_lease(ttl)?;
        match self.query(&format!("INSERT INTO {TABLE} (name) VALUES ({})", hex(name.as_str().as_bytes()))) {
            Ok(_) => Ok(Some(name.clone())),
            Err(Error::Backend { source, .. })
                if source.downcast_ref::<mysql::Error>().is_some_and(
                    |error| matches!(error, mysql::Error::MySqlError(server) if server.code == DUPLICATE_KEY),
                ) =>
            {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Nothing expires, so there is nothing to extend.
    fn extend(&self, _lease: &mut LockName, ttl: Duration) -> Result<bool> {
        lock_core::check_lease(ttl)?;
        Ok(true)
    }

    fn release(&self, name: LockName) -> Result<bool> {
        let deleted =
            self.query(&format!("DELETE FROM {TABLE} WHERE name = {}", hex(name.as_str().as_bytes())))?;
        Ok(deleted == 1)
    }
}

/// N05 on the shared harness MariaDB server (or `DISTLOCK_MYSQL_URL`).
#[derive(Debug, Clone)]
pub struct PrimaryKeyLockTarget {
    url: String,
}

impl PrimaryKeyLockTarget {
    /// The recipe on the shared server.
    ///
    /// # Panics
    /// When the shared MariaDB server cannot be started.
    pub fn new() -> Self {
        let server = shared::mariadb().expect("the shared MariaDB server for N05");
        Self { url: server.address().to_owned() }
    }
}

impl Default for PrimaryKeyLockTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl SuiteTarget for PrimaryKeyLockTarget {
    type Backend = PrimaryKeyLock;

    fn label(&self) -> String {
        "N05 primary-key lock without expiry".into()
    }

    fn abilities(&self) -> lock_testkit::suite::Abilities {
        lock_testkit::suite::Abilities::NONE
    }

    fn backend(&self) -> Result<PrimaryKeyLock> {
        PrimaryKeyLock::connect(&self.url)
    }

    fn child_env(&self) -> std::result::Result<Vec<(String, String)>, NotApplicable> {
        Ok(vec![(MYSQL_URL_VARIABLE.to_owned(), self.url.clone())])
    }
}
