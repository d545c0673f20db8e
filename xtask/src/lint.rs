//! The lint steps of `cargo xtask test` — clippy with each feature set on its own, rustdoc,
//! packaging, the CLI as installed — run beside the tests rather than before them.
//!
//! Why beside: they type-check the workspace about fifteen times over (about seven minutes on
//! two cores), while the test binaries mostly wait — for leases to run out, sessions to time
//! out, servers to start — leaving a core or so idle. So the lint runs at the lowest CPU
//! priority (Linux's `SCHED_IDLE`, see [`cmd::at_idle_priority`]): it gets only the CPU time no
//! test, server or build wants, and gives a core up the moment one of them wakes, so the tests'
//! timings see no competitor. It builds in a target directory of its own (`target/lint`), so it
//! never waits for the test build's or the doctests' lock on `target`, nor they for it. The
//! foreground steps (install, fmt, the tests) run as before; the pipeline then waits for the
//! lint and reports both — or, when a foreground step failed, stops the lint first.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::cmd;
use crate::TestArgs;

/// The feature sets clippy checks one by one (besides `--all-features`): each backend of the
/// facade alone, Redis without TLS, the SQL test support with one database, the CLI without
/// `compare` (`exec` and `inspect` only) and the CLI's `compare` without the other backends
/// (Redis alone; ZooKeeper alone). The CLI with etcd is the all-features build's: each of these
/// sets compiles the CLI anew, and etcd's gRPC stack with it. The test support of every backend
/// is the all-features build's too: it differs from that build only by `metrics` and
/// `zookeeper-tls`, whose `cfg`s are in lock-core and lock-zk's non-test code, which the
/// single-backend sets check without them.
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

/// One lint step: its short name in the log and its command.
pub struct LintStep {
    pub name: &'static str,
    pub command: Command,
}

/// The lint steps `args` asks for, in order (none with `--skip-lint`).
pub fn plan(args: &TestArgs) -> Vec<LintStep> {
    if args.skip_lint {
        return Vec::new();
    }
    let mut steps = Vec::new();
    let mut step = |name, command| steps.push(LintStep { name, command });
    // Unfiltered, the test build lints every target with every feature (see
    // `cmd::cargo_linting`); a filtered run builds only some, so clippy checks them all here.
    if !args.test_args.is_empty() {
        let mut clippy = cargo();
        clippy.args(["clippy", "--workspace", "--all-targets", "--all-features"]);
        clippy.args(["--", "-D", "warnings"]);
        step("clippy", clippy);
    }
    // Each feature on its own: code used only under another feature must not warn.
    for (package, features) in FEATURE_SETS {
        let mut clippy = cargo();
        clippy.args(["clippy", "--package", package, "--no-default-features", "--features", features]);
        clippy.args(["--", "-D", "warnings"]);
        step("clippy (one feature)", clippy);
    }
    // Broken intra-doc links and malformed docs fail like lints do.
    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--all-features", "--no-deps", "--quiet"])
        .env("RUSTDOCFLAGS", "-D warnings");
    step("doc", doc);
    // Every library crate and the CLI must package for the registry: no path-only dependency,
    // no missing file. `--no-verify`: verification builds each crate once more from its packaged
    // sources (minutes on two cores), and what it would catch is built by the steps above.
    let mut package = cargo();
    package.args(["package", "--workspace", "--exclude", "xtask", "--no-verify", "--quiet", "--allow-dirty"]);
    step("package", package);
    // The command as `cargo install distlock-cli` compiles it: its default features, no
    // dev-dependency features unified in, the lock file as it is. Checked, not built: the test
    // build links the same binary.
    let mut installed = cargo();
    installed.args(["clippy", "--package", "distlock-cli", "--locked", "--", "-D", "warnings"]);
    step("clippy (as installed)", installed);
    steps
}

/// [`cmd::cargo`] building in the lint's own target directory: `target/lint`, or `lint` under
/// `CARGO_TARGET_DIR` when that is set.
fn cargo() -> Command {
    let mut command = cmd::cargo();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    command.env("CARGO_TARGET_DIR", target.join("lint"));
    command
}

/// How one lint step ended.
pub struct LintOutcome {
    /// `lint N/M (name)`, as the log names it.
    pub label: String,
    pub took: Duration,
    pub passed: bool,
    /// `passed`, `FAILED`, or `STOPPED` when a foreground step's failure ended it.
    pub verdict: &'static str,
}

/// The lint steps, running on a thread of their own.
pub struct Beside {
    /// `None` once finished.
    thread: Option<JoinHandle<Vec<LintOutcome>>>,
    stop: Arc<Stop>,
}

/// How the pipeline stops the lint when a foreground step failed (or panicked).
#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    /// The process id of the step running now.
    running: Mutex<Option<u32>>,
}

impl Stop {
    /// Ends the step's process (`cargo`, which `chrt` and `nice` exec) and its compilers first
    /// (they hold the output pipes the step's wait reads to their end).
    fn kill(pid: u32) {
        let pid = pid.to_string();
        let quiet = |program: &str, args: &[&str]| {
            let mut command = Command::new(program);
            command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let _ = command.status();
        };
        quiet("pkill", &["-TERM", "-P", &pid]);
        quiet("kill", &[&pid]);
    }
}

impl Beside {
    /// Starts `steps`, one after another at idle priority, each step's output printed whole
    /// when it ends; the first failure ends the run.
    pub fn start(steps: Vec<LintStep>) -> Self {
        let count = steps.len();
        println!("\n==> the {count} lint steps run beside the others, at idle priority, in their own target directory");
        let stop = Arc::new(Stop::default());
        let stopping = stop.clone();
        let thread = thread::spawn(move || {
            let mut outcomes = Vec::with_capacity(count);
            for (index, step) in steps.into_iter().enumerate() {
                if stopping.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let label = format!("lint {}/{count} ({})", index + 1, step.name);
                let outcome = run_step(label, step.command, &stopping);
                let passed = outcome.passed;
                outcomes.push(outcome);
                if !passed {
                    break;
                }
            }
            outcomes
        });
        Self { thread: Some(thread), stop }
    }

    /// Stops the lint: the running step is ended and no other starts (a foreground step
    /// failed, so the run fails anyway and should say so now, not in seven minutes).
    pub fn stop(&self) {
        self.stop.stopped.store(true, Ordering::SeqCst);
        if let Some(pid) = self.stop.running.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Stop::kill(pid);
        }
    }

    /// Waits for the lint steps to end; how each ended.
    pub fn finish(mut self) -> Vec<LintOutcome> {
        let thread = self.thread.take().expect("finished once");
        thread.join().unwrap_or_else(|_| {
            vec![LintOutcome {
                label: "lint (its thread panicked)".to_owned(),
                took: Duration::ZERO,
                passed: false,
                verdict: "FAILED",
            }]
        })
    }
}

impl Drop for Beside {
    /// Not finished: the pipeline is unwinding from a panic; no lint outlives it.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

/// Runs one step at idle priority, its output captured; prints it whole with the outcome.
fn run_step(label: String, command: Command, stop: &Stop) -> LintOutcome {
    let mut command = cmd::at_idle_priority(command);
    let line = cmd::display(&command);
    let started = Instant::now();
    let child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let output = child.and_then(|child| {
        *stop.running.lock().unwrap_or_else(PoisonError::into_inner) = Some(child.id());
        // Stopped between the spawn and the line above: `stop` found no process to end.
        if stop.stopped.load(Ordering::SeqCst) {
            Stop::kill(child.id());
        }
        let output = child.wait_with_output();
        stop.running.lock().unwrap_or_else(PoisonError::into_inner).take();
        output
    });
    let took = started.elapsed();
    let (passed, text) = match output {
        Ok(output) => {
            let mut text = cmd::output_text(&output);
            if !output.status.success() {
                text.push_str(&format!("exited with {}\n", output.status));
            }
            (output.status.success(), text)
        }
        Err(error) => (false, format!("could not start it: {error}\n")),
    };
    let verdict = match (passed, stop.stopped.load(Ordering::SeqCst)) {
        (true, _) => "passed",
        (false, true) => "STOPPED",
        (false, false) => "FAILED",
    };
    // One write: the lock of stdout keeps the block apart from the test binaries' logs.
    let block = format!("\n==> {label} {verdict} in {}\n$ {line}\n{text}", cmd::format_duration(took));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(block.as_bytes()).and_then(|()| stdout.flush());
    LintOutcome { label, took, passed, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(args: &TestArgs) -> Vec<(&'static str, String)> {
        plan(args).into_iter().map(|step| (step.name, cmd::display(&step.command))).collect()
    }

    #[test]
    fn every_lint_step_builds_in_the_lint_target_directory() {
        let args = TestArgs { no_install: false, skip_lint: false, test_args: Vec::new() };
        let steps = describe(&args);
        assert_eq!(steps.len(), FEATURE_SETS.len() + 3);
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
        let setting = format!("CARGO_TARGET_DIR={}", target.join("lint").display());
        for (_, line) in &steps {
            assert!(line.contains(&setting), "{line}");
        }
        let first = "cargo clippy --package distlock --no-default-features --features redis -- -D warnings";
        assert!(steps[0].1.ends_with(first), "{}", steps[0].1);
        let names: Vec<_> = steps[FEATURE_SETS.len()..].iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["doc", "package", "clippy (as installed)"]);
        assert!(steps[FEATURE_SETS.len()].1.contains("RUSTDOCFLAGS='-D warnings'"));
    }

    #[test]
    fn a_filtered_run_lints_every_target_too_and_skip_lint_none() {
        let filtered = TestArgs { no_install: true, skip_lint: false, test_args: vec!["redis".to_owned()] };
        let steps = describe(&filtered);
        assert_eq!(steps[0].0, "clippy");
        assert!(steps[0].1.ends_with("cargo clippy --workspace --all-targets --all-features -- -D warnings"));
        let skipped = TestArgs { no_install: true, skip_lint: true, test_args: Vec::new() };
        assert!(describe(&skipped).is_empty());
    }
}
