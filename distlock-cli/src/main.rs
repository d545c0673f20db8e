//! `distlock`: the command-line face of distlock.
//!
//! - `distlock compare`: the docs' suite (S01–S16), the broken recipes (N01–N06) and the
//!   workloads W1–W3 across every backend kind, as a terminal matrix and a JSON, Markdown and
//!   HTML report. `cargo xtask compare` builds this in release mode and runs it.
//! - `distlock exec --url URL --name NAME -- CMD…`: holds a lock around a command, like
//!   `flock(1)`; `distlock inspect --url URL --name NAME`: what the server knows of one lock.
//! - `distlock elect --url URL --name NAME [--value V] -- CMD…`: runs a command while leader of
//!   an election; `distlock leader --url URL --name NAME [--follow]`: who leads it.
//! - `distlock bench <kind>`: the benchmark workloads W1–W6 against one backend kind, each
//!   result printed beside the physical limit measured in the same run (the server's round
//!   trip). `cargo xtask bench <kind>` builds this in release mode and runs it.
//! - `distlock kinds`: the backend kinds, and which of them this binary was built with.
//!
//! `compare`, `bench` and `kinds` come with the default feature `compare`; without it the binary
//! has `exec` and `inspect` only, and none of the test support or report dependencies. The
//! user's guide to every subcommand: [the `distlock` command][cli-guide] (rendered in the
//! `distlock` crate's docs).
//!
//! [cli-guide]: https://docs.rs/distlock/latest/distlock/guide/cli/index.html
//!
//! Backend kinds come from one table ([`kinds::KINDS`]): adding a backend adds a row there.

#[cfg(feature = "compare")]
mod bench;
#[cfg(feature = "compare")]
mod compare;
mod elect;
mod exec;
mod inspect;
#[cfg(feature = "compare")]
mod kinds;
mod server;
mod supervise;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// distlock: one distributed-lock API over many backends, and the tools to compare them.
#[derive(Debug, Parser)]
#[command(name = "distlock", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the docs' scenarios, the broken recipes and the workloads across every backend kind
    /// (or those named), and print the comparison matrix.
    #[cfg(feature = "compare")]
    Compare(compare::CompareArgs),
    /// Hold a distributed lock while a command runs, like flock(1): the command's exit status
    /// is distlock's; 75 if the lock is busy; 70 if it was lost while the command ran; 71 if it
    /// could not be taken (bad URL, unreachable server) or the command not started.
    Exec(exec::ExecArgs),
    /// Campaign in an election and run a command while leader: the command's exit status is
    /// distlock's; 75 if another candidate leads (`--no-wait`, `--wait`); 70 if the leadership
    /// was lost while the command ran; 71 if the campaign could not run.
    Elect(elect::ElectArgs),
    /// Print an election's leader: the value it proclaimed and its fencing token (`--follow`:
    /// each change, as the server reports it).
    Leader(elect::LeaderArgs),
    /// Show what the server knows of one lock: holder, remaining lease, fencing counter,
    /// waiters (for the backends that keep them where a client can read them).
    Inspect(inspect::InspectArgs),
    /// Run the benchmark workloads W1–W6 against one backend kind, beside the server round trip
    /// measured in the same run.
    #[cfg(feature = "compare")]
    Bench(bench::BenchArgs),
    /// List the backend kinds: name, Cargo feature, whether this binary has it, what it is.
    #[cfg(feature = "compare")]
    Kinds,
}

fn main() -> ExitCode {
    // A backend scenario's second process (etcd's E02), which exits when done.
    #[cfg(feature = "compare")]
    kinds::serve_scenario_child();
    // S04's holder process: the suite re-runs this binary as it re-runs a test binary, with the
    // holder's test name and libtest's `--exact`.
    #[cfg(feature = "compare")]
    if let Some(code) = kinds::run_s04_holder() {
        return code;
    }
    let cli = Cli::parse();
    match &cli.command {
        #[cfg(feature = "compare")]
        Command::Compare(args) => match compare::run(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => failed(&error),
        },
        Command::Exec(args) => exec::run(args),
        Command::Elect(args) => elect::run(args),
        Command::Leader(args) => elect::run_leader(args),
        Command::Inspect(args) => inspect::run(args),
        #[cfg(feature = "compare")]
        Command::Bench(args) => bench::run(args).map_or_else(|error| failed(&error), |()| ExitCode::SUCCESS),
        #[cfg(feature = "compare")]
        Command::Kinds => {
            kinds::print_table();
            ExitCode::SUCCESS
        }
    }
}

/// Reports a command's failure.
#[cfg(feature = "compare")]
fn failed(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}
