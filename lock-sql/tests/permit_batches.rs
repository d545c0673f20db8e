//! The lock-table kinds renew a client's permits in one round trip per renewal batch, as they do
//! its mutex leases (issue 28 §4): permits were once extended one at a time inside the batch, so
//! k permits against a stalled server held the batch — and a release waiting behind it — for k
//! I/O timeouts.

use std::time::{Duration, Instant};

use lock_core::{Deadline, DistributedLock, Extension, LockName, OwnerToken, Permits, Request};
use lock_sql::mysql::MySqlLockKind;
use lock_sql::postgres::PostgresLockKind;
use lock_sql::testkit::{SqlKind, SqlTarget};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_testkit::FaultProxies;

/// The client's connect and I/O timeouts.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Permits in the batch.
const PERMITS: usize = 4;
const LEASE: Duration = Duration::from_secs(30);

fn permits_are_renewed_in_one_round_trip<K: SqlKind>(kind: K)
where
    K::Backend: Permits,
{
    let target = SqlTarget::new(kind);
    let mut proxies = FaultProxies::default();
    let client = target
        .backend_routed(&mut |server| proxies.route(server), TIMEOUT, 4)
        .expect("a server kind")
        .expect("a client through the proxy");
    proxies.check().expect("every connection through a proxy");
    let backoff = (Duration::from_millis(10), Duration::from_millis(50));
    // Two semaphores of three permits, two held of each, and a mutex lease in the same batch.
    let names: Vec<LockName> = (0..2).map(|_| unique_name("permit-batch")).collect();
    let mut leases: Vec<_> = (0..PERMITS)
        .map(|index| {
            let owner = OwnerToken::random();
            let request = Request::new(&names[index % 2], &owner, LEASE, Deadline::Now, backoff);
            client.acquire_permit(&request, 3).expect("a server").expect("a free permit").lease
        })
        .collect();
    let mut mutex = client
        .try_acquire(&unique_name("permit-batch"), &OwnerToken::random(), LEASE)
        .unwrap()
        .expect("free");

    // And a permit whose lease runs out before the batch.
    let owner = OwnerToken::random();
    let short = Duration::from_millis(300);
    let request = Request::new(&names[0], &owner, short, Deadline::Now, backoff);
    let mut lapsed = client.acquire_permit(&request, 3).expect("a server").expect("a free permit").lease;
    std::thread::sleep(short * 3);

    // Renewed together while the server answers: every one held but the lapsed one.
    let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
    batch.push(Extension::new(&mut mutex, LEASE));
    batch.push(Extension::new(&mut lapsed, LEASE));
    let outcomes = client.extend_many(&mut batch);
    let (last, held) = outcomes.split_last().expect("outcomes");
    assert!(held.iter().all(|outcome| matches!(outcome, Ok(true))), "{outcomes:?}");
    assert!(matches!(last, Ok(false)), "a lapsed permit was renewed: {outcomes:?}");

    // One fewer: the batch is not of the same size each time.
    let released = leases.pop().expect("a permit");
    assert!(client.release(released).expect("a release"));

    proxies.cut();
    let mut batch: Vec<_> = leases.iter_mut().map(|lease| Extension::new(lease, LEASE)).collect();
    batch.push(Extension::new(&mut mutex, LEASE));
    let started = Instant::now();
    let outcomes = client.extend_many(&mut batch);
    let took = started.elapsed();
    println!(
        "[{}] a batch of {} permits and a mutex lease against a stalled server took {took:?} (I/O timeout {TIMEOUT:?})",
        kind.label(),
        PERMITS - 1
    );
    assert!(outcomes.iter().all(Result::is_err), "{outcomes:?}");
    // One round trip: one connect (a checkout may open a connection) and one I/O timeout.
    assert!(took < 2 * TIMEOUT + Duration::from_millis(900), "{}: the batch took {took:?}", kind.label());
    drop(proxies);
}

#[test]
fn postgres_permits_are_renewed_in_one_round_trip() {
    permits_are_renewed_in_one_round_trip(PostgresLockKind::Table);
}

#[test]
fn mysql_permits_are_renewed_in_one_round_trip() {
    permits_are_renewed_in_one_round_trip(MySqlLockKind::Table);
}
