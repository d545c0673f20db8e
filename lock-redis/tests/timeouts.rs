//! Failures cost one timeout, not two: a timed wait against a server that stops answering (or
//! never answered) returns by its deadline plus one read timeout; the `WAIT` failure path needs no
//! second pooled connection; a timed-out acquisition gives back what it may have been granted.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, Lock, LockClient, LockOptions};
use lock_redis::redis;
use lock_redis::RedisBackend;
use lock_testkit::eventually;
use lock_testkit::harness::RedisServer;
use lock_testkit::suite::unique_name;

const TIMEOUT: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(3);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(400);
/// The longest a Redis waiter goes without re-checking on its own.
const RECHECK: Duration = Duration::from_secs(1);

fn client(url: &str) -> LockClient<RedisBackend> {
    let backend =
        RedisBackend::builder(url).connect_timeout(TIMEOUT).io_timeout(TIMEOUT).build().expect("backend");
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(10)).build().unwrap())
}

#[test]
fn a_timed_wait_on_a_server_that_stops_answering_ends_by_its_deadline_plus_one_timeout() {
    let server = RedisServer::start().expect("private redis-server");
    let holder = client(&server.url());
    let waiter = client(&server.url());
    let name = unique_name("stopping");
    let _held = Lock::new(&holder, name.clone()).try_lock().unwrap().expect("free");
    let lock = Lock::new(&waiter, name);
    let started = Instant::now();
    let waiting = thread::spawn(move || {
        let outcome = lock.try_lock_for(WAIT).map(|guard| guard.is_some());
        (outcome, started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
    server.process().pause().expect("SIGSTOP");
    let (outcome, took) = waiting.join().unwrap();
    server.process().resume().expect("SIGCONT");
    println!("try_lock_for({WAIT:?}) with the server stopped after 300 ms: {outcome:?} after {took:?}");
    assert!(!matches!(outcome, Ok(true)), "acquired a held lock: {outcome:?}");
    assert!(took <= WAIT + TIMEOUT + SLACK, "returned after {took:?}, past the deadline plus one timeout");
    // The waiter notices at its next re-check (at most a second) and its attempt times out once;
    // clean-up must not cost a second timeout.
    let one_failure = Duration::from_millis(300) + RECHECK + TIMEOUT + SLACK;
    assert!(took <= one_failure, "returned after {took:?}: the failure cost more than one timeout");
}

#[test]
fn a_timed_wait_on_a_silent_listener_ends_by_its_deadline_plus_one_timeout() {
    // The kernel completes the handshake; nobody ever reads or answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let started = Instant::now();
    let outcome =
        RedisBackend::builder(url.as_str()).connect_timeout(TIMEOUT).io_timeout(TIMEOUT).build().and_then(
            |backend| {
                let client = LockClient::new(backend);
                client.lock_named("silent")?.try_lock_for(WAIT).map(|guard| guard.is_some())
            },
        );
    let took = started.elapsed();
    println!("try_lock_for({WAIT:?}) on a silent listener: {outcome:?} after {took:?}");
    assert!(outcome.is_err(), "a silent server is an error: {outcome:?}");
    assert!(took <= TIMEOUT + SLACK, "returned after {took:?}: the failure cost more than one timeout");
}

#[test]
fn a_failed_wait_for_replicas_needs_no_second_connection_and_gives_the_lock_back() {
    let server = RedisServer::start().expect("private redis-server");
    // An ACL user that may not run WAIT: the acquisition succeeds, WAIT fails with an error reply.
    let mut admin = redis::Client::open(server.url()).unwrap().get_connection_with_timeout(TIMEOUT).unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "nowait", "on", ">nowait-secret", "~*", "&*", "+@all", "-wait"])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://nowait:nowait-secret@127.0.0.1:{}/", server.port());
    let backend = RedisBackend::builder(url.as_str())
        .max_connections(1)
        .connect_timeout(Duration::from_secs(3))
        .wait_for_replicas(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let name = unique_name("nowait");
    let client = LockClient::new(backend);
    let started = Instant::now();
    let outcome = client.lock_named(name.as_str()).unwrap().try_lock().map(|guard| guard.is_some());
    let took = started.elapsed();
    println!("acquisition whose WAIT failed, pool of one: {outcome:?} after {took:?}");
    assert!(matches!(outcome, Err(Error::Backend { .. })), "WAIT's error is reported: {outcome:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}: waited for a second pooled connection");
    let rival = LockClient::new(RedisBackend::new(server.url()).unwrap());
    let rival_lock = rival.lock_named(name.as_str()).unwrap();
    assert!(
        eventually(Duration::from_secs(2), || rival_lock.try_lock().unwrap().is_some()),
        "the unconfirmed grant was given back"
    );
}

#[test]
fn a_timed_out_acquisition_gives_back_what_it_may_have_been_granted() {
    let server = RedisServer::start().expect("private redis-server");
    let short = Duration::from_millis(300);
    let backend = RedisBackend::builder(server.url()).io_timeout(short).build().unwrap();
    let client = LockClient::with_options(
        backend,
        LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap(),
    );
    let name = unique_name("in-doubt");
    let lock = client.lock_named(name.as_str()).unwrap();
    // Warm the pool and the scripts, then stop the server: the next request is queued unread,
    // and runs (granting the lock) when the server resumes, after the client gave up.
    drop(lock.try_lock().unwrap().expect("free"));
    server.process().pause().expect("SIGSTOP");
    let outcome = lock.try_lock();
    assert!(
        matches!(outcome, Err(Error::Timeout { .. }) | Err(Error::Connection { .. })),
        "{:?}",
        outcome.map(|g| g.is_some())
    );
    server.process().resume().expect("SIGCONT");
    // The grant in doubt (30 s lease) is given back by the clean-up, not left to lapse.
    let rival = LockClient::new(RedisBackend::new(server.url()).unwrap());
    let rival_lock = rival.lock_named(name.as_str()).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || rival_lock.try_lock().unwrap().is_some()),
        "the timed-out acquisition's grant was left to lapse (30 s)"
    );
}
