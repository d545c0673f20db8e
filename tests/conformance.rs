//! The docs' conformance suite (`docs/scenarios.md`) against every backend kind enabled by feature.
//!
//! One registration per backend kind: `conformance_tests!(module, target)` expands to one test per
//! scenario S01–S17, so `cargo test memory::` runs one backend and `cargo test s06` one scenario
//! on every backend. Each backend's suite targets come from its crate's `testkit` feature, which
//! this crate's `testkit` feature turns on for every enabled backend.

#[cfg(all(
    any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper", feature = "etcd"),
    not(feature = "testkit")
))]
compile_error!("the backends' conformance tests need this crate's `testkit` feature: use --all-features");

lock_testkit::conformance_tests!(memory, lock_testkit::suite::MemoryTarget::new());

#[cfg(feature = "redis")]
mod redis {
    use distlock::redis::testkit::{DeploymentTarget, RedisTarget, RedlockTarget};

    // Both single-node layouts, on the shared harness server (or `DISTLOCK_REDIS_URL`).
    lock_testkit::conformance_tests!(set_nx, RedisTarget::set_nx());
    lock_testkit::conformance_tests!(hash, RedisTarget::reentrant_hash());
    // Both layouts with non-fair waiters (`fair(false)`): a release wakes every waiter.
    lock_testkit::conformance_tests!(set_nx_non_fair, RedisTarget::set_nx().non_fair());
    lock_testkit::conformance_tests!(hash_non_fair, RedisTarget::reentrant_hash().non_fair());
    // Redlock over five independent shared harness nodes (or `DISTLOCK_REDIS_NODES`).
    lock_testkit::conformance_tests!(redlock, RedlockTarget::shared());
    // A Redis Cluster (3 primaries + 3 replicas) and a Sentinel-managed primary with 2 replicas
    // and 3 sentinels, shared harness deployments (or `DISTLOCK_REDIS_CLUSTER`,
    // `DISTLOCK_REDIS_SENTINEL`).
    lock_testkit::conformance_tests!(cluster, DeploymentTarget::cluster());
    lock_testkit::conformance_tests!(sentinel, DeploymentTarget::sentinel());
}

#[cfg(feature = "postgres")]
mod postgres {
    use distlock::postgres::testkit::PostgresTarget;
    use distlock::postgres::PostgresLockKind;

    // The three kinds on the shared harness server (or `DISTLOCK_POSTGRES_URL`).
    lock_testkit::conformance_tests!(table, PostgresTarget::new(PostgresLockKind::Table));
    // The lock table with non-fair waiters (`fair(false)`): a woken waiter races new callers.
    lock_testkit::conformance_tests!(table_non_fair, PostgresTarget::new(PostgresLockKind::Table).non_fair());
    lock_testkit::conformance_tests!(row, PostgresTarget::new(PostgresLockKind::Row));
    lock_testkit::conformance_tests!(advisory, PostgresTarget::new(PostgresLockKind::Advisory));
}

#[cfg(feature = "mysql")]
mod mysql {
    use distlock::mysql::testkit::MySqlTarget;
    use distlock::mysql::MySqlLockKind;

    // The three kinds on the shared harness MariaDB server (or `DISTLOCK_MYSQL_URL`).
    lock_testkit::conformance_tests!(table, MySqlTarget::new(MySqlLockKind::Table));
    // The lock table with non-fair waiters (`fair(false)`): a rung waiter races new callers.
    lock_testkit::conformance_tests!(table_non_fair, MySqlTarget::new(MySqlLockKind::Table).non_fair());
    lock_testkit::conformance_tests!(row, MySqlTarget::new(MySqlLockKind::Row));
    lock_testkit::conformance_tests!(advisory, MySqlTarget::new(MySqlLockKind::Advisory));
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use distlock::zookeeper::testkit::ZooKeeperTarget;

    // The shared standalone harness server (or the ensemble `DISTLOCK_ZOOKEEPER` names).
    lock_testkit::conformance_tests!(curator_mutex, ZooKeeperTarget::new());
}

#[cfg(feature = "etcd")]
mod etcd {
    use distlock::etcd::testkit::EtcdTarget;

    // The shared single-node harness server (or the server or cluster `DISTLOCK_ETCD_URL` names).
    lock_testkit::conformance_tests!(mutex, EtcdTarget::new());
}
