//! `distlock exec` against a throwaway Redis server: mutual exclusion of two commands, the busy
//! exit status, a lock taken away under a running command, and Ctrl-C.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use distlock::redis::testkit::RedisTarget;
use distlock::redis::RedisLockKind;
use distlock::LockName;
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::{unique_name, SuiteTarget};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn redis_url() -> String {
    shared::redis().unwrap().address().to_owned()
}

/// `distlock exec --url <redis> --name NAME <options> -- sh -c SCRIPT`.
fn exec(name: &LockName, options: &[&str], script: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .args(["exec", "--url", &redis_url(), "--name", name.as_str()])
        .args(options)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    command
}

fn exit_code(child: Child) -> i32 {
    child.wait_with_output().unwrap().status.code().unwrap_or(-1)
}

/// A shell script that signals it started (creates `started`), then holds until `release`
/// exists: no race against the clock.
fn hold_until_released(dir: &Path, extra: &str) -> String {
    format!(
        "{extra} touch {started}; while [ ! -e {release} ]; do sleep 0.02; done",
        started = dir.join("started").display(),
        release = dir.join("release").display()
    )
}

fn release(dir: &Path) {
    fs::write(dir.join("release"), b"").unwrap();
}

/// Waits until `path` exists (the command has started, holding the lock).
fn started(path: &Path) {
    assert!(eventually(Duration::from_secs(20), || path.exists()), "{} never appeared", path.display());
}

#[test]
fn two_commands_never_interleave() {
    let name = unique_name("exec-mutex");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do echo \"$DISTLOCK_NAME $DISTLOCK_FENCING_TOKEN $ID\" >> {}; sleep 0.05; done",
        log.display()
    );
    let first = exec(&name, &[], &script).env("ID", "a").spawn().unwrap();
    // The second starts while the first holds the lock (its first line is written): it must wait.
    started(&log);
    let second = exec(&name, &[], &script).env("ID", "b").spawn().unwrap();
    assert_eq!(exit_code(first), 0);
    assert_eq!(exit_code(second), 0);
    let lines: Vec<String> = fs::read_to_string(&log).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 16);
    // Each holder's eight lines are together, with its own fencing token and the lock's name.
    assert_eq!(lines[..8].iter().collect::<std::collections::HashSet<_>>().len(), 1, "{lines:?}");
    assert_eq!(lines[8..].iter().collect::<std::collections::HashSet<_>>().len(), 1, "{lines:?}");
    assert!(lines[0].ends_with(" a") && lines[8].ends_with(" b"), "{lines:?}");
    assert!(lines[0].starts_with(name.as_str()), "{lines:?}");
}

#[test]
fn a_held_lock_is_busy_for_no_wait_and_for_a_short_wait() {
    let name = unique_name("exec-busy");
    let dir = tempfile::tempdir().unwrap();
    let holder = exec(&name, &[], &hold_until_released(dir.path(), "")).spawn().unwrap();
    started(&dir.path().join("started"));
    let busy = exec(&name, &["--no-wait"], "true").output().unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", String::from_utf8_lossy(&busy.stderr));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("is held by another owner"));
    let waited = exec(&name, &["--wait", "200ms"], "true").output().unwrap();
    assert_eq!(waited.status.code(), Some(75));
    release(dir.path());
    assert_eq!(exit_code(holder), 0);
    // The command's own status is distlock's.
    assert_eq!(exec(&name, &["--no-wait"], "exit 7").status().unwrap().code(), Some(7));
}

#[test]
fn a_lock_taken_away_stops_the_command_and_exits_70() {
    let name = unique_name("exec-lost");
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // A short lease: renewal (every third of it) notices the deletion within a second.
    let child = exec(
        &name,
        &["--lease", "1s", "--grace", "1s"],
        &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    started(&pid_file);
    thread::sleep(Duration::from_millis(100));
    let command_pid: i32 = fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    RedisTarget::at(RedisLockKind::SetNx, redis_url()).break_lock(&name).unwrap().unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(70), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("lost the lock"));
    assert!(kill(Pid::from_raw(command_pid), None).is_err(), "the command still runs");
}

#[test]
fn ctrl_c_stops_the_command_and_releases_the_lock() {
    let name = unique_name("exec-sigint");
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let child = exec(&name, &[], &format!("touch {}; exec sleep 60", marker.display())).spawn().unwrap();
    started(&marker);
    thread::sleep(Duration::from_millis(100));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    // The command died of the forwarded SIGINT: 128 + 2.
    assert_eq!(exit_code(child), 130);
    assert_eq!(
        exec(&name, &["--no-wait"], "true").status().unwrap().code(),
        Some(0),
        "the lock was not released"
    );
}

#[test]
fn inspect_shows_the_holder_its_lease_and_the_fencing_counter() {
    let name = unique_name("exec-inspect");
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let script =
        hold_until_released(dir.path(), &format!("echo $DISTLOCK_FENCING_TOKEN > {};", token_file.display()));
    let holder = exec(&name, &["--lease", "20s"], &script).spawn().unwrap();
    started(&dir.path().join("started"));
    let token = fs::read_to_string(&token_file).unwrap().trim().to_owned();
    let inspect = || {
        let output = Command::new(env!("CARGO_BIN_EXE_distlock"))
            .args(["inspect", "--url", &redis_url(), name.as_str()])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let held = inspect();
    assert!(held.contains("holder:          owner "), "{held}");
    assert!(held.contains(&format!("fencing counter: {token}")), "{held}");
    assert!(held.contains("waiters:         0"), "{held}");
    let lease = held.lines().find_map(|line| line.strip_prefix("remaining lease: ")).unwrap();
    assert!(lease.ends_with('s') && !lease.contains("not kept"), "{held}");
    release(dir.path());
    assert_eq!(exit_code(holder), 0);
    assert!(inspect().contains("holder:          none (free)"));
}

/// PB01 from the command line: four processes run `distlock exec` 25 times each on one name,
/// through the harness's PgBouncer in transaction pooling (`pooler=transaction`), for pg-table
/// and pg-row: no two commands overlap, and every one ran.
#[cfg(feature = "postgres")]
mod through_transaction_pooling {
    use super::*;
    use lock_testkit::journal::{section_script, sections};

    const PROCESSES: usize = 4;
    const ROUNDS: usize = 25;

    fn pooled_url() -> String {
        let pgbouncer = shared::pgbouncer().expect("the shared PgBouncer");
        format!("{}transaction?pooler=transaction", pgbouncer.address())
    }

    fn commands_never_overlap_and_all_run(kind: &str) {
        let name = unique_name(&format!("exec-{kind}-pooled"));
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        fs::write(&journal, "").unwrap();
        let url = pooled_url();
        let loops: Vec<_> = (0..PROCESSES)
            .map(|process| {
                let (name, url, journal) = (name.clone(), url.clone(), journal.clone());
                let kind = kind.to_owned();
                thread::spawn(move || {
                    let section = section_script(&journal, &process.to_string(), "0.01");
                    for _ in 0..ROUNDS {
                        let output = Command::new(env!("CARGO_BIN_EXE_distlock"))
                            .args(["exec", "--url", &url, "--kind", &kind, "--name", name.as_str(), "--"])
                            .args(["sh", "-c", &section])
                            .stdin(Stdio::null())
                            .output()
                            .unwrap();
                        assert!(
                            output.status.success(),
                            "{kind} process {process}: {}{}",
                            String::from_utf8_lossy(&output.stdout),
                            String::from_utf8_lossy(&output.stderr)
                        );
                    }
                })
            })
            .collect();
        let ended: Vec<_> = loops.into_iter().map(thread::JoinHandle::join).collect();
        assert!(ended.iter().all(Result::is_ok), "a command failed (its message is above)");
        let counts = sections(&journal).unwrap_or_else(|error| panic!("{kind}: {error}"));
        let ran: Vec<usize> =
            (0..PROCESSES).map(|process| counts.get(&process.to_string()).copied().unwrap_or(0)).collect();
        assert_eq!(ran, vec![ROUNDS; PROCESSES], "{kind}: commands run by each process");
    }

    #[test]
    fn pb01_pg_table_commands_never_overlap() {
        commands_never_overlap_and_all_run("pg-table");
    }

    #[test]
    fn pb01_pg_row_commands_never_overlap() {
        commands_never_overlap_and_all_run("pg-row");
    }
}
