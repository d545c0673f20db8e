//! The scenarios of the replicated Redis deployments (`docs/scenarios.md`): R05 (slots spread
//! over a cluster's primaries, and a slot migrated under load), R06 (a cluster primary killed
//! with and without `WAIT`), R07 (the same on Sentinel, and the demoted primary never written
//! to). Each starts a deployment of its own: they kill and move things.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, HoldState, Lock, LockClient, LockGuard, LockName, LockOptions};
use lock_testkit::harness::{RedisCluster, RedisSentinelGroup, RedisServer};
use lock_testkit::suite::unique_name;
use lock_testkit::BackendScenario;
use redis::Commands as _;

use super::scenarios::fill_replication_backlog;
use crate::topology::slot_of;
use crate::{RedisBackend, RedisKeys};

const SECOND: Duration = Duration::from_secs(1);

/// The lease of the holders that live through a failover: renewed every third of it, so a
/// renewal falls after the failover (about 2.5 s) and before the lease ends.
const LEASE: Duration = Duration::from_secs(10);

/// How long a failover may take in these deployments (the harness's are ~2.5 s for a cluster
/// and a few seconds for Sentinel), with room for a loaded machine.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// R05, R06 and R07.
pub fn deployment_scenarios() -> Vec<BackendScenario> {
    vec![
        BackendScenario::new(
            "R05",
            "Redis Cluster: names over every primary; a slot migrated under load",
            || {
                r05_names_spread_over_every_primary_and_a_slot_moves_under_load();
            },
        ),
        BackendScenario::new("R06", "Redis Cluster: a primary killed, with and without WAIT", || {
            r06_cluster_failover();
        }),
        BackendScenario::new(
            "R07",
            "Redis Sentinel: failover followed, the old primary never written to",
            || {
                r07_sentinel_failover();
            },
        ),
    ]
}

fn backend(url: &str, wait: Option<Duration>) -> RedisBackend {
    let mut builder = RedisBackend::builder(url).connect_timeout(2 * SECOND).io_timeout(2 * SECOND);
    if let Some(timeout) = wait {
        builder = builder.wait_for_replicas(1, timeout);
    }
    builder.build().expect("a backend on the deployment")
}

fn client(backend: RedisBackend, lease: Duration) -> LockClient<RedisBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(lease).build().expect("options"))
}

fn raw(port: u16) -> redis::Connection {
    try_raw(port).expect("a connection to a node")
}

/// A connection to the node on `port`, or the error: a node being reconfigured (a sentinel
/// making a restarted primary a replica kills its clients) may reset a fresh connection.
fn try_raw(port: u16) -> redis::RedisResult<redis::Connection> {
    let connection =
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection_with_timeout(2 * SECOND)?;
    connection.set_read_timeout(Some(5 * SECOND))?;
    Ok(connection)
}

fn slot_of_name(name: &LockName) -> u16 {
    slot_of(RedisKeys::new("distlock", name).lock())
}

/// `count` fresh names whose keys share `slot`.
fn names_in_slot(slot: u16, count: usize) -> Vec<LockName> {
    let mut names = Vec::with_capacity(count);
    while names.len() < count {
        let name = unique_name("r05-slot");
        if slot_of_name(&name) == slot {
            names.push(name);
        }
    }
    names
}

/// R05: 1,000 names land on every primary; then 8 threads lock and unlock four names of one
/// slot while the slot moves to another primary: no overlap, no lost update, every call within
/// its timeout, and waiters are still woken by releases afterwards.
fn r05_names_spread_over_every_primary_and_a_slot_moves_under_load() {
    let cluster = RedisCluster::start().expect("a private Redis Cluster");
    let url = cluster.url();
    let locks = client(backend(&url, None), 30 * SECOND);

    let names: Vec<LockName> = (0..1000).map(|_| unique_name("r05")).collect();
    let guards: Vec<LockGuard<RedisBackend>> = names
        .iter()
        .map(|name| {
            Lock::new(&locks, name.clone()).try_lock().expect("try_lock").expect("a fresh name is free")
        })
        .collect();
    let primaries = cluster.primaries().expect("the primaries");
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    for primary in &primaries {
        let here: Vec<&LockName> = names.iter().filter(|name| primary.serves(slot_of_name(name))).collect();
        assert!(here.len() > 200, "primary {} holds only {} of 1,000 locks", primary.port, here.len());
        let key = RedisKeys::new("distlock", here[0]).lock().to_owned();
        let exists: bool = raw(primary.port).exists(&key).expect("EXISTS");
        assert!(exists, "the lock is on the primary serving its slot");
    }
    for guard in guards {
        guard.unlock().expect("unlock");
    }

    let slot = slot_of_name(&names[0]);
    let busy = names_in_slot(slot, 4);
    let source = cluster.primary_for_slot(slot).expect("the slot's primary");
    let target =
        primaries.iter().map(|primary| primary.port).find(|&port| port != source).expect("another primary");

    let stop = Arc::new(AtomicBool::new(false));
    let load = Arc::new(Load::default());
    let call_timeout = 5 * SECOND;
    let threads: Vec<_> = (0..8)
        .map(|index| {
            let (locks, busy, stop, load) =
                (locks.clone(), busy.clone(), Arc::clone(&stop), Arc::clone(&load));
            thread::spawn(move || {
                let mut turn = index;
                while !stop.load(Ordering::Relaxed) {
                    turn += 1;
                    let which = turn % busy.len();
                    load.one_call(&Lock::new(&locks, busy[which].clone()), which, call_timeout);
                }
            })
        })
        .collect();

    thread::sleep(SECOND / 2);
    let before_move = load.done.load(Ordering::Relaxed);
    let migration = cluster.begin_slot_migration(slot, target).expect("begin the migration");
    // Half-moved for a while: one key at a time, with pauses.
    thread::sleep(SECOND / 5);
    while cluster.move_slot_keys(&migration, 1).expect("move keys") > 0 {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(SECOND / 5);
    cluster.finish_slot_migration(&migration).expect("finish the migration");
    let moved_at = load.done.load(Ordering::Relaxed);
    thread::sleep(SECOND);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("a locking thread panicked");
    }
    assert_eq!(cluster.primary_for_slot(slot).expect("the slot's primary"), target, "the slot moved");
    load.check(before_move, moved_at);

    // Waiters are woken by the release's message on the slot's new primary, well before their
    // own once-a-second re-check.
    for name in &busy[..2] {
        let holder = Lock::new(&locks, name.clone()).try_lock().expect("try_lock").expect("free");
        let waiter_locks = locks.clone();
        let waited_name = name.clone();
        let waiter = thread::spawn(move || {
            let lock = Lock::new(&waiter_locks, waited_name);
            let guard = lock.try_lock_for(10 * SECOND).expect("wait").expect("acquired after the release");
            let acquired = Instant::now();
            guard.unlock().expect("unlock");
            acquired
        });
        thread::sleep(SECOND / 2);
        let released = Instant::now();
        holder.unlock().expect("unlock");
        let acquired = waiter.join().expect("the waiter panicked");
        let woken_after = acquired.saturating_duration_since(released);
        assert!(
            woken_after < Duration::from_millis(500),
            "the waiter took {woken_after:?} after the release"
        );
    }
    println!(
        "R05: 1,000 names over {} primaries; {} calls during the slot move, {} after",
        primaries.len(),
        moved_at - before_move,
        load.done.load(Ordering::Relaxed) - moved_at
    );
}

/// What R05's locking threads saw.
#[derive(Default)]
struct Load {
    /// Per name: whether a thread is inside its critical section.
    inside: [AtomicBool; 4],
    /// Per name: a counter read and written back (+1) non-atomically under the lock.
    counters: [AtomicU64; 4],
    done: AtomicU64,
    overlaps: AtomicU64,
    problems: Mutex<Vec<String>>,
}

impl Load {
    fn one_call(&self, lock: &Lock<RedisBackend>, which: usize, timeout: Duration) {
        let started = Instant::now();
        let outcome = lock.try_lock_for(timeout);
        let took = started.elapsed();
        if took > timeout + SECOND {
            self.problems.lock().expect("problems").push(format!("a call took {took:?}"));
        }
        match outcome {
            Ok(Some(guard)) => {
                if self.inside[which].swap(true, Ordering::SeqCst) {
                    self.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let seen = self.counters[which].load(Ordering::SeqCst);
                thread::sleep(Duration::from_micros(200));
                self.counters[which].store(seen + 1, Ordering::SeqCst);
                self.inside[which].store(false, Ordering::SeqCst);
                self.done.fetch_add(1, Ordering::SeqCst);
                if let Err(error) = guard.unlock() {
                    self.problems.lock().expect("problems").push(format!("unlock: {error}"));
                }
            }
            Ok(None) => self.problems.lock().expect("problems").push(format!("timed out after {took:?}")),
            Err(error) => self.problems.lock().expect("problems").push(format!("lock: {error}")),
        }
    }

    fn check(&self, before_move: u64, moved_at: u64) {
        let problems = self.problems.lock().expect("problems");
        assert!(
            problems.is_empty(),
            "{} failed calls, e.g. {:?}",
            problems.len(),
            &problems[..problems.len().min(5)]
        );
        assert_eq!(self.overlaps.load(Ordering::SeqCst), 0, "two holders at once");
        let counted: u64 = self.counters.iter().map(|counter| counter.load(Ordering::SeqCst)).sum();
        assert_eq!(counted, self.done.load(Ordering::SeqCst), "lost updates");
        assert!(before_move > 0, "no progress before the move");
        assert!(self.done.load(Ordering::SeqCst) > moved_at, "no progress after the move");
    }
}

/// R06: the primary that holds a lock is killed and its replica promoted. With `WAIT` the hold
/// survives (a rival is refused, the holder confirms it on the new primary, tokens keep rising);
/// without it the holder is told (in doubt, or lost) before a rival acquires the lost lock.
fn r06_cluster_failover() {
    let cluster = RedisCluster::start().expect("a private Redis Cluster");
    let url = cluster.url();

    // With WAIT.
    let holder = client(backend(&url, Some(2 * SECOND)), LEASE);
    let rival = client(backend(&url, None), LEASE);
    let name = unique_name("r06-wait");
    let slot = slot_of_name(&name);
    let guard = Lock::new(&holder, name.clone()).try_lock().expect("try_lock").expect("A acquires");
    let token_a = guard.fencing_token().expect("a token");
    let primary = cluster.primary_for_slot(slot).expect("the slot's primary");
    cluster.node(primary).expect("the node").process().kill9().expect("kill the primary");
    let killed = Instant::now();
    let promoted =
        cluster.wait_for_new_primary(slot, primary, FAILOVER_TIMEOUT).expect("the replica takes over");
    println!("R06: the replica on {promoted} serves the slot {:?} after the kill", killed.elapsed());
    survived_failover(guard, &rival, &name);
    let next = retried(|| Lock::new(&rival, name.clone()).try_lock()).expect("free after the unlock");
    assert!(next.fencing_token().expect("a token") > token_a, "tokens keep rising across the failover");
    next.unlock().expect("unlock");

    // The killed node rejoins (as a replica of its successor).
    cluster.node(primary).expect("the node").process().restart().expect("restart the old primary");
    cluster.wait_until_ok(FAILOVER_TIMEOUT).expect("the cluster settles");

    // Without WAIT: the write never reaches the replica (paused, behind a backlog), and is lost.
    let holder = client(backend(&url, None), LEASE);
    let name = loop {
        let name = unique_name("r06-nowait");
        if cluster.primary_for_slot(slot_of_name(&name)).expect("a primary") != promoted {
            break name;
        }
    };
    let slot = slot_of_name(&name);
    let primary = cluster.primary_for_slot(slot).expect("the slot's primary");
    let replica = cluster.replica_of(primary).expect("its replica");
    cluster.node(replica).expect("the replica").process().pause().expect("pause the replica");
    fill_replication_backlog(&mut raw(primary), &format!("distlock:{{{name}}}:filler"));
    let guard = retried(|| Lock::new(&holder, name.clone()).try_lock()).expect("A acquires");
    cluster.node(primary).expect("the node").process().kill9().expect("kill the primary");
    cluster.node(replica).expect("the replica").process().resume().expect("resume the replica");

    let mut told_at = None;
    let mut rival_at = None;
    let lock = Lock::new(&rival, name);
    let deadline = Instant::now() + FAILOVER_TIMEOUT;
    while rival_at.is_none() && Instant::now() < deadline {
        if told_at.is_none() && guard.state() != HoldState::Held {
            told_at = Some(Instant::now());
        }
        if let Ok(Some(rival_guard)) = lock.try_lock() {
            rival_at = Some(Instant::now());
            drop(rival_guard);
        }
        thread::sleep(Duration::from_millis(5));
    }
    let rival_at = rival_at.expect("the rival acquires the lock the failover lost");
    let told_at = told_at.expect("the holder was told before the rival acquired");
    assert!(told_at < rival_at);
    println!("R06 without WAIT: the holder was told {:?} before the rival acquired", rival_at - told_at);
    // Its primary is gone and the new one never had it: the release finds nothing to free.
    drop(guard);
}

/// A `WAIT`ed hold after its primary failed over: a rival is refused, the holder confirms it on
/// the new primary and it stays held, and it unlocks there.
fn survived_failover(guard: LockGuard<RedisBackend>, rival: &LockClient<RedisBackend>, name: &LockName) {
    assert!(
        retried(|| Lock::new(rival, name.clone()).try_lock()).is_none(),
        "the WAITed lock survived the failover: the rival is refused"
    );
    eventually(10 * SECOND, "the holder confirms its hold on the new primary", || {
        guard.state() == HoldState::Held
    });
    stays_held(&guard);
    guard.unlock().expect("unlock on the new primary");
}

/// A hold confirmed on the new primary stays held through several heartbeat rounds: the dead
/// primary that granted it no longer puts it in doubt.
fn stays_held(guard: &LockGuard<RedisBackend>) {
    let until = Instant::now() + 3 * SECOND / 2;
    while Instant::now() < until {
        assert_eq!(
            guard.state(),
            HoldState::Held,
            "the hold flapped after it was confirmed on the new primary"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// R07: a Sentinel failover. With `WAIT` the hold survives and a rival is refused; a client
/// built before the failover reaches the new primary within the failover time + 1 s; once the
/// old primary rejoins as a replica, nothing of the client's is written to it.
fn r07_sentinel_failover() {
    let group = RedisSentinelGroup::start().expect("a private Sentinel group");
    let url = group.url();
    let holder = client(backend(&url, Some(2 * SECOND)), LEASE);
    let rival_backend = backend(&url, None);
    let rival = client(rival_backend.clone(), LEASE);

    let name = unique_name("r07");
    let guard = Lock::new(&holder, name.clone()).try_lock().expect("try_lock").expect("A acquires");
    let token_a = guard.fencing_token().expect("a token");
    let old = group.current_primary_port().expect("the primary");
    let old_node: &RedisServer = group.data_node(old).expect("the primary's process");
    old_node.process().kill9().expect("kill the primary");
    let new = group.wait_for_new_primary(old, FAILOVER_TIMEOUT).expect("a new primary");
    let promoted_at = Instant::now();

    // The rival client, built before the failover, reaches the new primary.
    let probe = Lock::new(&rival, unique_name("r07-reach"));
    let reached_at = loop {
        if let Ok(Some(guard)) = probe.try_lock() {
            guard.unlock().expect("unlock");
            break Instant::now();
        }
        assert!(promoted_at.elapsed() < 10 * SECOND, "the client never reached the new primary {new}");
        thread::sleep(Duration::from_millis(10));
    };
    let late = reached_at - promoted_at;
    assert!(late <= SECOND, "the client reached the new primary {late:?} after the failover");
    survived_failover(guard, &rival, &name);

    // The old primary comes back and is made a replica of the new one.
    old_node.process().restart().expect("restart the old primary");
    eventually(FAILOVER_TIMEOUT, "the old primary rejoins as a replica", || {
        try_raw(old)
            .and_then(|mut connection| redis::cmd("ROLE").query::<redis::Value>(&mut connection))
            .is_ok_and(|role| matches!(role, redis::Value::Array(items) if matches!(items.first(), Some(redis::Value::BulkString(role)) if role == b"slave")))
    });
    let writes_before = client_writes(old);
    for _ in 0..50 {
        let guard = retried(|| Lock::new(&rival, name.clone()).try_lock()).expect("free");
        assert!(guard.fencing_token().expect("a token") > token_a, "tokens keep rising across the failover");
        guard.unlock().expect("unlock");
    }
    assert_eq!(client_writes(old), writes_before, "the client wrote to the demoted primary");
    assert_eq!(rival_backend.backend_name(), "redis");
    println!("R07: failover to {new}; the client reached it {late:?} after the sentinels named it");
}

/// Writes that clients sent the node on `port`: the scripts it ran (the replication stream
/// carries scripts as their effects, never as `EVALSHA`) and the writes it refused as a replica
/// (`READONLY`).
fn client_writes(port: u16) -> u64 {
    let mut info: String = redis::cmd("INFO").arg("commandstats").query(&mut raw(port)).expect("INFO");
    info += &redis::cmd("INFO").arg("errorstats").query::<String>(&mut raw(port)).expect("INFO");
    info.lines()
        .filter_map(|line| {
            let count = if line.starts_with("cmdstat_evalsha:") {
                line.split("calls=").nth(1)?
            } else if line.starts_with("errorstat_READONLY:") {
                line.split("count=").nth(1)?
            } else {
                return None;
            };
            count.split(',').next()?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// `call`'s answer once it gives one: a client's first call after a failover may fail with a
/// connection error (its pooled connection went to the dead primary), as a Redisson or Lettuce
/// call would; the next goes to the new primary.
fn retried<T>(mut call: impl FnMut() -> lock_core::Result<T>) -> T {
    let deadline = Instant::now() + 10 * SECOND;
    loop {
        match call() {
            Ok(answer) => return answer,
            Err(error) => {
                assert!(Instant::now() < deadline, "still failing after 10 s: {error}");
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn eventually(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}
