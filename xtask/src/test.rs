//! The `cargo xtask test` pipeline: install the servers, check formatting, lint, run the tests.
//!
//! The steps run in order and the first failure stops the pipeline. Each step prints a line with
//! its outcome and how long it took, so a CI log shows where the time went.

use std::process::Command;
use std::time::Instant;

use crate::cmd::{self, Failure};
use crate::install;
use crate::test_runner;
use crate::TestArgs;

/// The feature sets clippy checks one by one (besides `--all-features`): each backend of the
/// facade alone, Redis without TLS, the SQL test support with one database, the CLI without
/// `compare` (`exec` and `inspect` only) and the CLI's `compare` without the other backends
/// (Redis alone; ZooKeeper alone). The CLI with etcd is the all-features build's: each of these
/// sets compiles the CLI anew, and etcd's gRPC stack with it. The test support of every backend
/// is the all-features build's too: it differs from that build only by `metrics` and
/// `zookeeper-tls`, whose `cfg`s are in lock-core and lock-zk's non-test code, which the
/// single-backend sets check without them (about 40 s of CI saved).
const FEATURE_SETS: [(&str, &str); 13] = [
    ("distlock", "redis"),
    ("distlock", "postgres"),
    ("distlock", "mysql"),
    ("distlock", "zookeeper"),
    ("distlock", "etcd"),
    ("distlock", "metrics"),
    ("lock-redis", ""),
    ("lock-zk", "tls"),
    ("lock-sql", "testkit,postgres"),
    ("lock-sql", "testkit,mysql"),
    ("distlock-cli", "redis,postgres,mysql,zookeeper"),
    ("distlock-cli", "compare,redis"),
    ("distlock-cli", "compare,zookeeper"),
];

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
    let mut timings = Vec::with_capacity(count);
    let mut outcome = Ok(());
    for (index, step) in steps.into_iter().enumerate() {
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
    // Where the time went, also when a step failed.
    println!("\n==> steps:");
    for (label, elapsed, passed) in &timings {
        let verdict = if *passed { "passed" } else { "FAILED" };
        println!("{:>9}  {verdict:<6}  {label}", cmd::format_duration(*elapsed));
    }
    let total = cmd::format_duration(started.elapsed());
    match &outcome {
        Ok(()) => println!("==> all {count} steps passed in {total}"),
        Err(_) => println!("==> {} of {count} steps run in {total}", timings.len()),
    }
    outcome
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
        // Unfiltered, the test build lints every target with every feature (see
        // `cmd::cargo_linting`); a filtered run builds only some, so clippy checks them all here.
        if !args.test_args.is_empty() {
            let mut clippy = cmd::cargo();
            clippy.args(["clippy", "--workspace", "--all-targets", "--all-features"]);
            clippy.args(["--", "-D", "warnings"]);
            steps.push(Step { name: "clippy", action: Action::Run(clippy) });
        }
        // Each feature on its own: code used only under another feature must not warn.
        for (package, features) in FEATURE_SETS {
            let mut clippy = cmd::cargo();
            clippy.args(["clippy", "--package", package, "--no-default-features", "--features", features]);
            clippy.args(["--", "-D", "warnings"]);
            steps.push(Step { name: "clippy (one feature)", action: Action::Run(clippy) });
        }
        // Broken intra-doc links and malformed docs fail like lints do.
        let mut doc = cmd::cargo();
        doc.args(["doc", "--workspace", "--all-features", "--no-deps", "--quiet"])
            .env("RUSTDOCFLAGS", "-D warnings");
        steps.push(Step { name: "doc", action: Action::Run(doc) });
        // Every library crate and the CLI must package for the registry: no path-only dependency,
        // no missing file. `--no-verify`: verification builds each crate once more from its packaged
        // sources (minutes on two cores), and what it would catch is built by the steps above.
        let mut package = cmd::cargo();
        package.args([
            "package",
            "--workspace",
            "--exclude",
            "xtask",
            "--no-verify",
            "--quiet",
            "--allow-dirty",
        ]);
        steps.push(Step { name: "package", action: Action::Run(package) });
        // The command as `cargo install distlock-cli` compiles it: its default features, no
        // dev-dependency features unified in, the lock file as it is. Checked, not built: a
        // debug build of that feature set shares little with the test build (about two minutes
        // here), and the test build links the same binary.
        let mut installed = cmd::cargo();
        installed.args(["clippy", "--package", "distlock-cli", "--locked", "--", "-D", "warnings"]);
        steps.push(Step { name: "clippy (as installed)", action: Action::Run(installed) });
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

    fn one_feature(package: &str, features: &str) -> String {
        format!("cargo clippy --package {package} --no-default-features --features {features} -- -D warnings")
    }

    #[test]
    fn full_pipeline() {
        let args = TestArgs { no_install: false, skip_lint: false, test_args: Vec::new() };
        assert_eq!(
            describe(&args),
            [
                ("install servers", String::new()),
                ("fmt", "cargo fmt --all -- --check".to_owned()),
                ("clippy (one feature)", one_feature("distlock", "redis")),
                ("clippy (one feature)", one_feature("distlock", "postgres")),
                ("clippy (one feature)", one_feature("distlock", "mysql")),
                ("clippy (one feature)", one_feature("distlock", "zookeeper")),
                ("clippy (one feature)", one_feature("distlock", "etcd")),
                ("clippy (one feature)", one_feature("distlock", "metrics")),
                ("clippy (one feature)", one_feature("lock-redis", "")),
                ("clippy (one feature)", one_feature("lock-zk", "tls")),
                ("clippy (one feature)", one_feature("lock-sql", "testkit,postgres")),
                ("clippy (one feature)", one_feature("lock-sql", "testkit,mysql")),
                ("clippy (one feature)", one_feature("distlock-cli", "redis,postgres,mysql,zookeeper")),
                ("clippy (one feature)", one_feature("distlock-cli", "compare,redis")),
                ("clippy (one feature)", one_feature("distlock-cli", "compare,zookeeper")),
                (
                    "doc",
                    "RUSTDOCFLAGS=-D warnings cargo doc --workspace --all-features --no-deps --quiet"
                        .to_owned()
                ),
                (
                    "package",
                    "cargo package --workspace --exclude xtask --no-verify --quiet --allow-dirty".to_owned()
                ),
                (
                    "clippy (as installed)",
                    "cargo clippy --package distlock-cli --locked -- -D warnings".to_owned()
                ),
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
