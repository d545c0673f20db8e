//! The test step of `cargo xtask test`: builds every test target once, then runs the test
//! binaries (and the doctests and the README's examples) in three phases: the conformance suite
//! alone with more test threads, the rest several at a time (longest first), and last, alone,
//! the binaries that load the machine or are upset by load ([`ALONE_LAST`]).
//!
//! Why not plain `cargo test`: it runs the binaries one after another, and most of distlock's
//! tests wait — for leases to run out, sessions to time out, servers to start — rather than
//! compute: the conformance binary alone used about a quarter of one core over its 7 minutes.
//! Running binaries side by side (each still shares its servers across its own tests, as the
//! harness does per process) and giving the wait-bound conformance binary more test threads
//! turns that waiting into overlap, as far as timing-sensitive tests on two cores allow. cargo-nextest would run every test in a process of its own,
//! which would start the servers once per test instead of once per binary.
//!
//! Each binary's output is printed whole when it ends, so logs do not interleave; at the end a
//! table gives each binary's time and the slowest tests, and a line `tests: N passed, N failed`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::cmd::{self, Failure};

/// How many test binaries run at once. Their tests mostly wait, so this is more than the two
/// cores; beyond three, server start-ups (PostgreSQL's initdb, ZooKeeper's JVM) of the binaries
/// starting together compete for the CPU and stretch timing-sensitive checks.
const CONCURRENT_BINARIES: usize = 3;

/// Test threads for the binaries whose tests wait far more than they compute: the shared
/// conformance suite (one test per scenario and kind, each waiting out leases and timeouts).
/// Five: with six, scenarios that open many PostgreSQL connections at once (LE01's two
/// processes) starved 1 s renewals and 2 s connects of their neighbours on the 2-core CI machine
/// while a PostgreSQL login cost 43 ms of CPU (unoptimized SCRAM, 3 ms since); four took 271 s.
const WAIT_BOUND: [(&str, &str, usize); 1] = [("distlock", "conformance", 5)];

/// The binaries that take longest (measured on the CI machine), started first among those that
/// run side by side, so the phase does not end waiting for one of them; the rest follow in
/// build order.
const LONGEST_FIRST: [(&str, &str); 4] = [
    ("distlock-cli", "url_forms"),
    ("lock-redis", "slot_migration"),
    ("distlock-cli", "compare"),
    ("lock-redis", "deployments"),
];

/// The binaries that run alone: the conformance suite first (its many test threads wait out
/// 1 s leases on shared servers: beside other binaries' server start-ups and thousand-session
/// runs, its PostgreSQL renewals missed their leases in 3 of 3 runs), and at the end the binaries
/// that load the machine themselves — a thousand server sessions or holds on one client, whose
/// every call and loss is timed (beside others, their 1 s pool checkouts timed out).
const ALONE_FIRST: [(&str, &str); 1] = [("distlock", "conformance")];
/// The examples run after being built with the tests (the README's demos, in memory): run
/// here, they reuse the test build (`cargo run --example` resolves features for the root package
/// alone and builds the workspace again, about 20 s).
pub const EXAMPLES: [&str; 3] = ["seckill", "reentrant", "metrics"];

const ALONE_LAST: [(&str, &str); 5] = [
    // PB01/PB02: the suite through one PgBouncer (a single-threaded proxy), two tests at a time
    // of four scenarios each, some with 1 s leases (S08, RW03, SEM03), about 45 s. Beside other
    // binaries, three of four clean-clone CI runs failed one timed check there (S11 hand-offs of
    // 182-586 ms, a release timeout in ML01, a 1 s permit's renewal late in SEM03), none
    // reproduced without them.
    ("lock-sql", "scenarios"),
    ("lock-sql", "session_limits"),
    ("lock-zk", "connection_cut"),
    ("lock-zk", "scenarios"),
    // E02 (a 3-member cluster, a leader killed under 8 threads in 2 processes) and E04 (2,000
    // holds): beside it, MariaDB waits timed out in lock-sql's and the CLI's tests.
    ("lock-etcd", "lock_etcd"),
];

/// One test binary (or the doctests) to run.
struct Job {
    /// `package/target`, as the log names it.
    label: String,
    command: Command,
    /// When it runs.
    phase: Phase,
}

/// The three phases of the run, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Alone, before the others ([`ALONE_FIRST`]).
    First = 0,
    /// Side by side, [`CONCURRENT_BINARIES`] at a time.
    Together = 1,
    /// Alone, after the others ([`ALONE_LAST`]).
    Last = 2,
}

/// How one job ended.
struct Ended {
    label: String,
    took: Duration,
    passed: bool,
    counts: Counts,
    /// (seconds, test name) per test, where the binary reported times.
    times: Vec<(f64, String)>,
}

/// Test counts summed from libtest's `test result:` lines.
#[derive(Default, Clone, Copy)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Builds the tests of the whole workspace with every feature (linting them with clippy when
/// `lint`, see [`cmd::cargo_linting`]), then runs them concurrently.
///
/// # Errors
/// When the build fails, a binary cannot be started, or any test fails (the message names the
/// binaries that failed; their output is in the log above it).
pub fn run(lint: bool) -> Result<(), Failure> {
    let mut phases: [Vec<Job>; 3] = Default::default();
    for job in build(lint)? {
        phases[job.phase as usize].push(job);
    }
    let [first, together, last] = phases;
    let started = Instant::now();
    let mut ended = run_side_by_side(first, 1);
    ended.extend(run_side_by_side(together, CONCURRENT_BINARIES));
    ended.extend(run_side_by_side(last, 1));
    report(&ended, started.elapsed());
    let failed: Vec<_> = ended.iter().filter(|job| !job.passed).map(|job| job.label.as_str()).collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(format!("tests failed in {}", failed.join(", "))))
    }
}

/// Runs `jobs`, `at_once` at a time, in order; returns how each ended.
fn run_side_by_side(jobs: Vec<Job>, at_once: usize) -> Vec<Ended> {
    let queue = Mutex::new(VecDeque::from(jobs));
    let ended = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..at_once {
            scope.spawn(|| loop {
                let Some(job) = queue.lock().unwrap().pop_front() else { return };
                let result = run_job(job);
                ended.lock().unwrap().push(result);
            });
        }
    });
    ended.into_inner().unwrap()
}

/// `cargo test --no-run` of the workspace with every feature; a job per test binary, longest
/// first, and one for the doctests.
fn build(lint: bool) -> Result<Vec<Job>, Failure> {
    let cargo = if lint { cmd::cargo_linting } else { cmd::cargo };
    let mut build = cargo();
    build.args([
        "test",
        "--workspace",
        "--all-features",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    let line = cmd::display(&build);
    println!("$ {line}");
    // Diagnostics go to stderr as usual; stdout carries one JSON message per line.
    let output = build
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|error| Failure::new(format!("could not start `{line}`: {error}")))?;
    if !output.status.success() {
        return Err(Failure::new(format!("`{line}` exited with {}", output.status)));
    }
    let mut jobs = Vec::new();
    for message in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(message) else { continue };
        if let Some(job) = test_job(&message).or_else(|| example_job(&message)) {
            jobs.push(job);
        }
    }
    if jobs.is_empty() {
        return Err(Failure::new("the build produced no test binary"));
    }
    let rank = |job: &Job| LONGEST_FIRST.iter().position(|(p, t)| job.label == format!("{p}/{t}"));
    // Stable: the rest keep the build's order.
    jobs.sort_by_key(|job| rank(job).unwrap_or(usize::MAX));
    let mut doctests = cargo();
    doctests.args(["test", "--workspace", "--all-features", "--doc"]);
    jobs.push(Job { label: "doctests".to_owned(), command: doctests, phase: Phase::Together });
    Ok(jobs)
}

/// The job for a `compiler-artifact` message of a test executable, as `cargo test` would run it:
/// from its package's directory, with `CARGO_MANIFEST_DIR` set.
fn test_job(message: &serde_json::Value) -> Option<Job> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = PathBuf::from(message["manifest_path"].as_str()?);
    let directory = manifest.parent()?.to_path_buf();
    let package = message["package_id"].as_str().and_then(package_name).unwrap_or("?").to_owned();
    let target = message["target"]["name"].as_str()?.to_owned();
    let mut command = Command::new(executable);
    command.current_dir(&directory).env("CARGO_MANIFEST_DIR", &directory);
    if let Some((_, _, threads)) = WAIT_BOUND.iter().find(|(p, t, _)| *p == package && *t == target) {
        command.arg(format!("--test-threads={threads}"));
    }
    // Per-test times for the report: libtest's `--report-time` is unstable, and
    // RUSTC_BOOTSTRAP=1 for running (not building) the binary lets stable libtest accept it.
    command.args(["-Z", "unstable-options", "--report-time"]).env("RUSTC_BOOTSTRAP", "1");
    let named = |list: &[(&str, &str)]| list.iter().any(|(p, t)| *p == package && *t == target);
    let phase = if named(&ALONE_FIRST) {
        Phase::First
    } else if named(&ALONE_LAST) {
        Phase::Last
    } else {
        Phase::Together
    };
    Some(Job { label: format!("{package}/{target}"), command, phase })
}

/// The job for a `compiler-artifact` message of one of [`EXAMPLES`]: run from the workspace root,
/// as `cargo run --example` would.
fn example_job(message: &serde_json::Value) -> Option<Job> {
    let kinds = message["target"]["kind"].as_array()?;
    if message["reason"] != "compiler-artifact" || !kinds.iter().any(|kind| kind == "example") {
        return None;
    }
    let name = message["target"]["name"].as_str()?;
    if !EXAMPLES.contains(&name) {
        return None;
    }
    let mut command = Command::new(message["executable"].as_str()?);
    command.current_dir(cmd::workspace_root());
    Some(Job { label: format!("example {name}"), command, phase: Phase::Together })
}

/// A package's name from its id: `path+file:///…/lock-sql#0.1.0` or the older
/// `lock-sql 0.1.0 (path+file:///…)`; the facade at the root is `…/main#distlock@0.1.0`.
fn package_name(id: &str) -> Option<&str> {
    if let Some((_, fragment)) = id.rsplit_once('#') {
        let (name_or_version, _) = fragment.split_once('@').unwrap_or((fragment, ""));
        // `#0.1.0`: the name is the directory's.
        if name_or_version.starts_with(|c: char| c.is_ascii_digit()) {
            let path = id.split_once('#')?.0;
            return path.rsplit('/').next();
        }
        return Some(name_or_version);
    }
    id.split_whitespace().next()
}

/// Runs `job` to its end, its output captured; prints it whole with the outcome.
fn run_job(mut job: Job) -> Ended {
    let started = Instant::now();
    let output = job.command.stdin(Stdio::null()).output();
    let took = started.elapsed();
    let (passed, text) = match output {
        Ok(output) => {
            let text = cmd::output_text(&output);
            (output.status.success(), text)
        }
        Err(error) => (false, format!("could not start `{}`: {error}\n", cmd::display(&job.command))),
    };
    let outcome = if passed { "passed" } else { "FAILED" };
    // One print per job: the lock of stdout keeps jobs' logs apart.
    print!("\n==> {} {outcome} in {}\n{text}", job.label, cmd::format_duration(took));
    Ended { label: job.label, took, passed, counts: counts(&text), times: test_times(&text) }
}

/// The counts of every `test result:` line in `text`.
fn counts(text: &str) -> Counts {
    let mut counts = Counts::default();
    for line in text.lines().filter(|line| line.starts_with("test result: ")) {
        let number_before = |word: &str| -> u64 {
            let at = line.find(word).unwrap_or(0);
            line[..at].trim_end().rsplit([' ', ';', '.']).next().and_then(|n| n.parse().ok()).unwrap_or(0)
        };
        counts.passed += number_before(" passed");
        counts.failed += number_before(" failed");
        counts.ignored += number_before(" ignored");
    }
    counts
}

/// `(seconds, name)` of each `test NAME ... ok <1.234s>` line in `text`.
fn test_times(text: &str) -> Vec<(f64, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?;
            let (name, result) = rest.split_once(" ... ")?;
            let seconds = result.rsplit_once('<')?.1.strip_suffix("s>")?.parse().ok()?;
            Some((seconds, name.to_owned()))
        })
        .collect()
}

/// The table of binaries by time, the slowest tests, and the closing counts.
fn report(ended: &[Ended], took: Duration) {
    let mut by_time: Vec<_> = ended.iter().collect();
    by_time.sort_by_key(|job| std::cmp::Reverse(job.took));
    println!(
        "\n==> test binaries ({} alone, then {CONCURRENT_BINARIES} at a time, then {} alone), slowest first:",
        ALONE_FIRST.len(),
        ALONE_LAST.len()
    );
    for job in &by_time {
        let Counts { passed, failed, .. } = job.counts;
        let outcome = if job.passed { "ok" } else { "FAILED" };
        println!(
            "{:>9}  {outcome:<6} {passed:>4} passed {failed:>3} failed  {}",
            cmd::format_duration(job.took),
            job.label
        );
    }
    let mut tests: Vec<_> = ended
        .iter()
        .flat_map(|job| job.times.iter().map(move |(seconds, name)| (*seconds, &job.label, name)))
        .collect();
    tests.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("\n==> slowest tests:");
    for (seconds, label, name) in tests.iter().take(15) {
        println!("{seconds:>8.1}s  {label}: {name}");
    }
    let total = ended.iter().fold(Counts::default(), |sum, job| Counts {
        passed: sum.passed + job.counts.passed,
        failed: sum.failed + job.counts.failed + u64::from(!job.passed && job.counts.failed == 0),
        ignored: sum.ignored + job.counts.ignored,
    });
    println!("\n==> {} binaries in {}", ended.len(), cmd::format_duration(took));
    println!("tests: {} passed, {} failed, {} skipped", total.passed, total.failed, total.ignored);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_come_from_either_id_form() {
        assert_eq!(package_name("path+file:///work/main/lock-sql#0.1.0"), Some("lock-sql"));
        assert_eq!(package_name("path+file:///work/main#distlock@0.1.0"), Some("distlock"));
        assert_eq!(package_name("lock-sql 0.1.0 (path+file:///work/main/lock-sql)"), Some("lock-sql"));
    }

    #[test]
    fn libtest_lines_are_read() {
        let text = "test a::b ... ok <1.250s>\ntest c ... FAILED <0.100s>\n\
                    test result: FAILED. 1 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out\n\
                    test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n";
        let Counts { passed, failed, ignored } = counts(text);
        assert_eq!((passed, failed, ignored), (4, 1, 2));
        assert_eq!(test_times(text), [(1.25, "a::b".to_owned()), (0.1, "c".to_owned())]);
    }
}
