//! R03 (seeds 001, 002, 003): the single-node Redis backend on a primary with a replica, and a
//! failover to the replica before the lock replicated.
//!
//! - Without `WAIT` the lock is lost: the replica never got it, is promoted, and hands the same
//!   lock to a second client while the first still holds it.
//! - With `wait_for_replicas`, acquiring returns only once the replica has the lock (so it
//!   survives the same failover), and with the replica unable to acknowledge, acquiring fails
//!   with `Error::NotReplicated` and leaves no lock behind.

use std::time::{Duration, Instant};

use lock_core::{Error, Lock, LockClient, LockName, LockOptions};
use lock_redis::redis::{self, Commands as _};
use lock_redis::{RedisBackend, RedisKeys};
use lock_testkit::harness::RedisServer;
use lock_testkit::suite::unique_name;

const SECOND: Duration = Duration::from_secs(1);

/// The replication stream the primary must hold in its own memory before the lock is written:
/// more than fits in the paused replica's socket buffers.
const MIN_BACKLOG: u64 = 1 << 20;

fn connection(url: &str) -> redis::Connection {
    let connection = redis::Client::open(url).unwrap().get_connection_with_timeout(2 * SECOND).unwrap();
    connection.set_read_timeout(Some(5 * SECOND)).unwrap();
    connection
}

fn client(url: &str, wait: Option<Duration>) -> LockClient<RedisBackend> {
    let mut builder = RedisBackend::builder(url).connect_timeout(2 * SECOND);
    if let Some(timeout) = wait {
        builder = builder.wait_for_replicas(1, timeout);
    }
    let options = LockOptions::builder().lease(30 * SECOND).renewal(false).build().unwrap();
    LockClient::with_options(builder.build().unwrap(), options)
}

fn lock_key(name: &LockName) -> String {
    RedisKeys::new("distlock", name).lock().to_owned()
}

/// Makes sure the next write stays in the primary's memory until the paused replica reads on.
///
/// A paused (SIGSTOP) replica does not stop the kernel from receiving the primary's stream into
/// its socket buffer: it would apply the lock on resuming, even with the primary dead. A backlog
/// larger than those buffers keeps the lock's write in the primary's own output buffer, which
/// `kill -9` loses — the replication lag of seed 001's story.
fn fill_replication_backlog(primary: &mut redis::Connection) {
    let filler = vec![b'x'; 1 << 20];
    for index in 0..256 {
        let _: () = primary.set(format!("r03-filler:{index}"), &filler).unwrap();
        let replicas: String =
            redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("replica").query(primary).unwrap();
        let backlog: u64 = replicas
            .split_whitespace()
            .find_map(|field| field.strip_prefix("omem="))
            .and_then(|bytes| bytes.parse().ok())
            .unwrap_or(0);
        if backlog >= MIN_BACKLOG {
            return;
        }
    }
    panic!("the primary never held a replication backlog of {MIN_BACKLOG} bytes");
}

/// Kills the primary and promotes the replica (`REPLICAOF NO ONE`), as a failover would.
fn fail_over(primary: &RedisServer, replica: &RedisServer) {
    primary.process().kill9().unwrap();
    replica.process().resume().unwrap();
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut connection(&replica.url())).unwrap();
}

/// R03 without WAIT: the lock was acquired on the primary but never reached the replica; after
/// the failover a second client acquires the same lock. Two holders.
#[test]
fn r03_without_wait_a_failover_before_replication_loses_the_lock() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let name = unique_name("r03");

    replica.process().pause().unwrap();
    fill_replication_backlog(&mut connection(&primary.url()));
    let a = client(&primary.url(), None);
    let guard_a = Lock::new(&a, name.clone()).try_lock().unwrap().expect("A acquires on the primary");
    let on_primary: bool = connection(&primary.url()).exists(lock_key(&name)).unwrap();
    assert!(on_primary, "the lock is on the primary");

    fail_over(&primary, &replica);
    let on_replica: bool = connection(&replica.url()).exists(lock_key(&name)).unwrap();
    assert!(!on_replica, "the promoted replica never got the lock");

    let b = client(&replica.url(), None);
    let guard_b = Lock::new(&b, name).try_lock().unwrap();
    let guard_b = guard_b.expect("B acquires the same lock on the new primary: the lock was lost");
    assert!(guard_a.is_held() && guard_b.is_held(), "two holders at once");
    println!(
        "R03 without WAIT: two holders after the failover (A token {:?}, B token {:?})",
        guard_a.fencing_token(),
        guard_b.fencing_token()
    );
    drop(guard_b);
    std::mem::forget(guard_a); // Its primary is gone: nothing to release.
}

/// R03 with WAIT: every acquisition returns only after the replica has the lock; the lock then
/// survives the failover that lost it above.
#[test]
fn r03_with_wait_acquire_returns_once_the_replica_has_the_lock_and_survives_failover() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let locks = client(&primary.url(), Some(SECOND));
    let mut on_replica = connection(&replica.url());
    for _ in 0..20 {
        let name = unique_name("r03-wait");
        let guard = Lock::new(&locks, name.clone()).try_lock().unwrap().expect("acquired");
        let replicated: Option<String> = on_replica.get(lock_key(&name)).unwrap();
        assert!(replicated.is_some(), "the replica has the lock the moment acquire returns");
        guard.unlock().unwrap();
    }

    let name = unique_name("r03-wait-failover");
    let guard_a = Lock::new(&locks, name.clone()).try_lock().unwrap().expect("A acquires");
    fail_over(&primary, &replica);
    let b = client(&replica.url(), None);
    assert!(Lock::new(&b, name).try_lock().unwrap().is_none(), "the lock survived the failover");
    std::mem::forget(guard_a);
}

/// R03 with WAIT and a replica that cannot acknowledge (paused): acquiring fails with
/// `NotReplicated` after the WAIT timeout, and the lock is not left on the primary.
#[test]
fn r03_with_wait_and_a_paused_replica_acquire_fails_and_leaves_no_lock() {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    let wait = Duration::from_millis(300);
    let locks = client(&primary.url(), Some(wait));
    replica.process().pause().unwrap();

    let name = unique_name("r03-wait-paused");
    let started = Instant::now();
    let outcome = Lock::new(&locks, name.clone()).try_lock();
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::NotReplicated { acknowledged: 0, required: 1, .. })),
        "got {:?}",
        outcome.map(|guard| guard.is_some())
    );
    assert!(took >= wait && took < wait + 2 * SECOND, "failing took {took:?}");
    let left: bool = connection(&primary.url()).exists(lock_key(&name)).unwrap();
    assert!(!left, "an unreplicated acquisition is given back");
    replica.process().resume().unwrap();
}
