//! Bad input and bad servers give typed errors in bounded time: wrong passwords, closed ports,
//! silent listeners, calls from async tasks; and expired auth tokens are renewed.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_etcd::{EtcdBackend, EtcdLockBuilder};
use lock_testkit::harness::{EtcdOptions, EtcdServer};

#[test]
fn a_wrong_password_is_an_authentication_error_and_the_right_one_works() {
    let server = EtcdServer::start_with_auth().unwrap();
    let (user, password) = server.credentials().unwrap();
    let url = format!("etcd://{user}:not-{password}@{}", server.endpoint());
    let error = EtcdBackend::from_url(&url).unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error:?}");
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(&format!("not-{password}")), "the password never shows: {shown}");
    let anonymous = EtcdBackend::from_url(&format!("etcd://{}", server.endpoint())).unwrap_err();
    assert!(matches!(anonymous, Error::Authentication { .. }), "{anonymous:?}");
    let client = LockClient::new(EtcdBackend::from_url(&server.url()).unwrap());
    client.lock_named("authenticated").unwrap().lock().unwrap().unlock().unwrap();
}

#[test]
fn an_expired_auth_token_is_renewed() {
    let server =
        EtcdServer::start_with(EtcdOptions::new().auth().auth_token_ttl(Duration::from_secs(1))).unwrap();
    let client = LockClient::new(EtcdBackend::from_url(&server.url()).unwrap());
    client.lock_named("token").unwrap().lock().unwrap().unlock().unwrap();
    // Idle past the token's TTL: the next request is refused once, the token renewed, and the
    // request sent again.
    thread::sleep(Duration::from_secs(3));
    client.lock_named("token").unwrap().lock().unwrap().unlock().unwrap();
    // A waiter whose token expired while it waited still gets the lock.
    let rival = LockClient::new(EtcdBackend::from_url(&server.url()).unwrap());
    let guard = rival.lock_named("token").unwrap().lock().unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || client.lock_named("token").unwrap().lock().map(|guard| guard.unlock()))
    };
    thread::sleep(Duration::from_secs(3));
    guard.unlock().unwrap();
    waiter.join().unwrap().unwrap().unwrap();
}

#[test]
fn credentials_for_a_server_without_auth_are_dropped() {
    let server = EtcdServer::start().unwrap();
    let backend = EtcdBackend::from_url(&format!("etcd://app:secret@{}", server.endpoint())).unwrap();
    LockClient::new(backend).lock_named("open").unwrap().lock().unwrap().unlock().unwrap();
}

#[test]
fn a_closed_port_fails_at_once_with_a_connection_error() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let error = EtcdLockBuilder::from_url(&format!("etcd://127.0.0.1:{port}")).unwrap().build().unwrap_err();
    assert!(matches!(error, Error::Connection { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "not the whole connect timeout: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_silent_server_times_out_within_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let started = Instant::now();
    let error =
        EtcdBackend::builder(endpoint).connect_timeout(Duration::from_millis(700)).build().unwrap_err();
    let took = started.elapsed();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    assert!(took >= Duration::from_millis(700) && took < Duration::from_millis(1500), "{took:?}");
    drop(listener);
}

#[test]
fn a_server_stopped_while_waiting_ends_the_wait_by_its_deadline() {
    let server = EtcdServer::start().unwrap();
    let url = server.url();
    let backend = |url: &str| {
        EtcdBackend::builder(url.trim_start_matches("etcd://"))
            .io_timeout(Duration::from_millis(500))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (LockClient::new(backend(&url)), LockClient::new(backend(&url)));
    let _guard = holder.lock_named("paused").unwrap().lock().unwrap();
    server.process().pause().unwrap();
    let started = Instant::now();
    let outcome = waiter.lock_named("paused").unwrap().try_lock_for(Duration::from_secs(1));
    let took = started.elapsed();
    server.process().resume().unwrap();
    assert!(
        matches!(outcome, Ok(None) | Err(Error::Timeout { .. } | Error::Connection { .. })),
        "{outcome:?}"
    );
    assert!(took < Duration::from_millis(2200), "deadline plus one I/O timeout (and a little): {took:?}");
}

#[test]
fn calls_from_an_async_task_are_refused_and_work_from_spawn_blocking() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(EtcdBackend::from_url(&server.url()).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let refused = runtime
        .block_on(async { client.lock_named("async").unwrap().try_lock().map(|guard| guard.is_some()) });
    assert!(matches!(refused, Err(Error::Unsupported { .. })), "{refused:?}");
    let url = server.url();
    let built = runtime.block_on(async { EtcdBackend::from_url(&url).map(drop) });
    assert!(matches!(built, Err(Error::Unsupported { .. })), "{built:?}");
    let worked = runtime.block_on(async move {
        tokio::task::spawn_blocking(move || {
            client.lock_named("async").unwrap().lock().map(|guard| guard.unlock())
        })
        .await
        .unwrap()
    });
    worked.unwrap().unwrap();
}

/// The backend's own wait takes any deadline: one at the edge of what an `Instant` holds (the
/// backend adds its I/O timeout to bound requests) waits for a held lock like no deadline, and
/// gets it once the holder lets go.
#[test]
fn a_deadline_at_the_edge_of_time_waits_like_none() {
    use lock_core::{DistributedLock as _, LockName, NativeWait as _, OwnerToken};
    let server = EtcdServer::start().unwrap();
    let backend =
        || EtcdBackend::builder(server.endpoint()).io_timeout(Duration::from_millis(500)).build().unwrap();
    let (holder, waiter) = (backend(), backend());
    let name = LockName::new("edge-of-time").unwrap();
    let ttl = Duration::from_secs(10);
    let held = holder.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().expect("free");
    let (mut edge, mut step) = (Instant::now(), Duration::MAX);
    while !step.is_zero() {
        match edge.checked_add(step) {
            Some(later) => edge = later,
            None => step /= 2,
        }
    }
    thread::scope(|scope| {
        let waiting = scope.spawn(|| waiter.acquire_until(&name, &OwnerToken::random(), ttl, Some(edge)));
        thread::sleep(Duration::from_millis(300));
        assert!(holder.release(held).unwrap());
        let won = waiting.join().expect("no panic").unwrap().expect("the lock once released");
        assert!(waiter.release(won.lease).unwrap());
    });
}
