//! E01 — `etcdctl lock N` and distlock exclude each other on the name `N`, both ways: etcd's
//! own `concurrency.Mutex` (which `etcdctl lock` runs) and distlock's share one layout.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockName};
use lock_testkit::harness::EtcdServer;

use crate::EtcdBackend;

/// `etcdctl lock`'s session TTL here (its default is 10 s): a killed etcdctl frees the lock soon.
const ETCDCTL_TTL: &str = "2";

fn backend(server: &EtcdServer) -> EtcdBackend {
    EtcdBackend::from_url(&server.url()).expect("connect")
}

/// `etcdctl lock --ttl 2 <name> [-- command…]`, stdout piped.
fn etcdctl_lock(server: &EtcdServer, name: &str, command: &[&str]) -> Child {
    let mut etcdctl = server.etcdctl();
    etcdctl.args(["lock", "--ttl", ETCDCTL_TTL, name]);
    if !command.is_empty() {
        etcdctl.arg("--").args(command);
    }
    etcdctl.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("etcdctl")
}

/// Waits up to `timeout` for `child` to exit.
fn exited_within(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

pub(super) fn a_distlock_waiter_gets_the_lock_when_etcdctl_lets_go() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(backend(&server));
    let mut etcdctl = etcdctl_lock(&server, "e01-a", &[]);
    // Holding, `etcdctl lock` prints its key (and the empty value) and waits for a signal.
    // Kept open until etcdctl exits: a closed pipe would kill it (SIGPIPE) before it unlocks.
    let mut output = BufReader::new(etcdctl.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    let key = line.trim().to_owned();
    assert!(key.starts_with("e01-a/"), "{key:?}");
    let lock = client.lock_named("e01-a").unwrap();
    assert!(lock.try_lock().unwrap().is_none(), "etcdctl holds the lock");
    assert_eq!(client.backend().holder(&LockName::new("e01-a").unwrap()).unwrap().unwrap().0, key);
    let waiter = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        let acquired_at = Instant::now();
        guard.unlock().unwrap();
        acquired_at
    });
    thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "distlock must wait for etcdctl");
    let signalled = Instant::now();
    let status = Command::new("kill").args(["-INT", &etcdctl.id().to_string()]).status().unwrap();
    assert!(status.success());
    let acquired_at = waiter.join().unwrap();
    // etcdctl deletes its key on SIGINT (SIGTERM would kill it, leaving the key to its TTL): the waiter's watch fires, no TTL is waited out.
    let handover = acquired_at.duration_since(signalled);
    assert!(handover < Duration::from_secs(1), "{handover:?}");
    etcdctl.wait().unwrap();
    drop(output);
}

pub(super) fn etcdctl_waits_for_a_distlock_holder() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(backend(&server));
    let guard = client.lock_named("e01-b").unwrap().lock().unwrap();
    let mut etcdctl = etcdctl_lock(&server, "e01-b", &["sh", "-c", "echo \"$ETCD_LOCK_KEY\""]);
    assert!(!exited_within(&mut etcdctl, Duration::from_millis(700)), "etcdctl must wait for distlock");
    guard.unlock().unwrap();
    assert!(exited_within(&mut etcdctl, Duration::from_secs(3)), "etcdctl gets the lock once released");
    let mut output = String::new();
    BufReader::new(etcdctl.stdout.take().unwrap()).read_line(&mut output).unwrap();
    assert!(output.trim().starts_with("e01-b/"), "{output:?}");
}

pub(super) fn etcdctl_and_distlock_contending_never_overlap_and_both_progress() {
    let server = Arc::new(EtcdServer::start().unwrap());
    let dir = temp_dir();
    let journal = dir.join("journal");
    std::fs::write(&journal, "").unwrap();
    let client = LockClient::new(backend(&server));
    let distlock: Vec<_> = (0..2)
        .map(|_| {
            let (client, journal) = (client.clone(), journal.clone());
            thread::spawn(move || {
                let lock = client.lock_named("e01-c").unwrap();
                for _ in 0..10 {
                    let guard = lock.lock().unwrap();
                    let mut file = OpenOptions::new().append(true).open(&journal).unwrap();
                    writeln!(file, "B distlock").unwrap();
                    thread::sleep(Duration::from_millis(15));
                    writeln!(file, "E distlock").unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    let section = format!("echo B etcdctl >> {0}; sleep 0.03; echo E etcdctl >> {0}", journal.display());
    let etcdctl = {
        let server = Arc::clone(&server);
        thread::spawn(move || {
            for _ in 0..6 {
                let mut child = etcdctl_lock(&server, "e01-c", &["sh", "-c", &section]);
                assert!(child.wait().unwrap().success());
            }
        })
    };
    for thread in distlock {
        thread.join().unwrap();
    }
    etcdctl.join().unwrap();
    let counts = lock_testkit::journal::sections(&journal).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!((counts.get("distlock").copied(), counts.get("etcdctl").copied()), (Some(20), Some(6)));
    std::fs::remove_dir_all(dir).unwrap();
}

pub(super) fn names_with_a_slash_are_encoded_and_etcdctl_can_name_them() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(backend(&server));
    let name = LockName::new("jobs/nightly").unwrap();
    assert_eq!(client.backend().lock_prefix(&name), "jobs%2Fnightly");
    let guard = client.lock_named("jobs/nightly").unwrap().lock().unwrap();
    let mut etcdctl = etcdctl_lock(&server, "jobs%2Fnightly", &["true"]);
    assert!(!exited_within(&mut etcdctl, Duration::from_millis(500)));
    guard.unlock().unwrap();
    assert!(exited_within(&mut etcdctl, Duration::from_secs(3)));
}

/// A fresh directory under the system's temp dir.
fn temp_dir() -> std::path::PathBuf {
    let nanos = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("lock-etcd-e01-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
