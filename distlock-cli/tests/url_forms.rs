//! Every documented URL form through every command (`exec`, `inspect`, `bench`, `compare`), on
//! the harness's throwaway servers; and no password, in any form, in any error, `Debug` output,
//! command output or report file.
//!
//! Not covered: `rediss://` (the harness has no TLS server) and Redlock's `--url` list beyond
//! the kind check (its five nodes would double the test's time).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use lock_testkit::harness::{free_port, shared};
use lock_testkit::suite::unique_name;

/// The secret of every credential-leak check: with `@`, `:` and `/`, percent-encoded in URLs.
const SECRET: &str = "S3cr3tW0rd@x:y/z";
const ENCODED: &str = "S3cr3tW0rd%40x%3Ay%2Fz";
/// The distinctive part: it must appear nowhere, encoded or not.
const MARK: &str = "S3cr3tW0rd";

fn distlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_distlock")).args(args).stdin(Stdio::null()).output().unwrap()
}

fn text(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn port_of(url: &str) -> String {
    let after = url.rsplit_once(':').unwrap().1;
    after.trim_end_matches('/').split('/').next().unwrap().to_owned()
}

/// `exec` takes the lock with `url` and runs `true`; `inspect` reads it.
fn exec_and_inspect(url: &str, kind: Option<&str>) {
    let name = unique_name("url-forms");
    let mut args = vec!["exec", "--url", url, "--name", name.as_str(), "--timeout", "5s"];
    if let Some(kind) = kind {
        args.extend(["--kind", kind]);
    }
    args.extend(["--", "sh", "-c", "test -n \"$DISTLOCK_FENCING_TOKEN\""]);
    let run = distlock(&args);
    assert!(run.status.success(), "exec {url} {kind:?}: {}", text(&run));
    let run = distlock(&["inspect", "--url", url, name.as_str()]);
    assert!(run.status.success(), "inspect {url}: {}", text(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("holder:"), "{}", text(&run));
}

/// `bench KIND --url URL --workloads w1` (which cleans up after itself) and `compare --quick
/// --only s01` on the kind.
fn bench_and_compare(kind: &str, flag: &str, url: &str) {
    let run = distlock(&["bench", kind, "--url", url, "--workloads", "w1"]);
    assert!(run.status.success(), "bench {kind} --url {url}: {}", text(&run));
    // On a user's server the bench deletes what its runs left (fence keys, lock rows).
    assert!(
        text(&run).contains("keys or rows under `distlock-bench:`"),
        "bench {kind} cleaned up: {}",
        text(&run)
    );
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let run = distlock(&[
        "compare",
        "--quick",
        "--only",
        "s01",
        "--jobs",
        "1",
        "--backends",
        kind,
        flag,
        url,
        "--out",
        dir,
    ]);
    assert!(run.status.success(), "compare {kind} {flag} {url}: {}", text(&run));
    let report = std::fs::read_to_string(out.path().join("report.json")).unwrap();
    assert!(report.contains("\"ok\": true") || report.contains("\"ok\":true"), "{report}");
}

#[test]
fn every_documented_url_form_works_through_every_command() {
    let redis = shared::redis().unwrap().address().to_owned();
    let postgres = shared::postgres().unwrap().address().to_owned();
    let mysql = shared::mariadb().unwrap().address().to_owned();
    let zookeeper = shared::zookeeper().unwrap().address().to_owned();
    let etcd = shared::etcd().unwrap().address().to_owned();

    exec_and_inspect(&redis, None);
    exec_and_inspect(&redis, Some("redis-hash"));
    // postgres:// and postgresql:// with user and password; libpq key=value.
    exec_and_inspect(&postgres, None);
    exec_and_inspect(&postgres.replacen("postgres://", "postgresql://", 1), Some("pg-row"));
    let libpq =
        format!("host=127.0.0.1 port={} user=distlock password=distlock dbname=distlock", port_of(&postgres));
    exec_and_inspect(&libpq, Some("pg-advisory"));
    exec_and_inspect(&mysql, Some("mysql-row"));
    // zk:// with a namespace holding an `@`, with digest credentials, and with several hosts.
    exec_and_inspect(&format!("zk://{zookeeper}/url-forms/a@b"), None);
    exec_and_inspect(&format!("zk://app:p%40ss@{zookeeper}/url-forms-digest"), None);
    let port = zookeeper.rsplit_once(':').unwrap().1;
    exec_and_inspect(&format!("zookeeper://127.0.0.1:{port},localhost:{port}/url-forms"), Some("zookeeper"));
    // etcd:// bare, and with a namespace, two endpoints and (ignored without auth) credentials.
    exec_and_inspect(&etcd, None);
    let port = port_of(&etcd);
    exec_and_inspect(&format!("etcd://app:p%40ss@127.0.0.1:{port},localhost:{port}/url-forms"), Some("etcd"));

    bench_and_compare("zookeeper", "--zookeeper", &format!("zk://{zookeeper}/url-forms-compare"));
    bench_and_compare("redis", "--redis", &redis);
    bench_and_compare("pg-table", "--postgres", &postgres.replacen("postgres://", "postgresql://", 1));
    bench_and_compare("mysql-advisory", "--mysql", &mysql);
    bench_and_compare("etcd", "--etcd", &format!("{etcd}/url-forms-compare"));

    // A kind of another scheme is refused, by exec and compare alike.
    let run = distlock(&["exec", "--url", &redis, "--name", "x", "--kind", "pg-row", "--", "true"]);
    assert!(!run.status.success() && text(&run).contains("does not go with"), "{}", text(&run));
    let run = distlock(&["compare", "--quick", "--only", "s01", "--backends", "redis", "--redis", &postgres]);
    assert!(!run.status.success() && text(&run).contains("does not go with"), "{}", text(&run));
}

/// Every form a password can take, against servers that refuse: a closed port, or the harness
/// server with a wrong password.
fn leaky_urls() -> Vec<(&'static str, String)> {
    let closed = free_port().unwrap();
    let pg_port = port_of(shared::postgres().unwrap().address());
    vec![
        ("redis", format!("redis://:{ENCODED}@127.0.0.1:{closed}/")),
        ("redis", format!("redis://user:{ENCODED}@127.0.0.1:{closed}/0?x=a@b")),
        // Written raw, as users do: `@`, `:`, `/`, `?` and `#` unencoded, or no scheme at all.
        ("redis", format!("redis://user:{SECRET}@127.0.0.1:{closed}/")),
        ("redis", format!("app:{SECRET}@127.0.0.1:{closed}")),
        ("mysql-table", format!("mysql://distlock:{MARK}?x#y@127.0.0.1:{closed}/distlock")),
        ("redis", format!("redis://user:x?{MARK}=1@127.0.0.1:{closed}/")),
        ("pg-table", format!("postgres://distlock:x?{MARK}=1@127.0.0.1:{closed}/distlock")),
        ("zookeeper", format!("zk+tls://app:x?{MARK}@127.0.0.1:{closed}/locks?cacert=/nonexistent.pem")),
        ("etcd", format!("etcds://app:x?{MARK}=1@127.0.0.1:{closed}/locks?cacert=/nonexistent.pem")),
        ("etcd", format!("etcd://app:{MARK}/x@127.0.0.1:{closed}/locks")),
        ("etcd", format!("etcd://app:x/{MARK}@127.0.0.1:{closed}/locks")),
        ("zookeeper", format!("zk://app:{MARK}/x@127.0.0.1:{closed}/locks")),
        (
            "redlock",
            format!(
                "redis://:{ENCODED}@127.0.0.1:{closed}/,redis://:{ENCODED}@127.0.0.1:{}/",
                free_port().unwrap()
            ),
        ),
        ("pg-table", format!("postgres://distlock:{ENCODED}@127.0.0.1:{pg_port}/distlock")),
        ("pg-table", format!("postgresql://distlock@127.0.0.1:{pg_port}/distlock?password={ENCODED}")),
        (
            "pg-table",
            format!("host=127.0.0.1 port={pg_port} user=distlock dbname=distlock password='{SECRET}'"),
        ),
        ("pg-table", format!("host=127.0.0.1 port={closed} password={MARK}x")),
        ("mysql-table", format!("mysql://distlock:{ENCODED}@127.0.0.1:{closed}/distlock")),
        ("zookeeper", format!("zk://app:{ENCODED}@127.0.0.1:{closed}/locks")),
        ("etcd", format!("etcd://app:{ENCODED}@127.0.0.1:{closed}/locks")),
        ("etcd", format!("etcds://app:{SECRET}@127.0.0.1:{closed}/locks?cacert=/nonexistent.pem")),
    ]
}

fn assert_secret_free(what: &str, shown: &str) {
    assert!(!shown.contains(MARK) && !shown.contains(ENCODED), "{what} shows the password:\n{shown}");
}

fn assert_dir_secret_free(what: &str, dir: &Path) {
    for entry in walk(dir) {
        let contents = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        assert_secret_free(&format!("{what}: {}", entry.display()), &contents);
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn no_password_appears_in_errors_debug_output_or_reports() {
    use distlock::{parse_url_opts, BackendKind, ConnectOptions};
    use std::time::Duration;

    for (kind, url) in leaky_urls() {
        // The builders: build() errors and Debug of builder and (where one is built) backend.
        let options = ConnectOptions::new()
            .kind(kind.parse::<BackendKind>().unwrap())
            .connect_timeout(Duration::from_secs(2))
            .io_timeout(Duration::from_secs(2));
        let built = parse_url_opts(&url, &options);
        assert!(built.is_err(), "{kind}: a refusing server was accepted");
        assert_secret_free(
            &format!("build() of {kind}"),
            &format!("{built:?} / {}", built.as_ref().unwrap_err()),
        );
        let debug = match kind {
            "redis" => format!("{:?}", distlock::redis::RedisBackend::builder(url.as_str())),
            "redlock" => {
                format!("{:?}", distlock::redis::RedlockBackend::builder(distlock::split_url_list(&url)))
            }
            "pg-table" => format!("{:?}", distlock::postgres::PostgresBackend::builder(url.as_str())),
            "mysql-table" => format!("{:?}", distlock::mysql::MySqlBackend::builder(url.as_str())),
            "etcd" => format!("{:?}", distlock::etcd::EtcdLockBuilder::from_url(&url)),
            _ => format!("{:?}", distlock::zookeeper::ZooKeeperLockBuilder::from_url(&url)),
        };
        assert_secret_free(&format!("Debug of the {kind} builder"), &debug);

        // The commands: exec, inspect, bench, compare (output and report files).
        let run = distlock(&[
            "exec",
            "--url",
            &url,
            "--name",
            "leak",
            "--kind",
            kind,
            "--timeout",
            "2s",
            "--",
            "true",
        ]);
        assert!(!run.status.success());
        assert_secret_free(&format!("exec {kind}"), &text(&run));
        if kind != "redlock" {
            let run = distlock(&["inspect", "--url", &url, "leak"]);
            assert!(!run.status.success());
            assert_secret_free(&format!("inspect {kind}"), &text(&run));
        }
        let run = distlock(&["bench", kind, "--url", &url, "--workloads", "w1"]);
        assert!(!run.status.success());
        assert_secret_free(&format!("bench {kind}"), &text(&run));
        let flag = match kind {
            "redis" => "--redis",
            "redlock" => "--redlock",
            "pg-table" => "--postgres",
            "mysql-table" => "--mysql",
            "etcd" => "--etcd",
            _ => "--zookeeper",
        };
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().to_str().unwrap();
        let run = distlock(&[
            "compare",
            "--quick",
            "--only",
            "s01",
            "--jobs",
            "1",
            "--backends",
            kind,
            flag,
            &url,
            "--out",
            dir,
        ]);
        assert_secret_free(&format!("compare {kind}"), &text(&run));
        assert_dir_secret_free(&format!("compare {kind} report"), out.path());
    }
}
