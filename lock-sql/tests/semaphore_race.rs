//! A semaphore never admits more holders than permits, even when a renewal races an acquirer at
//! a permit's expiry (issue 28 §1). On MySQL/MariaDB the permits are rows of one table: a
//! renewal evaluated just before its permit's expiry and not yet committed once let an acquirer
//! count the permit as expired (a non-locking read), wait for the renewal in its `DELETE` of
//! expired permits, find the permit alive and keep it — and insert its own beside it: two
//! holders of a one-permit semaphore, and the renewal reported success.
//!
//! The test holds the renewal's transaction open across the permit's expiry (the statement the
//! client renews with, run on a raw connection) while another client acquires.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Deadline, OwnerToken, Permits, Request};
use lock_sql::mysql::MySqlLockKind;
use lock_sql::mysql_driver::prelude::Queryable;
use lock_sql::mysql_driver::Conn;
use lock_sql::testkit::MySqlTarget;
use lock_testkit::suite::unique_name;

/// The permit's lease: short, so that it expires while the renewal is held open.
const LEASE: Duration = Duration::from_millis(1_500);

/// Generous bounds for the events the test waits for (a loaded machine).
const PATIENCE: Duration = Duration::from_secs(30);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Waits until `condition` holds, polling; panics with `what` after [`PATIENCE`].
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn a_renewal_at_expiry_never_lets_a_second_holder_in(kind: MySqlLockKind) {
    let target = MySqlTarget::new(kind);
    let holder = target.backend_with(Duration::from_secs(5), 2).expect("a client");
    let rival = target.backend_with(Duration::from_secs(60), 2).expect("a client");
    let name = unique_name("sem-race");
    let name_hex = hex(name.as_str().as_bytes());
    let backoff = (Duration::from_millis(10), Duration::from_millis(50));
    let first_owner = OwnerToken::random();
    let request = Request::new(&name, &first_owner, LEASE, Deadline::Now, backoff);
    let first = holder.acquire_permit(&request, 1).expect("a server").expect("a free semaphore");

    // The renewal, as the holder's client sends it, in a transaction held open: evaluated while
    // the permit is valid, committed after it expired.
    let mut renewal = Conn::new(target.url()).expect("a raw connection");
    let sem = "`distlock_locks_sem`";
    let owner: Vec<u8> = renewal
        .query_first(format!("SELECT owner FROM {sem} WHERE name = X'{name_hex}' AND owner <> X''"))
        .expect("a query")
        .expect("the permit's row");
    renewal
        .query_drop("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .expect("a transaction");
    renewal
        .query_drop(format!(
            "UPDATE {sem} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 60 SECOND \
             WHERE name = X'{name_hex}' AND owner = X'{}' AND expires_at >= UTC_TIMESTAMP(6)",
            hex(&owner)
        ))
        .expect("the renewal");
    assert_eq!(renewal.affected_rows(), 1, "the renewal finds its permit valid");

    // The committed permit expires on the server's clock.
    let mut watcher = Conn::new(target.url()).expect("a raw connection");
    wait_for("the permit's committed expiry", || {
        watcher
            .query_first::<i64, _>(format!(
                "SELECT COUNT(*) FROM {sem} WHERE name = X'{name_hex}' AND owner <> X'' \
                 AND expires_at >= UTC_TIMESTAMP(6)"
            ))
            .expect("a query")
            == Some(0)
    });

    let acquiring = thread::spawn(move || {
        let second_owner = OwnerToken::random();
        let request = Request::new(&name, &second_owner, Duration::from_secs(60), Deadline::Now, backoff);
        rival.acquire_permit(&request, 1).expect("a server").map(|acquired| acquired.lease)
    });
    // The acquirer runs into the renewal's row lock, whichever statement meets it: its
    // statements run (on this user's connections, which the process list shows) until then.
    wait_for("the acquirer to wait for the renewal", || {
        acquiring.is_finished()
            || watcher
                .query_first::<i64, _>(format!(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
                     AND COMMAND = 'Query' AND INFO LIKE '%{name_hex}%'"
                ))
                .expect("a query")
                .is_some_and(|waiting| waiting > 0)
    });
    renewal.query_drop("COMMIT").expect("the renewal commits");
    let second = acquiring.join().expect("the acquirer");

    let holders: i64 = watcher
        .query_first(format!(
            "SELECT COUNT(*) FROM {sem} WHERE name = X'{name_hex}' AND owner <> X'' \
             AND expires_at >= UTC_TIMESTAMP(6)"
        ))
        .expect("a query")
        .expect("a count");
    println!(
        "[mysql {kind:?}] holders of a 1-permit semaphore after a renewal raced an acquirer: {holders} \
         (acquirer {})",
        if second.is_some() { "admitted" } else { "refused" }
    );
    assert_eq!(holders, 1, "{kind:?}: a 1-permit semaphore has {holders} live permits");
    assert!(second.is_none(), "{kind:?}: the acquirer was admitted beside a renewed permit");
    drop(first);
}

#[test]
fn mysql_semaphores_never_over_admit() {
    for kind in [MySqlLockKind::Table, MySqlLockKind::Row, MySqlLockKind::Advisory] {
        a_renewal_at_expiry_never_lets_a_second_holder_in(kind);
    }
}
