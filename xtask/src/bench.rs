//! `cargo xtask bench <kind>`: builds the `distlock` command in release mode (with every backend
//! it knows) and runs `distlock bench <kind>`, the workloads W1–W6 against that backend kind.

use clap::Args;

use crate::cmd::{self, Failure};

/// Options of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The backend kind to measure (`distlock bench --help` lists them): `memory`, `redis`,
    /// `redis-hash`, `redlock`, …
    pub backend: String,
    /// Also write the raw records to `DIR/<backend>/<workload>_r<run>.json`.
    #[arg(long, value_name = "DIR")]
    pub raw_dir: Option<std::path::PathBuf>,
    /// How many times to run the whole set.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Which workloads to run, comma-separated (`w1,w2,w3,w4,w5,w6`).
    #[arg(long, default_value = "w1,w2,w3,w4,w5,w6")]
    pub workloads: String,
}

/// Runs the benchmark.
///
/// # Errors
/// When building or running the bench binary fails.
pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    let mut command = cmd::cargo();
    // The CLI's default features are every backend: the kind table says which feature a kind
    // needs, so nothing here has to know.
    command.args(["run", "--release", "--quiet", "-p", "distlock-cli", "--bin", "distlock", "--"]);
    command.args(["bench", &args.backend, "--runs", &args.runs.to_string(), "--workloads", &args.workloads]);
    if let Some(dir) = &args.raw_dir {
        command.arg("--raw-dir").arg(dir);
    }
    cmd::run(&mut command)
}
