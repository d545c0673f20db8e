//! S04 — the holder crashes (sources 000, 003): a child process that holds the lock is killed with
//! SIGKILL; another client gets the lock within the lease plus a second (TTL backends), or as soon
//! as the server notices the dead session or connection.
//!
//! The child is this very test binary, re-run with only this test selected and an environment
//! variable that makes the scenario hold the lock instead of testing. So the child runs exactly
//! the backend code and configuration under test, and needs no separately built helper.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockName};

use crate::suite::breach::HELD_AFTER_CRASH;
use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Set in the child: the name of the lock to hold.
pub const HOLD_VAR: &str = "DISTLOCK_S04_HOLD";
/// What the child prints once it holds the lock.
const HELD_LINE: &str = "DISTLOCK-S04-HELD";
const LEASE: Duration = Duration::from_secs(2);
/// A child whose parent died exits on its own after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(120);

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    if let Ok(name) = std::env::var(HOLD_VAR) {
        hold_until_killed(target, &name);
    }
    let env = applicable!(target.child_env());
    let name = unique_name("s04");
    let exe = std::env::current_exe().map_err(|e| Failure(format!("cannot find the test binary: {e}")))?;
    let mut child = Command::new(exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(HOLD_VAR, name.as_str())
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Failure(format!("cannot start the holder process: {e}")))?;
    let result = check_crash(target, &name, &mut child);
    // Whatever happened, leave no process behind.
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn check_crash<T: SuiteTarget>(
    target: &T,
    name: &LockName,
    child: &mut std::process::Child,
) -> ScenarioResult {
    let stdout = child.stdout.take().ok_or_else(|| Failure("no stdout from the holder".into()))?;
    let (lines, received) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + 60 * SECOND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            // libtest may have printed the test's name on the same line first.
            Ok(line) if line.trim().ends_with(HELD_LINE) => break,
            Ok(_) => continue,
            Err(_) => return Err(Failure("the holder process never reported holding the lock".into())),
        }
    }
    let survivor = client(target, options(10 * SECOND, true))?;
    let lock = Lock::new(&survivor, name.clone());
    ensure!(lock.try_lock()?.is_none(), "the lock was free although the child process held it");

    child.kill().map_err(|e| Failure(format!("cannot kill the holder: {e}")))?; // SIGKILL on Unix
    child.wait().map_err(|e| Failure(format!("cannot reap the holder: {e}")))?;
    let killed = Instant::now();
    let bound = target.free_after_crash_within(LEASE);
    let acquired = lock.try_lock_for(bound + 5 * SECOND)?;
    let after = killed.elapsed();
    ensure!(acquired.is_some(), "the lock {HELD_AFTER_CRASH} ({after:?} later)");
    ensure!(after <= bound, "the lock {HELD_AFTER_CRASH} for {after:?}, past the bound of {bound:?}");
    Ok(Verdict::Pass)
}

/// The child's side: hold the lock (with renewal) and wait to be killed.
fn hold_until_killed<T: SuiteTarget>(target: &T, name: &str) -> ! {
    let outcome = (|| -> Result<(), Failure> {
        let client = client(target, options(LEASE, true))?;
        let name = LockName::new(name)?;
        let guard = acquire(&Lock::new(&client, name))?;
        println!("{HELD_LINE}");
        std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
        thread::sleep(CHILD_LIFETIME);
        drop(guard);
        Ok(())
    })();
    if let Err(failure) = outcome {
        eprintln!("S04 holder process failed: {failure}");
        std::process::exit(2);
    }
    std::process::exit(0);
}
