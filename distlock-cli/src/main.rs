//! `distlock`: the command-line face of distlock.
//!
//! - `distlock bench <kind>`: the benchmark workloads W1–W4 against one backend kind, each
//!   result printed beside the physical limit measured in the same run (the server's round
//!   trip). `cargo xtask bench <kind>` builds this in release mode and runs it.
//! - `distlock kinds`: the backend kinds, and which of them this binary was built with.
//!
//! Backend kinds come from one table ([`kinds::KINDS`]): adding a backend adds a row there.

mod bench;
mod kinds;

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
    /// Run the benchmark workloads W1–W4 against one backend kind, beside the server round trip
    /// measured in the same run.
    Bench(bench::BenchArgs),
    /// List the backend kinds: name, Cargo feature, whether this binary has it, what it is.
    Kinds,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Kinds => {
            kinds::print_table();
            Ok(())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
