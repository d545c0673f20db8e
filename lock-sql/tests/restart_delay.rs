//! The session kinds' restart delay (issue 28) where the shared suite's S17 does not reach: a
//! PostgreSQL backend that crashes (`kill -9` of one backend) makes the postmaster reset every
//! backend — every session and its locks are gone — while `pg_postmaster_start_time()` stays
//! the same. No session lock may be granted until the reset is a lease old — also through
//! PgBouncer's transaction pooling, whose client connections outlive the server's sessions.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, OwnerToken};
use lock_sql::postgres::{Pooler, PostgresBackend, PostgresLockKind};
use lock_testkit::harness::{PgBouncer, PoolMode, PostgresServer};
use lock_testkit::suite::unique_name;

/// The lease every attempt asks for.
const LEASE: Duration = Duration::from_secs(2);
/// How long after the lease a grant may come (reconnecting, crash recovery, a loaded machine).
const SLACK: Duration = Duration::from_secs(10);

/// One attempt every this long.
const TRY_EVERY: Duration = Duration::from_millis(20);

/// Tries `name` until granted or `within` has passed; returns when it was granted.
fn granted_within(locks: &PostgresBackend, name: &lock_core::LockName, within: Duration) -> Instant {
    let started = Instant::now();
    loop {
        // Errors while the server resets its backends are expected: try again.
        if let Ok(Some(lease)) = locks.try_acquire(name, &OwnerToken::random(), LEASE) {
            let at = Instant::now();
            assert!(locks.release(lease).unwrap(), "released");
            return at;
        }
        assert!(started.elapsed() < within, "not granted within {within:?}");
        thread::sleep(TRY_EVERY);
    }
}

/// A client backend's pid (its process title names the client's address).
fn a_client_backend(server: &PostgresServer) -> u32 {
    server
        .process()
        .pids()
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("127.0.0.1("))
        })
        .expect("a client backend")
}

/// Crashes one of `server`'s client backends (the postmaster then resets them all) while
/// `locks` holds `name`; asserts that no grant comes before a lease has passed since.
fn no_grant_within_a_lease_of_a_backend_reset(server: &PostgresServer, locks: &PostgresBackend, label: &str) {
    let name = unique_name("backend-reset");
    // Two holds at once, released: two pooled connections that learned the server's age. Then
    // a hold, so that the client has a backend to crash, and an idle pooled connection beside it.
    granted_within(locks, &name, LEASE + SLACK);
    let warm: Vec<_> = [unique_name("backend-reset-warm"), unique_name("backend-reset-warm")]
        .iter()
        .map(|other| locks.try_acquire(other, &OwnerToken::random(), LEASE).unwrap().expect("free"))
        .collect();
    for lease in warm {
        assert!(locks.release(lease).unwrap(), "released");
    }
    let mut held = locks.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    let postmaster = server.process().pid();

    let backend = a_client_backend(server);
    let killed = std::process::Command::new("kill").args(["-9", &backend.to_string()]).status();
    assert!(killed.is_ok_and(|status| status.success()), "kill -9 {backend}");
    let reset = Instant::now();
    // Until the server has recovered: the client's next attempt then meets a server that
    // answers, on whatever pooled connection it has (behind a pooler, one that outlived the
    // reset and learned the server's age before it).
    let direct = PostgresBackend::builder(server.url()).pooler(Pooler::None);
    while direct.clone().build().is_err() {
        assert!(reset.elapsed() < SLACK, "the server did not recover within {SLACK:?}");
        thread::sleep(TRY_EVERY);
    }

    let granted = granted_within(locks, &name, LEASE + SLACK) - reset;
    assert_eq!(server.process().pid(), postmaster, "the postmaster restarted: not a backend reset");
    assert!(
        granted + Duration::from_millis(50) >= LEASE,
        "{label}: granted {granted:?} after the backend reset, before the old holder's lease of {LEASE:?} ended"
    );
    println!("{label}: first grant {granted:?} after the backend reset (lease {LEASE:?})");
    // The old hold's session is gone with the reset.
    assert!(!locks.extend(&mut held, LEASE).unwrap_or(false));
}

/// Behind PgBouncer a pooled connection is the pooler's client connection, which outlives the
/// server sessions behind it: what it learned of the server's age before the reset must not let
/// it grant right after.
#[test]
fn a_backend_reset_behind_pgbouncer_delays_session_grants_by_a_lease() {
    let server = PostgresServer::start_durable().expect("a PostgreSQL server");
    let pgbouncer = PgBouncer::start_in_front_of(server.port()).expect("a PgBouncer");
    for (mode, kind) in [
        (PoolMode::Transaction, PostgresLockKind::Row),
        (PoolMode::Session, PostgresLockKind::Row),
        (PoolMode::Session, PostgresLockKind::Advisory),
    ] {
        let url = format!("{}?pooler={}", pgbouncer.url(mode), mode.alias());
        let locks = PostgresBackend::builder(url).kind(kind).build().expect("a client");
        locks.ensure_schema().expect("the schema");
        let label = format!("{kind:?} through {} pooling", mode.alias());
        no_grant_within_a_lease_of_a_backend_reset(&server, &locks, &label);
    }
}

#[test]
fn a_backend_reset_delays_session_grants_by_a_lease() {
    let server = PostgresServer::start_durable().expect("a PostgreSQL server");
    for kind in [PostgresLockKind::Row, PostgresLockKind::Advisory] {
        let locks = PostgresBackend::builder(server.url()).kind(kind).build().expect("a client");
        locks.ensure_schema().expect("the schema");
        no_grant_within_a_lease_of_a_backend_reset(&server, &locks, &format!("{kind:?}"));
    }
}
