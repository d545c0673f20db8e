//! What the `metrics` feature records, printed by `metrics-util`'s debugging recorder after a
//! small contended run: 8 threads take turns on one lock 25 times each.
//!
//! ```text
//! cargo run --example metrics --features metrics                       # in-memory backend
//! cargo run --example metrics --features metrics,redis -- redis://127.0.0.1:6379/ [redis-hash]
//! cargo run --example metrics --features metrics,postgres -- postgres://user:pw@127.0.0.1/db pg-row
//! ```
//!
//! A service installs an exporter instead (`metrics-exporter-prometheus`, …) — before building
//! its clients, as here.

use std::error::Error;
use std::thread;
use std::time::Duration;

use distlock::{parse_url_opts, ConnectOptions, DistributedLock, LockClient, LockOptions, MemoryBackend};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

const THREADS: usize = 8;
const TURNS: usize = 25;

fn main() -> Result<(), Box<dyn Error>> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let target = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    if target == "memory" {
        contend(MemoryBackend::new())?;
    } else {
        let mut options = ConnectOptions::new();
        if let Some(kind) = std::env::args().nth(2) {
            options = options.kind(kind.parse()?);
        }
        let backend = parse_url_opts(&target, &options)?;
        backend.ensure_schema()?;
        contend(backend)?;
    }

    println!("{:<40} {:<44} value", "metric", "labels");
    let mut rows: Vec<_> = snapshotter.snapshot().into_vec();
    rows.sort_by(|(a, ..), (b, ..)| a.key().name().cmp(b.key().name()));
    for (key, unit, _, value) in rows {
        let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let value = match value {
            DebugValue::Counter(count) => count.to_string(),
            DebugValue::Gauge(gauge) => gauge.to_string(),
            DebugValue::Histogram(samples) => {
                let mut samples: Vec<f64> = samples.iter().map(|sample| sample.into_inner()).collect();
                samples.sort_by(f64::total_cmp);
                let at =
                    |q: f64| samples.get(((samples.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0.0);
                let unit = unit.map_or("", |unit| unit.as_canonical_label());
                format!("n={} p50={:.6}{unit} p99={:.6}{unit}", samples.len(), at(0.5), at(0.99))
            }
        };
        println!("{:<40} {:<44} {value}", key.key().name(), labels.join(","));
    }
    Ok(())
}

/// Takes turns on one lock from several threads.
fn contend<B: DistributedLock>(backend: B) -> distlock::Result<()> {
    let client =
        LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(5)).build()?);
    let lock = client.lock_named("metrics-example")?;
    thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| -> distlock::Result<()> {
                    for _ in 0..TURNS {
                        let guard = lock.lock()?;
                        thread::sleep(Duration::from_micros(500));
                        guard.unlock()?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|worker| worker.join().expect("a worker panicked"))
    })?;
    client.close()
}
