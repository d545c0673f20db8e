//! The PostgreSQL lock table's waiter queue in the lock row: a release notifies the oldest live
//! waiting client only (and nobody when nobody waits), and a fair lock is the head's until a
//! crashed waiter's entry lapses. (Arrival order and leaving the queue: `table_queue.rs`.)

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, LockName, OwnerToken};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_sql::testkit::SqlTarget;
use lock_testkit::suite::unique_name;

const TTL: Duration = Duration::from_secs(30);

/// Listens on `channel` on a connection of its own; every payload goes to the returned receiver.
/// The listener runs until the test process ends.
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

/// Runs `sql` on a connection of its own; the first column of each row, as text.
fn query(url: &str, sql: &str) -> Vec<String> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
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
            .collect()
    })
}

/// Puts a queue entry for `channel` on `name`'s row (which must exist), living `ms` from now
/// (negative: already lapsed), as a waiting client would.
fn enqueue(url: &str, name: &LockName, channel: &str, ms: i64) {
    query(
        url,
        &format!(
            "UPDATE distlock_locks SET waiters = waiters || \
             ((round(extract(epoch FROM clock_timestamp()) * 1000)::bigint + {ms})::text || ':{channel}') \
             WHERE name = '{}'",
            name.as_str()
        ),
    );
}

fn table(target: &SqlTarget<PostgresLockKind>, fair: bool) -> PostgresBackend {
    let locks = PostgresBackend::builder(target.url())
        .kind(PostgresLockKind::Table)
        .io_timeout(Duration::from_secs(2))
        .fair(fair)
        .build()
        .expect("a client");
    locks.ensure_schema().expect("the tables");
    locks
}

#[test]
fn a_release_notifies_the_oldest_live_waiter_and_nobody_else() {
    let target = SqlTarget::new(PostgresLockKind::Table);
    let locks = table(&target, true);
    let (first, second) =
        (format!("distlock_t_{}a", std::process::id()), format!("distlock_t_{}b", std::process::id()));
    let (to_first, to_second) = (listen(target.url(), &first), listen(target.url(), &second));

    // Nobody waits: no notification, however many releases.
    let name = unique_name("notified");
    for _ in 0..5 {
        let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
        assert!(locks.release(lease).expect("a server"));
    }
    // A lapsed entry is nobody: still no notification.
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    enqueue(target.url(), &name, &first, -1);
    assert!(locks.release(lease).expect("a server"));
    thread::sleep(Duration::from_millis(200));
    assert_eq!(to_first.try_iter().count(), 0, "a lapsed entry was notified");

    // Two live entries: the release notifies the older one only, with the lock's name.
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    enqueue(target.url(), &name, &first, 60_000);
    enqueue(target.url(), &name, &second, 60_000);
    assert!(locks.release(lease).expect("a server"));
    assert_eq!(to_first.recv_timeout(Duration::from_secs(5)).expect("notified"), name.as_str());
    thread::sleep(Duration::from_millis(200));
    assert_eq!(to_second.try_iter().count(), 0, "the second waiter was notified too");
}

#[test]
fn a_fair_lock_is_taken_only_by_the_queue_head_until_its_entry_lapses() {
    let target = SqlTarget::new(PostgresLockKind::Table);
    let (fair, unfair) = (table(&target, true), table(&target, false));
    let name = unique_name("head");
    let lease = fair.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    // A waiter that crashed: its entry lives 1.5 s.
    enqueue(target.url(), &name, &format!("distlock_t_{}gone", std::process::id()), 1_500);
    assert!(fair.release(lease).expect("a server"));

    assert!(
        fair.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").is_none(),
        "fair: the head's turn"
    );
    let barged = unfair
        .try_acquire(&name, &OwnerToken::random(), TTL)
        .expect("a server")
        .expect("non-fair: first come");
    assert!(unfair.release(barged).expect("a server"));
    // The entry lapses and the fair lock is free for anyone again.
    thread::sleep(Duration::from_millis(1_700));
    let lease =
        fair.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("the entry lapsed");
    assert!(fair.release(lease).expect("a server"));
}

/// A lock table made by a version without the waiter queue gets it from `ensure_schema`, and its
/// locks then work; a second `ensure_schema` changes nothing.
#[test]
fn ensure_schema_adds_the_waiters_column_to_an_older_table() {
    let target = SqlTarget::new(PostgresLockKind::Table);
    let table = format!("older_layout_{}", std::process::id());
    let query = |sql: String| query(target.url(), &sql);
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
        "SELECT attname FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = 'waiters'"
    ));
    assert_eq!(columns, ["waiters"]);
    let name = unique_name("older");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    assert!(locks.release(lease).expect("a server"));
    query(format!("DROP TABLE {table}, {table}_rows; DROP SEQUENCE {table}_fence"));
}
