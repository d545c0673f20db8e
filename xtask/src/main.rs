//! Project automation for distlock, run as `cargo xtask <command>` (an alias defined in
//! `.cargo/config.toml`).
//!
//! - `cargo xtask test`: install the server programs the tests need (Debian/Ubuntu), check
//!   formatting, run clippy, and run every test of the workspace. CI runs this through `.ci/run`.
//! - `cargo xtask compare`: install the servers, then run `distlock compare --quick --out
//!   target/distlock-report` (release build): the docs' suite, the broken recipes and the
//!   workloads across every backend kind.
//! - `cargo xtask bench <backend>`: run the benchmark workloads W1–W6 (release build).
//!
//! Each command lives in its own module; this file only holds the command line.

mod bench;
mod cmd;
mod compare;
mod install;
mod lint;
mod test;
mod test_runner;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// distlock's project automation.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    task: Task,
}

/// The commands of `cargo xtask`.
#[derive(Debug, Subcommand)]
enum Task {
    /// Install the servers the tests need, then check formatting, lint and run all tests.
    ///
    /// The steps: make sure redis-server, PostgreSQL, MariaDB and ZooKeeper are installed (with
    /// apt-get on Debian/Ubuntu, only what is missing); `cargo fmt --all -- --check`; clippy
    /// with each backend feature on its own and the CLI without `compare`; `cargo doc` with
    /// warnings denied; `cargo package` of every published crate; clippy of the CLI as `cargo
    /// install` compiles it; every test of `cargo test --workspace --all-features`, built with
    /// clippy as the compiler's wrapper (so every target is linted with every feature, warnings
    /// denied), the binaries run side by side (a test that cannot get its server fails; none
    /// skips), with the seckill, reentrant and metrics examples of the same build. The lint
    /// steps (clippy per feature set, doc, package, the CLI as installed) run beside the rest at
    /// idle priority in `target/lint`. The first failing step stops the run (the lint with it;
    /// a failing lint step fails the run at its end); a table of the steps' times ends it.
    Test(TestArgs),
    /// Install the servers, build `distlock` in release mode and compare every backend kind:
    /// the docs' scenarios, the broken recipes and the workloads, as a matrix on the terminal and
    /// a report in `target/distlock-report/` (JSON, Markdown, HTML).
    Compare(compare::CompareArgs),
    /// Run the benchmark workloads W1–W6 against one backend, in release mode, each result
    /// printed beside the limit measured in the same run (the server's round trip).
    Bench(bench::BenchArgs),
}

/// Options of `cargo xtask test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Do not check for (or install) the server programs the tests start.
    #[arg(long)]
    pub no_install: bool,
    /// Skip `cargo fmt --check`, `cargo clippy`, `cargo doc`, `cargo package` and the CLI's clippy,
    /// for quick local runs.
    #[arg(long)]
    pub skip_lint: bool,
    /// Arguments passed on to `cargo test`, e.g. `-- redis` (a test-name filter) or
    /// `-- redis -- --nocapture`.
    #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
    pub test_args: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.task {
        Task::Test(args) => test::run(args),
        Task::Compare(args) => compare::run(args),
        Task::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("\nerror: {failure}");
            ExitCode::FAILURE
        }
    }
}
