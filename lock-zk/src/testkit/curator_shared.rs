//! Z04 and Z05 — interop with Apache Curator's `InterProcessReadWriteLock` (including a
//! distlock writer's downgrade, which a waiting Curator writer must not overtake) and
//! `InterProcessSemaphoreV2`: a real Java client (`tests/curator/CuratorShared.java`, run through
//! Z03's machinery in `curator.rs`) and distlock clients share one read-write lock path, or one
//! semaphore path, of the shared harness server — the paths distlock's docs tell Java users to
//! point the recipes at (`<root>/%read-write/<name>`, `<root>/%semaphore/<name>`).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use lock_core::{LockClient, LockName, LockOptions};
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;
use zookeeper_client as zk;

use super::curator::Java;
use super::TIMEOUT;
use crate::error::Failure;
use crate::path::Root;
use crate::ZooKeeperBackend;

/// The root both sides work under.
const ROOT: &str = "/distlock-z04";

/// The Java helper's class.
const CLASS: &str = "CuratorShared";

/// Z04's contention run: Curator's acquisitions (every third a write); distlock's two threads
/// take at least as many together.
const RW_ROUNDS: usize = 150;

/// Z05: the semaphore's permits, and each side's threads and rounds per thread.
const PERMITS: u32 = 3;
const SEM_THREADS: usize = 4;
const SEM_ROUNDS: usize = 25;

/// Long enough for a JVM to start and Curator to connect on a loaded machine.
const JAVA_BOUND: Duration = Duration::from_secs(60);

fn backend(connect_string: &str) -> ZooKeeperBackend {
    // Curator's default ACL is open to anyone; so is a backend without digest authentication.
    ZooKeeperBackend::builder(connect_string).namespace(ROOT).build().unwrap()
}

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

/// The children of `path` (none if it does not exist).
fn children(backend: &ZooKeeperBackend, path: &str) -> Vec<String> {
    let session = &backend.inner.session;
    let client = session.client().unwrap();
    match session.call(TIMEOUT, client.list_children(path)) {
        Ok(children) => children,
        Err(Failure::Zk(zk::Error::NoNode)) => Vec::new(),
        Err(failure) => panic!("listing {path}: {:?}", failure.into_error("list")),
    }
}

/// Curator's protected node name `_c_<uuid>-<kind><10 digits>` (the downgrade's suffix aside).
fn assert_layout(child: &str, kind: &str) {
    let rest = child.strip_prefix("_c_").unwrap_or_else(|| panic!("{child}"));
    let (uuid, sequence) = rest.split_once(&format!("-{kind}")).unwrap_or_else(|| panic!("{child}"));
    assert_eq!(uuid.len(), 36, "{child}");
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()), "{child}");
}

/// The node a `HELD <node>` line names, checked to be under `path`.
fn held_node(line: &str, path: &str) -> String {
    let node = line.strip_prefix("HELD ").unwrap_or_else(|| panic!("{line}"));
    let child =
        node.strip_prefix(&format!("{path}/")).unwrap_or_else(|| panic!("{node} is not under {path}"));
    child.to_owned()
}

/// Z04, exclusion both ways and shared reads, one step at a time.
pub(super) fn z04_exclusion() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("z04-rw");
    let path = Root::new(ROOT).unwrap().read_write_path(&name);
    let observer = backend(&connect_string);
    let ours = client(backend(&connect_string));
    let lock = ours.read_write_lock(name.as_str()).unwrap();
    let queued =
        |count: usize| eventually(Duration::from_secs(30), || children(&observer, &path).len() == count);

    // Curator's writer holds: distlock's readers and writers are refused, and its release lets a
    // waiting distlock reader in.
    let mut java = Java::run(CLASS, &connect_string, &path, &["rw-hold", "write"]);
    assert_layout(&held_node(&java.line(JAVA_BOUND), &path), "__WRIT__");
    assert!(lock.try_read().unwrap().is_none(), "a distlock reader got in past Curator's writer");
    assert!(lock.try_write().unwrap().is_none(), "a distlock writer got in past Curator's writer");
    assert!(lock.try_read_for(Duration::from_millis(300)).unwrap().is_none(), "a waiting reader got in");
    // Refused attempts delete their nodes in the background: gone before the waiter queues.
    assert!(queued(1), "refused attempts left nodes: {:?}", children(&observer, &path));
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.try_read_for(Duration::from_secs(30)).unwrap();
            acquired_tx.send(guard.is_some()).unwrap();
            drop(guard);
        })
    };
    assert!(queued(2), "the distlock reader never queued behind Curator's writer");
    let listed = children(&observer, &path);
    let reader = listed.iter().find(|child| child.contains("__READ__"));
    assert_layout(reader.unwrap_or_else(|| panic!("no reader's node among {listed:?}")), "__READ__");
    java.tell("release");
    assert!(
        acquired.recv_timeout(Duration::from_secs(30)).unwrap(),
        "Curator's release did not let the reader in"
    );
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    waiter.join().unwrap();

    // distlock's writer holds: Curator's reader and writer time out; after the release, Curator's
    // reader gets in.
    let write = lock.try_write_for(Duration::from_secs(10)).unwrap().expect("distlock's write lock");
    assert!(queued(1), "nodes besides distlock's writer: {:?}", children(&observer, &path));
    assert_layout(&children(&observer, &path)[0], "__WRIT__");
    for access in ["read", "write"] {
        let java = Java::run(CLASS, &connect_string, &path, &["rw-try", access, "500"]);
        assert_eq!(java.line(JAVA_BOUND), "TIMEOUT", "Curator's {access} lock got in past distlock's writer");
        java.exit();
    }
    write.unlock().unwrap();
    let java = Java::run(CLASS, &connect_string, &path, &["rw-try", "read", "10000"]);
    assert_eq!(java.line(JAVA_BOUND), "ACQUIRED", "Curator's reader after distlock's writer let go");
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();

    // Curator's reader holds: a distlock reader shares it, a distlock writer waits for it.
    let mut java = Java::run(CLASS, &connect_string, &path, &["rw-hold", "read"]);
    assert_layout(&held_node(&java.line(JAVA_BOUND), &path), "__READ__");
    let shared = lock.try_read().unwrap();
    assert!(shared.is_some(), "a distlock reader could not share the lock with Curator's reader");
    drop(shared);
    assert!(lock.try_write().unwrap().is_none(), "a distlock writer got in past Curator's reader");
    // Refused attempts delete their nodes in the background: gone before the waiter queues.
    assert!(queued(1), "refused attempts left nodes: {:?}", children(&observer, &path));
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.try_write_for(Duration::from_secs(30)).unwrap();
            acquired_tx.send(guard.is_some()).unwrap();
            drop(guard);
        })
    };
    assert!(queued(2), "the distlock writer never queued behind Curator's reader");
    java.tell("release");
    assert!(
        acquired.recv_timeout(Duration::from_secs(30)).unwrap(),
        "Curator's release did not let the writer in"
    );
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    waiter.join().unwrap();

    // distlock's writer downgrades while Curator's writer waits: the downgraded reader's node
    // sorts before Curator's, which waits until that reader is released too.
    assert!(queued(0), "nodes left: {:?}", children(&observer, &path));
    let write = lock.try_write_for(Duration::from_secs(10)).unwrap().expect("distlock's write lock");
    let java = Java::run(CLASS, &connect_string, &path, &["rw-try", "write", "30000"]);
    assert!(queued(2), "Curator's writer never queued behind distlock's");
    let downgraded = lock.try_read().unwrap().expect("the writer's own read lock");
    write.unlock().unwrap();
    let overtook = java.try_line(Duration::from_secs(1));
    assert_eq!(overtook, None, "Curator's waiting writer overtook distlock's downgraded reader");
    downgraded.unlock().unwrap();
    assert_eq!(
        java.line(Duration::from_secs(30)),
        "ACQUIRED",
        "Curator's writer after the downgraded reader"
    );
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    assert!(queued(0), "nodes left: {:?}", children(&observer, &path));
}

/// One holder's visit to the shared directory of Z04's contention run: it leaves a file named
/// after its mode and looks at the others' — a writer must be alone, a reader must see no
/// writer. Logs the holder (`R`/`RW`) next to the directory. Whether it was alone as it must be.
fn rw_visit(dir: &Path, write: bool) -> bool {
    let mine = dir.join(format!("{}-{}", if write { "w" } else { "r" }, uuid::Uuid::new_v4()));
    fs::File::create_new(&mine).unwrap();
    let clash = fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name()).any(|other| {
        let other = other.to_string_lossy();
        *other != *mine.file_name().unwrap().to_string_lossy() && (write || other.starts_with("w-"))
    });
    let mut log = OpenOptions::new().create(true).append(true).open(log_of(dir)).unwrap();
    writeln!(log, "{}", if write { "RW" } else { "R" }).unwrap();
    thread::sleep(Duration::from_millis(1));
    fs::remove_file(&mine).unwrap();
    !clash
}

fn log_of(dir: &Path) -> PathBuf {
    PathBuf::from(format!("{}.log", dir.display()))
}

/// Z04, contention: Curator's reads and writes and two distlock threads' on one path: no writer
/// ever shares the lock.
pub(super) fn z04_contention() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("z04-contend");
    let path = Root::new(ROOT).unwrap().read_write_path(&name);
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("holders");
    fs::create_dir(&dir).unwrap();

    let java = Java::run(
        CLASS,
        &connect_string,
        &path,
        &["rw-contend", &RW_ROUNDS.to_string(), dir.to_str().unwrap()],
    );
    let java_done = Arc::new(AtomicBool::new(false));
    let rust: Vec<_> = (0..2)
        .map(|index| {
            let (backend, name, dir, java_done) =
                (backend(&connect_string), name.clone(), dir.clone(), java_done.clone());
            thread::spawn(move || {
                let lock = client(backend).read_write_lock(name.as_str()).unwrap();
                let (mut acquisitions, mut overlaps) = (0, 0);
                while acquisitions < RW_ROUNDS / 2 || !java_done.load(Ordering::SeqCst) {
                    let write = (acquisitions + index) % 3 == 0;
                    let guard = if write { lock.write() } else { lock.read() }.unwrap();
                    acquisitions += 1;
                    if !rw_visit(&dir, write) {
                        overlaps += 1;
                    }
                    guard.unlock().unwrap();
                }
                (acquisitions, overlaps)
            })
        })
        .collect();
    let done = java.line(Duration::from_secs(180));
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(done, format!("DONE acquisitions={RW_ROUNDS} overlaps=0"), "the Curator client's view");
    java.exit();
    let (mut acquisitions, mut overlaps) = (0, 0);
    for thread in rust {
        let (a, o) = thread.join().unwrap();
        acquisitions += a;
        overlaps += o;
    }
    assert_eq!(overlaps, 0, "distlock holders shared the lock with a writer");
    let log = fs::read_to_string(log_of(&dir)).unwrap();
    let holders: Vec<&str> = log.lines().collect();
    let switches =
        holders.windows(2).filter(|pair| pair[0].starts_with('J') != pair[1].starts_with('J')).count();
    println!(
        "Z04: {} holds ({RW_ROUNDS} Curator, {acquisitions} distlock; {} writes), {switches} hand-overs between the two",
        holders.len(),
        holders.iter().filter(|holder| holder.ends_with('W')).count()
    );
    assert!(switches >= 10, "the two sides hardly overlapped in time: {switches} hand-overs");
    let observer = backend(&connect_string);
    assert!(eventually(Duration::from_secs(5), || children(&observer, &path).is_empty()), "nodes left");
}

/// Z05: Curator's `InterProcessSemaphoreV2` and distlock's semaphore of the same count on one
/// path: each side's permits keep the other's out, and under contention there are never more
/// than N holders in all.
pub(super) fn z05_semaphore() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("z05-sem");
    let path = Root::new(ROOT).unwrap().semaphore_path(&name);
    let observer = backend(&connect_string);
    let leases = format!("{path}/leases");
    let ours = client(backend(&connect_string));
    let semaphore = ours.semaphore(name.as_str(), 2).unwrap();

    // Curator holds both permits of two: distlock is refused until Curator returns them.
    let mut java = Java::run(CLASS, &connect_string, &path, &["sem-hold", "2", "2"]);
    assert_eq!(java.line(JAVA_BOUND), "HELD 2");
    let curator_leases = children(&observer, &leases);
    assert_eq!(curator_leases.len(), 2, "{curator_leases:?}");
    curator_leases.iter().for_each(|child| assert_layout(child, "lease-"));
    assert!(semaphore.try_acquire().unwrap().is_none(), "distlock got a third permit of two");
    assert!(
        semaphore.try_acquire_for(Duration::from_millis(300)).unwrap().is_none(),
        "a waiting permit got in"
    );
    let lease_count =
        |count: usize| eventually(Duration::from_secs(30), || children(&observer, &leases).len() == count);
    assert!(lease_count(2), "refused attempts left lease nodes");
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            let guard = semaphore.try_acquire_for(Duration::from_secs(30)).unwrap();
            acquired_tx.send(guard.is_some()).unwrap();
            drop(guard);
        })
    };
    // The waiter's lease node (it waits for room holding the `locks` mutex, as Curator does).
    assert!(lease_count(3), "the distlock waiter never created its lease node");
    java.tell("release");
    assert!(
        acquired.recv_timeout(Duration::from_secs(30)).unwrap(),
        "Curator's return did not let distlock in"
    );
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    waiter.join().unwrap();

    // distlock holds both: Curator times out, and gets in once one is returned.
    let first = semaphore.try_acquire_for(Duration::from_secs(10)).unwrap().expect("a permit");
    let second = semaphore.try_acquire_for(Duration::from_secs(10)).unwrap().expect("a second permit");
    children(&observer, &leases).iter().for_each(|child| assert_layout(child, "lease-"));
    let java = Java::run(CLASS, &connect_string, &path, &["sem-try", "2", "500"]);
    assert_eq!(java.line(JAVA_BOUND), "TIMEOUT", "Curator got a third permit of two");
    java.exit();
    first.unlock().unwrap();
    let java = Java::run(CLASS, &connect_string, &path, &["sem-try", "2", "10000"]);
    assert_eq!(java.line(JAVA_BOUND), "ACQUIRED", "Curator after distlock returned a permit");
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    second.unlock().unwrap();

    sem_contention(&connect_string, &observer, &unique_name("z05-contend"));
}

/// Z05, contention: threads of a Curator client and of two distlock clients take permits of one
/// 3-permit semaphore, each counting the holders' files in a shared directory.
fn sem_contention(connect_string: &str, observer: &ZooKeeperBackend, name: &LockName) {
    let path = Root::new(ROOT).unwrap().semaphore_path(name);
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("holders");
    fs::create_dir(&dir).unwrap();
    let java = Java::run(
        CLASS,
        connect_string,
        &path,
        &[
            "sem-contend",
            &PERMITS.to_string(),
            &SEM_THREADS.to_string(),
            &SEM_ROUNDS.to_string(),
            dir.to_str().unwrap(),
        ],
    );
    let clients = [client(backend(connect_string)), client(backend(connect_string))];
    let rust: Vec<_> = (0..SEM_THREADS)
        .map(|index| {
            let (semaphore, dir) =
                (clients[index % 2].semaphore(name.as_str(), PERMITS).unwrap(), dir.clone());
            thread::spawn(move || {
                let mut overlaps = 0;
                for _ in 0..SEM_ROUNDS {
                    let guard = semaphore.acquire().unwrap();
                    let mine = dir.join(format!("r-{}", uuid::Uuid::new_v4()));
                    fs::File::create_new(&mine).unwrap();
                    if fs::read_dir(&dir).unwrap().count() > PERMITS as usize {
                        overlaps += 1;
                    }
                    thread::sleep(Duration::from_millis(2));
                    fs::remove_file(&mine).unwrap();
                    guard.unlock().unwrap();
                }
                overlaps
            })
        })
        .collect();
    let done = java.line(Duration::from_secs(180));
    let rounds = SEM_THREADS * SEM_ROUNDS;
    assert_eq!(done, format!("DONE acquisitions={rounds} overlaps=0"), "the Curator client's view");
    java.exit();
    let overlaps: usize = rust.into_iter().map(|thread| thread.join().unwrap()).sum();
    assert_eq!(overlaps, 0, "distlock holders found more than {PERMITS} holders inside");
    println!(
        "Z05: {} permits taken ({rounds} Curator, {rounds} distlock), never more than {PERMITS} holders",
        2 * rounds
    );
    let leases = format!("{path}/leases");
    assert!(
        eventually(Duration::from_secs(5), || children(observer, &leases).is_empty()),
        "lease nodes left"
    );
}
