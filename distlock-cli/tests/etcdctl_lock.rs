//! `distlock exec --url etcd://… --name N -- CMD` and `etcdctl lock N -- CMD` share one lock on
//! the harness's etcd server: run together on one name they never overlap, a command of either
//! waits for the other's, and `distlock inspect` reads `etcdctl`'s holder and distlock's waiter.

use std::fs;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::Duration;

use lock_testkit::eventually;
use lock_testkit::harness::{shared, EtcdServer};
use lock_testkit::journal::{section_script, sections};
use lock_testkit::suite::unique_name;

/// The shared harness server: its URL for distlock, and the server itself for `etcdctl`.
fn server() -> (&'static str, &'static EtcdServer) {
    let shared = shared::etcd().expect("the shared etcd server");
    let server = shared.server().expect("these tests run etcdctl against the harness's own etcd server");
    (shared.address(), server)
}

/// `distlock exec --url <etcd> --name NAME <options> -- sh -c SCRIPT`.
fn distlock_exec(name: &str, options: &[&str], script: &str) -> Command {
    let (url, _) = server();
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .args(["exec", "--url", url, "--name", name])
        .args(options)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    command
}

/// `etcdctl lock NAME -- sh -c SCRIPT` (its own 10 s session TTL; it deletes its key when the
/// command ends).
fn etcdctl_lock(name: &str, script: &str) -> Command {
    let (_, server) = server();
    let mut command = server.etcdctl();
    command.args(["lock", name, "--", "sh", "-c", script]).stdin(Stdio::null());
    command
}

fn distlock_inspect(name: &str) -> Output {
    let (url, _) = server();
    Command::new(env!("CARGO_BIN_EXE_distlock")).args(["inspect", "--url", url, name]).output().unwrap()
}

/// A child killed (and reaped) if the test fails before waiting for it: no process left behind.
struct Running(Option<Child>);

impl Running {
    fn spawn(command: &mut Command) -> Self {
        Self(Some(command.spawn().unwrap()))
    }

    fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }

    fn has_exited(&mut self) -> bool {
        self.0.as_mut().unwrap().try_wait().unwrap().is_some()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Commands each loop runs.
const ROUNDS: usize = 6;

fn text(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn distlock_exec_and_etcdctl_lock_on_one_name_never_overlap() {
    let name = unique_name("etcdctl-exec");
    let name = name.as_str().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    fs::write(&journal, "").unwrap();
    // Two distlock loops and one etcdctl loop, all at once: each command waits for the others'.
    let loops: Vec<_> = ["distlock-1", "distlock-2", "etcdctl"]
        .into_iter()
        .map(|who| {
            let (name, script) = (name.clone(), section_script(&journal, who, "0.05"));
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let mut command = if who == "etcdctl" {
                        etcdctl_lock(&name, &script)
                    } else {
                        distlock_exec(&name, &[], &script)
                    };
                    let output = Running::spawn(command.stdout(Stdio::piped()).stderr(Stdio::piped())).wait();
                    assert!(output.status.success(), "{who}: {}", text(&output));
                }
            })
        })
        .collect();
    // Every loop ends (its children reaped, killed if it failed) before any failure is raised:
    // a panic here while another loop's `etcdctl` waits would leave it orphaned, waiting forever
    // for a server that exits with this process.
    let ended: Vec<_> = loops.into_iter().map(thread::JoinHandle::join).collect();
    assert!(ended.iter().all(Result::is_ok), "a command failed (its message is above)");
    let counts = sections(&journal).unwrap_or_else(|error| panic!("{error}"));
    for who in ["distlock-1", "distlock-2", "etcdctl"] {
        assert_eq!(counts.get(who).copied(), Some(ROUNDS), "{who}: {counts:?}");
    }
}

#[test]
fn a_distlock_command_waits_for_an_etcdctl_holder_and_inspect_sees_both() {
    let name = unique_name("etcdctl-holds");
    let name = name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let (started, release, token) =
        (dir.path().join("started"), dir.path().join("release"), dir.path().join("token"));
    // etcdctl holds until the test lets go: no race against the clock.
    let hold =
        format!("touch {}; while [ ! -e {} ]; do sleep 0.02; done", started.display(), release.display());
    let holder = Running::spawn(etcdctl_lock(name, &hold).stdout(Stdio::null()).stderr(Stdio::piped()));
    assert!(eventually(Duration::from_secs(20), || started.exists()), "etcdctl never took the lock");

    let busy = distlock_exec(name, &["--no-wait"], "true").output().unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));

    // inspect reads etcdctl's key, `<name>/<lease hex>`, as the holder.
    let seen = distlock_inspect(name);
    assert!(seen.status.success(), "{}", text(&seen));
    let seen = String::from_utf8_lossy(&seen.stdout).into_owned();
    assert!(seen.contains(&format!("key {name}/")) && seen.contains("waiters:         0"), "{seen}");

    let mut waiter = Running::spawn(
        distlock_exec(
            name,
            &["--wait", "30s"],
            &format!("echo \"$DISTLOCK_FENCING_TOKEN\" > {}", token.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped()),
    );
    // Queued behind etcdctl: inspect counts it, and its command has not run.
    let queued = eventually(Duration::from_secs(20), || {
        String::from_utf8_lossy(&distlock_inspect(name).stdout).contains("waiters:         1")
    });
    assert!(queued, "the distlock waiter never queued");
    assert!(!waiter.has_exited() && !token.exists(), "distlock ran while etcdctl held the lock");

    fs::write(&release, b"").unwrap();
    let done = holder.wait();
    assert!(done.status.success(), "etcdctl: {}", text(&done));
    let done = waiter.wait();
    assert!(done.status.success(), "distlock: {}", text(&done));
    // The waiter's token is its key's create revision: a positive number.
    let token: u64 = fs::read_to_string(&token).unwrap().trim().parse().unwrap();
    assert!(token > 0);
    let seen = String::from_utf8_lossy(&distlock_inspect(name).stdout).into_owned();
    assert!(seen.contains("holder:          none (free)"), "{seen}");
}

#[test]
fn etcdctl_waits_for_a_distlock_exec_holder() {
    let name = unique_name("exec-holds");
    let name = name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let (started, release, ran) =
        (dir.path().join("started"), dir.path().join("release"), dir.path().join("ran"));
    let hold =
        format!("touch {}; while [ ! -e {} ]; do sleep 0.02; done", started.display(), release.display());
    let holder =
        Running::spawn(distlock_exec(name, &[], &hold).stdout(Stdio::piped()).stderr(Stdio::piped()));
    assert!(eventually(Duration::from_secs(20), || started.exists()), "distlock never took the lock");
    let mut waiter = Running::spawn(
        etcdctl_lock(name, &format!("touch {}", ran.display())).stdout(Stdio::null()).stderr(Stdio::piped()),
    );
    let queued = eventually(Duration::from_secs(20), || {
        String::from_utf8_lossy(&distlock_inspect(name).stdout).contains("waiters:         1")
    });
    assert!(queued, "etcdctl never queued");
    assert!(!waiter.has_exited() && !ran.exists(), "etcdctl ran while distlock held the lock");
    fs::write(&release, b"").unwrap();
    let done = holder.wait();
    assert!(done.status.success(), "distlock: {}", text(&done));
    let done = waiter.wait();
    assert!(done.status.success() && ran.exists(), "etcdctl: {}", text(&done));
}
