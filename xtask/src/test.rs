//! The `cargo xtask test` pipeline: install the servers, check formatting, lint, run the tests.
//!
//! The steps run in order and the first failure stops the pipeline; the lint steps (`lint.rs`)
//! run beside them at idle priority, and the pipeline waits for them at the end. Each step prints
//! a line with its outcome and how long it took, so a CI log shows where the time went.

use std::process::Command;
use std::time::Instant;

use crate::cmd::{self, Failure};
use crate::install;
use crate::lint::{self, Beside};
use crate::test_runner;
use crate::TestArgs;

/// One step of the pipeline.
struct Step {
    /// Its short name in the log, e.g. `clippy`.
    name: &'static str,
    /// What it does.
    action: Action,
}

/// What a step does.
enum Action {
    /// Make sure the server programs are installed ([`install::ensure_servers`]).
    InstallServers,
    /// Build every test target (linting it, unless `--skip-lint`), then run the test binaries
    /// and the examples several at a time ([`test_runner::run`]).
    RunTests { lint: bool },
    /// Run a command, which must succeed.
    Run(Command),
}

/// Runs the pipeline that `args` asks for.
///
/// # Errors
///
/// If a step fails; the message names the step and why it failed.
pub fn run(args: &TestArgs) -> Result<(), Failure> {
    let steps = plan(args);
    let count = steps.len();
    let started = Instant::now();
    // Started once the servers (and protoc, which etcd-client's build script runs) are there.
    let mut lint_steps = Some(lint::plan(args)).filter(|steps| !steps.is_empty());
    let mut beside = None;
    let mut timings = Vec::with_capacity(count);
    let mut outcome = Ok(());
    for (index, step) in steps.into_iter().enumerate() {
        if !matches!(step.action, Action::InstallServers) {
            beside = beside.or_else(|| lint_steps.take().map(Beside::start));
        }
        let label = format!("step {}/{count} ({})", index + 1, step.name);
        println!("\n==> {label}");
        let step_started = Instant::now();
        let result = match step.action {
            Action::InstallServers => install::ensure_servers(),
            Action::RunTests { lint } => test_runner::run(lint),
            Action::Run(mut command) => cmd::run(&mut command),
        };
        let elapsed = step_started.elapsed();
        timings.push((label.clone(), elapsed, result.is_ok()));
        if let Err(failure) = result {
            println!("==> {label} failed after {}", cmd::format_duration(elapsed));
            outcome = Err(failure.context(format!("{label} failed")));
            break;
        }
        println!("==> {label} passed in {}", cmd::format_duration(elapsed));
    }
    let lint = beside.map(|beside| {
        if outcome.is_err() {
            beside.stop();
        }
        let waited = Instant::now();
        let outcomes = beside.finish();
        println!("\n==> waited {} for the lint steps", cmd::format_duration(waited.elapsed()));
        outcomes
    });
    // Where the time went, also when a step failed.
    println!("\n==> steps:");
    for (label, elapsed, passed) in &timings {
        let verdict = if *passed { "passed" } else { "FAILED" };
        println!("{:>9}  {verdict:<6}  {label}", cmd::format_duration(*elapsed));
    }
    let lint = lint.unwrap_or_default();
    for step in &lint {
        println!("{:>9}  {:<6}  {} (beside)", cmd::format_duration(step.took), step.verdict, step.label);
    }
    let total = cmd::format_duration(started.elapsed());
    let lint_failed = lint.iter().find(|step| !step.passed).map(|step| step.label.clone());
    match (&outcome, &lint_failed) {
        (Ok(()), None) => println!("==> all {count} steps passed in {total}"),
        (Ok(()), Some(label)) => println!("==> all {count} steps passed, but {label} failed, in {total}"),
        (Err(_), _) => println!("==> {} of {count} steps run in {total}", timings.len()),
    }
    match (outcome, lint_failed) {
        (Err(failure), _) => Err(failure),
        (Ok(()), Some(label)) => Err(Failure::new(format!("{label} failed (its output is above)"))),
        (Ok(()), None) => Ok(()),
    }
}

/// The steps `args` asks for, in order; says which steps are skipped.
fn plan(args: &TestArgs) -> Vec<Step> {
    let mut steps = Vec::new();
    if args.no_install {
        println!("Not checking the server programs (--no-install).");
    } else {
        steps.push(Step { name: "install servers", action: Action::InstallServers });
    }
    if args.skip_lint {
        println!("Not checking formatting, lints, docs or packaging (--skip-lint).");
    } else {
        let mut fmt = cmd::cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        steps.push(Step { name: "fmt", action: Action::Run(fmt) });
    }
    // Not `--all-targets`: that would leave out the doctests. A test that cannot get its server
    // fails (the harness never skips), so a missing install shows here.
    let lint = !args.skip_lint;
    if args.test_args.is_empty() {
        let name = if lint { "clippy + test" } else { "test" };
        steps.push(Step { name, action: Action::RunTests { lint } });
    } else {
        // A filtered run (`-- redis`, `-- -p lock-sql`) is plain `cargo test`, as a developer types it.
        let mut test = cmd::cargo();
        test.args(["test", "--workspace", "--all-features"]).args(&args.test_args);
        steps.push(Step { name: "test", action: Action::Run(test) });
    }
    // The examples are the README's main job: run them (in-memory), not just compile them. The
    // unfiltered test step runs them from its own build.
    let examples = if args.test_args.is_empty() { &[][..] } else { &test_runner::EXAMPLES[..] };
    for example in examples {
        let mut run = cmd::cargo();
        run.args(["run", "--quiet", "--all-features", "--example", example]);
        steps.push(Step { name: example, action: Action::Run(run) });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan for `args`, as step names and command lines without the path to cargo.
    fn describe(args: &TestArgs) -> Vec<(&'static str, String)> {
        plan(args)
            .into_iter()
            .map(|step| match step.action {
                Action::InstallServers => (step.name, String::new()),
                Action::RunTests { lint } => {
                    (step.name, format!("(test binaries and examples, concurrently; lint: {lint})"))
                }
                Action::Run(command) => {
                    let args = command.get_args().map(|arg| arg.to_string_lossy().into_owned());
                    let envs = command.get_envs().filter_map(|(name, value)| {
                        Some(format!("{}={}", name.to_string_lossy(), value?.to_string_lossy()))
                    });
                    let line = envs.chain(["cargo".to_owned()]).chain(args).collect::<Vec<_>>();
                    (step.name, line.join(" "))
                }
            })
            .collect()
    }

    #[test]
    fn full_pipeline() {
        // The lint steps run beside these (`lint.rs`).
        let args = TestArgs { no_install: false, skip_lint: false, test_args: Vec::new() };
        assert_eq!(
            describe(&args),
            [
                ("install servers", String::new()),
                ("fmt", "cargo fmt --all -- --check".to_owned()),
                ("clippy + test", "(test binaries and examples, concurrently; lint: true)".to_owned()),
            ]
        );
    }

    #[test]
    fn quick_pipeline_passes_arguments_to_cargo_test() {
        let args = TestArgs {
            no_install: true,
            skip_lint: true,
            test_args: ["conformance", "--", "--nocapture"].map(String::from).to_vec(),
        };
        assert_eq!(
            describe(&args)[0],
            (
                "test",
                "cargo test --workspace --all-features conformance -- \
                 --nocapture"
                    .to_owned()
            )
        );
    }
}
