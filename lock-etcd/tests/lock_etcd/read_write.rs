//! Read-write locks against the shared etcd server: the keys are etcd's `recipe.RWMutex` layout
//! exactly (read back with `etcdctl`), a key written in that layout by someone else (a Go
//! service) is obeyed, writers and readers of two clients wait for each other and are woken by
//! the release, and a writer's downgrade shares the read unless a writer waits behind it.

use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::LockClient;
use lock_etcd::EtcdBackend;
use lock_testkit::harness::{shared, EtcdServer};

/// Long enough for a watch to have woken a waiter, short of the 5 s recheck.
const WOKEN_WITHIN: Duration = Duration::from_secs(1);

fn server() -> &'static EtcdServer {
    shared::etcd().unwrap().server().expect("the harness's etcd server (etcdctl reads its keys)")
}

fn client() -> LockClient<EtcdBackend> {
    LockClient::new(EtcdBackend::from_url(&server().url()).expect("connect"))
}

/// A name no other test or run uses.
fn unique(name: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{nanos}")
}

/// One key as `etcdctl get -w fields` shows it.
#[derive(Debug)]
struct Stored {
    key: String,
    value: String,
    lease: i64,
}

/// Every key under `prefix`, read with `etcdctl get --prefix -w fields`.
fn keys_under(prefix: &str) -> Vec<Stored> {
    let mut etcdctl: Command = server().etcdctl();
    let output = etcdctl.args(["get", "--prefix", prefix, "-w", "fields"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let field = |line: &str, name: &str| line.strip_prefix(&format!("\"{name}\" : ")).map(str::to_owned);
    let unquote = |text: String| text.trim_matches('"').to_owned();
    let mut stored = Vec::new();
    for line in text.lines() {
        if let Some(key) = field(line, "Key") {
            stored.push(Stored { key: unquote(key), value: String::new(), lease: 0 });
        } else if let (Some(value), Some(last)) = (field(line, "Value"), stored.last_mut()) {
            last.value = unquote(value);
        } else if let (Some(lease), Some(last)) = (field(line, "Lease"), stored.last_mut()) {
            last.lease = lease.parse().unwrap();
        }
    }
    stored
}

/// Whether `key` is `<dir>/<decimal unix nanos>`.
fn is_go_key(key: &str, dir: &str) -> bool {
    key.strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|nanos| !nanos.is_empty() && nanos.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
fn keys_are_go_s_rwmutex_layout() {
    let client = client();
    let name = unique("rw-layout");
    let prefix = format!("%read-write/{name}");
    let lock = client.read_write_lock(&name).unwrap();
    let lease = client.backend().lease_id();

    let read = lock.try_read().unwrap().expect("free");
    let stored = keys_under(&format!("{prefix}/"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(is_go_key(&stored[0].key, &format!("{prefix}/read")), "{stored:?}");
    assert_eq!((stored[0].value.as_str(), stored[0].lease), ("", lease), "{stored:?}");
    let read_token = read.fencing_token().unwrap();
    read.unlock().unwrap();
    assert!(keys_under(&format!("{prefix}/")).is_empty(), "release deletes the key");

    let write = lock.try_write().unwrap().expect("free");
    let stored = keys_under(&format!("{prefix}/"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(is_go_key(&stored[0].key, &format!("{prefix}/write")), "{stored:?}");
    assert_eq!((stored[0].value.as_str(), stored[0].lease), ("", lease), "{stored:?}");
    assert!(write.fencing_token().unwrap() > read_token, "one counter for both modes");
    write.unlock().unwrap();
    assert!(keys_under(&format!("{prefix}/")).is_empty());
}

#[test]
fn a_writer_waits_for_another_client_s_reader_and_a_reader_for_its_writer() {
    let (reader_client, writer_client) = (client(), client());
    let name = unique("rw-two-clients");
    let prefix = format!("%read-write/{name}");
    let (lock, theirs) =
        (reader_client.read_write_lock(&name).unwrap(), writer_client.read_write_lock(&name).unwrap());

    // Readers of two clients share.
    let read = lock.try_read().unwrap().expect("free");
    let (shared_tx, shared_rx) = mpsc::channel();
    let other = theirs.clone();
    thread::spawn(move || shared_tx.send(other.try_read().unwrap().is_some()).unwrap()).join().unwrap();
    assert!(shared_rx.recv().unwrap(), "a second client's reader shares the read lock");

    // A writer of the other client waits for the reader, and is woken by its release.
    let (writing_tx, writing_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let other = theirs.clone();
    let writer = thread::spawn(move || {
        assert!(other.try_write().unwrap().is_none(), "a try_write while a reader holds");
        let guard = other.write().unwrap();
        writing_tx.send(Instant::now()).unwrap();
        done_rx.recv().unwrap();
        guard.unlock().unwrap();
    });
    assert!(writing_rx.recv_timeout(Duration::from_millis(300)).is_err(), "the writer must wait");
    let stored = keys_under(&format!("{prefix}/"));
    assert_eq!(stored.len(), 2, "the reader's key and the waiting writer's: {stored:?}");
    let released_at = Instant::now();
    read.unlock().unwrap();
    let writing_at = writing_rx.recv_timeout(Duration::from_secs(10)).expect("the writer got in");
    assert!(writing_at.duration_since(released_at) < WOKEN_WITHIN, "woken by the watch");

    // Now a reader of the first client waits for that writer.
    assert!(lock.try_read().unwrap().is_none(), "a try_read while another client writes");
    let (reading_tx, reading_rx) = mpsc::channel();
    let mine = lock.clone();
    let reader = thread::spawn(move || {
        let guard = mine.read().unwrap();
        reading_tx.send(Instant::now()).unwrap();
        guard.unlock().unwrap();
    });
    assert!(reading_rx.recv_timeout(Duration::from_millis(300)).is_err(), "the reader must wait");
    let released_at = Instant::now();
    done_tx.send(()).unwrap();
    writer.join().unwrap();
    let reading_at = reading_rx.recv_timeout(Duration::from_secs(10)).expect("the reader got in");
    assert!(reading_at.duration_since(released_at) < WOKEN_WITHIN, "woken by the watch");
    reader.join().unwrap();
    assert!(keys_under(&format!("{prefix}/")).is_empty(), "no key left behind");
}

#[test]
fn a_go_writer_s_key_holds_distlock_readers_back() {
    let client = client();
    let name = unique("rw-go-writer");
    let prefix = format!("%read-write/{name}");
    // What Go's `RWMutex.Lock` writes (here without a lease).
    let go_key = format!("{prefix}/write/1700000000000000000");
    let status = server().etcdctl().args(["put", &go_key, ""]).output().unwrap().status;
    assert!(status.success());
    let lock = client.read_write_lock(&name).unwrap();
    assert!(lock.try_read().unwrap().is_none(), "the Go writer holds");
    assert!(lock.try_write().unwrap().is_none(), "the Go writer holds");
    let (reading_tx, reading_rx) = mpsc::channel();
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.read().unwrap();
            reading_tx.send(Instant::now()).unwrap();
            guard.unlock().unwrap();
        })
    };
    assert!(reading_rx.recv_timeout(Duration::from_millis(300)).is_err(), "the reader must wait");
    let released_at = Instant::now();
    // Go's `Unlock`: the key deleted.
    let status = server().etcdctl().args(["del", &go_key]).output().unwrap().status;
    assert!(status.success());
    let reading_at = reading_rx.recv_timeout(Duration::from_secs(10)).expect("the reader got in");
    assert!(reading_at.duration_since(released_at) < WOKEN_WITHIN, "woken by the watch");
    reader.join().unwrap();
}

#[test]
fn a_timed_out_writer_leaves_no_key_and_holds_no_reader_back() {
    let (a, b) = (client(), client());
    let name = unique("rw-timeout");
    let prefix = format!("%read-write/{name}");
    let read = a.read_write_lock(&name).unwrap().try_read().unwrap().expect("free");
    let theirs = b.read_write_lock(&name).unwrap();
    let started = Instant::now();
    let waited = thread::spawn(move || theirs.try_write_for(Duration::from_millis(400)).unwrap().is_none());
    assert!(waited.join().unwrap(), "the reader holds");
    assert!(started.elapsed() >= Duration::from_millis(400));
    let stored = keys_under(&format!("{prefix}/"));
    assert_eq!(stored.len(), 1, "only the reader's key: {stored:?}");
    let other = b.read_write_lock(&name).unwrap();
    let joined = thread::spawn(move || other.try_read().unwrap().is_some()).join().unwrap();
    assert!(joined, "no writer's key is left to hold readers back");
    read.unlock().unwrap();
}

#[test]
fn a_downgrade_is_shared_unless_a_writer_waits_behind_it() {
    let (a, b) = (client(), client());
    let name = unique("rw-downgrade");
    let prefix = format!("%read-write/{name}");
    let (lock, theirs) = (a.read_write_lock(&name).unwrap(), b.read_write_lock(&name).unwrap());
    let try_read_elsewhere = |lock: &lock_core::ReadWriteLock<EtcdBackend>| {
        let lock = lock.clone();
        thread::spawn(move || lock.try_read().unwrap().is_some()).join().unwrap()
    };

    // Nobody waits: the downgraded read is a read key of its own, shared once the write goes.
    let write = lock.try_write().unwrap().expect("free");
    let read = lock.try_read().unwrap().expect("a writer takes the read lock");
    assert!(!try_read_elsewhere(&theirs), "the write lock still holds");
    write.unlock().unwrap();
    let stored = keys_under(&format!("{prefix}/"));
    assert!(stored.len() == 1 && is_go_key(&stored[0].key, &format!("{prefix}/read")), "{stored:?}");
    assert!(try_read_elsewhere(&theirs), "the downgraded read is shared");
    read.unlock().unwrap();

    // A writer waits behind the write lock: the downgraded read keeps the write key, so that
    // writer cannot get in before the read is released.
    let write = lock.try_write().unwrap().expect("free");
    let (writing_tx, writing_rx) = mpsc::channel();
    let waiter = {
        let theirs = theirs.clone();
        thread::spawn(move || {
            let guard = theirs.write().unwrap();
            writing_tx.send(Instant::now()).unwrap();
            guard.unlock().unwrap();
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while keys_under(&format!("{prefix}/")).len() < 2 {
        assert!(Instant::now() < deadline, "the waiting writer's key never appeared");
        thread::sleep(Duration::from_millis(20));
    }
    let read = lock.try_read().unwrap().expect("a writer takes the read lock");
    assert_eq!(read.fencing_token(), write.fencing_token(), "the read is on the write key");
    write.unlock().unwrap();
    assert!(read.is_held());
    assert!(writing_rx.recv_timeout(Duration::from_millis(500)).is_err(), "the writer got in past the read");
    let stored = keys_under(&format!("{prefix}/write"));
    assert_eq!(stored.len(), 2, "the write key stays while the read holds: {stored:?}");
    let released_at = Instant::now();
    read.unlock().unwrap();
    let writing_at = writing_rx.recv_timeout(Duration::from_secs(10)).expect("the writer got in");
    assert!(writing_at.duration_since(released_at) < WOKEN_WITHIN);
    waiter.join().unwrap();
    assert!(keys_under(&format!("{prefix}/")).is_empty(), "no key left behind");
}
