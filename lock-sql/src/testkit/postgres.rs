//! The PostgreSQL kinds as [`SqlKind`]s, on the harness's PostgreSQL servers.

use std::time::Duration;

use lock_core::LockName;
use lock_testkit::harness::shared::{self, POSTGRES_URL_VARIABLE};
use lock_testkit::harness::PostgresServer;
use lock_testkit::suite::PausableServers;
use lock_testkit::workload::TimeOne;

use super::SqlKind;
use crate::postgres::{PostgresBackend, PostgresLockKind};

impl SqlKind for PostgresLockKind {
    type Backend = PostgresBackend;

    const URL_VARIABLE: &'static str = POSTGRES_URL_VARIABLE;
    const SCHEME: &'static str = "postgres";
    const DEFAULT_PORT: u16 = 5432;
    const ROUTED_PARAMETERS: &'static str = "";
    const USER: &'static str = PostgresServer::USER;

    fn label(self) -> &'static str {
        PostgresLockKind::label(self)
    }

    fn is_table(self) -> bool {
        self == PostgresLockKind::Table
    }

    fn wakes_waiters(self) -> bool {
        true
    }

    fn shared_abilities(self) -> (bool, bool) {
        // Read-write: row (`FOR SHARE`/`FOR UPDATE`) and advisory (shared advisory locks);
        // semaphores: the permits table, every kind.
        (self != PostgresLockKind::Table, true)
    }

    fn shared_url() -> Result<String, String> {
        shared::postgres().map(|server| server.address().to_owned()).map_err(|e| e.to_string())
    }

    fn start_server() -> Result<(String, Box<dyn PausableServers>), String> {
        // Durable commits: S17 restarts it and counts on what it committed.
        let server = PostgresServer::start_durable().map_err(|e| e.to_string())?;
        Ok((server.url(), Box::new(vec![server])))
    }

    fn build_client(
        self,
        url: &str,
        timeout: Duration,
        max_connections: u32,
        fair: bool,
        restart_delay: bool,
    ) -> lock_core::Result<PostgresBackend> {
        PostgresBackend::builder(url)
            .kind(self)
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .max_connections(max_connections)
            .fair(fair)
            .restart_delay(restart_delay)
            .build()
    }

    fn ensure_schema(backend: &PostgresBackend) -> lock_core::Result<()> {
        backend.ensure_schema()
    }

    fn fenced_store(backend: &PostgresBackend) -> lock_core::Result<Box<dyn lock_core::FencedStore>> {
        let store = crate::postgres::PostgresFencedStore::new(backend.clone(), super::target::FENCED_TABLE)?;
        store.ensure_table()?;
        Ok(Box::new(store))
    }

    fn ensure_guarded_table(backend: &PostgresBackend) -> lock_core::Result<()> {
        crate::postgres::PostgresFencedStore::new(backend.clone(), super::target::GUARDED_TABLE)?
            .ensure_table()
    }

    fn write_if_held(
        backend: &PostgresBackend,
        lease: &mut crate::postgres::PostgresLease,
        key: &str,
        value: &[u8],
    ) -> lock_core::Result<()> {
        let table = super::target::GUARDED_TABLE;
        let sql = format!(
            "INSERT INTO {table} (key, fence, value) VALUES ($1, 0, $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        );
        backend.execute_if_held(lease, &sql, &[&key, &value]).map(drop)
    }

    fn read_guarded(backend: &PostgresBackend, key: &str) -> lock_core::Result<Option<Vec<u8>>> {
        use lock_core::FencedStore as _;
        let table = crate::postgres::PostgresFencedStore::new(backend.clone(), super::target::GUARDED_TABLE)?;
        Ok(table.read(key)?.map(|(_, value)| value))
    }

    fn remaining_lease(backend: &PostgresBackend, name: &LockName) -> lock_core::Result<Option<Duration>> {
        backend.remaining_lease(name)
    }

    fn break_lock(backend: &PostgresBackend, name: &LockName) -> lock_core::Result<()> {
        backend.break_lock(name)
    }

    fn durability(backend: &PostgresBackend) -> Result<String, String> {
        backend.server_settings(&["fsync", "synchronous_commit"])
    }

    fn delete_prefixed(backend: &PostgresBackend, prefix: &str) -> lock_core::Result<u64> {
        backend.delete_prefixed(prefix)
    }

    fn round_trip(backend: &PostgresBackend) -> TimeOne {
        backend.select_one_probe()
    }
}
