//! The lint steps of `cargo xtask test` (clippy per feature set, docs, packaging), run on a
//! thread of their own beside the test build and the tests, at idle priority.
//!
//! Why: the lint steps are compile-bound (about five minutes of both cores here), the tests
//! mostly wait — for leases to run out, sessions to time out, servers to start — and leave a
//! core idle much of their ten minutes. Run one after the other they added up; side by side the
//! lints take what the tests leave. At idle priority (`chrt --idle 0`, Linux's `SCHED_IDLE`: a
//! thread that runs only when no other wants the CPU; `nice -n 19` where there is no `chrt`)
//! they cannot delay a renewal or a timed call of a test the way a normal-priority compile beside
//! them would. While the test runner runs a binary alone (timing-sensitive ones, [`quiet`]), no
//! lint step starts: only one already running goes on. They build into a target directory of their own ([`lint_target_dir`]), so that
//! cargo's lock on the build directory never makes the tests' cargo commands (the doctests) wait
//! for them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::cmd::{self, Failure};

/// One lint step: its short name in the log and the command.
pub struct LintStep {
    pub name: &'static str,
    pub command: Command,
}

/// How one lint step ended.
pub struct LintOutcome {
    /// `beside the tests: <name>`, as the step table shows it.
    pub label: String,
    pub took: Duration,
    pub result: Result<(), Failure>,
}

/// The lint steps running beside the rest of the pipeline.
pub struct Beside(JoinHandle<Vec<LintOutcome>>);

/// Starts `steps`, one after another, on a thread of their own at idle priority; each step's
/// output is printed whole when it ends. The first failing step stops the rest.
pub fn start(steps: Vec<LintStep>) -> Beside {
    let target_dir = lint_target_dir();
    println!(
        "Running {} lint steps beside the tests, at idle priority, building into {}.",
        steps.len(),
        target_dir.display()
    );
    Beside(thread::spawn(move || {
        let mut outcomes = Vec::with_capacity(steps.len());
        for LintStep { name, mut command } in steps {
            wait_until_not_quiet();
            command.env("CARGO_TARGET_DIR", &target_dir);
            let outcome = run_captured(format!("beside the tests: {name}"), at_idle_priority(&command));
            let failed = outcome.result.is_err();
            outcomes.push(outcome);
            if failed {
                break;
            }
        }
        outcomes
    }))
}

impl Beside {
    /// Waits for the lint steps to end.
    pub fn finish(self) -> Vec<LintOutcome> {
        self.0.join().unwrap_or_else(|_| {
            vec![LintOutcome {
                label: "beside the tests".to_owned(),
                took: Duration::ZERO,
                result: Err(Failure::new("the thread running the lint steps panicked")),
            }]
        })
    }
}

/// How many [`Quiet`] guards live: while any does, no lint step starts.
static QUIET: Mutex<usize> = Mutex::new(0);
static QUIET_ENDED: Condvar = Condvar::new();

/// While it lives, no lint step starts (one running goes on); see [`quiet`].
pub struct Quiet(());

/// Keeps lint steps from starting until the guard is dropped: for the test binaries that run
/// alone because load beside them stretches their timed checks.
pub fn quiet() -> Quiet {
    *QUIET.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
    Quiet(())
}

impl Drop for Quiet {
    fn drop(&mut self) {
        *QUIET.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) -= 1;
        QUIET_ENDED.notify_all();
    }
}

fn wait_until_not_quiet() {
    let mut quiet = QUIET.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    while *quiet > 0 {
        quiet = QUIET_ENDED.wait(quiet).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

/// Runs `command` to its end, its output captured, and prints the output whole with the outcome.
fn run_captured(label: String, mut command: Command) -> LintOutcome {
    let line = cmd::display(&command);
    let started = Instant::now();
    let output = command.stdin(Stdio::null()).output();
    let took = started.elapsed();
    let (result, text) = match output {
        Ok(output) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            let result = if output.status.success() {
                Ok(())
            } else {
                Err(Failure::new(format!("`{line}` exited with {}", output.status)))
            };
            (result, text)
        }
        Err(error) => (Err(Failure::new(format!("could not start `{line}`: {error}"))), String::new()),
    };
    let verdict = if result.is_ok() { "passed" } else { "failed" };
    // One print per step: the lock of stdout keeps it apart from the tests' logs.
    print!("\n==> {label} {verdict} in {}\n$ {line}\n{text}", cmd::format_duration(took));
    LintOutcome { label, took, result }
}

/// `command` run at idle priority: through `chrt --idle 0` where there is one (Linux), else
/// `nice -n 19`, else as it is. Children (rustc, clippy-driver) inherit the priority.
fn at_idle_priority(command: &Command) -> Command {
    let wrapper: Option<(PathBuf, &[&str])> = cmd::find_on_path("chrt")
        .map(|chrt| (chrt, &["--idle", "0"][..]))
        .or_else(|| cmd::find_on_path("nice").map(|nice| (nice, &["-n", "19"][..])));
    let mut wrapped = match &wrapper {
        Some((program, args)) => {
            let mut wrapped = Command::new(program);
            wrapped.args(*args).arg(command.get_program()).args(command.get_args());
            wrapped
        }
        None => {
            let mut wrapped = Command::new(command.get_program());
            wrapped.args(command.get_args());
            wrapped
        }
    };
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    if let Some(directory) = command.get_current_dir() {
        wrapped.current_dir(directory);
    }
    wrapped
}

/// Where the lint steps build: `lint/` in the target directory (`$CARGO_TARGET_DIR`, else the
/// workspace's `target/`).
fn lint_target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cmd::workspace_root().join("target"));
    target.join("lint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_wrapper_keeps_the_command_its_environment_and_directory() {
        let mut command = Command::new("cargo");
        command.args(["clippy", "--package", "lock-sql"]).env("RUSTDOCFLAGS", "-D warnings");
        command.env_remove("CARGO_PKG_NAME").current_dir("/tmp");
        let wrapped = at_idle_priority(&command);
        let args: Vec<_> = wrapped.get_args().map(|arg| arg.to_string_lossy().into_owned()).collect();
        assert!(args.ends_with(&["cargo", "clippy", "--package", "lock-sql"].map(String::from)), "{args:?}");
        let envs: Vec<_> = wrapped.get_envs().collect();
        assert!(envs.contains(&("RUSTDOCFLAGS".as_ref(), Some("-D warnings".as_ref()))));
        assert!(envs.contains(&("CARGO_PKG_NAME".as_ref(), None)));
        assert_eq!(wrapped.get_current_dir(), Some("/tmp".as_ref()));
    }
}
