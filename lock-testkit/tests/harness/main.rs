//! The real-server harness, checked against real servers through the project's client crates:
//! Redis (single nodes, Cluster, Sentinel) in `redis_servers.rs`, PostgreSQL and MariaDB in
//! `sql_servers.rs`, ZooKeeper in `zookeeper_servers.rs`, etcd in `etcd_servers.rs` (with the
//! `etcd-server` feature); here, the shared servers and the servers of a test binary that dies.
//!
//! Every test that needs a server fails if the server cannot start: nothing is skipped.

#[cfg(feature = "etcd-server")]
mod etcd_servers;
mod redis_servers;
mod sql_servers;
mod zookeeper_servers;

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use lock_testkit::harness::{
    shared, MariaDbServer, PostgresServer, RedisCluster, RedisOptions, RedisSentinelGroup, RedisServer,
    TestCa, ZooKeeperEnsemble, ZooKeeperMode, ZooKeeperServer,
};
use mysql::prelude::Queryable as _;
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use redis::Commands as _;
use zookeeper_client as zk;

/// How long killed processes may take to disappear.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `pid` runs: `/proc/PID` exists and is not a zombie. A zombie is dead; the process
/// that adopted it reaps it in its own time.
fn is_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat[stat.rfind(')').expect("stat has a command name") + 1..].split_whitespace().next();
    !matches!(state, Some("Z" | "X"))
}

fn accepts_connections(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
}

/// Asserts that every pid is dead and nothing listens on `port` any more.
fn assert_gone(pids: &[u32], port: u16) {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while pids.iter().any(|&pid| is_alive(pid)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = pids.iter().copied().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "processes {alive:?} outlived their server");
    assert!(!accepts_connections(port), "port {port} still accepts connections");
}

/// Asserts that the harness reaped `pid` itself: no zombie left, `kill(pid, 0)` fails.
fn assert_reaped(pid: u32) {
    let pid = i32::try_from(pid).expect("pid fits i32");
    assert_eq!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH));
}

fn redis_connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("valid Redis URL")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect to Redis")
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

#[test]
fn shared_servers_start_once_and_answer() {
    let redis = shared::redis().expect("shared Redis");
    assert!(std::ptr::eq(redis, shared::redis().unwrap()), "started twice");
    let pong: String = redis::cmd("PING").query(&mut redis_connection(redis.address())).unwrap();
    assert_eq!(pong, "PONG");

    let nodes = shared::redis_nodes(3).expect("shared Redlock nodes");
    let again = shared::redis_nodes(2).unwrap();
    assert!(std::ptr::eq(nodes[0], again[0]) && std::ptr::eq(nodes[1], again[1]));
    let mut addresses: Vec<&str> = nodes.iter().map(|node| node.address()).collect();
    addresses.push(redis.address());
    addresses.sort_unstable();
    addresses.dedup();
    assert_eq!(addresses.len(), 4, "nodes must be distinct servers");

    let postgres = shared::postgres().expect("shared PostgreSQL");
    let mut client = postgres::Client::connect(postgres.address(), postgres::NoTls).unwrap();
    client.simple_query("SELECT 1").unwrap();

    let mariadb = shared::mariadb().expect("shared MariaDB");
    let mut connection = mysql::Conn::new(mysql::Opts::from_url(mariadb.address()).unwrap()).unwrap();
    connection.query_drop("SELECT 1").unwrap();

    let zookeeper = shared::zookeeper().expect("shared ZooKeeper");
    current_thread_runtime().block_on(async {
        let client = zk::Client::connect(zookeeper.address()).await.unwrap();
        client.get_data("/").await.unwrap();
    });
}

/// Set in the child test binary that [`servers_die_with_a_test_binary_that_runs_no_destructors`]
/// starts.
const CHILD_VARIABLE: &str = "DISTLOCK_HARNESS_TEST_CHILD";

/// Runs the test `name` of this binary as a child (with [`CHILD_VARIABLE`] set) and returns what
/// follows `marker` on the line of its output that has it.
fn run_child(name: &str, marker: &str) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_VARIABLE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        // libtest prints the test's name on the same line first.
        .find_map(|line| line.split_once(marker).map(|(_, report)| report.to_owned()))
        .unwrap_or_else(|| {
            panic!("the child reported no server:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr))
        })
}

#[test]
fn servers_die_with_a_test_binary_that_runs_no_destructors() {
    const NAME: &str = "servers_die_with_a_test_binary_that_runs_no_destructors";
    if std::env::var_os(CHILD_VARIABLE).is_some() {
        // The child: start a server, report it, and exit without dropping it, as a test
        // binary does with shared servers in statics.
        let server = RedisServer::start().expect("start redis-server in the child");
        println!(
            "child-server {} {}",
            server.process().pid().expect("running"),
            server.process().dir().display()
        );
        std::process::exit(0);
    }

    let report = run_child(NAME, "child-server ");
    let (pid, dir) = report.split_once(' ').expect("pid and dir");
    let pid: u32 = pid.parse().unwrap();
    let dir = PathBuf::from(dir);

    // Only the pid tells: the child's port is not in this process's list of handed-out
    // ports, so a server of a concurrent test here may already have been given it.
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while is_alive(pid) {
        assert!(Instant::now() < deadline, "the child's server {pid} outlived it");
        thread::sleep(Duration::from_millis(20));
    }
    // No destructor ran, so the dir is still there: the next run's cleanup removes it.
    assert!(dir.exists());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_paused_server_dies_with_a_test_binary_that_runs_no_destructors() {
    const NAME: &str = "a_paused_server_dies_with_a_test_binary_that_runs_no_destructors";
    if std::env::var_os(CHILD_VARIABLE).is_some() {
        // The child: start a server with helper processes, freeze it all (SIGSTOP), report
        // every pid, and exit without dropping it — as a run interrupted during S15 does.
        let server = PostgresServer::start().expect("start PostgreSQL in the child");
        let pids = server.process().pids();
        server.process().pause().expect("pause");
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        println!("child-pids {}", pids.join(" "));
        std::process::exit(0);
    }

    let pids: Vec<u32> = run_child(NAME, "child-pids ").split(' ').map(|pid| pid.parse().unwrap()).collect();
    assert!(pids.len() > 2, "expected a postmaster with children, got {pids:?}");
    // The postmaster gets SIGKILL from the kernel; its frozen helpers must not stay behind.
    let deadline = Instant::now() + EXIT_TIMEOUT;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&pid| is_alive(pid)).collect();
        if alive.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the child's frozen server processes {alive:?} outlived it");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Installs ring as rustls's process-wide provider, which redis-rs and zookeeper-client build
/// their TLS configs with (zookeeper-client's `tls` feature compiles aws-lc-rs in too, and with
/// two providers compiled rustls will not pick one by itself).
fn install_ring_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn read_pem(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path:?}: {e}"))
}

#[test]
fn redis_tls_serves_tls_only_and_can_require_client_certificates() {
    install_ring_provider();
    let server = RedisServer::start_with(RedisOptions::new().tls().password("s3cret"))
        .expect("start a TLS-only redis-server");
    let port = server.port();
    let ca = server.tls_ca().expect("a TLS-only server has a CA");
    assert_eq!(server.url(), format!("rediss://:s3cret@127.0.0.1:{port}/?{}", ca.cacert_query()));
    let tls_client = |trusted: PathBuf, client_certificate: bool, port: u16| {
        let certificates = redis::TlsCertificates {
            root_cert: Some(read_pem(trusted).into_bytes()),
            client_tls: client_certificate.then(|| redis::ClientTlsConfig {
                client_cert: read_pem(ca.client_cert()).into_bytes(),
                client_key: read_pem(ca.client_key()).into_bytes(),
            }),
        };
        redis::Client::build_with_tls(format!("rediss://:s3cret@127.0.0.1:{port}/"), certificates)
            .expect("a TLS client")
            .get_connection_with_timeout(Duration::from_secs(2))
    };

    let mut connection = tls_client(ca.ca_cert(), false, port).expect("TLS trusting the test CA");
    let () = connection.set("greeting", "over tls").unwrap();
    let value: Option<String> = connection.get("greeting").unwrap();
    assert_eq!(value.as_deref(), Some("over tls"));
    let another_ca = tls_client(ca.other_ca_cert(), false, port);
    assert!(another_ca.is_err(), "a handshake trusting another CA must fail");
    let plaintext = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2));
    assert!(plaintext.is_err(), "the TLS-only port must refuse plaintext");
    server.process().restart().expect("restart the TLS-only server");
    assert!(tls_client(ca.ca_cert(), false, port).is_ok(), "TLS after a restart");

    let strict =
        RedisServer::start_with(RedisOptions::new().tls_requiring_client_certificates().password("s3cret"))
            .expect("start a redis-server requiring client certificates");
    let anonymous = tls_client(ca.ca_cert(), false, strict.port())
        .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
    assert!(anonymous.is_err(), "a client without a certificate must be refused");
    let mut connection =
        tls_client(ca.ca_cert(), true, strict.port()).expect("TLS with a client certificate");
    let pong: String = redis::cmd("PING").query(&mut connection).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn zookeeper_tls_serves_tls_only_and_can_require_client_certificates() {
    install_ring_provider();
    let server = ZooKeeperServer::start_tls_requiring_client_certificates()
        .expect("start a TLS-only ZooKeeper requiring client certificates");
    let ca = server.tls_ca().expect("a TLS-only server has a CA");
    assert_eq!(server.url(), format!("zk+tls://127.0.0.1:{}/?{}", server.port(), ca.cacert_query()));
    // Four-letter words, over TLS.
    assert_eq!(server.mode(), Some(ZooKeeperMode::Standalone));

    let tls = |trusted: PathBuf, client_certificate: bool| {
        let options = zk::TlsOptions::new().with_pem_ca(&read_pem(trusted)).unwrap();
        match client_certificate {
            true => {
                options.with_pem_identity(&read_pem(ca.client_cert()), &read_pem(ca.client_key())).unwrap()
            }
            false => options,
        }
    };
    let connect_string = server.connect_string();
    let runtime = current_thread_runtime();
    runtime.block_on(async {
        let client = zk::Client::connector()
            .with_tls(tls(ca.ca_cert(), true))
            .secure_connect(&connect_string)
            .await
            .expect("a session over TLS with a client certificate");
        let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/over-tls", b"hello", &create).await.unwrap();
        assert_eq!(client.get_data("/over-tls").await.unwrap().0, b"hello");

        let failing = [
            (
                "without a client certificate",
                zk::Client::connector().with_tls(tls(ca.ca_cert(), false)),
                true,
            ),
            ("trusting another CA", zk::Client::connector().with_tls(tls(ca.other_ca_cert(), true)), true),
            ("in plaintext", zk::Client::connector(), false),
        ];
        for (what, connector, secure) in failing {
            let connector = connector.with_fail_eagerly().with_session_timeout(Duration::from_secs(2));
            let session = match secure {
                true => connector.secure_connect(&connect_string).await,
                false => connector.connect(&connect_string).await,
            };
            assert!(session.is_err(), "a session {what} must fail");
        }
    });
}

#[test]
fn shared_tls_servers_start_once_and_carry_their_ca_in_the_address() {
    let redis = shared::redis_tls().expect("shared TLS-only Redis");
    assert!(std::ptr::eq(redis, shared::redis_tls().unwrap()), "started twice");
    let server = redis.server().unwrap();
    let ca = server.tls_ca().expect("TLS-only");
    assert_eq!(redis.address(), format!("rediss://127.0.0.1:{}/?{}", server.port(), ca.cacert_query()));

    let zookeeper = shared::zookeeper_tls().expect("shared TLS-only ZooKeeper");
    assert!(std::ptr::eq(zookeeper, shared::zookeeper_tls().unwrap()), "started twice");
    let server = zookeeper.server().unwrap();
    assert_eq!(zookeeper.address(), server.url());
    assert!(zookeeper.address().starts_with("zk+tls://127.0.0.1:"), "{}", zookeeper.address());
    assert_eq!(server.mode(), Some(ZooKeeperMode::Standalone));
}
