//! Guarded writes on the lock's own server (`execute_if_held`) on every kind of both
//! databases: written while held; refused as not held, with nothing written, once the lock was
//! taken away behind the holder (the server's check, not the client's belief); a row kind's
//! write is rolled back with its lost transaction and committed with its release; a failed
//! statement keeps the hold.

use std::time::Duration;

use lock_core::{DistributedLock, Error, OwnerToken};
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_sql::testkit::{SqlKind, SqlTarget};
use lock_testkit::suite::{unique_name, SuiteTarget};

const LEASE: Duration = Duration::from_secs(30);

fn written_then_refused_once_broken<K: SqlKind>(kind: K) {
    let target = SqlTarget::new(kind).without_restart_delay();
    let backend = target.backend().unwrap();
    K::ensure_guarded_table(&backend).unwrap();
    let name = unique_name("exec-if-held");
    let key = name.as_str();
    let mut lease = backend.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    K::write_if_held(&backend, &mut lease, key, b"while held").unwrap();

    target.break_lock(&name).unwrap().unwrap(); // marks the row free, or ends the session
    let refused = K::write_if_held(&backend, &mut lease, key, b"stale");
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{}: {refused:?}", kind.label());
    drop(backend.release(lease));

    let left = K::read_guarded(&backend, key).unwrap();
    // A row kind's write lived in the holding transaction, rolled back when its session ended.
    let expected = if kind.label().ends_with("-row") { None } else { Some(b"while held".to_vec()) };
    assert_eq!(left, expected, "{}", kind.label());
}

#[test]
fn postgres_kinds_write_while_held_and_not_once_the_lock_is_gone() {
    for kind in [PostgresLockKind::Table, PostgresLockKind::Row, PostgresLockKind::Advisory] {
        written_then_refused_once_broken(kind);
    }
}

#[test]
fn mysql_kinds_write_while_held_and_not_once_the_lock_is_gone() {
    for kind in [MySqlLockKind::Table, MySqlLockKind::Row, MySqlLockKind::Advisory] {
        written_then_refused_once_broken(kind);
    }
}

/// A statement that fails leaves the hold as it was (the row kind's savepoint), and the row
/// kind's write shows once the release commits the holding transaction.
#[test]
fn a_failed_statement_keeps_the_hold_and_a_row_write_commits_with_the_release() {
    let pg: PostgresBackend =
        SqlTarget::new(PostgresLockKind::Row).without_restart_delay().backend().unwrap();
    let my: MySqlBackend = SqlTarget::new(MySqlLockKind::Row).without_restart_delay().backend().unwrap();
    PostgresLockKind::ensure_guarded_table(&pg).unwrap();
    MySqlLockKind::ensure_guarded_table(&my).unwrap();

    let name = unique_name("exec-if-held-row");
    let mut lease = pg.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    assert!(pg.execute_if_held(&mut lease, "SELECT no_such_column", &[]).is_err());
    PostgresLockKind::write_if_held(&pg, &mut lease, name.as_str(), b"committed").unwrap();
    assert_eq!(
        PostgresLockKind::read_guarded(&pg, name.as_str()).unwrap(),
        None,
        "visible before the release"
    );
    assert!(pg.extend(&mut lease, LEASE).unwrap(), "the hold survived the failed statement");
    assert!(pg.release(lease).unwrap());
    assert_eq!(
        PostgresLockKind::read_guarded(&pg, name.as_str()).unwrap().as_deref(),
        Some(b"committed".as_slice())
    );

    let name = unique_name("exec-if-held-row");
    let mut lease = my.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    assert!(my.execute_if_held(&mut lease, "SELECT no_such_column").is_err());
    MySqlLockKind::write_if_held(&my, &mut lease, name.as_str(), b"committed").unwrap();
    assert!(my.extend(&mut lease, LEASE).unwrap(), "the hold survived the failed statement");
    assert!(my.release(lease).unwrap());
    assert_eq!(
        MySqlLockKind::read_guarded(&my, name.as_str()).unwrap().as_deref(),
        Some(b"committed".as_slice())
    );
}

/// A row kind's statement that ends the holding transaction (here `COMMIT`; a deadlock that
/// rolls all of it back does the same) ends the hold: refused as not held, the session closed,
/// so the next renewal reports the loss and a rival gets the lock.
#[test]
fn a_statement_that_ends_the_holding_transaction_ends_the_hold() {
    let pg: PostgresBackend =
        SqlTarget::new(PostgresLockKind::Row).without_restart_delay().backend().unwrap();
    let name = unique_name("exec-if-held-commit");
    let mut lease = pg.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    let refused = pg.execute_if_held(&mut lease, "COMMIT", &[]);
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "postgres: {refused:?}");
    assert!(!pg.extend(&mut lease, LEASE).unwrap_or(false), "postgres: the hold was still renewed");
    let rival = pg.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap();
    assert!(rival.is_some(), "postgres: the lock stayed taken");

    let my: MySqlBackend = SqlTarget::new(MySqlLockKind::Row).without_restart_delay().backend().unwrap();
    let name = unique_name("exec-if-held-commit");
    let mut lease = my.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
    let refused = my.execute_if_held(&mut lease, "COMMIT");
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "mysql: {refused:?}");
    assert!(!my.extend(&mut lease, LEASE).unwrap_or(false), "mysql: the hold was still renewed");
    let rival = my.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap();
    assert!(rival.is_some(), "mysql: the lock stayed taken");
}
