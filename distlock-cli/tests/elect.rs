//! `distlock elect` and `distlock leader` against a throwaway Redis server: one leader runs its
//! command while another candidate is busy, followers see the leader's value and token, and a
//! resignation (the command's end) hands over to a waiting candidate.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use distlock::LockName;
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;

fn redis_url() -> String {
    shared::redis().unwrap().address().to_owned()
}

/// `distlock elect --url <redis> --name NAME --value VALUE <options> -- sh -c SCRIPT`.
fn elect(name: &LockName, value: &str, options: &[&str], script: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .args(["elect", "--url", &redis_url(), "--name", name.as_str(), "--value", value])
        .args(options)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    command
}

/// `distlock leader --url <redis> --name NAME`'s output.
fn leader(name: &LockName) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args(["leader", "--url", &redis_url(), "--name", name.as_str()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn wait_for(path: &Path) {
    assert!(eventually(Duration::from_secs(20), || path.exists()), "{} never appeared", path.display());
}

#[test]
fn one_leader_runs_its_command_followers_see_it_and_the_next_one_takes_over() {
    let name = unique_name("elect");
    let dir = tempfile::tempdir().unwrap();
    let (started, release) = (dir.path().join("started"), dir.path().join("release"));
    assert_eq!(leader(&name), "leader: none\n");
    let script = format!(
        "echo \"$DISTLOCK_ELECTION $DISTLOCK_LEADER_VALUE $DISTLOCK_FENCING_TOKEN\" > {out}; touch {started}; \
         while [ ! -e {release} ]; do sleep 0.02; done",
        out = dir.path().join("env").display(),
        started = started.display(),
        release = release.display()
    );
    let first = elect(&name, "host-a:7000", &[], &script).spawn().unwrap();
    wait_for(&started);
    let env = fs::read_to_string(dir.path().join("env")).unwrap();
    let token = env.split_whitespace().nth(2).expect("a fencing token").to_owned();
    assert_eq!(env.trim(), format!("{name} host-a:7000 {token}"));
    assert_eq!(leader(&name), format!("leader: host-a:7000\ntoken:  {token}\n"));

    // Busy while the first leads.
    let busy = elect(&name, "host-b", &["--no-wait"], "true").output().unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", String::from_utf8_lossy(&busy.stderr));

    // A waiting candidate leads once the first command ends (its leadership is resigned).
    let second_started = dir.path().join("second");
    let second =
        elect(&name, "host-b:7000", &["--wait", "30s"], &format!("touch {}", second_started.display()))
            .spawn()
            .unwrap();
    fs::write(&release, b"").unwrap();
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(0));
    let second = second.wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(second_started.exists());
    assert_eq!(leader(&name), "leader: none\n");
}

#[test]
fn bad_input_is_a_typed_error_with_exit_71() {
    let output = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args([
            "elect",
            "--url",
            "redis://user:hunter2@127.0.0.1:1/",
            "--name",
            "x",
            "--timeout",
            "1s",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(71));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let output = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args(["leader", "--url", &redis_url(), "--name", "bad\u{1}name"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(71));
}
