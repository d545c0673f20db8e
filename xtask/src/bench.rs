//! `cargo xtask bench <backend>`: builds the `distlock-bench` binary in release mode (with the
//! backend's feature) and runs the workloads W1–W4 against the backend.

use clap::Args;

use crate::cmd::{self, Failure};

/// Options of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The backend to measure: `memory`, or a backend whose feature the bench knows (`redis`,
    /// `redlock`).
    pub backend: String,
    /// Also write the raw records to `DIR/<backend>/<workload>_r<run>.json`.
    #[arg(long, value_name = "DIR")]
    pub raw_dir: Option<std::path::PathBuf>,
    /// How many times to run the whole set.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Which workloads to run, comma-separated (`w1,w2,w3,w4`).
    #[arg(long, default_value = "w1,w2,w3,w4")]
    pub workloads: String,
}

/// The Cargo feature of `lock-testkit` a backend needs, if any.
fn feature_of(backend: &str) -> Option<&'static str> {
    match backend {
        "redis" | "redis-hash" | "redlock" => Some("redis"),
        _ => None,
    }
}

/// Runs the benchmark.
///
/// # Errors
/// When building or running the bench binary fails.
pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    let mut command = cmd::cargo();
    command.args(["run", "--release", "--quiet", "-p", "lock-testkit", "--bin", "distlock-bench"]);
    if let Some(feature) = feature_of(&args.backend) {
        command.args(["--features", feature]);
    }
    command.args(["--", &args.backend, "--runs", &args.runs.to_string(), "--workloads", &args.workloads]);
    if let Some(dir) = &args.raw_dir {
        command.arg("--raw-dir").arg(dir);
    }
    cmd::run(&mut command)
}
