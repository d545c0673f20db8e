//! The real-server harness, checked against real servers through the project's client crates.
//!
//! Every test that needs a server fails if the server cannot start: nothing is skipped.

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
fn redis_answers_rejects_wrong_passwords_and_is_gone_after_drop() {
    let server =
        RedisServer::start_with(RedisOptions::new().password("s3cret:/@")).expect("start redis-server");
    let port = server.port();

    let mut connection = redis_connection(&server.url());
    let () = connection.set("greeting", "hello").unwrap();
    let value: Option<String> = connection.get("greeting").unwrap();
    assert_eq!(value.as_deref(), Some("hello"));

    let wrong = redis::Client::open(format!("redis://:wrong@127.0.0.1:{port}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .map(|_| ())
        .expect_err("a wrong password must be rejected");
    assert_eq!(wrong.kind(), redis::ErrorKind::AuthenticationFailed, "{wrong}");
    let mut anonymous = redis_connection(&format!("redis://127.0.0.1:{port}/"));
    let refused = anonymous.get::<_, Option<String>>("greeting").expect_err("no password must be rejected");
    assert!(refused.to_string().contains("NOAUTH"), "{refused}");

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

#[test]
fn redis_replica_copies_the_primary() {
    let primary = RedisServer::start().expect("start the primary");
    let replica = RedisServer::start_replica_of(&primary).expect("start the replica");
    assert_ne!(primary.port(), replica.port());

    let () = redis_connection(&primary.url()).set("copied", "yes").unwrap();
    let mut from_replica = redis_connection(&replica.url());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let value: Option<String> = from_replica.get("copied").unwrap();
        if value.as_deref() == Some("yes") {
            break;
        }
        assert!(Instant::now() < deadline, "the key never reached the replica");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redis_kill9_then_restart_answers_on_the_same_port_without_the_data() {
    let server = RedisServer::start().expect("start redis-server");
    let port = server.port();
    let () = redis_connection(&server.url()).set("doomed", "1").unwrap();
    let old_pid = server.process().pid().expect("running");

    server.process().kill9().unwrap();
    assert!(!server.process().is_running());
    assert_eq!(server.process().pid(), None);
    assert_reaped(old_pid);
    assert_gone(&[old_pid], port);
    assert!(server.process().pause().is_err(), "a dead server cannot be paused");

    server.process().restart().expect("restart redis-server");
    assert!(server.process().is_running());
    assert_ne!(server.process().pid(), Some(old_pid));
    assert_eq!(server.port(), port);
    let value: Option<String> = redis_connection(&server.url()).get("doomed").unwrap();
    assert_eq!(value, None, "nothing is persisted across a crash");
}

#[test]
fn redis_pause_stalls_reads_and_resume_recovers() {
    let server = RedisServer::start().expect("start redis-server");
    let mut connection = redis_connection(&server.url());
    connection.set_read_timeout(Some(Duration::from_millis(300))).unwrap();

    server.process().pause().unwrap();
    assert!(server.process().is_running(), "a paused server still runs");
    let stalled =
        connection.get::<_, Option<String>>("anything").expect_err("a paused server must not answer");
    assert!(stalled.is_timeout(), "{stalled}");

    server.process().resume().unwrap();
    // The stalled connection's late reply would be out of step; use a fresh one.
    let value: Option<String> = redis_connection(&server.url()).get("anything").unwrap();
    assert_eq!(value, None);
}

#[test]
fn redis_start_many_gives_independent_nodes() {
    let nodes = RedisServer::start_many(3).expect("start three nodes");
    let () = redis_connection(&nodes[0].url()).set("only-here", "1").unwrap();
    for node in &nodes[1..] {
        assert_ne!(node.port(), nodes[0].port());
        let value: Option<String> = redis_connection(&node.url()).get("only-here").unwrap();
        assert_eq!(value, None);
    }
}

/// Every process of a group and its port, to check after the drop that none is left.
fn pids_and_ports<'a>(
    servers: impl IntoIterator<Item = &'a lock_testkit::harness::ServerProcess>,
) -> Vec<(u32, u16)> {
    servers.into_iter().filter_map(|process| Some((process.pid()?, process.port()))).collect()
}

fn assert_all_gone(processes: Vec<(u32, u16)>) {
    for (pid, port) in processes {
        assert_reaped(pid);
        assert_gone(&[pid], port);
    }
}

/// The hash slot of `key`, as the node on `port` computes it.
fn key_slot(port: u16, key: &str) -> u16 {
    redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut redis_connection(&node_url(port))).unwrap()
}

fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

#[test]
fn redis_cluster_has_three_primaries_with_a_linked_replica_each_and_is_gone_after_drop() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let ports: Vec<u16> = cluster.nodes().iter().map(RedisServer::port).collect();
    let seeds: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
    assert_eq!(cluster.url(), format!("redis+cluster://{}/", seeds.join(",")));

    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    assert_eq!(primaries.iter().map(|primary| primary.slot_count()).sum::<usize>(), 16384);
    let mut roles: Vec<u16> = Vec::new();
    for primary in &primaries {
        assert!(primary.slot_count() > 0 && primary.id.len() == 40, "{primary:?}");
        assert_eq!(primary.replicas.len(), 1, "{primary:?}");
        let replica = cluster.replica_of(primary.port).unwrap();
        assert_eq!(replica, primary.replicas[0]);
        let info: String =
            redis::cmd("INFO").arg("replication").query(&mut redis_connection(&node_url(replica))).unwrap();
        assert!(info.contains(&format!("master_port:{}", primary.port)), "{info}");
        assert!(info.contains("master_link_status:up"), "{info}");
        roles.extend([primary.port, replica]);
        for slot in [primary.slots[0].start(), primary.slots[0].end()] {
            assert_eq!(cluster.primary_for_slot(*slot).unwrap(), primary.port);
        }
    }
    roles.sort_unstable();
    let mut sorted = ports.clone();
    sorted.sort_unstable();
    assert_eq!(roles, sorted, "every node is a primary or a replica");

    // A key is written on the primary of its slot; any other primary redirects.
    let slot = key_slot(ports[0], "greeting");
    let owner = cluster.primary_for_slot(slot).unwrap();
    let () = redis_connection(&node_url(owner)).set("greeting", "hello").unwrap();
    let other = primaries.iter().map(|primary| primary.port).find(|&port| port != owner).unwrap();
    let moved = redis_connection(&node_url(other)).get::<_, Option<String>>("greeting").unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    assert_eq!(moved.redirect_node(), Some((format!("127.0.0.1:{owner}").as_str(), slot)), "{moved}");

    let processes = pids_and_ports(cluster.nodes().iter().map(RedisServer::process));
    assert_eq!(processes.len(), 6);
    drop(cluster);
    assert_all_gone(processes);
}

#[test]
fn redis_cluster_migrate_slot_moves_its_keys_and_redirects_while_half_moved() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let any = cluster.nodes()[0].port();
    let keys = ["{moving}1", "{moving}2", "{moving}3", "{moving}4"];
    let slot = key_slot(any, keys[0]);
    let source = cluster.primary_for_slot(slot).unwrap();
    let target =
        cluster.primaries().unwrap().iter().map(|primary| primary.port).find(|&port| port != source).unwrap();
    let mut on_source = redis_connection(&node_url(source));
    for key in keys {
        let () = on_source.set(key, format!("value of {key}")).unwrap();
    }

    // Half moved: the source asks clients to try the target for keys it no longer has, and
    // refuses multi-key requests over keys on both sides.
    let migration = cluster.begin_slot_migration(slot, target).unwrap();
    assert_eq!((migration.slot, migration.source, migration.target), (slot, source, target));
    assert_eq!(cluster.move_slot_keys(&migration, 1).unwrap(), 1);
    let redirects: Vec<redis::RedisError> =
        keys.iter().filter_map(|key| on_source.get::<_, Option<String>>(*key).err()).collect();
    assert_eq!(redirects.len(), 1, "exactly one key left the source: {redirects:?}");
    let ask = &redirects[0];
    assert_eq!(ask.code(), Some("ASK"), "{ask}");
    assert_eq!(ask.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{ask}");
    let both_sides = on_source.mget::<_, Vec<Option<String>>>(&keys[..]).unwrap_err();
    assert_eq!(both_sides.code(), Some("TRYAGAIN"), "{both_sides}");

    assert_eq!(cluster.move_slot_keys(&migration, usize::MAX).unwrap(), 3);
    cluster.finish_slot_migration(&migration).unwrap();
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), target);
    let mut on_target = redis_connection(&node_url(target));
    for key in keys {
        let value: Option<String> = on_target.get(key).unwrap();
        assert_eq!(value, Some(format!("value of {key}")));
    }
    let moved = on_source.get::<_, Option<String>>(keys[0]).unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    assert_eq!(moved.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{moved}");

    // And back in one call.
    cluster.migrate_slot(slot, source).unwrap();
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), source);
    let value: Option<String> = on_source.get(keys[3]).unwrap();
    assert_eq!(value, Some(format!("value of {}", keys[3])));
    assert!(cluster.migrate_slot(slot, source).is_err(), "the slot is already there");
}

#[test]
fn redis_cluster_promotes_the_replica_of_a_killed_primary_and_takes_it_back_as_a_replica() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let slot = key_slot(cluster.nodes()[0].port(), "survivor");
    let old_primary = cluster.primary_for_slot(slot).unwrap();
    let replica = cluster.replica_of(old_primary).unwrap();
    let mut connection = redis_connection(&node_url(old_primary));
    let () = connection.set("survivor", "1").unwrap();
    // Let the replica copy it before the crash.
    let copies: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut connection).unwrap();
    assert_eq!(copies, 1);

    let node = cluster.node(old_primary).unwrap();
    let killed = Instant::now();
    node.process().kill9().unwrap();
    let new_primary =
        cluster.wait_for_new_primary(slot, old_primary, Duration::from_secs(10)).expect("a failover");
    let failover = killed.elapsed();
    assert_eq!(new_primary, replica);
    cluster.wait_until_ok(Duration::from_secs(5)).unwrap();
    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3);
    assert!(primaries.iter().all(|primary| primary.port != old_primary));
    let mut connection = redis_connection(&node_url(new_primary));
    let value: Option<String> = connection.get("survivor").unwrap();
    assert_eq!(value.as_deref(), Some("1"), "the replica had the primary's data");
    let () = connection.set("survivor", "2").unwrap();
    eprintln!("cluster failover took {failover:?}");

    // The old primary comes back from its nodes.conf as the new primary's replica.
    node.process().restart().expect("restart the old primary");
    let mut restarted = redis_connection(&node.url());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut restarted).unwrap();
        let linked =
            info.contains(&format!("master_port:{new_primary}")) && info.contains("master_link_status:up");
        // The other nodes list it as a replica once they have heard from it again.
        if linked && cluster.replica_of(new_primary).ok() == Some(old_primary) {
            break;
        }
        assert!(Instant::now() < deadline, "the old primary never rejoined as a replica:\n{info}");
        thread::sleep(Duration::from_millis(50));
    }
    cluster.wait_until_ok(Duration::from_secs(5)).unwrap();
}

#[test]
fn redis_sentinel_group_names_a_new_primary_when_the_primary_dies_and_is_gone_after_drop() {
    let group = RedisSentinelGroup::start().expect("start a Redis Sentinel group");
    let sentinels: Vec<String> =
        group.sentinels().iter().map(|sentinel| format!("127.0.0.1:{}", sentinel.port())).collect();
    assert_eq!(group.url(), format!("redis+sentinel://{}/distlock-primary", sentinels.join(",")));
    assert_eq!(group.master_name(), "distlock-primary");
    assert_eq!(group.data_nodes().len(), 3);
    let old_primary = group.current_primary_port().unwrap();
    assert_eq!(old_primary, group.data_nodes()[0].port());
    let () = redis_connection(&node_url(old_primary)).set("before", "1").unwrap();

    let killed = Instant::now();
    group.data_node(old_primary).unwrap().process().kill9().unwrap();
    let new_primary = group.wait_for_new_primary(old_primary, Duration::from_secs(10)).expect("a failover");
    eprintln!("sentinel failover took {:?}", killed.elapsed());
    assert!(group.data_nodes()[1..].iter().any(|node| node.port() == new_primary));
    assert_eq!(group.current_primary_port().unwrap(), new_primary);
    let mut connection = redis_connection(&node_url(new_primary));
    let value: Option<String> = connection.get("before").unwrap();
    assert_eq!(value.as_deref(), Some("1"), "the replica had the primary's data");
    let () = connection.set("after", "2").unwrap();

    let processes = pids_and_ports(
        group
            .sentinels()
            .iter()
            .map(|sentinel| sentinel.process())
            .chain(group.data_nodes().iter().map(RedisServer::process)),
    );
    assert_eq!(processes.len(), 5, "the killed primary is not running");
    drop(group);
    assert_all_gone(processes);
}

#[test]
fn shared_redis_cluster_and_sentinel_group_start_once_and_answer() {
    let cluster = shared::redis_cluster().expect("shared Redis Cluster");
    assert!(std::ptr::eq(cluster, shared::redis_cluster().unwrap()), "started twice");
    assert!(cluster.address().starts_with("redis+cluster://127.0.0.1:"), "{}", cluster.address());
    let started = cluster.server().unwrap();
    let port = started.primary_for_slot(0).unwrap();
    let state: String =
        redis::cmd("CLUSTER").arg("INFO").query(&mut redis_connection(&node_url(port))).unwrap();
    assert!(state.contains("cluster_state:ok"), "{state}");

    let sentinel = shared::redis_sentinel().expect("shared Redis Sentinel group");
    assert!(std::ptr::eq(sentinel, shared::redis_sentinel().unwrap()), "started twice");
    assert!(sentinel.address().ends_with("/distlock-primary"), "{}", sentinel.address());
    let primary = sentinel.server().unwrap().current_primary_port().unwrap();
    let pong: String = redis::cmd("PING").query(&mut redis_connection(&node_url(primary))).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn postgres_answers_rejects_a_wrong_password_restarts_and_is_gone_with_its_backends() {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let port = server.port();
    let select_one = || {
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let row = client.query_one("SELECT 1, current_database()", &[]).unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        assert_eq!(row.get::<_, String>(1), PostgresServer::DATABASE);
        client
    };
    let client = select_one();

    let wrong = format!("postgres://{}:wrong@127.0.0.1:{port}/distlock", PostgresServer::USER);
    let error = postgres::Client::connect(&wrong, postgres::NoTls)
        .map(|_| ())
        .expect_err("a wrong password must be rejected");
    assert_eq!(error.code(), Some(&postgres::error::SqlState::INVALID_PASSWORD), "{error}");

    // The postmaster, its helpers and the backend serving `client`: all die with a kill9.
    let pids = server.process().pids();
    assert!(pids.len() > 2, "expected a postmaster with children, got {pids:?}");
    server.process().kill9().unwrap();
    assert_reaped(pids[0]);
    assert_gone(&pids, port);
    drop(client);
    server.process().restart().expect("restart PostgreSQL");
    let client = select_one();

    let pids = server.process().pids();
    drop(server);
    assert_reaped(pids[0]);
    assert_gone(&pids, port);
    drop(client);
}

#[test]
fn mariadb_answers_rejects_a_wrong_password_restarts_and_is_gone_after_drop() {
    let server = MariaDbServer::start().expect("start MariaDB");
    let port = server.port();
    let connect = |url: &str| mysql::Conn::new(mysql::Opts::from_url(url).expect("valid MySQL URL"));

    let mut connection = connect(&server.url()).unwrap();
    let one: Option<i32> = connection.query_first("SELECT 1").unwrap();
    assert_eq!(one, Some(1));
    let locked: Option<i32> = connection.query_first("SELECT GET_LOCK('harness', 0)").unwrap();
    assert_eq!(locked, Some(1));
    // The lock user may kill its own other connections, as lock tests do.
    let mut victim = connect(&server.url()).unwrap();
    connection.query_drop(format!("KILL {}", victim.connection_id())).expect("KILL of an own connection");
    assert!(victim.query_drop("SELECT 1").is_err(), "the killed connection still works");
    let mut root = connect(&server.root_url()).expect("root logs in over TCP");
    root.query_drop("SELECT 1").unwrap();

    let wrong = format!("mysql://{}:wrong@127.0.0.1:{port}/distlock", MariaDbServer::USER);
    match connect(&wrong) {
        Err(mysql::Error::MySqlError(error)) => assert_eq!(error.code, 1045, "{error}"),
        Err(other) => panic!("expected access denied, got {other}"),
        Ok(_) => panic!("a wrong password must be rejected"),
    }

    let pid = server.process().pid().expect("running");
    server.process().kill9().unwrap();
    assert_reaped(pid);
    assert_gone(&[pid], port);
    server.process().restart().expect("restart MariaDB");
    let one: Option<i32> = connect(&server.url()).unwrap().query_first("SELECT 1").unwrap();
    assert_eq!(one, Some(1));

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

/// A TLS-only PostgreSQL server: a login over TLS, verifying the test CA's certificate, works
/// (also after a restart: the readiness probe speaks TLS); a plaintext one is refused by
/// `pg_hba.conf`, and says so.
#[test]
fn postgres_tls_server_takes_tls_logins_only_and_restarts() {
    let server = PostgresServer::start_tls().expect("start a TLS-only PostgreSQL");
    assert!(server.is_tls());
    let ca = TestCa::shared().unwrap();
    let url = server.url();
    assert!(url.contains("sslmode=verify-full&sslrootcert="), "{url}");
    assert!(url.ends_with(&ca.ca_cert().display().to_string()), "{url}");
    let config = || {
        let mut config = postgres::Config::new();
        config
            .host(TestCa::SERVER_HOST)
            .port(server.port())
            .user(PostgresServer::USER)
            .password(PostgresServer::PASSWORD)
            .dbname(PostgresServer::DATABASE);
        config
    };
    let encrypted = || {
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(ca.rustls_client_config().unwrap());
        let mut client = config().ssl_mode(postgres::config::SslMode::Require).connect(tls).unwrap();
        let row = client.query_one("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]);
        let row = row.unwrap();
        assert!(row.get::<_, bool>(0), "the session is not encrypted");
        row.get::<_, String>(1)
    };
    println!("TLS version: {}", encrypted());

    let refused = config().connect(postgres::NoTls).map(|_| ()).expect_err("plaintext must be refused");
    println!("plaintext: {refused}");
    let database = refused.as_db_error().expect("the server's refusal");
    assert_eq!(database.code(), &postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
    assert!(database.message().ends_with("no encryption"), "{refused}");

    server.process().kill9().unwrap();
    server.process().restart().expect("restart the TLS-only PostgreSQL");
    encrypted();
}

/// A TLS-only MariaDB server: a login over TLS, verifying the test CA's certificate, works
/// (also after a restart); a plaintext one is refused (`require_secure_transport`).
#[test]
fn mariadb_tls_server_takes_tls_logins_only_and_restarts() {
    let server = MariaDbServer::start_tls().expect("start a TLS-only MariaDB");
    assert!(server.is_tls());
    let ca = TestCa::shared().unwrap();
    let url = server.url();
    assert!(url.contains("ssl-mode=VERIFY_IDENTITY&ssl-ca="), "{url}");
    let options = |ssl: Option<mysql::SslOpts>| {
        mysql::OptsBuilder::new()
            .ip_or_hostname(Some(TestCa::SERVER_HOST))
            .tcp_port(server.port())
            .user(Some(MariaDbServer::USER))
            .pass(Some(MariaDbServer::PASSWORD))
            .db_name(Some(MariaDbServer::DATABASE))
            .prefer_socket(false)
            .ssl_opts(ssl)
    };
    let encrypted = || {
        let ssl = mysql::SslOpts::default().with_root_cert_path(Some(ca.ca_cert()));
        let mut connection = mysql::Conn::new(options(Some(ssl))).expect("a login over TLS");
        let version: Option<(String, String)> =
            connection.query_first("SHOW SESSION STATUS LIKE 'Ssl_version'").unwrap();
        let version = version.expect("a status row").1;
        assert!(!version.is_empty(), "the session is not encrypted");
        version
    };
    println!("TLS version: {}", encrypted());

    match mysql::Conn::new(options(None)) {
        Err(mysql::Error::MySqlError(error)) => println!("plaintext: code {}: {error}", error.code),
        Err(other) => panic!("expected the server's refusal, got {other}"),
        Ok(_) => panic!("a plaintext login must be refused"),
    }

    server.process().kill9().unwrap();
    server.process().restart().expect("restart the TLS-only MariaDB");
    encrypted();
}

#[test]
fn zookeeper_answers_restarts_and_is_gone_after_drop() {
    let server = ZooKeeperServer::start().expect("start ZooKeeper");
    let port = server.port();
    assert_eq!(server.mode(), Some(ZooKeeperMode::Standalone));

    let runtime = current_thread_runtime();
    runtime.block_on(async {
        let client = zk::Client::connect(&server.connect_string()).await.unwrap();
        let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/harness", b"hello", &create).await.unwrap();
        let (data, _) = client.get_data("/harness").await.unwrap();
        assert_eq!(data, b"hello");
    });

    let pid = server.process().pid().expect("running");
    server.process().kill9().unwrap();
    assert_reaped(pid);
    assert_gone(&[pid], port);
    server.process().restart().expect("restart ZooKeeper");
    // ZooKeeper writes its transaction log before answering, so the node survived.
    runtime.block_on(async {
        let client = zk::Client::connect(&server.connect_string()).await.unwrap();
        let (data, _) = client.get_data("/harness").await.unwrap();
        assert_eq!(data, b"hello");
    });

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

#[test]
fn zookeeper_ensemble_elects_a_new_leader_when_the_leader_dies() {
    let ensemble = ZooKeeperEnsemble::start(3).expect("start a 3-node ensemble");
    let leader = ensemble.leader().expect("a leader right after start");
    let followers =
        ensemble.nodes().iter().filter(|node| node.mode() == Some(ZooKeeperMode::Follower)).count();
    assert_eq!(followers, 2);

    let runtime = current_thread_runtime();
    let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    runtime.block_on(async {
        let client = zk::Client::connect(&ensemble.connect_string()).await.unwrap();
        client.create("/survives", b"quorum", &create).await.unwrap();
    });

    let old_leader = &ensemble.nodes()[leader];
    old_leader.process().kill9().unwrap();
    let new_leader = ensemble.wait_for_leader(Duration::from_secs(30)).expect("a new leader");
    assert_ne!(new_leader, leader);
    runtime.block_on(async {
        let client = zk::Client::connect(&ensemble.connect_string()).await.unwrap();
        let (data, _) = client.get_data("/survives").await.unwrap();
        assert_eq!(data, b"quorum");
    });

    // The old leader rejoins on its old ports, as a follower of the new one.
    old_leader.process().restart().expect("restart the old leader");
    let deadline = Instant::now() + Duration::from_secs(30);
    while old_leader.mode() != Some(ZooKeeperMode::Follower) {
        assert!(Instant::now() < deadline, "the old leader never rejoined");
        thread::sleep(Duration::from_millis(50));
    }

    let nodes: Vec<(u32, u16)> =
        ensemble.nodes().iter().map(|node| (node.process().pid().expect("running"), node.port())).collect();
    drop(ensemble);
    for (pid, port) in nodes {
        assert_reaped(pid);
        assert_gone(&[pid], port);
    }
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
