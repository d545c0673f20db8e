//! The PostgreSQL lock table notifies only when someone waits: releases of locks nobody waits for
//! send no `NOTIFY` (a notifying transaction takes a database-wide lock at commit, which would
//! serialize the releases of independent names), and a release with a waiter does, waking it.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, OwnerToken};
use lock_sql::postgres::PostgresLockKind;
use lock_sql::testkit::SqlTarget;
use lock_testkit::suite::unique_name;

const TTL: Duration = Duration::from_secs(30);

/// Listens on the lock table's channel (`distlock_` + the default table, `distlock_locks`) on a
/// connection of its own; every payload goes to the returned receiver. The listener runs until
/// the test process ends.
fn listen(url: &str, channel: &str) -> mpsc::Receiver<String> {
    let (payloads, received) = mpsc::channel();
    let (listening, ready) = mpsc::channel();
    let (url, listen) = (url.to_owned(), format!("LISTEN \"{channel}\""));
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let (client, mut connection) =
                tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("a listening connection");
            // The connection's messages are read by polling it; notifications are among them.
            let forward = async move {
                while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    if let tokio_postgres::AsyncMessage::Notification(notification) = message {
                        let _ = payloads.send(notification.payload().to_owned());
                    }
                }
            };
            let subscribe = async {
                client.batch_execute(&listen).await.expect("LISTEN");
                listening.send(()).expect("the test waits");
                std::future::pending::<()>().await;
            };
            tokio::join!(forward, subscribe);
        });
    });
    ready.recv_timeout(Duration::from_secs(10)).expect("LISTEN in force");
    received
}

#[test]
fn a_release_notifies_only_when_someone_waits() {
    let target = SqlTarget::new(PostgresLockKind::Table);
    let locks = target.backend_with(Duration::from_secs(2), 4).expect("a client");
    locks.ensure_schema().expect("the tables");
    let notifications = listen(target.url(), "distlock_distlock_locks");

    // Nobody waits: no notification, however many releases.
    let alone = unique_name("alone");
    for _ in 0..20 {
        let lease = locks.try_acquire(&alone, &OwnerToken::random(), TTL).expect("a server").expect("free");
        assert!(locks.release(lease).expect("a server"));
    }
    // A waiter: the release notifies, and the waiter gets the lock by that notification (long
    // before its one-second re-check).
    let waited = unique_name("waited");
    let lease = locks.try_acquire(&waited, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let (got, acquired) = mpsc::channel();
    let waiter = {
        let (target, waited) = (target.clone(), waited.clone());
        thread::spawn(move || {
            let waiting = target.backend_with(Duration::from_secs(2), 2).expect("a client");
            let native = waiting.native_wait().expect("lock-table waiters are woken");
            let deadline = Instant::now() + Duration::from_secs(20);
            let lease = native
                .acquire_until(&waited, &OwnerToken::random(), TTL, Some(deadline))
                .expect("a server")
                .expect("granted before the deadline")
                .lease;
            got.send(Instant::now()).expect("the test waits");
            assert!(waiting.release(lease).expect("a server"));
        })
    };
    // Let the waiter fail its attempts, listen and note on the row that it waits.
    thread::sleep(Duration::from_millis(1_500));
    let released_at = Instant::now();
    assert!(locks.release(lease).expect("a server"));
    let woken_after =
        acquired.recv_timeout(Duration::from_secs(10)).expect("the waiter got the lock") - released_at;
    waiter.join().expect("the waiter");

    let seen: Vec<String> = notifications.try_iter().collect();
    assert!(
        !seen.iter().any(|payload| payload == alone.as_str()),
        "releases nobody waited for notified: {seen:?}"
    );
    assert!(
        seen.iter().any(|payload| payload == waited.as_str()),
        "the release with a waiter did not notify: {seen:?}"
    );
    println!("the waiter got the lock {woken_after:?} after the release");
    assert!(
        woken_after < Duration::from_millis(500),
        "woken {woken_after:?} after the release: by a re-check, not the notification"
    );
}

/// A lock table made by a version without the waiters column gets it from `ensure_schema`, and
/// its locks then work; a second `ensure_schema` changes nothing.
#[test]
fn ensure_schema_adds_the_waiters_column_to_an_older_table() {
    let target = SqlTarget::new(PostgresLockKind::Table);
    let table = format!("older_layout_{}", std::process::id());
    let query = |sql: String| {
        let url = target.url().to_owned();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let (client, connection) =
                tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
            let driver = tokio::spawn(connection);
            let rows = client.simple_query(&sql).await.expect("the statement");
            drop(client);
            let _ = driver.await;
            rows.iter()
                .filter_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                    _ => None,
                })
                .collect::<Vec<String>>()
        })
    };
    query(format!(
        "CREATE TABLE {table} (name text COLLATE \"C\" PRIMARY KEY, owner text NOT NULL, \
         hold_count integer NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL, \
         acquired_at timestamptz NOT NULL)"
    ));
    let locks = lock_sql::postgres::PostgresBackend::builder(target.url())
        .kind(PostgresLockKind::Table)
        .table(table.as_str())
        .build()
        .expect("a client");
    locks.ensure_schema().expect("the older table upgraded");
    locks.ensure_schema().expect("nothing to do the second time");
    let columns = query(format!(
        "SELECT attname FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = 'waiters_until'"
    ));
    assert_eq!(columns, ["waiters_until"]);
    let name = unique_name("older");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    assert!(locks.release(lease).expect("a server"));
    query(format!("DROP TABLE {table}, {table}_rows; DROP SEQUENCE {table}_fence"));
}
