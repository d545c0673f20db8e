//! `distlock exec` with a session hold in doubt (issue 16): the command's connection to the
//! server is cut by a proxy, so the liveness checks go unanswered. `--on-doubt stop` (the
//! default) stops the command as soon as the hold is in doubt, before it is lost; `--on-doubt
//! continue` lets it run until the hold is known lost. On ZooKeeper and on PostgreSQL row locks.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;
use lock_testkit::{eventually, FaultProxy};

/// The lease: how long the checks may fail before the hold is lost.
const LEASE: &str = "6s";
const LEASE_TIME: Duration = Duration::from_secs(6);
/// The connect and reply timeout of `distlock exec`.
const TIMEOUT: &str = "500ms";

/// The first `host:port` in `address` (a URL or a connect string).
fn socket_address(address: &str) -> (SocketAddr, String) {
    let start = address.rfind('@').map_or_else(|| address.find("://").map_or(0, |i| i + 3), |i| i + 1);
    let rest = &address[start..];
    let end = rest.find(['/', ',', '?']).unwrap_or(rest.len());
    let host_port = &rest[..end];
    let socket = host_port.parse().unwrap_or_else(|e| panic!("{host_port} in {address}: {e}"));
    (socket, host_port.to_owned())
}

/// `address` with its server replaced by a proxy that the test cuts.
fn through_proxy(address: &str) -> (FaultProxy, String) {
    let (server, host_port) = socket_address(address);
    let proxy = FaultProxy::start(server).unwrap();
    let proxied = address.replacen(&host_port, &proxy.address().to_string(), 1);
    (proxy, proxied)
}

/// Runs `distlock exec` on `url` with `on_doubt`, cuts its connection once the command runs, and
/// returns its exit code and how long after the cut the command was sent SIGTERM.
/// `on_doubt`: the `--on-doubt` flag, `None` for the default.
fn cut_under_exec(url: &str, kind: Option<&str>, on_doubt: Option<&str>) -> (i32, Duration) {
    let (proxy, url) = through_proxy(url);
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let stopped = dir.path().join("stopped");
    // The command notes when it is told to stop; distlock exits later, after its release of the
    // lock (bounded by its timeouts) — that is not what the bounds below are about.
    let script = format!(
        "trap 'touch {}; exit 143' TERM; touch {}; sleep 60 & wait",
        stopped.display(),
        started.display()
    );
    let name = unique_name("exec-doubt");
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command.args(["exec", "--url", &url, "--name", name.as_str(), "--lease", LEASE, "--timeout", TIMEOUT]);
    command.args(["--grace", "1s"]);
    if let Some(on_doubt) = on_doubt {
        command.args(["--on-doubt", on_doubt]);
    }
    if let Some(kind) = kind {
        command.args(["--kind", kind]);
    }
    let mut child = command.args(["--", "sh", "-c", &script]).stdin(Stdio::null()).spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(30), || Path::new(&started).exists()),
        "the command never started"
    );
    // Past one liveness check, so the hold is in its steady state.
    std::thread::sleep(Duration::from_millis(2_500));
    proxy.cut();
    let cut_at = Instant::now();
    let deadline = cut_at + LEASE_TIME * 3;
    let mut stopped_after = None;
    let status = loop {
        if stopped_after.is_none() && stopped.exists() {
            stopped_after = Some(cut_at.elapsed());
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("distlock exec ran on {:?} after its connection was cut", LEASE_TIME * 3);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped_after = stopped_after.or_else(|| stopped.exists().then(|| cut_at.elapsed()));
    (status.code().unwrap_or(-1), stopped_after.expect("the command was told to stop (SIGTERM)"))
}

fn stops_in_doubt_and_continues_until_lost(url: &str, kind: Option<&str>) {
    // No flag: the default is to stop.
    let (code, after) = cut_under_exec(url, kind, None);
    assert_eq!(code, 70, "stopped as on a loss");
    // In doubt at the first unanswered check: within one renew interval (lease / 3) + the
    // timeout; lost no earlier than the lease less an interval.
    assert!(after < Duration::from_millis(3_500), "stopped {after:?} after the cut: not at the doubt");

    let (code, after) = cut_under_exec(url, kind, Some("continue"));
    assert_eq!(code, 70, "stopped at the loss");
    // Lost once no check succeeded for a whole lease (the last one confirmed up to an interval
    // before the cut).
    assert!(
        after >= LEASE_TIME - LEASE_TIME / 3 - Duration::from_millis(100),
        "stopped {after:?} after the cut: before the loss"
    );
}

#[test]
fn zookeeper_hold_in_doubt() {
    let connect = shared::zookeeper().unwrap().address().to_owned();
    stops_in_doubt_and_continues_until_lost(&format!("zk://{connect}/distlock-exec"), None);
}

#[test]
fn postgres_row_hold_in_doubt() {
    let url = shared::postgres().unwrap().address().to_owned();
    stops_in_doubt_and_continues_until_lost(&url, Some("pg-row"));
}
