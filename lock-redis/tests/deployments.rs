//! The replicated deployments: R05 (a cluster's slots, one migrated under load), R06 (a cluster
//! primary killed, with and without `WAIT`), R07 (a Sentinel failover), each on a deployment of
//! its own; and the cluster- and Sentinel-specific behaviour around them.

use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

use lock_core::{Lock, LockClient, LockOptions};
use lock_redis::redis;
use lock_redis::testkit::{deployment_scenarios, DeploymentTarget};
use lock_redis::{RedisBackend, RedisLockKind};
use lock_testkit::eventually;
use lock_testkit::harness::RedisCluster;
use lock_testkit::run_backend_scenario;
use lock_testkit::suite::{unique_name, SuiteTarget as _};

#[test]
fn r05_slots_spread_and_a_slot_migrates_under_load() {
    run_backend_scenario(deployment_scenarios(), "R05");
}

#[test]
fn r06_cluster_failover_with_and_without_wait() {
    run_backend_scenario(deployment_scenarios(), "R06");
}

#[test]
fn r07_sentinel_failover_is_followed() {
    run_backend_scenario(deployment_scenarios(), "R07");
}

/// The reentrant-hash layout works on both deployments too (the suite runs `SetNx`).
#[test]
fn the_reentrant_hash_layout_works_on_both_deployments() {
    for target in [DeploymentTarget::cluster(), DeploymentTarget::sentinel()] {
        let target = target.with_kind(RedisLockKind::ReentrantHash);
        let locks = LockClient::with_options(target.backend().unwrap(), LockOptions::default());
        for _ in 0..20 {
            let lock = Lock::new(&locks, unique_name("hash-deployment"));
            let outer = lock.lock().unwrap();
            let inner = lock.try_lock().unwrap().expect("reentrant");
            drop(inner);
            assert!(outer.is_held());
            outer.unlock().unwrap();
        }
    }
}

/// Renewing 10,000 leases spread over the three primaries costs one pipeline per primary, not
/// one request per lease: each primary runs exactly one `SCRIPT LOAD` (the head of each
/// pipeline) for the batch, counted with `INFO commandstats` on a cluster of the test's own.
#[test]
fn a_renewal_batch_is_one_pipeline_per_primary() {
    use lock_core::{DistributedLock as _, Extension, OwnerToken};
    let cluster = RedisCluster::start().unwrap();
    let backend = RedisBackend::builder(cluster.url()).build().unwrap();
    let ttl = Duration::from_secs(30);
    let mut leases: Vec<_> = (0..10_000)
        .map(|_| {
            backend.try_acquire(&unique_name("batch"), &OwnerToken::random(), ttl).unwrap().expect("free")
        })
        .collect();
    let primaries: Vec<u16> = cluster.primaries().unwrap().iter().map(|primary| primary.port).collect();
    let before: Vec<u64> = primaries.iter().map(|&port| script_calls(port)).collect();
    let mut batch: Vec<Extension<'_, _>> =
        leases.iter_mut().map(|lease| Extension::new(lease, ttl)).collect();
    let outcomes = backend.extend_many(&mut batch);
    assert!(outcomes.iter().all(|outcome| matches!(outcome, Ok(true))), "a lease was not renewed");
    let after: Vec<u64> = primaries.iter().map(|&port| script_calls(port)).collect();
    for ((port, before), after) in primaries.iter().zip(before).zip(after) {
        assert_eq!(after - before, 1, "primary {port}: one pipeline (one SCRIPT LOAD) per batch");
    }
    for lease in leases {
        assert!(backend.release(lease).unwrap());
    }
}

/// Leader election on both deployments: the campaign, proclaim and release scripts publish on
/// the election's channel (`SPUBLISH` on the cluster), and a follower's watch hears them.
#[test]
fn elections_work_and_wake_followers_on_both_deployments() {
    use std::time::Instant;

    use lock_core::Elections as _;
    for target in [DeploymentTarget::cluster(), DeploymentTarget::sentinel()] {
        let options = LockOptions::builder().lease(30 * SECOND).build().unwrap();
        let client = LockClient::with_options(target.backend().unwrap(), options);
        for _ in 0..5 {
            let election =
                client.election(unique_name("deployment-election").as_str()).unwrap().with_value("a");
            let mut watch = client.backend().watch_leader(election.name()).unwrap();
            let leadership = election.try_campaign().unwrap().expect("free");
            let leader = election.leader().unwrap().expect("a leader");
            assert_eq!(
                (leader.value.as_slice(), leader.token),
                (b"a".as_slice(), leadership.fencing_token())
            );
            // 5 s of patience, far longer than a message takes, and than a re-check would.
            let woken = |watch: &mut Box<dyn lock_core::LeaderWatch + '_>| {
                watch.wait(Instant::now() + 5 * SECOND).unwrap()
            };
            assert!(woken(&mut watch), "the win is announced");
            leadership.proclaim("b").unwrap();
            assert!(woken(&mut watch), "the proclaim is announced");
            assert_eq!(election.leader().unwrap().expect("a leader").value, b"b");
            leadership.resign().unwrap();
            assert!(woken(&mut watch), "the resign is announced");
            assert_eq!(election.leader().unwrap(), None);
        }
    }
}

/// `SCRIPT` calls the node on `port` has run.
fn script_calls(port: u16) -> u64 {
    let mut connection =
        redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut connection).unwrap();
    info.lines()
        .find(|line| line.starts_with("cmdstat_script|load:") || line.starts_with("cmdstat_script:"))
        .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// On a cluster a release wakes its waiter through the shard channel on the slot's primary
/// (`SPUBLISH`/`SSUBSCRIBE`), within milliseconds — not by the waiter's own once-a-second
/// re-check — for names on every primary.
#[test]
fn a_cluster_release_wakes_its_waiter_by_sharded_pub_sub() {
    let target = DeploymentTarget::cluster();
    let locks = LockClient::with_options(target.backend().unwrap(), LockOptions::default());
    for _ in 0..6 {
        let name = unique_name("sharded-wake");
        let holder = Lock::new(&locks, name.clone()).lock().unwrap();
        let waiter_locks = locks.clone();
        let waiter = std::thread::spawn(move || {
            let guard =
                Lock::new(&waiter_locks, name).try_lock_for(Duration::from_secs(10)).unwrap().unwrap();
            let acquired = std::time::Instant::now();
            guard.unlock().unwrap();
            acquired
        });
        std::thread::sleep(Duration::from_millis(300));
        let released = std::time::Instant::now();
        holder.unlock().unwrap();
        let woken_after = waiter.join().unwrap().saturating_duration_since(released);
        assert!(woken_after < Duration::from_millis(200), "woken {woken_after:?} after the release");
    }
}

/// Read-write and semaphore waiters follow their lock's slot to its new primary, as the mutex's
/// do: after the slot moved, they subscribe to their release channels there (so a release on
/// the new primary wakes them), and get in once the holders release.
#[test]
fn read_write_and_semaphore_waiters_follow_a_moved_slot() {
    use lock_core::{
        Access, Deadline, DistributedLock as _, OwnerToken, Permits as _, ReadWrite as _, Request,
    };
    let cluster = RedisCluster::start().unwrap();
    let backend = RedisBackend::builder(cluster.url()).build().unwrap();
    let name = unique_name("follow-slot");
    let keys = backend.keys(&name);
    let lease = Duration::from_secs(30);
    let backoff = (Duration::from_millis(50), Duration::from_secs(1));
    let request = |owner, deadline| Request::new(&name, owner, lease, deadline, backoff);
    let (writer, holder) = (OwnerToken::random(), OwnerToken::random());
    let written = backend.acquire_rw(&request(&writer, Deadline::Now), Access::Write).unwrap().expect("free");
    let permit = backend.acquire_permit(&request(&holder, Deadline::Now), 1).unwrap().expect("free");

    let waiters: Vec<_> = [false, true]
        .into_iter()
        .map(|semaphore| {
            let (backend, name) = (backend.clone(), name.clone());
            std::thread::spawn(move || {
                let owner = OwnerToken::random();
                let request = Request::new(
                    &name,
                    &owner,
                    lease,
                    Deadline::At(std::time::Instant::now() + 60 * SECOND),
                    backoff,
                );
                let acquired = if semaphore {
                    backend.acquire_permit(&request, 1)
                } else {
                    backend.acquire_rw(&request, Access::Read)
                };
                let acquired = acquired.unwrap().expect("the waiter gets in once the holder releases");
                assert!(backend.release(acquired.lease).unwrap());
            })
        })
        .collect();

    let channels = [keys.read_write_channel(), keys.semaphore_channel()];
    let subscribed_on = |port: u16| {
        let mut connection = node(port);
        let reply: Vec<redis::Value> =
            redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channels).query(&mut connection).unwrap();
        reply.chunks(2).all(|pair| matches!(pair.get(1), Some(redis::Value::Int(count)) if *count > 0))
    };
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(keys.lock())
        .query(&mut node(cluster.nodes()[0].port()))
        .unwrap();
    let source = cluster.primary_for_slot(slot).unwrap();
    assert!(eventually(10 * SECOND, || subscribed_on(source)), "the waiters subscribe on the slot's primary");
    let target =
        cluster.primaries().unwrap().iter().map(|primary| primary.port).find(|&port| port != source).unwrap();
    cluster.migrate_slot(slot, target).unwrap();
    assert!(
        eventually(10 * SECOND, || subscribed_on(target)),
        "the waiters subscribe on the slot's new primary"
    );
    assert!(backend.release(written.lease).unwrap());
    assert!(backend.release(permit.lease).unwrap());
    for waiter in waiters {
        waiter.join().expect("a waiter failed");
    }
}

/// A plain connection to the cluster node on `port`.
fn node(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap()
}
