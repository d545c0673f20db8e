//! Fencing tokens survive a crash of the server right after the grant (issue 28), on the
//! session kinds and every primitive that hands tokens out there: mutex, write, read, and a
//! writer's read (downgrade). Each case takes one token from a fresh sequence, the server is
//! killed at once (`kill -9` of mariadbd, SIGQUIT of the postmaster) and started again, and the
//! next token must be greater. Before the fix the sequence's update was never flushed: the first
//! token after the restart was 1 again. (Permits and the lock tables commit their counters.)

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Access, Deadline, DistributedLock, LockName, OwnerToken, Request};
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_testkit::harness::{MariaDbServer, PostgresServer, ServerProcess};
use lock_testkit::suite::unique_name;

const LEASE: Duration = Duration::from_secs(30);
/// How long the server may take to answer again after the restart (a loaded machine).
const BACK_WITHIN: Duration = Duration::from_secs(20);

/// What takes the token.
#[derive(Debug, Clone, Copy)]
enum Primitive {
    Mutex,
    Write,
    Read,
    /// A read by the owner of a held write lock.
    Downgrade,
}

const PRIMITIVES: [Primitive; 4] =
    [Primitive::Mutex, Primitive::Write, Primitive::Read, Primitive::Downgrade];

/// Takes a token with `primitive` on `name` and returns it, leaving the leases held (the crash
/// ends them).
fn token<B: DistributedLock>(locks: &B, primitive: Primitive, name: &LockName) -> lock_core::Result<u64> {
    let owner = OwnerToken::random();
    let request = Request::new(
        name,
        &owner,
        LEASE,
        Deadline::Now,
        (Duration::from_millis(5), Duration::from_millis(50)),
    );
    let fencing = locks.fencing().expect("SQL locks are fenced");
    let rw = || locks.read_write().expect("SQL kinds have read-write locks");
    let lease = match primitive {
        Primitive::Mutex => locks.try_acquire(name, &owner, LEASE)?,
        Primitive::Write => rw().acquire_rw(&request, Access::Write)?.map(|acquired| acquired.lease),
        Primitive::Read => rw().acquire_rw(&request, Access::Read)?.map(|acquired| acquired.lease),
        Primitive::Downgrade => {
            let write = rw().acquire_rw(&request, Access::Write)?.expect("free");
            std::mem::forget(write);
            rw().acquire_rw(&request, Access::Read)?.map(|acquired| acquired.lease)
        }
    };
    let lease = lease.expect("free");
    let token = fencing.fencing_token(&lease).get();
    // Held until the crash ends it.
    std::mem::forget(lease);
    Ok(token)
}

/// For each primitive the kind has (MariaDB's advisory kind has no read-write locks): a fresh table (so a fresh sequence), one token, a crash and restart, one
/// token more.
/// Returns the cases whose token did not increase.
fn check<B: DistributedLock>(label: &str, process: &ServerProcess, build: impl Fn(&str) -> B) -> Vec<String> {
    let mut repeated = Vec::new();
    let primitives =
        if build("distlock_locks").read_write().is_some() { &PRIMITIVES[..] } else { &PRIMITIVES[..1] };
    for &primitive in primitives {
        let table =
            format!("fd_{}", unique_name("t").as_str().replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        let table = &table[..table.len().min(40)];
        let before = token(&build(table), primitive, &unique_name("fd")).expect("a token");
        process.restart().expect("the server back");
        let started = Instant::now();
        let after = loop {
            // Errors while the server comes back are expected: try again.
            match token(&build(table), primitive, &unique_name("fd")) {
                Ok(token) => break token,
                Err(error) => {
                    assert!(started.elapsed() < BACK_WITHIN, "{label} {primitive:?}: {error}");
                    thread::sleep(Duration::from_millis(50));
                }
            }
        };
        if after <= before {
            repeated
                .push(format!("{label} {primitive:?}: token {after} after the restart, {before} before it"));
        }
    }
    repeated
}

/// Runs [`check`] for each of `kinds` (built by `build(kind, table)`, schema ensured) and fails
/// with every case whose token did not increase.
fn assert_durable<K: Copy, B: DistributedLock>(
    process: &ServerProcess,
    kinds: [K; 2],
    label: impl Fn(K) -> &'static str,
    build: impl Fn(K, &str) -> lock_core::Result<B>,
) {
    let repeated: Vec<String> = kinds
        .into_iter()
        .flat_map(|kind| {
            check(label(kind), process, |table| build(kind, table).expect("a client and its schema"))
        })
        .collect();
    assert!(repeated.is_empty(), "{repeated:#?}");
}

#[test]
fn postgres_tokens_survive_a_crash_right_after_the_grant() {
    let server = PostgresServer::start_durable().expect("a PostgreSQL server");
    let kinds = [PostgresLockKind::Row, PostgresLockKind::Advisory];
    assert_durable(server.process(), kinds, PostgresLockKind::label, |kind, table| {
        let locks =
            PostgresBackend::builder(server.url()).kind(kind).table(table).restart_delay(false).build()?;
        locks.ensure_schema().map(|()| locks)
    });
}

#[test]
fn mariadb_tokens_survive_a_crash_right_after_the_grant() {
    let server = MariaDbServer::start().expect("a MariaDB server");
    let kinds = [MySqlLockKind::Row, MySqlLockKind::Advisory];
    assert_durable(server.process(), kinds, MySqlLockKind::label, |kind, table| {
        let locks =
            MySqlBackend::builder(server.url()).kind(kind).table(table).restart_delay(false).build()?;
        locks.ensure_schema().map(|()| locks)
    });
}
