//! Waits of the row and advisory kinds in the server's lock queue: a timed wait keeps its place
//! in the queue for its whole length (first come, first served), and a short I/O timeout does not
//! turn a MySQL wait into polling.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, LockName, OwnerToken};
use lock_sql::testkit::{SqlKind, SqlTarget};
use lock_testkit::suite::unique_name;

const TTL: Duration = Duration::from_secs(30);

/// Waits for `name` until `deadline` on a client of its own; sends `who` when it gets the lock,
/// then releases it.
fn waiter<K: SqlKind>(kind: K, name: LockName, deadline: Instant, who: char, got: mpsc::Sender<char>) {
    let locks = SqlTarget::new(kind).backend_with(Duration::from_secs(2), 2).expect("a client");
    let native = locks.native_wait().expect("row and advisory locks wait in the server");
    let acquired =
        native.acquire_until(&name, &OwnerToken::random(), TTL, Some(deadline)).expect("a working server");
    let acquired = acquired.unwrap_or_else(|| panic!("waiter {who} timed out"));
    got.send(who).expect("the test is listening");
    thread::sleep(Duration::from_millis(100));
    assert!(locks.release(acquired.lease).expect("a working server"));
}

/// Waiter A queues first; waiter B joins `join_after` later, and the lock is released
/// `release_after` the start: A must get it first. The timings put B's arrival just before A's
/// wait would re-queue behind it if timed waits were sliced as `lock()`'s are (every I/O timeout:
/// 2 s here), and the release after that.
fn a_timed_wait_keeps_its_place<K: SqlKind>(kind: K, join_after: Duration, release_after: Duration) {
    let holder = SqlTarget::new(kind).backend_with(Duration::from_secs(2), 2).expect("a client");
    let name = unique_name("fifo");
    let lease =
        holder.try_acquire(&name, &OwnerToken::random(), TTL).expect("a working server").expect("free");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (got, order) = mpsc::channel();
    let first = {
        let (name, got) = (name.clone(), got.clone());
        thread::spawn(move || waiter(kind, name, deadline, 'A', got))
    };
    thread::sleep(join_after);
    let second = thread::spawn(move || waiter(kind, name, deadline, 'B', got));
    thread::sleep(release_after - join_after);
    assert!(holder.release(lease).expect("a working server"));
    let order: String = order.iter().take(2).collect();
    first.join().expect("waiter A");
    second.join().expect("waiter B");
    assert_eq!(order, "AB", "{}: the first waiter lost its place in the queue", kind.label());
}

/// [`a_timed_wait_keeps_its_place`] with the timings of both databases' former slices.
fn timed_waits_keep_their_place<K: SqlKind>(kind: K) {
    a_timed_wait_keeps_its_place(kind, Duration::from_millis(500), Duration::from_millis(1_200));
    a_timed_wait_keeps_its_place(kind, Duration::from_millis(4_500), Duration::from_millis(6_000));
}

/// A waiter whose 1 ms waits keep timing out while a holder takes and frees the lock every
/// millisecond or so: a wait that times out just as the lock is granted to it must not keep it.
/// (PostgreSQL reports such a wait's `lock_timeout` yet keeps the grant; a session-level
/// advisory lock then stayed with the waiter's pooled session, and the holder could never take
/// the lock again.)
fn a_wait_timing_out_as_the_lock_frees_keeps_nothing<K: SqlKind>(kind: K) {
    let target = SqlTarget::new(kind);
    let holder = target.backend_with(Duration::from_secs(2), 2).expect("a client");
    let name = unique_name("raced-timeout");
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the waiter however the holder's loop ends (a failed assertion too).
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    thread::scope(|s| {
        s.spawn(|| {
            let waiting = target.backend_with(Duration::from_secs(2), 2).expect("a client");
            let native = waiting.native_wait().expect("a queue wait");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let deadline = Instant::now() + Duration::from_millis(1);
                let acquired = match native.acquire_until(&name, &OwnerToken::random(), TTL, Some(deadline)) {
                    // A loaded machine's server may answer a wait late: the client gives up on
                    // the connection, which ends its session (and anything it held).
                    Err(error) if error.is_retryable() => continue,
                    acquired => acquired,
                };
                if let Some(acquired) = acquired.expect("a working server") {
                    assert!(waiting.release(acquired.lease).expect("a working server"));
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        for cycle in 0..300_u32 {
            let given_up = Instant::now() + Duration::from_secs(3);
            let lease = loop {
                if let Some(lease) =
                    holder.try_acquire(&name, &OwnerToken::random(), TTL).expect("a working server")
                {
                    break lease;
                }
                assert!(
                    Instant::now() < given_up,
                    "{}: cycle {cycle}: the lock stayed taken for 3 s though the waiter never holds it \
                     longer than a release: a timed-out wait kept it",
                    kind.label()
                );
                thread::sleep(Duration::from_micros(200));
            };
            thread::sleep(Duration::from_micros(200 + u64::from(cycle * 7_919 % 1_500)));
            assert!(holder.release(lease).expect("a working server"));
        }
    });
}

macro_rules! queue_waits {
    ($module:ident, $kind:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn a_timed_row_wait_keeps_its_place_in_the_queue() {
                timed_waits_keep_their_place(<$kind>::Row);
            }

            #[test]
            fn a_timed_advisory_wait_keeps_its_place_in_the_queue() {
                timed_waits_keep_their_place(<$kind>::Advisory);
            }

            #[test]
            fn a_row_wait_timing_out_as_the_lock_frees_keeps_nothing() {
                a_wait_timing_out_as_the_lock_frees_keeps_nothing(<$kind>::Row);
            }

            #[test]
            fn an_advisory_wait_timing_out_as_the_lock_frees_keeps_nothing() {
                a_wait_timing_out_as_the_lock_frees_keeps_nothing(<$kind>::Advisory);
            }
        }
    };
}

queue_waits!(postgres, lock_sql::postgres::PostgresLockKind);
queue_waits!(mysql, lock_sql::mysql::MySqlLockKind);

/// With a 1 s I/O timeout (under 2 s, where the wait slice used to round down to 0 s), a 1.5 s
/// wait on a held lock is one statement waiting in the server, not `NOWAIT` attempts every 50 ms:
/// sampled through the process list, the waiter's statement is running nearly all the time.
#[test]
fn mysql_waits_with_a_short_io_timeout_wait_in_the_server() {
    use lock_sql::mysql::MySqlLockKind;
    use lock_sql::mysql_driver::prelude::Queryable as _;

    for kind in [MySqlLockKind::Row, MySqlLockKind::Advisory] {
        let target = SqlTarget::new(kind);
        let holder = target.backend_with(Duration::from_secs(1), 2).expect("a client");
        let waiting = target.backend_with(Duration::from_secs(1), 2).expect("a client");
        let name = unique_name("no-poll");
        let lease =
            holder.try_acquire(&name, &OwnerToken::random(), TTL).expect("a working server").expect("free");
        // The name's bytes, as they appear (in hex) in the waiter's statement.
        let marker: String = name.as_str().bytes().map(|byte| format!("{byte:02x}")).collect();
        let mut admin = lock_sql::mysql_driver::Conn::new(target.url()).expect("an admin connection");
        let sampling = thread::scope(|s| {
            let wait = s.spawn(|| {
                let native = waiting.native_wait().expect("a queue wait");
                let deadline = Instant::now() + Duration::from_millis(1_500);
                native
                    .acquire_until(&name, &OwnerToken::random(), TTL, Some(deadline))
                    .expect("a working server")
            });
            thread::sleep(Duration::from_millis(100));
            let (mut samples, mut waiting_samples) = (0, 0);
            while !wait.is_finished() && samples < 60 {
                let running: u64 = admin
                    .query_first(format!(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                         WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND LOCATE('{marker}', LOWER(INFO)) > 0"
                    ))
                    .expect("the process list")
                    .unwrap_or(0);
                samples += 1;
                waiting_samples += u32::from(running > 0);
                thread::sleep(Duration::from_millis(20));
            }
            assert!(wait.join().expect("the waiter").is_none(), "the lock was held throughout");
            (samples, waiting_samples)
        });
        assert!(holder.release(lease).expect("a working server"));
        let (samples, waiting_samples) = sampling;
        assert!(
            samples >= 20 && waiting_samples * 10 >= samples * 8,
            "{}: the waiter's statement was in the server in {waiting_samples} of {samples} samples (polling?)",
            kind.label()
        );
    }
}
