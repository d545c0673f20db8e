//! `distlock-bench`: runs the workloads W1–W4 against one backend and prints each result beside
//! the physical limit measured in the same run (the server's round trip).
//!
//! `cargo xtask bench <backend>` builds this in release mode and runs it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::Value;

use lock_testkit::suite::{MemoryTarget, SuiteTarget};
use lock_testkit::workload::{self, Percentiles};

/// Benchmark distlock backends with workloads W1–W4.
#[derive(Debug, Parser)]
struct Args {
    /// The backend to measure.
    backend: Backend,
    /// Also write the raw records to `DIR/<backend>/<workload>_r<run>.json`.
    #[arg(long, value_name = "DIR")]
    raw_dir: Option<PathBuf>,
    /// How many times to run the whole set.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Which workloads to run.
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,w4")]
    workloads: Vec<Workload>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// The in-process reference backend.
    Memory,
    /// Redis, single node, `SET NX PX` layout (feature `redis`).
    Redis,
    /// Redis, single node, reentrant-hash layout (feature `redis`).
    RedisHash,
    /// Redlock over five independent Redis nodes (feature `redis`).
    Redlock,
}

impl Backend {
    /// The name on the command line (`redis-hash`), which also names its raw-record directory.
    fn name(self) -> String {
        self.to_possible_value().map_or_else(|| format!("{self:?}"), |value| value.get_name().to_owned())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    W1,
    W2,
    W3,
    W4,
}

/// The measured limit every result is compared with.
struct Peer {
    /// Measures the round trip to the server now; `None` for in-process backends. It is measured
    /// right before and right after each workload, and the workload is compared with the mean:
    /// on a shared machine the round trip drifts, and a single early measurement would flatter or
    /// wrong the result at random.
    probe: Option<Probe>,
    /// How the limit was measured, for the raw records.
    description: String,
    /// For Redlock: the single-node W1 pair p50 measured in the same run, the yardstick of
    /// "Redlock W1 p50 ≤ 2 × single-node p50".
    single_node_w1_p50: Option<Duration>,
}

/// A round-trip measurement.
type Probe = Box<dyn Fn() -> Result<Duration, String>>;

/// The round trip measured before and after one workload.
#[derive(Clone, Copy)]
struct RoundTrip {
    before: Duration,
    after: Duration,
}

impl RoundTrip {
    fn mean(self) -> Duration {
        (self.before + self.after) / 2
    }
}

impl Peer {
    /// Runs `workload` between two round-trip measurements.
    fn around<R>(
        &self,
        workload: impl FnOnce() -> Result<R, String>,
    ) -> Result<(R, Option<RoundTrip>), String> {
        let Some(probe) = &self.probe else { return Ok((workload()?, None)) };
        let before = probe()?;
        let result = workload()?;
        Ok((result, Some(RoundTrip { before, after: probe()? })))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.backend {
        Backend::Memory => {
            let peer = Peer {
                probe: None,
                description: "in-process (no server round trip)".into(),
                single_node_w1_p50: None,
            };
            run_all(&MemoryTarget::new(), &peer, &args)
        }
        Backend::Redis | Backend::RedisHash | Backend::Redlock => servers::run(args.backend, &args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_all<T: SuiteTarget>(target: &T, peer: &Peer, args: &Args) -> Result<(), String> {
    let label = target.label();
    println!("backend: {label}");
    println!("limit:   {}", peer.description);
    let mut w1_rate = None;
    for run in 1..=args.runs {
        if args.runs > 1 {
            println!("-- run {run} of {}", args.runs);
        }
        for &workload in &args.workloads {
            let (raw, round_trip) = match workload {
                Workload::W1 => {
                    let (report, round_trip) =
                        peer.around(|| workload::w1_uncontended(target).map_err(|e| format!("W1: {e}")))?;
                    let rate = report.pairs_per_second();
                    w1_rate = Some(rate);
                    let Percentiles { p50, p99 } = report.latency();
                    let limit = round_trip.map(|rtt| 1.0 / (2.0 * rtt.mean().as_secs_f64()));
                    println!(
                        "W1 uncontended  {rate:>10.0} pairs/s{}  pair p50 {} p99 {}",
                        ratio(rate, limit, "1/(2×RTT)"),
                        show_ns(p50),
                        show_ns(p99)
                    );
                    if let Some(single) = peer.single_node_w1_p50 {
                        let times = p50 as f64 / single.as_nanos() as f64;
                        println!(
                            "                pair p50 {} = {times:.2} × single-node W1 pair p50 {} (target ≤ 2.00: {})",
                            show_ns(p50),
                            show(single),
                            if times <= 2.0 { "met" } else { "NOT met" }
                        );
                    }
                    print_round_trip(round_trip);
                    (report.to_json(), round_trip)
                }
                Workload::W2 => {
                    let (report, round_trip) =
                        peer.around(|| workload::w2_contended(target).map_err(|e| format!("W2: {e}")))?;
                    let handoffs = report.handoffs();
                    let (min, max) = report.per_worker_min_max();
                    let fairness = if max == 0 { 0.0 } else { min as f64 / max as f64 };
                    let rtt4 = round_trip.map(|rtt| 4.0 * rtt.mean().as_secs_f64() * 1e9);
                    println!(
                        "W2 contended    {:>10.0} acq/s  lost updates {}  overlaps {}  errors {}/{}",
                        report.acquisitions_per_second(),
                        report.lost_updates(),
                        report.overlaps(),
                        report.acquire_errors,
                        report.release_errors
                    );
                    println!(
                        "                hand-off p50 {} p99 {}; cross-worker p50 {}{} p99 {} ({:.0} % of hand-offs); per-worker min/max {min}/{max} = {fairness:.2}",
                        show_ns(handoffs.all.p50),
                        show_ns(handoffs.all.p99),
                        show_ns(handoffs.cross_worker.p50),
                        rtt4.map_or(String::new(), |limit| format!(
                            " = {:.2} × 4×RTT",
                            handoffs.cross_worker.p50 as f64 / limit
                        )),
                        show_ns(handoffs.cross_worker.p99),
                        handoffs.cross_worker_share * 100.0
                    );
                    print_round_trip(round_trip);
                    (report.to_json(), round_trip)
                }
                Workload::W3 => {
                    let report = workload::w3_independent(target).map_err(|e| format!("W3: {e}"))?;
                    let rate = report.pairs_per_second();
                    let Percentiles { p50, p99 } = report.latency();
                    println!(
                        "W3 independent  {rate:>10.0} pairs/s{}  pair p50 {} p99 {}",
                        w1_rate.map_or(String::new(), |w1| format!(" = {:.2} × W1", rate / w1)),
                        show_ns(p50),
                        show_ns(p99)
                    );
                    (report.to_json(), None)
                }
                Workload::W4 => {
                    let report = workload::w4_renewal_scale(target).map_err(|e| format!("W4: {e}"))?;
                    println!(
                        "W4 renewal      {} locks of 1 s held 30 s: {} lost; {} renewal thread(s) of {} threads; RSS {:.1} MiB, +{:.1} MiB for the held locks; acquired in {}",
                        report.locks,
                        report.lost,
                        report.renewal_threads,
                        report.process_threads,
                        report.rss_kib as f64 / 1024.0,
                        report.rss_kib.saturating_sub(report.rss_before_kib) as f64 / 1024.0,
                        show_ns(report.acquire_ns)
                    );
                    (report.to_json(), None)
                }
            };
            if let Some(dir) = &args.raw_dir {
                write_raw(
                    dir,
                    &args.backend.name(),
                    &label,
                    workload,
                    run,
                    with_round_trip(raw, round_trip),
                    peer,
                )?;
            }
        }
    }
    Ok(())
}

fn write_raw(
    dir: &Path,
    backend: &str,
    label: &str,
    workload: Workload,
    run: usize,
    mut raw: Value,
    peer: &Peer,
) -> Result<(), String> {
    let dir = dir.join(backend);
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    if let Value::Object(fields) = &mut raw {
        fields.insert("backend".into(), label.into());
        fields.insert("run".into(), run.into());
        fields.insert(
            "peer".into(),
            serde_json::json!({
                "measured": peer.description,
                "single_node_w1_p50_ns": peer.single_node_w1_p50.map(|p50| p50.as_nanos() as u64),
            }),
        );
    }
    let name = format!("{}_r{run}.json", format!("{workload:?}").to_lowercase());
    let path = dir.join(name);
    fs::write(&path, raw.to_string()).map_err(|e| format!("write {}: {e}", path.display()))
}

/// `raw` with the round trip it was compared with (if any) as `round_trip_{before,after,mean}_ns`.
fn with_round_trip(mut raw: Value, round_trip: Option<RoundTrip>) -> Value {
    if let (Value::Object(fields), Some(rtt)) = (&mut raw, round_trip) {
        for (key, value) in [("before", rtt.before), ("after", rtt.after), ("mean", rtt.mean())] {
            fields.insert(format!("round_trip_{key}_ns"), (value.as_nanos() as u64).into());
        }
    }
    raw
}

/// Prints the round trip a workload was compared with.
fn print_round_trip(round_trip: Option<RoundTrip>) {
    if let Some(rtt) = round_trip {
        println!(
            "                round trip p50 {} before, {} after: compared with their mean {}",
            show(rtt.before),
            show(rtt.after),
            show(rtt.mean())
        );
    }
}

fn ratio(value: f64, limit: Option<f64>, what: &str) -> String {
    limit.map_or(String::new(), |limit| format!(" = {:.2} × {what} ({limit:.0})", value / limit))
}

fn show(duration: Duration) -> String {
    format!("{duration:.1?}")
}

fn show_ns(ns: u64) -> String {
    show(Duration::from_nanos(ns))
}

/// The server backends: each starts its own harness servers (or uses the ones `DISTLOCK_REDIS_URL`
/// / `DISTLOCK_REDIS_NODES` name) and measures their round trip in the same run.
#[cfg(feature = "redis")]
mod servers {
    use std::time::{Duration, Instant};

    use lock_testkit::redis::RedisTarget;
    use lock_testkit::redlock::{self, RedlockTarget};
    use lock_testkit::suite::SuiteTarget as _;
    use lock_testkit::workload::{self, Percentiles};

    use super::{run_all, show, Args, Backend, Peer};

    /// How many PINGs measure the round trip (after as many again to warm up).
    const PINGS: usize = 10_000;

    pub(super) fn run(backend: Backend, args: &Args) -> Result<(), String> {
        match backend {
            Backend::Redlock => {
                // The yardstick first: single-node W1 on a server of its own, in this same run.
                let single = RedisTarget::set_nx();
                println!("single-node reference: W1 on {} at {}", single.label(), single.url());
                let report = workload::w1_uncontended(&single).map_err(|e| format!("single-node W1: {e}"))?;
                let p50 = Duration::from_nanos(report.latency().p50);
                println!("single-node W1 pair p50 {}", show(p50));
                let target = RedlockTarget::shared();
                let first = target.urls().first().ok_or("no Redlock nodes")?.clone();
                let probe_url = first.clone();
                let peer = Peer {
                    probe: Some(Box::new(move || ping_p50(&probe_url))),
                    description: format!(
                        "round trip = p50 of {PINGS} PINGs on one connection to node 1 of {} ({first}), as `redis-benchmark -c 1 -t ping`, before and after each workload",
                        target.urls().len()
                    ),
                    single_node_w1_p50: Some(p50),
                };
                run_all(&target, &peer, args)
            }
            Backend::RedisHash => single(RedisTarget::reentrant_hash(), args),
            _ => single(RedisTarget::set_nx(), args),
        }
    }

    fn single(target: RedisTarget, args: &Args) -> Result<(), String> {
        let url = target.url().to_owned();
        let peer = Peer {
            probe: Some(Box::new(move || ping_p50(&url))),
            description: format!(
                "round trip = p50 of {PINGS} PINGs on one connection to {}, as `redis-benchmark -c 1 -t ping`, before and after each workload",
                target.url()
            ),
            single_node_w1_p50: None,
        };
        run_all(&target, &peer, args)
    }

    /// The median round trip of `PING` on one connection to `url`.
    fn ping_p50(url: &str) -> Result<Duration, String> {
        let mut connection = redlock::probe(url).map_err(|e| format!("connecting to {url}: {e}"))?;
        let mut ping = || redis_ping(&mut connection);
        for _ in 0..PINGS {
            ping()?;
        }
        let mut samples = Vec::with_capacity(PINGS);
        for _ in 0..PINGS {
            let started = Instant::now();
            ping()?;
            samples.push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        Ok(Duration::from_nanos(Percentiles::of(&samples).p50))
    }

    fn redis_ping(connection: &mut lock_redis::redis::Connection) -> Result<(), String> {
        lock_redis::redis::cmd("PING").query::<()>(connection).map_err(|e| format!("PING: {e}"))
    }
}

#[cfg(not(feature = "redis"))]
mod servers {
    use super::{Args, Backend};

    pub(super) fn run(backend: Backend, _: &Args) -> Result<(), String> {
        Err(format!(
            "{backend:?} needs the bench built with the `redis` feature: run `cargo xtask bench {}`",
            match backend {
                Backend::RedisHash => "redis-hash",
                Backend::Redlock => "redlock",
                _ => "redis",
            }
        ))
    }
}
