//! The lock-table kinds' waiter queues, on both databases: a release wakes the oldest waiting
//! client by the server (PostgreSQL `NOTIFY`, MariaDB's doorbell), fair waiters are served in
//! arrival order (a client with several waiting threads goes to the tail when one wins), a
//! waiter out of time leaves the queue, non-fair waiters are woken too, and MariaDB's doorbell
//! outlives the end of its anchor's session.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, LockName, OwnerToken};
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_sql::testkit::{MySqlTarget, PostgresTarget};
use lock_testkit::eventually;
use lock_testkit::suite::unique_name;

const TTL: Duration = Duration::from_secs(30);

/// Well under the waiters' one-second re-check: a waiter served this soon was woken by the
/// release.
const WOKEN: Duration = Duration::from_millis(500);

/// Builds a lock-table client; `fair` as the builder's.
type Build<B> = Arc<dyn Fn(bool) -> B + Send + Sync>;

fn postgres() -> Build<PostgresBackend> {
    let target = PostgresTarget::new(PostgresLockKind::Table);
    target.backend_with(Duration::from_secs(2), 4).expect("a client").ensure_schema().expect("tables");
    Arc::new(move |fair| {
        PostgresBackend::builder(target.url())
            .io_timeout(Duration::from_secs(2))
            .fair(fair)
            .build()
            .expect("a client")
    })
}

fn mysql() -> Build<MySqlBackend> {
    let target = MySqlTarget::new(MySqlLockKind::Table);
    target.backend_with(Duration::from_secs(2), 4).expect("a client").ensure_schema().expect("tables");
    Arc::new(move |fair| {
        MySqlBackend::builder(target.url())
            .io_timeout(Duration::from_secs(2))
            .fair(fair)
            .build()
            .expect("a client")
    })
}

/// A connection of its own to `target`'s server, outside any client.
fn raw_mysql(target: &MySqlTarget) -> lock_sql::mysql_driver::Conn {
    lock_sql::mysql_driver::Conn::new(lock_sql::mysql_driver::Opts::from_url(target.url()).expect("the URL"))
        .expect("a connection")
}

/// Waits for `name` on `locks` (at most 20 s), notes `who` as served, holds the lock 100 ms and
/// releases it; when it released.
fn serve<B: DistributedLock, W>(
    locks: &B,
    name: &LockName,
    served: &Mutex<Vec<(W, Instant)>>,
    who: W,
) -> Instant {
    let native = locks.native_wait().expect("lock-table waiters are woken");
    let deadline = Instant::now() + Duration::from_secs(20);
    let acquired = native
        .acquire_until(name, &OwnerToken::random(), TTL, Some(deadline))
        .expect("a server")
        .expect("served before the deadline");
    served.lock().unwrap().push((who, Instant::now()));
    thread::sleep(Duration::from_millis(100));
    let released_at = Instant::now();
    assert!(locks.release(acquired.lease).expect("a server"));
    released_at
}

/// Three clients queue one after another behind a holder; each release wakes the next promptly,
/// in arrival order when fair.
fn waiters_are_woken_by_releases<B: DistributedLock + 'static>(build: &Build<B>, fair: bool) {
    let locks = build(fair);
    let name = unique_name("queue");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let served = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..3)
        .map(|index| {
            let (build, name, served) = (Arc::clone(build), name.clone(), Arc::clone(&served));
            let waiter = thread::spawn(move || serve(&build(fair), &name, &served, index));
            // Let this one queue before the next arrives.
            thread::sleep(Duration::from_millis(700));
            waiter
        })
        .collect();
    let released_at = Instant::now();
    assert!(locks.release(lease).expect("a server"));
    let mut releases = vec![released_at];
    releases.extend(waiters.into_iter().map(|waiter| waiter.join().expect("a waiter")));
    releases.sort();
    let served = served.lock().unwrap().clone();
    if fair {
        assert_eq!(served.iter().map(|(index, _)| *index).collect::<Vec<_>>(), [0, 1, 2], "arrival order");
    }
    for (position, (index, at)) in served.iter().enumerate() {
        let after = *at - releases[position];
        println!("waiter {index} served {after:?} after the release before it");
        assert!(after < WOKEN, "waiter {index} served {after:?} after the release: by a re-check");
    }
}

/// A fair waiter that runs out of time leaves the queue (also a client whose two waiting threads
/// run out of time together): the next waiter is served at the next release, not when the
/// first one's entry would have lapsed.
fn a_waiter_out_of_time_leaves_the_queue<B: DistributedLock + 'static>(build: &Build<B>) {
    let locks = build(true);
    let name = unique_name("gives-up");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let impatient = {
        let (build, name) = (Arc::clone(build), name.clone());
        thread::spawn(move || {
            let locks = build(true);
            let deadline = Instant::now() + Duration::from_millis(800);
            // Two threads of one client, out of time together: the client's one entry must go.
            thread::scope(|scope| {
                for _ in 0..2 {
                    scope.spawn(|| {
                        let native = locks.native_wait().expect("woken");
                        let waited = native.acquire_until(&name, &OwnerToken::random(), TTL, Some(deadline));
                        assert!(waited.expect("a server").is_none());
                    });
                }
            });
        })
    };
    thread::sleep(Duration::from_millis(300));
    let (got, acquired) = mpsc::channel();
    let patient = {
        let (build, name) = (Arc::clone(build), name.clone());
        thread::spawn(move || {
            let locks = build(true);
            let deadline = Instant::now() + Duration::from_secs(20);
            let native = locks.native_wait().expect("woken");
            let acquired = native
                .acquire_until(&name, &OwnerToken::random(), TTL, Some(deadline))
                .expect("a server")
                .expect("served");
            got.send(Instant::now()).expect("the test waits");
            assert!(locks.release(acquired.lease).expect("a server"));
        })
    };
    impatient.join().expect("the impatient waiter");
    thread::sleep(Duration::from_millis(300));
    let released_at = Instant::now();
    assert!(locks.release(lease).expect("a server"));
    let after = acquired.recv_timeout(Duration::from_secs(10)).expect("served") - released_at;
    patient.join().expect("the patient waiter");
    println!("the patient waiter was served {after:?} after the release");
    assert!(after < WOKEN, "served {after:?} after the release: the leaver's entry held up the queue");
}

/// A fair client whose two threads wait moves to the queue's tail when one of them wins, behind
/// a client that queued after it: the order of service is the winner, the other client, then
/// the client's second thread, each woken by the release before it.
fn a_client_with_two_waiting_threads_goes_to_the_tail<B: DistributedLock + 'static>(build: &Build<B>) {
    let locks = build(true);
    let name = unique_name("two-threads");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let served = Arc::new(Mutex::new(Vec::new()));
    let waiter = |locks: Arc<B>, who: &'static str| {
        let (name, served) = (name.clone(), Arc::clone(&served));
        move || serve(&*locks, &name, &served, who)
    };
    let two = Arc::new(build(true));
    let first = thread::spawn(waiter(Arc::clone(&two), "two"));
    let second = thread::spawn(waiter(Arc::clone(&two), "two"));
    // Let the client queue before the other arrives.
    thread::sleep(Duration::from_millis(700));
    let other = thread::spawn(waiter(Arc::new(build(true)), "other"));
    thread::sleep(Duration::from_millis(700));
    let mut releases = vec![Instant::now()];
    assert!(locks.release(lease).expect("a server"));
    releases.extend([first, second, other].map(|waiter| waiter.join().expect("a waiter")));
    releases.sort();
    let served = served.lock().unwrap().clone();
    assert_eq!(served.iter().map(|(who, _)| *who).collect::<Vec<_>>(), ["two", "other", "two"], "the order");
    for (position, (who, at)) in served.iter().enumerate() {
        let after = *at - releases[position];
        assert!(after < WOKEN, "{who} served {after:?} after the release before it: by a re-check");
    }
}

#[test]
fn postgres_a_client_with_two_waiting_threads_goes_to_the_tail() {
    a_client_with_two_waiting_threads_goes_to_the_tail(&postgres());
}

#[test]
fn mysql_a_client_with_two_waiting_threads_goes_to_the_tail() {
    a_client_with_two_waiting_threads_goes_to_the_tail(&mysql());
}

#[test]
fn postgres_fair_waiters_are_woken_in_arrival_order() {
    waiters_are_woken_by_releases(&postgres(), true);
}

#[test]
fn postgres_non_fair_waiters_are_woken() {
    waiters_are_woken_by_releases(&postgres(), false);
}

#[test]
fn postgres_a_waiter_out_of_time_leaves_the_queue() {
    a_waiter_out_of_time_leaves_the_queue(&postgres());
}

#[test]
fn mysql_fair_waiters_are_woken_in_arrival_order() {
    waiters_are_woken_by_releases(&mysql(), true);
}

#[test]
fn mysql_non_fair_waiters_are_woken() {
    waiters_are_woken_by_releases(&mysql(), false);
}

#[test]
fn mysql_a_waiter_out_of_time_leaves_the_queue() {
    a_waiter_out_of_time_leaves_the_queue(&mysql());
}

/// A PostgreSQL client that has waited before (its `LISTEN` is up) attempts in the queueing
/// statement at once: a free lock is taken without counting as contended, and on a busy fair lock
/// it queues behind the waiter that came first and is woken by the release after that waiter's.
#[test]
fn postgres_a_listening_client_attempts_in_the_queue_at_once() {
    let build = postgres();
    let holder = build(true);
    let client = Arc::new(build(true));
    let native = client.native_wait().expect("woken");
    let deadline = || Some(Instant::now() + Duration::from_secs(20));
    // The client waits once, which brings its LISTEN connection up.
    let warm_up = unique_name("listening-warm-up");
    let held = holder.try_acquire(&warm_up, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let waited = thread::spawn({
        let (client, warm_up) = (Arc::clone(&client), warm_up.clone());
        move || {
            let native = client.native_wait().expect("woken");
            native
                .acquire_until(&warm_up, &OwnerToken::random(), TTL, deadline())
                .expect("a server")
                .expect("served")
        }
    });
    thread::sleep(Duration::from_millis(300));
    assert!(holder.release(held).expect("a server"));
    let warmed = waited.join().expect("the warm-up waiter");
    assert!(client.release(warmed.lease).expect("a server"));

    let free = unique_name("listening-free");
    let acquired = native.acquire_until(&free, &OwnerToken::random(), TTL, deadline()).expect("a server");
    let acquired = acquired.expect("a free lock is taken");
    assert!(!acquired.contended, "a free lock taken at the first attempt is not contended");
    assert!(client.release(acquired.lease).expect("a server"));

    let busy = unique_name("listening-busy");
    let lease = holder.try_acquire(&busy, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let served = Arc::new(Mutex::new(Vec::new()));
    let first = thread::spawn({
        let (build, busy, served) = (Arc::clone(&build), busy.clone(), Arc::clone(&served));
        move || serve(&build(true), &busy, &served, "first")
    });
    thread::sleep(Duration::from_millis(700));
    let second = thread::spawn({
        let (client, busy, served) = (Arc::clone(&client), busy.clone(), Arc::clone(&served));
        move || serve(&*client, &busy, &served, "listening")
    });
    thread::sleep(Duration::from_millis(700));
    let mut releases = vec![Instant::now()];
    assert!(holder.release(lease).expect("a server"));
    releases.extend([first, second].map(|waiter| waiter.join().expect("a waiter")));
    releases.sort();
    let served = served.lock().unwrap().clone();
    assert_eq!(
        served.iter().map(|(who, _)| *who).collect::<Vec<_>>(),
        ["first", "listening"],
        "arrival order"
    );
    for (position, (who, at)) in served.iter().enumerate() {
        let after = *at - releases[position];
        assert!(after < WOKEN, "{who} served {after:?} after the release before it: by a re-check");
    }
}

/// A fair MariaDB client whose release rang a waiter (and whose doorbell is up) queues in its
/// next acquisition of the name at once: it is served after the waiter it rang, woken by that
/// waiter's release; and when the hint is stale (the waiter came and went), it takes the free
/// lock without counting as contended.
#[test]
fn mysql_a_releaser_that_rang_a_waiter_queues_at_once() {
    let build = mysql();
    let client = Arc::new(build(true));
    let native = client.native_wait().expect("woken");
    let deadline = || Some(Instant::now() + Duration::from_secs(20));
    // A waiter on another client for `name`, queued behind the client's hold; returns when it
    // was served and when it released.
    let mut admin = raw_mysql(&MySqlTarget::new(MySqlLockKind::Table));
    let mut wait_for = |name: &LockName, served: &Arc<Mutex<Vec<(&'static str, Instant)>>>| {
        let waiter = {
            let (build, name, served) = (Arc::clone(&build), name.clone(), Arc::clone(served));
            thread::spawn(move || serve(&build(true), &name, &served, "rung"))
        };
        // Queued (so that the release rings it), as its entry in the queue table shows.
        let hex_name: String = name.as_str().bytes().map(|byte| format!("{byte:02X}")).collect();
        let queued = eventually(Duration::from_secs(10), || {
            let entries: Option<u64> = lock_sql::mysql_driver::prelude::Queryable::query_first(
                &mut admin,
                format!("SELECT COUNT(*) FROM distlock_locks_queue WHERE name = X'{hex_name}'"),
            )
            .expect("the queue");
            entries.unwrap_or(0) > 0
        });
        assert!(queued, "the waiter never queued");
        waiter
    };
    // The client waits once, which brings its doorbell up.
    let warm_up = unique_name("rang-warm-up");
    let other = build(true);
    let held = other.try_acquire(&warm_up, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let warming = thread::spawn({
        let (client, warm_up) = (Arc::clone(&client), warm_up.clone());
        move || {
            let native = client.native_wait().expect("woken");
            let acquired = native.acquire_until(&warm_up, &OwnerToken::random(), TTL, deadline());
            let acquired = acquired.expect("a server").expect("served");
            assert!(client.release(acquired.lease).expect("a server"));
        }
    });
    thread::sleep(Duration::from_millis(300));
    assert!(other.release(held).expect("a server"));
    warming.join().expect("the warm-up");

    // The hint holds: the client's release rings the waiter, and its next acquisition queues
    // behind it.
    let busy = unique_name("rang-busy");
    let served = Arc::new(Mutex::new(Vec::new()));
    let lease = client.try_acquire(&busy, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let rung = wait_for(&busy, &served);
    let released_at = Instant::now();
    assert!(client.release(lease).expect("a server"));
    let again = native.acquire_until(&busy, &OwnerToken::random(), TTL, deadline()).expect("a server");
    let again = again.expect("served after the waiter");
    let served_again = Instant::now();
    assert!(again.contended, "it waited");
    let rung_released = rung.join().expect("the rung waiter");
    assert!(client.release(again.lease).expect("a server"));
    let served = served.lock().unwrap().clone();
    assert_eq!(served.len(), 1);
    let (_, rung_at) = served[0];
    assert!(rung_at - released_at < WOKEN, "the waiter served {:?} after the release", rung_at - released_at);
    assert!(served_again > rung_released, "the client was served before the waiter it rang released");
    let after = served_again - rung_released;
    assert!(after < WOKEN, "the client served {after:?} after the waiter's release: by a re-check");

    // A stale hint: the waiter it rang came and went; the lock is free.
    let stale = unique_name("rang-stale");
    let served = Arc::new(Mutex::new(Vec::new()));
    let lease = client.try_acquire(&stale, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let rung = wait_for(&stale, &served);
    assert!(client.release(lease).expect("a server"));
    rung.join().expect("the rung waiter");
    let acquired = native.acquire_until(&stale, &OwnerToken::random(), TTL, deadline()).expect("a server");
    let acquired = acquired.expect("a free lock is taken");
    assert!(!acquired.contended, "a free lock taken without a sleep is not contended");
    assert!(client.release(acquired.lease).expect("a server"));
}

/// A fair lock-table try refuses a free lock while a live waiter is queued for it (a waiter that
/// crashed: its entry, put here by hand, names no live connection), a non-fair one takes it, and
/// once the entry lapses the fair try takes it too.
#[test]
fn mysql_fair_try_lock_respects_the_queue_until_the_entry_lapses() {
    use lock_sql::mysql_driver::prelude::Queryable as _;
    let target = MySqlTarget::new(MySqlLockKind::Table);
    let build = mysql();
    let (fair, unfair) = (build(true), build(false));
    let name = unique_name("mytry");
    let lease = fair.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let mut sql = raw_mysql(&target);
    sql.exec_drop(
        "INSERT INTO distlock_locks_queue (name, waiter, until) \
         VALUES (?, 4294967295, UTC_TIMESTAMP(6) + INTERVAL 1500000 MICROSECOND)",
        (name.as_str().as_bytes(),),
    )
    .expect("a queue entry");
    // As a waiter's own transaction does: the row names the queue's head.
    sql.exec_drop(
        "UPDATE distlock_locks SET ring = 4294967295, \
         ring_until = UTC_TIMESTAMP(6) + INTERVAL 1500000 MICROSECOND WHERE name = ?",
        (name.as_str().as_bytes(),),
    )
    .expect("the head on the row");
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
    thread::sleep(Duration::from_millis(1_700));
    let lease =
        fair.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("the entry lapsed");
    assert!(fair.release(lease).expect("a server"));
}

/// A release rings only a doorbell of the server it reaches: a queue entry whose doorbell is
/// another server's (Galera, a virtual IP after a failover) names a connection id that on this
/// server may be a stranger's, whose statement `KILL QUERY` would interrupt. The entry here names
/// a sleeping connection of this server without saying which server its doorbell is on (what
/// every entry once was, and what an entry of another server looks like to this one): the
/// release must not interrupt that connection's statement.
#[test]
fn mysql_a_release_never_rings_a_connection_of_another_server() {
    use lock_sql::mysql_driver::prelude::Queryable as _;
    let target = MySqlTarget::new(MySqlLockKind::Table);
    let locks = mysql()(true);
    let name = unique_name("mybell");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let connect = || raw_mysql(&target);
    let mut stranger = connect();
    let stranger_id = stranger.connection_id();
    let sleeping = thread::spawn(move || {
        let started = Instant::now();
        let slept: Result<Option<i64>, _> = stranger.query_first("SELECT SLEEP(3)");
        (slept.ok().flatten(), started.elapsed())
    });
    let mut sql = connect();
    // The entry and the row's head, as a waiter's own transaction writes them.
    sql.exec_drop(
        "INSERT INTO distlock_locks_queue (name, waiter, until) \
         VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL 10 SECOND)",
        (name.as_str().as_bytes(), stranger_id),
    )
    .expect("a queue entry");
    sql.exec_drop(
        "UPDATE distlock_locks SET ring = ?, ring_until = UTC_TIMESTAMP(6) + INTERVAL 10 SECOND WHERE name = ?",
        (stranger_id, name.as_str().as_bytes()),
    )
    .expect("the head on the row");
    // The stranger's statement runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sql
        .query_first::<i64, _>(format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {stranger_id} AND INFO LIKE 'SELECT SLEEP%'"
        ))
        .expect("a query")
        != Some(1)
    {
        assert!(Instant::now() < deadline, "the stranger's statement never ran");
        thread::sleep(Duration::from_millis(10));
    }
    assert!(locks.release(lease).expect("a server"));
    let (slept, took) = sleeping.join().expect("the stranger");
    println!("a stranger's SLEEP(3) after a release rang its id: {slept:?} after {took:?}");
    assert_eq!(slept, Some(0), "the stranger's statement was interrupted after {took:?}");
}

/// MariaDB's doorbell naps in `GET_LOCK` of a user lock its anchor connection holds (not in
/// `SLEEP`, whose server-wide mutex held rings up for seconds under load). When the anchor's
/// session ends, the doorbell's wait takes the lock at once: it must not spin on it but give it
/// back and nap on a new anchor, so the next release still rings the waiter well before its
/// own re-check.
#[test]
fn mysql_the_doorbell_naps_on_its_anchor_and_survives_the_anchors_end() {
    use lock_sql::mysql_driver::prelude::Queryable as _;
    let target = MySqlTarget::new(MySqlLockKind::Table);
    let build = mysql();
    let (holder, waiter) = (build(true), build(true));
    let name = unique_name("anchor");
    let lease = holder.try_acquire(&name, &OwnerToken::random(), TTL).expect("a server").expect("free");
    let mut admin = raw_mysql(&target);
    // The anchor of the doorbell that the waiter's queue entry names, while it naps (other
    // tests' doorbells nap on the same server): the id in its lock's name.
    let hex_name: String = name.as_str().bytes().map(|byte| format!("{byte:02X}")).collect();
    let anchor = |admin: &mut lock_sql::mysql_driver::Conn| -> Option<u64> {
        let nap: Option<String> = admin
            .query_first(format!(
                "SELECT p.INFO FROM distlock_locks_queue q JOIN information_schema.PROCESSLIST p \
                 ON p.ID = q.waiter & 0xFFFFFFFF WHERE q.name = X'{hex_name}' \
                 AND p.INFO LIKE 'SELECT GET_LOCK(''distlock-doorbell-%'"
            ))
            .expect("the queue and the process list");
        nap?.split("distlock-doorbell-").nth(1)?.split('\'').next()?.parse().ok()
    };
    let (served_tx, served) = mpsc::channel();
    let waiting = {
        let name = name.clone();
        thread::spawn(move || {
            let native = waiter.native_wait().expect("lock-table waiters are woken");
            let deadline = Some(Instant::now() + Duration::from_secs(20));
            let won = native.acquire_until(&name, &OwnerToken::random(), TTL, deadline).expect("a server");
            served_tx.send(Instant::now()).expect("the test waits");
            let won = won.expect("served before the deadline");
            assert!(waiter.release(won.lease).expect("a server"));
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Some(anchor) = anchor(&mut admin) {
            break anchor;
        }
        assert!(Instant::now() < deadline, "no doorbell napped on an anchor's lock");
        thread::sleep(Duration::from_millis(10));
    };
    admin.query_drop(format!("KILL CONNECTION {first}")).expect("the anchor killed");
    let second = loop {
        if let Some(anchor) = anchor(&mut admin).filter(|&anchor| anchor != first) {
            break anchor;
        }
        assert!(Instant::now() < deadline, "the doorbell never napped on a new anchor");
        thread::sleep(Duration::from_millis(10));
    };
    let released_at = Instant::now();
    assert!(holder.release(lease).expect("a server"));
    let after = served.recv_timeout(Duration::from_secs(10)).expect("served") - released_at;
    waiting.join().expect("the waiter");
    println!("anchors {first} then {second}; the waiter was served {after:?} after the release");
    assert!(after < WOKEN, "served {after:?} after the release: the new doorbell was not rung");
}
