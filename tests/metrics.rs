//! The `metrics` feature counts what a program did: 100 contended acquisitions and releases and
//! one lock lost underneath its holder, on the in-memory backend, a real Redis server (a lease
//! kind) and a real PostgreSQL server (row locks: a session kind, whose loss starts with a
//! failed liveness check), read back through `metrics-util`'s debugging recorder.
//!
//! One test function: the recorder is process-wide and must be installed before the clients
//! are built.

use std::collections::HashMap;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use distlock::metrics as names;
use distlock::postgres::testkit::PostgresTarget;
use distlock::postgres::PostgresLockKind;
use distlock::redis::testkit::{delete_keys_of_names, RedisTarget};
use distlock::redis::RedisBackend;
use distlock::{DistributedLock, LockClient, LockName, LockOptions, MemoryBackend};
use lock_testkit::suite::unique_name;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::CompositeKey;

const THREADS: usize = 4;
const PER_THREAD: usize = 25;

#[test]
fn counters_match_what_the_program_did() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");

    let memory = MemoryBackend::new();
    exercise(|| memory.clone(), |name| assert!(memory.force_release(name)));

    let target = RedisTarget::set_nx();
    let url = target.url();
    exercise(
        || RedisBackend::new(url).unwrap(),
        |name| assert!(delete_keys_of_names(url, "distlock", name.as_str()).unwrap() >= 1),
    );

    let target = PostgresTarget::new(PostgresLockKind::Row);
    let timeout = Duration::from_secs(2);
    let breaker = target.backend_with(timeout, 4).unwrap();
    exercise(|| target.backend_with(timeout, 16).unwrap(), |name| breaker.break_lock(name).unwrap());

    let metrics = Metrics::read(&snapshotter);
    for kind in ["memory", "redis-set-nx", "pg-row"] {
        let count = |name: &str| metrics.counter(name, kind);
        let acquisitions = THREADS * PER_THREAD + 1;
        assert_eq!(count(names::ACQUISITIONS), acquisitions as u64, "{kind}");
        let contended = count(names::CONTENDED_ACQUISITIONS);
        assert!((1..=acquisitions as u64).contains(&contended), "{kind}: {contended} contended");
        assert_eq!(metrics.samples(names::ACQUIRE_WAIT, kind), acquisitions, "{kind}");
        assert_eq!(count(names::LOSSES), 1, "{kind}");
        // Every hold ended once: 100 released, one lost.
        assert_eq!(metrics.samples(names::HOLD_TIME, kind), acquisitions, "{kind}");
        // The lost hold's release is no failure of its own: its loss was reported.
        assert_eq!(count(names::RELEASE_FAILURES), 0, "{kind}");
        assert_eq!(count(names::ACQUIRE_ERRORS), 0, "{kind}");
        // The try_lock on the held lock gave up once.
        assert_eq!(count(names::ACQUIRE_TIMEOUTS), 1, "{kind}");
        assert!(metrics.counter_with(names::RENEWALS, kind, ("outcome", "confirmed")) >= 1, "{kind}");
        assert!(metrics.samples(names::RENEWAL_BATCH, kind) >= 2, "{kind}");
        // Deleted (Redis, memory) or its session terminated (pg-row): the next renewal or
        // liveness check finds it gone, without a spell of doubt.
        let told_gone = metrics.counter_with(names::RENEWALS, kind, ("outcome", "lost"));
        let failed = metrics.counter_with(names::RENEWALS, kind, ("outcome", "failed"));
        assert_eq!(
            (told_gone, failed, count(names::IN_DOUBT)),
            (1, 0, 0),
            "{kind}: told gone, failed, in doubt"
        );
    }
    for backend in ["redis", "postgres"] {
        let checkouts = metrics.0.iter().filter(|(key, _)| {
            key.key().name() == names::POOL_WAIT
                && key.key().labels().any(|l| l.key() == "backend" && l.value() == backend)
        });
        let timed: usize = checkouts
            .map(|(_, value)| match value {
                DebugValue::Histogram(samples) => samples.len(),
                other => panic!("not a histogram: {other:?}"),
            })
            .sum();
        assert!(timed > 0, "{backend}: no pool checkout timed");
    }
}

/// 100 acquisitions of one lock by 4 threads (each released), one `try_lock` that finds it
/// held, and one hold renewed, then lost to `break_lock`.
fn exercise<B: DistributedLock>(backend: impl Fn() -> B, break_lock: impl Fn(&LockName)) {
    let options = LockOptions::builder().lease(Duration::from_secs(1)).build().unwrap();
    let client = LockClient::with_options(backend(), options);
    let lock = client.lock_named(unique_name("metrics-contended").as_str()).unwrap();
    let start = Barrier::new(THREADS);
    thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                start.wait();
                for _ in 0..PER_THREAD {
                    let guard = lock.lock().unwrap();
                    thread::sleep(Duration::from_micros(200));
                    guard.unlock().unwrap();
                }
            });
        }
    });

    let name = unique_name("metrics-lost");
    let lost = client.lock_named(name.as_str()).unwrap();
    let guard = lost.lock().unwrap();
    let rival = LockClient::new(backend());
    assert!(rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().is_none());
    // Renewed (every 333 ms) at least once before the lock is deleted underneath it.
    thread::sleep(Duration::from_millis(500));
    break_lock(&name);
    assert!(guard.lost_signal().wait_timeout(Duration::from_secs(5)), "the loss is reported");
    assert!(guard.unlock().is_err(), "a lost hold cannot be released");
}

/// A snapshot of every metric, by name.
struct Metrics(Vec<(CompositeKey, DebugValue)>);

impl Metrics {
    fn read(snapshotter: &Snapshotter) -> Self {
        Self(snapshotter.snapshot().into_vec().into_iter().map(|(key, _, _, value)| (key, value)).collect())
    }

    fn of<'a>(
        &'a self,
        name: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = (HashMap<&'a str, &'a str>, &'a DebugValue)> {
        self.0.iter().filter_map(move |(key, value)| {
            let labels: HashMap<_, _> =
                key.key().labels().map(|label| (label.key(), label.value())).collect();
            (key.key().name() == name && labels.get("kind") == Some(&kind)).then_some((labels, value))
        })
    }

    fn counter(&self, name: &str, kind: &str) -> u64 {
        self.of(name, kind)
            .map(|(_, value)| match value {
                DebugValue::Counter(count) => *count,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    fn counter_with(&self, name: &str, kind: &str, (label, wanted): (&str, &str)) -> u64 {
        self.of(name, kind)
            .filter(|(labels, _)| labels.get(label) == Some(&wanted))
            .map(|(_, value)| match value {
                DebugValue::Counter(count) => *count,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    fn samples(&self, name: &str, kind: &str) -> usize {
        self.of(name, kind)
            .map(|(_, value)| match value {
                DebugValue::Histogram(samples) => samples.len(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }
}
