//! `cargo xtask compare`: installs the servers that are missing (as `cargo xtask test` does),
//! builds the `distlock` command in release mode and runs
//! `distlock compare --quick --out target/distlock-report` (or the options given).

use clap::Args;

use crate::cmd::{self, Failure};
use crate::install;

/// Options of `cargo xtask compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Do not check for (or install) the server programs the comparison starts.
    #[arg(long)]
    pub no_install: bool,
    /// Options for `distlock compare` (default: `--quick --out target/distlock-report`).
    #[arg(last = true, value_name = "COMPARE_ARGS")]
    pub compare_args: Vec<String>,
}

/// Runs the comparison.
///
/// # Errors
/// When installing, building or the comparison fails (a failed cell is a failure).
pub fn run(args: &CompareArgs) -> Result<(), Failure> {
    if !args.no_install {
        install::ensure_servers()?;
    }
    let mut command = cmd::cargo();
    command.args(["run", "--release", "--quiet", "-p", "distlock-cli", "--bin", "distlock", "--", "compare"]);
    if args.compare_args.is_empty() {
        command.args(["--quick", "--out", "target/distlock-report"]);
    } else {
        command.args(&args.compare_args);
    }
    cmd::run(&mut command)
}
