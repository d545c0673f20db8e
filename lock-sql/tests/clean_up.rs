//! `clean_up` — what `distlock compare` and `distlock bench --url` run on a user's servers —
//! deletes every row that locks under a prefix left behind: lock rows (kept free after a
//! release, so that the fence never restarts), semaphore rows and read-write rows.

use std::time::Duration;

use lock_core::{
    Access, Deadline, DistributedLock, Fencing, LockName, OwnerToken, Permits, ReadWrite, Request,
};
use lock_sql::mysql::MySqlLockKind;
use lock_sql::postgres::PostgresLockKind;
use lock_sql::testkit::{MySqlTarget, PostgresTarget};
use lock_testkit::suite::{unique_name, SuiteTarget};

const LEASE: Duration = Duration::from_secs(30);

/// Takes and releases a lock, a permit and (`read_write`) a read lock under a fresh prefix,
/// then cleans up under it: the clean-up deletes the `rows` they left, and the semaphore's
/// fence starts again.
fn nothing_is_left<T: SuiteTarget>(target: &T, read_write: bool, rows: u64)
where
    T::Backend: Permits + ReadWrite + Fencing,
{
    let backend = target.backend().expect("a client");
    let prefix = format!("{}:", unique_name("clean-up").as_str());
    let name = |what: &str| LockName::new(format!("{prefix}{what}")).expect("a name");
    let owner = OwnerToken::random();
    let backoff = (Duration::from_millis(10), Duration::from_millis(50));
    let lease = backend.try_acquire(&name("mutex"), &owner, LEASE).expect("a server").expect("free");
    assert!(backend.release(lease).expect("a server"));
    let semaphore = name("semaphore");
    let request = Request::new(&semaphore, &owner, LEASE, Deadline::Now, backoff);
    let permit = backend.acquire_permit(&request, 2).expect("a server").expect("a free permit");
    assert!(backend.release(permit.lease).expect("a server"));
    if read_write {
        let rw = name("read-write");
        let request = Request::new(&rw, &owner, LEASE, Deadline::Now, backoff);
        let read = backend.acquire_rw(&request, Access::Read).expect("a server").expect("free");
        assert!(backend.release(read.lease).expect("a server"));
    }
    assert_eq!(target.clean_up(&prefix).expect("a clean-up"), rows, "rows deleted");
    assert_eq!(target.clean_up(&prefix).expect("a clean-up"), 0, "rows deleted by a second clean-up");
    let request = Request::new(&semaphore, &owner, LEASE, Deadline::Now, backoff);
    let permit = backend.acquire_permit(&request, 2).expect("a server").expect("a free permit");
    let fence = backend.fencing_token(&permit.lease).get();
    assert_eq!(fence, 1, "the semaphore's row was deleted: its fence starts again");
    assert!(backend.release(permit.lease).expect("a server"));
    target.clean_up(&prefix).expect("a clean-up");
}

#[test]
fn postgres_lock_table_leaves_nothing() {
    // The lock row and the semaphore's.
    nothing_is_left(&PostgresTarget::new(PostgresLockKind::Table), false, 2);
}

#[test]
fn postgres_row_locks_leave_nothing() {
    // The mutex's row, the semaphore's and the read-write lock's three.
    nothing_is_left(&PostgresTarget::new(PostgresLockKind::Row), true, 5);
}

#[test]
fn mysql_lock_table_leaves_nothing() {
    // The lock row and the semaphore's header (a released permit's row goes with it).
    nothing_is_left(&MySqlTarget::new(MySqlLockKind::Table), false, 2);
}

#[test]
fn mysql_row_locks_leave_nothing() {
    // The mutex's row, the semaphore's header and the read-write lock's row.
    nothing_is_left(&MySqlTarget::new(MySqlLockKind::Row), true, 3);
}
