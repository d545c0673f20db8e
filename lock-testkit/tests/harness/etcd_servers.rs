//! etcd: a single node, a node with auth, a 3-member cluster, the shared server. Checked with
//! `etcdctl` and etcd's HTTP gateway (the harness itself needs no etcd client crate).

use std::io::{Read as _, Write as _};

use lock_testkit::harness::{EtcdCluster, EtcdOptions, EtcdServer};

use super::*;

/// Runs `command` with `args`: its trimmed stdout if it succeeds, else its stderr.
fn run(mut command: Command, args: &[&str]) -> Result<String, String> {
    let output = command.args(args).output().expect("run etcdctl");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    match output.status.success() {
        true => Ok(text(&output.stdout)),
        false => Err(text(&output.stderr)),
    }
}

/// `etcdctl get KEY --print-value-only`.
fn get(command: Command, key: &str) -> Result<String, String> {
    run(command, &["get", key, "--print-value-only"])
}

#[test]
fn etcd_answers_etcdctl_keeps_its_data_across_kill9_and_is_gone_after_drop() {
    let server = EtcdServer::start().expect("start etcd");
    let port = server.port();
    assert_eq!(server.endpoint(), format!("127.0.0.1:{port}"));
    assert_eq!(server.url(), format!("etcd://127.0.0.1:{port}"));
    assert_eq!(server.credentials(), None);

    assert_eq!(run(server.etcdctl(), &["put", "harness", "hello"]), Ok("OK".to_owned()));
    assert_eq!(get(server.etcdctl(), "harness").as_deref(), Ok("hello"));

    let pid = server.process().pid().expect("running");
    server.process().kill9().unwrap();
    assert_reaped(pid);
    assert_gone(&[pid], port);
    server.process().restart().expect("restart etcd");
    // Written (not fsynced) before the kill: the kernel kept it.
    assert_eq!(get(server.etcdctl(), "harness").as_deref(), Ok("hello"));

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

/// One HTTP/1.0 request with a JSON body to etcd's gateway; the status code and the body.
fn gateway(port: u16, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect to etcd");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let authorization = token.map(|token| format!("Authorization: {token}\r\n")).unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.0\r\nContent-Type: application/json\r\n{authorization}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).expect("a status code");
    (code, body.to_owned())
}

#[test]
fn etcd_with_auth_refuses_anonymous_clients_and_expires_idle_tokens() {
    let server = EtcdServer::start_with(EtcdOptions::new().auth().auth_token_ttl(Duration::from_secs(2)))
        .expect("start etcd with auth");
    let (user, password) = server.credentials().expect("auth is enabled");
    assert_eq!((user, password), (EtcdServer::ROOT_USER, EtcdServer::ROOT_PASSWORD));
    assert_eq!(server.url(), format!("etcd://{user}:{password}@127.0.0.1:{}", server.port()));

    // `etcdctl()` passes the credentials.
    assert_eq!(run(server.etcdctl(), &["put", "guarded", "yes"]), Ok("OK".to_owned()));
    assert_eq!(get(server.etcdctl(), "guarded").as_deref(), Ok("yes"));

    let bare = || {
        let mut command = Command::new(server.etcdctl().get_program());
        command.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", server.endpoint()));
        command
    };
    let anonymous = get(bare(), "guarded").expect_err("an anonymous read must be refused");
    assert!(anonymous.contains("user name is empty"), "{anonymous}");
    let mut wrong = bare();
    wrong.arg(format!("--user={user}:wrong"));
    let wrong = get(wrong, "guarded").expect_err("a wrong password must be refused");
    assert!(wrong.contains("authentication failed"), "{wrong}");

    // `--auth-token-ttl 2`: a token unused for longer is gone.
    let credentials = format!(r#"{{"name":"{user}","password":"{password}"}}"#);
    let (code, body) = gateway(server.port(), "/v3/auth/authenticate", &credentials, None);
    assert_eq!(code, 200, "{body}");
    let token: serde_json::Value = serde_json::from_str(&body).unwrap();
    let token = token["token"].as_str().expect("a token").to_owned();
    // "guarded", base64-encoded.
    let range = r#"{"key":"Z3VhcmRlZA=="}"#;
    let (code, body) = gateway(server.port(), "/v3/kv/range", range, Some(&token));
    assert_eq!(code, 200, "a fresh token must work: {body}");
    thread::sleep(Duration::from_secs(4));
    let (code, body) = gateway(server.port(), "/v3/kv/range", range, Some(&token));
    assert_ne!(code, 200, "an idle token must expire: {body}");
    assert!(body.contains("invalid auth token"), "{body}");

    // Auth survives a restart: it is in the data dir.
    server.process().restart().expect("restart etcd with auth");
    assert!(get(bare(), "guarded").is_err(), "anonymous after a restart");
    assert_eq!(get(server.etcdctl(), "guarded").as_deref(), Ok("yes"));
}

#[test]
fn etcd_cluster_elects_a_new_leader_when_the_leader_dies_and_takes_it_back() {
    let cluster = EtcdCluster::start(3).expect("start a 3-member etcd cluster");
    assert_eq!(cluster.members().len(), 3);
    let endpoints = cluster.endpoints();
    assert_eq!(cluster.url(), format!("etcd://{}", endpoints.join(",")));
    let leader = cluster.leader().expect("a leader right after start");

    assert_eq!(run(cluster.etcdctl(), &["put", "survives", "quorum"]), Ok("OK".to_owned()));

    let old_leader = &cluster.members()[leader];
    old_leader.process().kill9().unwrap();
    let new_leader = cluster.wait_for_leader(Duration::from_secs(30)).expect("a new leader");
    assert_ne!(new_leader, leader);
    assert_eq!(get(cluster.members()[new_leader].etcdctl(), "survives").as_deref(), Ok("quorum"));

    // The old member comes back on its ports with its data, following the new leader.
    old_leader.process().restart().expect("restart the old leader");
    assert_eq!(get(old_leader.etcdctl(), "survives").as_deref(), Ok("quorum"));
    assert_eq!(cluster.wait_for_leader(Duration::from_secs(30)).ok(), Some(new_leader));

    let members: Vec<(u32, u16)> = cluster
        .members()
        .iter()
        .map(|member| (member.process().pid().expect("running"), member.port()))
        .collect();
    drop(cluster);
    for (pid, port) in members {
        assert_reaped(pid);
        assert_gone(&[pid], port);
    }
}

#[test]
fn shared_etcd_starts_once_and_answers() {
    let etcd = shared::etcd().expect("shared etcd");
    assert!(std::ptr::eq(etcd, shared::etcd().unwrap()), "started twice");
    let server = etcd.server().unwrap();
    assert_eq!(etcd.address(), server.url());
    assert_eq!(run(server.etcdctl(), &["put", "shared", "yes"]), Ok("OK".to_owned()));
    assert_eq!(get(server.etcdctl(), "shared").as_deref(), Ok("yes"));
}
