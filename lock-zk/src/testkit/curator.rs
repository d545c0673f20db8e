//! Z03 — interop with Apache Curator's `InterProcessMutex`: a real Java client (Curator from the
//! Debian jars, `tests/curator/CuratorMutex.java` of this crate, compiled here) and distlock
//! clients contend on one lock path of the shared harness server. The Java programs of
//! `tests/curator/` are compiled and run here for Z04 and Z05 (`curator_shared.rs`) and LE05
//! (`curator_election.rs`) too.
//!
//! The jars come from Debian's `libcurator-recipes-java` (`cargo xtask test` installs it and a
//! JDK); `DISTLOCK_CURATOR_CLASSPATH` names other jars instead.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::ZooKeeperBackend;
use lock_core::{LockClient, LockOptions};
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;

/// Names the Curator class path (jars, `:`-separated) instead of Debian's.
const CLASSPATH_VARIABLE: &str = "DISTLOCK_CURATOR_CLASSPATH";

/// Debian's jars for Curator 5.4 and what it needs at run time; the first three suffice to compile.
const DEBIAN_JARS: [&str; 8] = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    // Silences SLF4J: without a binding it prints warnings on every start.
    "slf4j-nop.jar",
];

/// The root both sides lock under: Curator's lock path is `<ROOT>/<name>`.
const ROOT: &str = "/distlock-z03";

/// Acquisitions per side in the contention run: together at least 500.
const PER_SIDE: usize = 300;

/// The compiled helpers: their class directory and the run class path.
struct Curator {
    class_path: String,
    _classes: tempfile::TempDir,
}

/// Compiles the helpers (every `.java` of `tests/curator/`) once per test binary.
fn curator() -> &'static Curator {
    static CURATOR: OnceLock<Curator> = OnceLock::new();
    CURATOR.get_or_init(|| {
        let jars = std::env::var(CLASSPATH_VARIABLE).unwrap_or_else(|_| {
            DEBIAN_JARS
                .iter()
                .map(|jar| {
                    let path = Path::new("/usr/share/java").join(jar);
                    assert!(
                        path.exists(),
                        "{} is missing: install Debian's libcurator-recipes-java (cargo xtask test does), \
                         or set {CLASSPATH_VARIABLE}",
                        path.display()
                    );
                    path.display().to_string()
                })
                .collect::<Vec<_>>()
                .join(":")
        });
        let classes = tempfile::Builder::new().prefix("distlock-curator-").tempdir().unwrap();
        let sources = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/curator");
        let sources: Vec<PathBuf> = ["CuratorMutex.java", "CuratorShared.java", "CuratorLatch.java"]
            .iter()
            .map(|file| sources.join(file))
            .inspect(|source| {
                assert!(
                    source.exists(),
                    "{} is missing (it ships with the lock-zk sources)",
                    source.display()
                );
            })
            .collect();
        let compiled = Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(classes.path())
            .args(["-cp", &jars])
            .args(&sources)
            .status()
            .unwrap_or_else(|e| {
                panic!("javac (Debian's default-jdk-headless; cargo xtask test installs it): {e}")
            });
        assert!(compiled.success(), "javac failed on {sources:?}");
        Curator { class_path: format!("{}:{jars}", classes.path().display()), _classes: classes }
    })
}

/// A running Curator client, killed if the test ends first.
pub(super) struct Java {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Java {
    fn start(connect_string: &str, lock_path: &str, mode: &[&str]) -> Self {
        Self::run("CuratorMutex", connect_string, lock_path, mode)
    }

    /// Runs the helper `class` (`CuratorMutex`, `CuratorShared`) on `path` in `mode`.
    pub(super) fn run(class: &str, connect_string: &str, path: &str, mode: &[&str]) -> Self {
        let mut child = Command::new("java")
            .args(["-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"])
            .args(["-cp", &curator().class_path, class, connect_string, path])
            .args(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("java (Debian's default-jdk-headless): {e}"));
        let lines = read_lines(child.stdout.take().unwrap());
        Self { child, lines }
    }

    /// The next line, within `timeout`.
    pub(super) fn line(&self, timeout: Duration) -> String {
        self.lines
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("the Curator client said nothing for {timeout:?}"))
    }

    /// The next line, if one comes within `timeout`.
    pub(super) fn try_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    pub(super) fn tell(&mut self, line: &str) {
        writeln!(self.child.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    pub(super) fn exit(mut self) {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the Curator client exited with {status}");
    }
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (sender, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

fn backend(connect_string: &str) -> ZooKeeperBackend {
    // Curator's default ACL is open to anyone; so is a backend without digest authentication.
    ZooKeeperBackend::builder(connect_string).namespace(ROOT).build().unwrap()
}

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

/// Enters the critical section shared with the Curator client: the marker file is created
/// atomically (a second holder finds it there), and the holder is logged.
pub(super) fn critical_section(marker: &Path, side: &str) -> bool {
    let entered = match OpenOptions::new().write(true).create_new(true).open(marker) {
        Ok(_) => true,
        Err(error) if error.kind() == ErrorKind::AlreadyExists => false,
        Err(error) => panic!("marker file: {error}"),
    };
    let mut log = OpenOptions::new().create(true).append(true).open(marker.with_extension("log")).unwrap();
    writeln!(log, "{side}").unwrap();
    thread::sleep(Duration::from_millis(1));
    if entered {
        fs::remove_file(marker).unwrap();
    }
    entered
}

/// Z03, contention: Curator and distlock clients on one path, 0 overlaps, many hand-overs.
pub(super) fn z03_contention() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("z03-contend");
    let lock_path = format!("{ROOT}/{}", name.as_str());
    let dir = tempfile::tempdir().unwrap();
    // Java appends `<marker>.log`; so does `critical_section` (`with_extension`).
    let marker = dir.path().join("marker");

    let java = Java::start(
        &connect_string,
        &lock_path,
        &["contend", &PER_SIDE.to_string(), marker.to_str().unwrap()],
    );
    let java_done = Arc::new(AtomicBool::new(false));
    // Two distlock clients, each looping until the Curator client is done and it has its share.
    let rust: Vec<_> = (0..2)
        .map(|_| {
            let (backend, name, marker, java_done) =
                (backend(&connect_string), name.clone(), marker.clone(), java_done.clone());
            thread::spawn(move || {
                let lock = client(backend).lock_named(name.as_str()).unwrap();
                let (mut acquisitions, mut overlaps) = (0, 0);
                while acquisitions < PER_SIDE / 2 || !java_done.load(Ordering::SeqCst) {
                    let guard = lock.lock().unwrap();
                    acquisitions += 1;
                    if !critical_section(&marker, "R") {
                        overlaps += 1;
                    }
                    guard.unlock().unwrap();
                }
                (acquisitions, overlaps)
            })
        })
        .collect();
    let done = java.line(Duration::from_secs(120));
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(done, format!("DONE acquisitions={PER_SIDE} overlaps=0"), "the Curator client's view");
    java.exit();
    let (mut acquisitions, mut overlaps) = (0, 0);
    for thread in rust {
        let (a, o) = thread.join().unwrap();
        acquisitions += a;
        overlaps += o;
    }
    assert_eq!(overlaps, 0, "distlock clients found the critical section occupied");
    assert!(acquisitions + PER_SIDE >= 500, "only {} acquisitions", acquisitions + PER_SIDE);

    // They really contended: the log of holders switches sides many times.
    let log = fs::read_to_string(marker.with_extension("log")).unwrap();
    let holders: Vec<&str> = log.lines().collect();
    let switches = holders.windows(2).filter(|pair| pair[0] != pair[1]).count();
    println!("Z03: {} acquisitions ({PER_SIDE} Curator, {acquisitions} distlock), {switches} hand-overs between the two", holders.len());
    assert!(switches >= 20, "the two sides hardly overlapped in time: {switches} hand-overs");
    let observer = backend(&connect_string);
    assert!(
        eventually(Duration::from_secs(5), || observer.contenders(&name).unwrap().is_empty()),
        "nodes left"
    );
}

/// Z03, wake-ups: each side's release wakes the other's waiter.
pub(super) fn z03_wake_ups() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("z03-wake");
    let lock_path = format!("{ROOT}/{}", name.as_str());
    let observer = backend(&connect_string);
    let queued = |count: usize| {
        eventually(Duration::from_secs(30), || observer.contenders(&name).unwrap().len() == count)
    };

    // distlock holds, Curator waits: distlock's release wakes it (Curator waits on the watch only).
    let holder = client(backend(&connect_string));
    let guard = holder.lock_named(name.as_str()).unwrap().lock().unwrap();
    let java = Java::start(&connect_string, &lock_path, &["wait", "60"]);
    assert_eq!(java.line(Duration::from_secs(60)), "WAITING");
    assert!(queued(2), "the Curator client never queued");
    guard.unlock().unwrap();
    let released = Instant::now();
    assert_eq!(java.line(Duration::from_secs(60)), "ACQUIRED");
    println!("Z03: Curator acquired {:?} after distlock's release", released.elapsed());
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();

    // Curator holds, distlock waits: Curator's release fires distlock's watch.
    let mut java = Java::start(&connect_string, &lock_path, &["hold"]);
    let held = java.line(Duration::from_secs(60));
    let node = held.strip_prefix("HELD ").unwrap_or_else(|| panic!("{held}")).to_owned();
    let children = java.line(Duration::from_secs(10));
    let curator_node = node.rsplit('/').next().unwrap();
    assert_eq!(observer.contenders(&name).unwrap(), vec![curator_node.to_owned()], "{children}");
    assert_layout(curator_node);

    let waiter_backend = backend(&connect_string);
    let wake_ups = waiter_backend.clone();
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let name = name.clone();
        thread::spawn(move || {
            let guard = client(waiter_backend).lock_named(name.as_str()).unwrap().lock().unwrap();
            acquired_tx.send(()).unwrap();
            guard.unlock().unwrap();
        })
    };
    assert!(queued(2), "the distlock client never queued");
    let ours = observer.contenders(&name).unwrap().pop().unwrap();
    assert_layout(&ours);
    // Release only once distlock's waiter watches Curator's node: else it would find the node
    // gone when it sets the watch, and acquire without being woken.
    let watched = eventually(Duration::from_secs(30), || match shared::zookeeper().unwrap().server() {
        Ok(server) => server.four_letter_word("wchp").is_ok_and(|watches| watches.contains(&node)),
        // An external ensemble may not answer four-letter words: give the waiter a moment.
        Err(_) => {
            thread::sleep(Duration::from_secs(1));
            true
        }
    });
    assert!(watched, "distlock's waiter never watched Curator's node");
    java.tell("release");
    acquired.recv_timeout(Duration::from_secs(30)).expect("distlock never acquired after Curator's release");
    assert_eq!(java.line(Duration::from_secs(10)), "RELEASED");
    java.exit();
    waiter.join().unwrap();
    assert_eq!(wake_ups.wake_ups(), 1, "distlock's waiter was not woken by its watch on Curator's node");
}

/// `_c_<uuid>-lock-<10 digits>`, the node name of Curator's protected `InterProcessMutex`.
fn assert_layout(node: &str) {
    let rest = node.strip_prefix("_c_").unwrap_or_else(|| panic!("{node}"));
    let (uuid, sequence) = rest.split_once("-lock-").unwrap_or_else(|| panic!("{node}"));
    assert_eq!(uuid.len(), 36, "{node}");
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()), "{node}");
}
