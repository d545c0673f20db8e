//! `distlock bench <kind>`: runs the workloads W1–W6 against one backend kind and prints each
//! result beside the physical limit measured in the same run (the server's round trip); M1 on
//! request: W1 without and with a metrics recorder.

mod metrics_overhead;
mod raw;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use lock_testkit::workload::{Percentiles, RoundTripProbe, W1Limit, W1Report, W6_HOLD, W6_PERMITS};

use lock_testkit::workload::Scale;

use crate::kinds::{KindTarget, Opened, Selected};

/// Options of `distlock bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The backend kind to measure (`memory`, `redis`, `redis-hash`, `redlock`, …; `<kind>-tls`
    /// for its TLS twin on TLS-only throwaway servers).
    kind: String,
    /// Use these servers instead of starting throwaway ones: a URL (`redis://…`), or a
    /// comma-separated list for multi-node kinds (Redlock). Every name then starts with
    /// `distlock-bench:`, and what the runs left under it is deleted at the end.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Also write the raw records to `DIR/<kind>/<workload>_r<run>.json`.
    #[arg(long, value_name = "DIR")]
    raw_dir: Option<PathBuf>,
    /// How many times to run the whole set.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Also measure where a lock pair's time goes on the `--url` server (always done on throwaway
    /// servers): the server time per operation on the Redis kinds, which resets the server's
    /// statistics (`CONFIG RESETSTAT`); the request floor on ZooKeeper (nodes under the root);
    /// the lock's pair beside etcd's own Lock service on etcd (keys under the namespace).
    #[arg(long)]
    server_time: bool,
    /// Which workloads to run (`m1`: W1 without and with a metrics recorder, five times each).
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,w4,w5,w6")]
    workloads: Vec<Workload>,
}

/// One benchmark workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Workload {
    W1,
    W2,
    W3,
    W4,
    W5,
    W6,
    M1,
}

/// The round trip measured before and after one workload. On a shared machine the round trip
/// drifts, and a single early measurement would flatter or wrong the result at random: each
/// workload is compared with the mean of the two.
#[derive(Clone, Copy)]
pub(crate) struct RoundTrip {
    pub(crate) before: Duration,
    pub(crate) after: Duration,
}

impl RoundTrip {
    pub(crate) fn mean(self) -> Duration {
        (self.before + self.after) / 2
    }
}

/// Runs the benchmark `args` asks for.
///
/// # Errors
/// An unknown kind, servers that cannot be started or reached, or a failing workload.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let selected = Selected::find(&args.kind)?;
    let kind = selected.kind;
    if args.url.is_some() {
        lock_testkit::suite::set_name_namespace(NAMESPACE);
    }
    let opened = kind.open(selected.servers(args.url.as_deref())?)?;
    let measured = run_on(args, &selected, &opened);
    // On a user's own servers, leave nothing behind (also after a failed workload): every
    // workload's names start with NAMESPACE. (Rows and fence keys outlive their locks by
    // design, so that a fence never restarts.)
    if args.url.is_some() {
        let deleted =
            opened.target.clean_up(NAMESPACE).map_err(|error| format!("cleaning up `{NAMESPACE}`: {error}"));
        match (&measured, deleted) {
            (_, Ok(deleted)) => eprintln!("deleted {deleted} keys or rows under `{NAMESPACE}`"),
            (Ok(()), Err(error)) => return Err(error),
            (Err(_), Err(error)) => eprintln!("{error}"),
        }
    }
    measured
}

/// The prefix of every name a benchmark on a user's servers (`--url`) uses.
const NAMESPACE: &str = "distlock-bench:";

/// [`run`] on the opened kind.
fn run_on(args: &BenchArgs, selected: &Selected, opened: &Opened) -> Result<(), String> {
    let probe = opened.target.round_trip().map_err(|e| format!("round trip: {e}"))?;
    println!("backend: {}", opened.target.label());
    println!(
        "limit:   {}",
        probe.as_ref().map_or("in-process (no server round trip)", RoundTripProbe::description)
    );
    // Kinds compared with a single server (Redlock, Cluster, Sentinel): its W1 pair p50, measured
    // in blocks alternated with the kind's own W1 (see `measure`).
    // Made only when W1 runs (for a cluster it starts servers of its own).
    let reference = opened
        .single_node_reference
        .as_ref()
        .filter(|_| args.workloads.contains(&Workload::W1))
        .map(|reference| (reference.make)());
    if let Some(reference) = &reference {
        println!("single-node reference: W1 on {}, alternated with this kind's", reference.label());
    }
    let mut single_node_w1_p50 = None;
    let mut w1_rate = None;
    for run in 1..=args.runs {
        if args.runs > 1 {
            println!("-- run {run} of {}", args.runs);
        }
        if let Some(breakdown) =
            opened.time_breakdown.as_ref().filter(|_| args.url.is_none() || args.server_time)
        {
            // A measurement, not a workload: its failure (CONFIG refused on a managed server,
            // say) is reported and the workloads still run.
            match breakdown() {
                Ok(report) => println!("{report}"),
                Err(error) => println!("time breakdown: not measured: {error}"),
            }
        }
        for &workload in &args.workloads {
            let (record, round_trip) = measure(
                workload,
                opened,
                reference.as_deref(),
                &mut single_node_w1_p50,
                probe.as_ref(),
                &mut w1_rate,
            )?;
            if let Some(dir) = &args.raw_dir {
                let limit = probe.as_ref().map(RoundTripProbe::description);
                raw::write(
                    dir,
                    selected.name(),
                    opened,
                    // Measured with W1, in its blocks: on W1's record only.
                    single_node_w1_p50.filter(|_| workload == Workload::W1),
                    limit,
                    workload,
                    run,
                    record,
                    round_trip,
                )?;
            }
        }
    }
    Ok(())
}

/// Runs `workload` (W2 between two round-trip measurements), prints it, and returns its raw
/// record.
fn measure(
    workload: Workload,
    opened: &Opened,
    single_node: Option<&dyn KindTarget>,
    single_node_w1_p50: &mut Option<Duration>,
    probe: Option<&RoundTripProbe>,
    w1_rate: &mut Option<f64>,
) -> Result<(serde_json::Value, Option<RoundTrip>), String> {
    let target: &dyn KindTarget = &*opened.target;
    match workload {
        Workload::W1 => {
            // W1 times a round trip after each pair itself: no probe around it. With a single-node
            // reference, both run in alternated blocks (a round trip here moves between about 15
            // and 80 µs from one minute to the next: only ratios within one window count).
            let (report, single) = match single_node {
                None => (target.w1(Scale::FULL).map_err(|e| format!("W1: {e}"))?, None),
                Some(single) => {
                    let (report, single) = alternated_w1(target, single)?;
                    (report, Some(single))
                }
            };
            let rate = report.pairs_per_second();
            *w1_rate = Some(rate);
            let Percentiles { p50, p99 } = report.latency();
            let limit = match (report.limit(), report.round_trip()) {
                (W1Limit::Ratio(ratio), Some(rtt)) => {
                    format!(" = {ratio:.2} × 1/(2×RTT) ({:.0})", 1.0 / (2.0 * rtt.as_secs_f64()))
                }
                (W1Limit::ProbeNotALowerBound(ratio), _) => format!(
                    " = no ratio: the pairs ran faster than two round trips ({ratio:.2} × 1/(2×RTT)), so the \
                     probe is no lower bound here (a measurement problem)"
                ),
                _ => String::new(),
            };
            println!(
                "W1 uncontended  {rate:>10.0} pairs/s{limit}  pair p50 {} p99 {}",
                show_ns(p50),
                show_ns(p99)
            );
            if let (Some(single), Some(reference)) = (single, &opened.single_node_reference) {
                let single_p50 = single.latency().p50;
                *single_node_w1_p50 = Some(Duration::from_nanos(single_p50));
                let times = p50 as f64 / single_p50 as f64;
                let max = reference.max_ratio;
                println!(
                    "                pair p50 {} = {times:.2} × single-node W1 pair p50 {} in the same blocks \
                     (target ≤ {max:.2}: {}); single node {:.0} pairs/s, round trip {}",
                    show_ns(p50),
                    show_ns(single_p50),
                    if times <= max { "met" } else { "NOT met" },
                    single.pairs_per_second(),
                    single.round_trip().map_or_else(|| "-".into(), show)
                );
            }
            if let Some(rtt) = report.round_trip() {
                println!("                round trip p50 {}, timed after each pair", show(rtt));
            }
            Ok((report.to_json(), None))
        }
        Workload::W2 => {
            // The reference runs in the same window, after the lock's W2 (its round trips bracket
            // both).
            // A reference that fails is reported; the lock's own W2 stands.
            let ((report, reference), round_trip) = around(probe, || {
                let report = target.w2(Scale::FULL).map_err(|e| format!("W2: {e}"))?;
                let reference =
                    opened.w2_reference.as_ref().map(|reference| (reference, (reference.run)(Scale::FULL)));
                Ok((report, reference))
            })?;
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
            let mut record = report.to_json();
            match reference {
                Some((reference, Ok(plain)))
                    if plain.records.is_empty() || plain.acquire_errors + plain.release_errors > 0 =>
                {
                    // A recipe that could not run cleanly (an ACL, a read-only replica) measured
                    // nothing to compare with.
                    println!(
                        "                reference: {} not measured: {} acquisitions, errors {}/{}",
                        reference.label,
                        plain.records.len(),
                        plain.acquire_errors,
                        plain.release_errors
                    );
                    record["reference"] =
                        serde_json::json!({"recipe": reference.label, "report": plain.to_json()});
                }
                Some((reference, Ok(plain))) => {
                    let ratio = report.acquisitions_per_second() / plain.acquisitions_per_second();
                    let verdict = reference.min_ratio.map_or(String::new(), |min| {
                        format!(" (target ≥ {min:.2}: {})", if ratio >= min { "met" } else { "NOT met" })
                    });
                    let (low, high) = plain.per_worker_min_max();
                    let plain_handoffs = plain.handoffs();
                    println!(
                        "                reference: {} {:.0} acq/s, lost updates {}, overlaps {}, \
                         cross-worker hand-offs {:.0} % (p50 {}), per-worker min/max {low}/{high}; W2 = {ratio:.2} × it{verdict}",
                        reference.label,
                        plain.acquisitions_per_second(),
                        plain.lost_updates(),
                        plain.overlaps(),
                        plain_handoffs.cross_worker_share * 100.0,
                        show_ns(plain_handoffs.cross_worker.p50),
                    );
                    record["reference"] = serde_json::json!({
                        "recipe": reference.label,
                        "ratio": ratio,
                        "target": reference.min_ratio,
                        "report": plain.to_json(),
                    });
                }
                Some((reference, Err(error))) => {
                    println!("                reference: {} not measured: {error}", reference.label);
                }
                None => {}
            }
            print_round_trip(round_trip);
            Ok((record, round_trip))
        }
        Workload::W3 => {
            let report = target.w3(Scale::FULL).map_err(|e| format!("W3: {e}"))?;
            let rate = report.pairs_per_second();
            let Percentiles { p50, p99 } = report.latency();
            println!(
                "W3 independent  {rate:>10.0} pairs/s{}  pair p50 {} p99 {}",
                w1_rate.map_or(String::new(), |w1| format!(" = {:.2} × W1", rate / w1)),
                show_ns(p50),
                show_ns(p99)
            );
            Ok((report.to_json(), None))
        }
        Workload::W4 => {
            if let Some(reason) = target.w4_not_applicable().map_err(|e| format!("W4: {e}"))? {
                println!("W4 renewal      n/a: {reason}");
                return Ok((serde_json::json!({"workload": "w4", "not_applicable": reason}), None));
            }
            let report = target.w4().map_err(|e| format!("W4: {e}"))?;
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
            Ok((report.to_json(), None))
        }
        Workload::W5 | Workload::W6 => shared_mode(workload, target),
        Workload::M1 => {
            let overhead = metrics_overhead::measure(target)?;
            let ratio = overhead.ratio();
            println!(
                "M1 metrics      {:>10.0} pairs/s with a Prometheus recorder = {ratio:.3} × {:.0} without one (W1 medians of 5 alternating runs; target ≥ 0.97: {})",
                overhead.with,
                overhead.without,
                if ratio >= 0.97 { "met" } else { "NOT met" }
            );
            let record = serde_json::json!({
                "workload": "m1",
                "w1_pairs_per_second_without_recorder": overhead.without,
                "w1_pairs_per_second_with_recorder": overhead.with,
                "ratio": ratio,
            });
            Ok((record, None))
        }
    }
}

/// W5 and W6 print n/a for a kind without read-write locks or semaphores.
fn shared_mode(
    workload: Workload,
    target: &dyn KindTarget,
) -> Result<(serde_json::Value, Option<RoundTrip>), String> {
    let outcome = match workload {
        Workload::W5 => target.w5(Scale::FULL).map(|report| {
            let reads = report.reads_per_second();
            let mutex = report.mutex_pairs_per_second();
            println!(
                "W5 read-mostly  {reads:>10.0} reads/s + {:.0} writes/s = {:.2} × the mutex's {mutex:.0} pairs/s (8 workers, 90 % reads); overlaps {}",
                report.writes_per_second(),
                reads / mutex,
                report.overlaps
            );
            report.to_json()
        }),
        _ => target.w6(Scale::FULL).map(|report| {
            let rate = report.acquisitions_per_second();
            println!(
                "W6 semaphore    {rate:>10.0} acq/s = {:.2} × {} permits / {} hold  max holders {} of {} (8 workers)",
                rate * W6_HOLD.as_secs_f64() / f64::from(W6_PERMITS),
                W6_PERMITS,
                show(W6_HOLD),
                report.max_holders,
                W6_PERMITS
            );
            report.to_json()
        }),
    };
    let label = format!("{workload:?}");
    match outcome {
        Ok(record) => Ok((record, None)),
        Err(error @ distlock::Error::Unsupported { .. }) => {
            println!(
                "{label} {:<13} n/a: {error}",
                if workload == Workload::W5 { "read-mostly" } else { "semaphore" }
            );
            Ok((
                serde_json::json!({"workload": label.to_lowercase(), "not_applicable": error.to_string()}),
                None,
            ))
        }
        Err(error) => Err(format!("{label}: {error}")),
    }
}

/// Runs `workload` between two round-trip measurements (none in process).
pub(crate) fn around<R>(
    probe: Option<&RoundTripProbe>,
    workload: impl FnOnce() -> Result<R, String>,
) -> Result<(R, Option<RoundTrip>), String> {
    let Some(probe) = probe else { return Ok((workload()?, None)) };
    let before = probe.measure()?;
    let result = workload()?;
    Ok((result, Some(RoundTrip { before, after: probe.measure()? })))
}

/// W1 of `target` and of its single-node `reference` in alternated blocks ([`W1_BLOCKS`] of each,
/// the order swapped each time), each block's pairs added to its side's report.
fn alternated_w1(
    target: &dyn KindTarget,
    reference: &dyn KindTarget,
) -> Result<(W1Report, W1Report), String> {
    let block = Scale { w1_pairs: Scale::FULL.w1_pairs / W1_BLOCKS, ..Scale::FULL };
    let (mut mine, mut theirs): (Option<W1Report>, Option<W1Report>) = (None, None);
    for round in 0..W1_BLOCKS {
        for first in [round % 2 == 0, round % 2 != 0] {
            let (side, report) = if first {
                (&mut mine, target.w1(block).map_err(|e| format!("W1: {e}"))?)
            } else {
                (&mut theirs, reference.w1(block).map_err(|e| format!("single-node W1: {e}"))?)
            };
            match side {
                Some(sum) => sum.append(report),
                None => *side = Some(report),
            }
        }
    }
    Ok((mine.ok_or("no W1 block")?, theirs.ok_or("no single-node W1 block")?))
}

/// How many blocks of W1 each side runs when a kind is compared with a single node.
const W1_BLOCKS: usize = 4;

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

fn show(duration: Duration) -> String {
    format!("{duration:.1?}")
}

fn show_ns(ns: u64) -> String {
    show(Duration::from_nanos(ns))
}
