//! One client cut off from its server holds up no other client of the same process: while the
//! cut client's calls wait on connections that never answer, a healthy client of the same server
//! opens its connections and takes locks as usual. (PostgreSQL's pools once shared two
//! connection-opening threads per process, so a cut client's connection attempts held up every
//! other client's for their whole connect timeout.)

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, OwnerToken};
use lock_sql::testkit::{SqlKind, SqlTarget};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_testkit::FaultProxies;

/// The cut client's timeouts: each of its connection attempts hangs this long.
const CUT_TIMEOUT: Duration = Duration::from_secs(5);
/// The healthy client's timeouts.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The cut client's concurrent calls (each may start a connection attempt).
const CUT_CALLS: usize = 6;

fn a_cut_client_holds_up_no_other<K: SqlKind>(kind: K) {
    let target = SqlTarget::new(kind);
    let mut proxies = FaultProxies::default();
    let cut = target
        .backend_routed(&mut |server| proxies.route(server), CUT_TIMEOUT, CUT_CALLS as u32)
        .expect("a server kind")
        .expect("a client through the proxy");
    proxies.check().expect("every connection through a proxy");
    proxies.cut();
    let calls: Vec<_> = (0..CUT_CALLS)
        .map(|_| {
            let cut = cut.clone();
            thread::spawn(move || {
                drop(cut.try_acquire(&unique_name("iso-cut"), &OwnerToken::random(), TIMEOUT))
            })
        })
        .collect();
    // Let the cut calls start their connection attempts.
    thread::sleep(Duration::from_millis(300));

    let healthy = target.backend_with(TIMEOUT, 4).expect("a client of the healthy server");
    // Several locks at once, so the healthy client needs connections beyond its first.
    let started = Instant::now();
    let names: Vec<_> = (0..3).map(|_| unique_name("iso-ok")).collect();
    thread::scope(|s| {
        for name in &names {
            let healthy = &healthy;
            s.spawn(move || {
                let lease = healthy
                    .try_acquire(name, &OwnerToken::random(), TIMEOUT)
                    .expect("the healthy client works while another is cut off")
                    .expect("a free name");
                thread::sleep(Duration::from_millis(50));
                assert!(healthy.release(lease).expect("a release"));
            });
        }
    });
    let took = started.elapsed();
    println!(
        "[{}] three locks of a healthy client took {took:?} while another client was cut off",
        kind.label()
    );
    assert!(
        took < Duration::from_secs(1),
        "{}: the healthy client waited {took:?} behind the cut client's connection attempts",
        kind.label()
    );
    drop(proxies);
    for call in calls {
        call.join().expect("a cut call");
    }
}

#[test]
fn postgres_clients_are_isolated() {
    a_cut_client_holds_up_no_other(lock_sql::postgres::PostgresLockKind::Table);
    a_cut_client_holds_up_no_other(lock_sql::postgres::PostgresLockKind::Advisory);
}

#[test]
fn mysql_clients_are_isolated() {
    a_cut_client_holds_up_no_other(lock_sql::mysql::MySqlLockKind::Table);
    a_cut_client_holds_up_no_other(lock_sql::mysql::MySqlLockKind::Advisory);
}
