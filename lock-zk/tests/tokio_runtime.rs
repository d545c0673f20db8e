//! Calls from inside a tokio runtime: an async task gets [`Error::Unsupported`] (a blocking call
//! would stall its executor; tokio's `block_on` used to panic there), a `spawn_blocking` thread
//! may call as any thread, and dropping the backend inside an async task closes its session in
//! order (its nodes go at once, not a session timeout later) without blocking or panicking.

use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, Extension, LockClient, LockName, NativeWait, OwnerToken};
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_zk::testkit::{ZooKeeperTarget, SESSION_TIMEOUT};
use lock_zk::{ZooKeeperBackend, ZooKeeperLease};

const LEASE: Duration = Duration::from_secs(30);

/// How soon after its holder's session is closed a rival gets a lock: far below the session
/// timeout, after which the servers would free it anyway.
const FREED_WITHIN: Duration = Duration::from_millis(1_500);

fn is_unsupported<T: std::fmt::Debug>(what: &str, outcome: lock_core::Result<T>) {
    match outcome {
        Err(error @ Error::Unsupported { backend: "zookeeper", .. }) => {
            assert!(error.to_string().contains("spawn_blocking"), "{what}: {error}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// `work` on a thread where blocking is allowed.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.expect("the blocking task")
}

async fn acquire(backend: &ZooKeeperBackend, name: &LockName) -> ZooKeeperLease {
    let (backend, name) = (backend.clone(), name.clone());
    blocking(move || backend.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free")).await
}

/// How long a fresh client (of its own session) takes to get `name`.
async fn rival_gets(name: &LockName) -> Duration {
    let name = name.clone();
    blocking(move || {
        let rival = ZooKeeperTarget::new().backend().unwrap();
        let started = Instant::now();
        let lease =
            rival.acquire_until(&name, &OwnerToken::random(), LEASE, Some(started + 3 * SESSION_TIMEOUT));
        let took = started.elapsed();
        assert!(rival.release(lease.unwrap().expect("freed when its session ended").lease).unwrap());
        took
    })
    .await
}

async fn calls_are_refused_and_drops_close_in_order() {
    let target = ZooKeeperTarget::new();
    is_unsupported("building", target.builder().build());
    let backend = blocking(move || target.backend().unwrap()).await;
    let name = unique_name("in-runtime");
    let owner = OwnerToken::random();

    is_unsupported("try_acquire", backend.try_acquire(&name, &owner, LEASE));
    is_unsupported("acquire_until", backend.acquire_until(&name, &owner, LEASE, None).map(drop));
    is_unsupported("contenders", backend.contenders(&name));
    is_unsupported("session_state", backend.session_state());
    let client = LockClient::new(backend.clone());
    is_unsupported("try_lock", client.lock_named(name.as_str()).unwrap().try_lock().map(drop));
    drop(client);

    let mut lease = acquire(&backend, &name).await;
    is_unsupported("extend", backend.extend(&mut lease, LEASE));
    let outcomes = backend.extend_many(&mut [Extension::new(&mut lease, LEASE)]);
    assert_eq!(outcomes.len(), 1);
    is_unsupported("extend_many", outcomes.into_iter().next().unwrap());
    // Refused, but the delete is sent: the lock is free at once.
    is_unsupported("release", backend.release(lease));
    let took = rival_gets(&name).await;
    assert!(took < FREED_WITHIN, "a refused release left the lock held for {took:?}");

    // Dropped with a lock held: the session is closed (its node deleted) without waiting here.
    let held = unique_name("dropped-in-runtime");
    let lease = acquire(&backend, &held).await;
    let started = Instant::now();
    drop(lease);
    drop(backend);
    let dropping = started.elapsed();
    assert!(dropping < Duration::from_millis(100), "dropping the backend blocked the task for {dropping:?}");
    let took = rival_gets(&held).await;
    assert!(took < FREED_WITHIN, "the dropped backend's lock was freed only after {took:?}");
}

#[tokio::test]
async fn inside_a_current_thread_runtime_calls_are_refused_and_drops_close_in_order() {
    calls_are_refused_and_drops_close_in_order().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_multi_thread_runtime_calls_are_refused_and_drops_close_in_order() {
    calls_are_refused_and_drops_close_in_order().await;
}

/// The way the error advises: every call works from `spawn_blocking`, dropping included.
#[tokio::test]
async fn spawn_blocking_may_call_and_drop() {
    let name = unique_name("spawn-blocking");
    let in_blocking = name.clone();
    blocking(move || {
        let backend = ZooKeeperTarget::new().backend().unwrap();
        let client = LockClient::new(backend.clone());
        let guard = client.lock_named(in_blocking.as_str()).unwrap().lock().unwrap();
        assert!(guard.is_held());
        guard.unlock().unwrap();
        drop(client);
        // Dropped holding the lock: the session closes here, in order.
        let lease = backend.try_acquire(&in_blocking, &OwnerToken::random(), LEASE).unwrap();
        drop(lease.expect("free"));
        drop(backend);
    })
    .await;
    let took = rival_gets(&name).await;
    assert!(took < FREED_WITHIN, "the lock was freed only after {took:?}");
}

/// Inside a runtime's `block_on` (no task): refused too, and the drop closes in order.
#[test]
fn inside_block_on_calls_are_refused_and_drops_close_in_order() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(calls_are_refused_and_drops_close_in_order());
}
