//! The MySQL kinds as [`SqlKind`]s, on the harness's MariaDB servers.

use std::time::Duration;

use lock_core::LockName;
use lock_testkit::harness::shared::{self, MYSQL_URL_VARIABLE};
use lock_testkit::harness::MariaDbServer;
use lock_testkit::suite::PausableServers;
use lock_testkit::workload::TimeOne;

use super::SqlKind;
use crate::mysql::schema::hex;
use crate::mysql::{MySqlBackend, MySqlLockKind};

impl SqlKind for MySqlLockKind {
    type Backend = MySqlBackend;

    const URL_VARIABLE: &'static str = MYSQL_URL_VARIABLE;
    const SCHEME: &'static str = "mysql";
    const DEFAULT_PORT: u16 = 3306;
    // The driver otherwise moves a connection to 127.0.0.1 onto the server's Unix socket,
    // around the proxy.
    const ROUTED_PARAMETERS: &'static str = "prefer_socket=false";
    const USER: &'static str = MariaDbServer::USER;

    fn label(self) -> &'static str {
        MySqlLockKind::label(self)
    }

    fn is_table(self) -> bool {
        self == MySqlLockKind::Table
    }

    fn wakes_waiters(self) -> bool {
        true
    }

    fn shared_abilities(self) -> (bool, bool) {
        // Read-write: row only (`LOCK IN SHARE MODE`/`FOR UPDATE`; `GET_LOCK` has no shared
        // mode); semaphores: the permits table, every kind.
        (self == MySqlLockKind::Row, true)
    }

    fn shared_url() -> Result<String, String> {
        shared::mariadb().map(|server| server.address().to_owned()).map_err(|e| e.to_string())
    }

    fn start_server() -> Result<(String, Box<dyn PausableServers>), String> {
        let server = MariaDbServer::start().map_err(|e| e.to_string())?;
        Ok((server.url(), Box::new(vec![server])))
    }

    fn build_client(
        self,
        url: &str,
        timeout: Duration,
        max_connections: u32,
        fair: bool,
        restart_delay: bool,
    ) -> lock_core::Result<MySqlBackend> {
        MySqlBackend::builder(url)
            .kind(self)
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .max_connections(max_connections)
            .fair(fair)
            .restart_delay(restart_delay)
            .build()
    }

    fn ensure_schema(backend: &MySqlBackend) -> lock_core::Result<()> {
        backend.ensure_schema()
    }

    fn fenced_store(backend: &MySqlBackend) -> lock_core::Result<Box<dyn lock_core::FencedStore>> {
        let store = crate::mysql::MySqlFencedStore::new(backend.clone(), super::target::FENCED_TABLE)?;
        store.ensure_table()?;
        Ok(Box::new(store))
    }

    fn ensure_guarded_table(backend: &MySqlBackend) -> lock_core::Result<()> {
        crate::mysql::MySqlFencedStore::new(backend.clone(), super::target::GUARDED_TABLE)?.ensure_table()
    }

    fn write_if_held(
        backend: &MySqlBackend,
        lease: &mut crate::mysql::MySqlLease,
        key: &str,
        value: &[u8],
    ) -> lock_core::Result<()> {
        let (table, key, value) = (super::target::GUARDED_TABLE, hex(key.as_bytes()), hex(value));
        let sql = format!(
            "INSERT INTO {table} (k, fence, value) VALUES ({key}, 0, {value}) \
             ON DUPLICATE KEY UPDATE value = VALUES(value)"
        );
        backend.execute_if_held(lease, &sql).map(drop)
    }

    fn read_guarded(backend: &MySqlBackend, key: &str) -> lock_core::Result<Option<Vec<u8>>> {
        use lock_core::FencedStore as _;
        let table = crate::mysql::MySqlFencedStore::new(backend.clone(), super::target::GUARDED_TABLE)?;
        Ok(table.read(key)?.map(|(_, value)| value))
    }

    fn remaining_lease(backend: &MySqlBackend, name: &LockName) -> lock_core::Result<Option<Duration>> {
        backend.remaining_lease(name)
    }

    fn break_lock(backend: &MySqlBackend, name: &LockName) -> lock_core::Result<()> {
        backend.break_lock(name)
    }

    fn durability(backend: &MySqlBackend) -> Result<String, String> {
        backend.server_settings(&["innodb_flush_log_at_trx_commit", "sync_binlog"])
    }

    fn delete_prefixed(backend: &MySqlBackend, prefix: &str) -> lock_core::Result<u64> {
        backend.delete_prefixed(prefix)
    }

    fn round_trip(backend: &MySqlBackend) -> TimeOne {
        backend.select_one_probe()
    }
}
