//! The backend's own checks of its read-write locks and semaphores on the harness server, beyond
//! the suite's RW and SEM scenarios: the downgrade keeps writers that were already waiting out,
//! and the three primitives of one name never meet.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lock_core::{LockClient, LockOptions};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_zk::testkit::ZooKeeperTarget;
use lock_zk::ZooKeeperBackend;

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

/// A writer that waits while another holds the write lock must not get in when the holder
/// downgrades (takes the read lock, then lets the write lock go): the downgraded reader's node
/// sorts before the waiting writer's. Its token is above the downgraded reader's.
#[test]
fn a_downgraded_reader_keeps_a_writer_that_was_already_waiting_out() {
    let target = ZooKeeperTarget::new();
    let name = unique_name("downgrade");
    let holder = client(target.backend().unwrap());
    let lock = holder.read_write_lock(name.as_str()).unwrap();
    let write = lock.try_write_for(Duration::from_secs(10)).unwrap().expect("the write lock");

    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let other = client(target.backend().unwrap()).read_write_lock(name.as_str()).unwrap();
        thread::spawn(move || {
            let guard =
                other.try_write_for(Duration::from_secs(30)).unwrap().expect("the waiting writer's turn");
            acquired_tx.send(guard.fencing_token()).unwrap();
            guard.unlock().unwrap();
        })
    };
    // The waiter queues behind the writer (its node is there well within this).
    thread::sleep(Duration::from_millis(500));
    let downgraded = lock.try_read().unwrap().expect("the writer's own read lock");
    write.unlock().unwrap();
    assert!(
        acquired.recv_timeout(Duration::from_secs(1)).is_err(),
        "the waiting writer overtook the downgraded reader"
    );
    assert!(downgraded.is_held());
    let read_token = downgraded.fencing_token().expect("a token");
    downgraded.unlock().unwrap();
    let write_token = acquired.recv_timeout(Duration::from_secs(10)).expect("the writer after the downgrade");
    assert!(
        write_token.expect("a token") > read_token,
        "the writer's token is not above the downgraded reader's"
    );
    waiter.join().unwrap();
}

/// The mutex, the read-write lock and the semaphore called `x` are three locks.
#[test]
fn a_name_is_three_separate_primitives() {
    let target = ZooKeeperTarget::new();
    let name = unique_name("three");
    let first = client(target.backend().unwrap());
    let second = client(target.backend().unwrap());
    let _mutex = first.lock_named(name.as_str()).unwrap().try_lock().unwrap().expect("the mutex");
    let _write = second.read_write_lock(name.as_str()).unwrap().try_write().unwrap().expect("the write lock");
    let _permit = second.semaphore(name.as_str(), 1).unwrap().try_acquire().unwrap().expect("the permit");
}

/// A read asked under the owner of a write lock of *another* name is no downgrade: it waits for
/// that name's writer like any reader (the downgrade map is keyed by name and owner).
#[test]
fn a_writer_s_owner_reading_another_name_gets_no_downgrade() {
    use lock_core::{Access, Deadline, OwnerToken, ReadWrite, Request};

    let target = ZooKeeperTarget::new();
    let (mine, theirs) = (unique_name("downgrade-mine"), unique_name("downgrade-theirs"));
    let ttl = Duration::from_secs(30);
    let backoff = (Duration::from_millis(5), Duration::from_millis(50));
    let backend = target.backend().unwrap();
    let rival = target.backend().unwrap();
    let (owner, rival_owner) = (OwnerToken::random(), OwnerToken::random());

    let write = |backend: &ZooKeeperBackend, name, owner| {
        let request = Request::new(name, owner, ttl, Deadline::Now, backoff);
        backend.acquire_rw(&request, Access::Write).unwrap().expect("a free write lock")
    };
    let _my_write = write(&backend, &mine, &owner);
    let _their_write = write(&rival, &theirs, &rival_owner);

    let read = Request::new(&theirs, &owner, ttl, Deadline::Now, backoff);
    let granted = backend.acquire_rw(&read, Access::Read).unwrap();
    assert!(granted.is_none(), "a read of another client's write-locked name was granted");
}
