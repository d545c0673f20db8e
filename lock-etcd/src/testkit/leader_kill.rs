//! E02 — a 3-member cluster whose leader is killed (`kill -9`) under contention: 8 threads in 2
//! processes take one lock in turn and increment a counter in a shared file inside it. Checked:
//! no two holders inside at once, no increment lost, every call back within its bound — and,
//! with one holder and one waiter, that a hold survives the leader's death (the new leader
//! keeps the lease) and excludes meanwhile.
//!
//! The second process is the running executable again with [`CHILD_VARIABLE`] set: a test
//! binary re-run with only the calling test selected, or the `distlock` command, whose `main`
//! calls [`serve_e02_child_if_asked`] first.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{HoldState, LockClient, LockOptions};
use lock_testkit::harness::EtcdCluster;
use lock_testkit::suite::unique_name;

use crate::EtcdBackend;

/// Set in E02's second process: `<endpoints> <name> <run in ms> <directory>`.
pub const CHILD_VARIABLE: &str = "DISTLOCK_E02_CHILD";
/// Contending threads per process.
const THREADS: usize = 4;
/// How long both processes contend; the leader is killed a third of the way in.
const RUN: Duration = Duration::from_secs(12);
/// Each attempt's wait for the lock.
const TRY_FOR: Duration = Duration::from_secs(3);
/// The clients' I/O timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The clients' lease TTL: longer than a leader election (2–4 s with the harness's timing).
const SESSION_TTL: Duration = Duration::from_secs(8);
/// What a call may take beyond its own bound on a loaded two-core machine.
const SLACK: Duration = Duration::from_secs(1);
/// What the child prints when done: the line, then its acquisitions, overlaps, slow calls and
/// failed calls.
const DONE_LINE: &str = "DISTLOCK-E02-DONE";
const READY_LINE: &str = "DISTLOCK-E02-READY";

fn backend(endpoints: &str) -> EtcdBackend {
    EtcdBackend::builder(endpoints)
        .session_ttl(SESSION_TTL)
        .io_timeout(IO_TIMEOUT)
        .connect_timeout(IO_TIMEOUT)
        .build()
        .expect("connect to the cluster")
}

/// What the threads of one process saw.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    acquired: u64,
    overlaps: u64,
    slow: u64,
    failed: u64,
}

impl Tally {
    fn add(self, other: Self) -> Self {
        Self {
            acquired: self.acquired + other.acquired,
            overlaps: self.overlaps + other.overlaps,
            slow: self.slow + other.slow,
            failed: self.failed + other.failed,
        }
    }
}

/// [`THREADS`] threads of one client taking `name` in turn until `run` has passed, each holder
/// incrementing the counter file in `dir`.
fn contend(endpoints: &str, name: &str, run: Duration, dir: &Path) -> Tally {
    let options = LockOptions::builder().lease(SESSION_TTL).build().expect("options");
    let client = LockClient::with_options(backend(endpoints), options);
    let until = Instant::now() + run;
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (client, name, dir) = (client.clone(), name.to_owned(), dir.to_owned());
            thread::spawn(move || {
                let lock = client.lock_named(&name).expect("name");
                let mut tally = Tally::default();
                while Instant::now() < until {
                    let asked = Instant::now();
                    let outcome = lock.try_lock_for(TRY_FOR);
                    tally.slow += u64::from(asked.elapsed() > TRY_FOR + IO_TIMEOUT + SLACK);
                    let guard = match outcome {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(_) => {
                            tally.failed += 1;
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    tally.acquired += 1;
                    tally.overlaps += u64::from(!critical_section(&dir));
                    let releasing = Instant::now();
                    if guard.unlock().is_err() {
                        tally.failed += 1;
                    }
                    tally.slow += u64::from(releasing.elapsed() > IO_TIMEOUT + SLACK);
                }
                tally
            })
        })
        .collect();
    threads.into_iter().map(|thread| thread.join().expect("contender")).fold(Tally::default(), Tally::add)
}

/// Inside the lock: marks the section taken (an existing mark is an overlap), increments the
/// counter by read, pause and write (a lost update shows as a short count), and leaves. Whether
/// the section was free.
fn critical_section(dir: &Path) -> bool {
    let mark = dir.join("inside");
    let alone = match OpenOptions::new().write(true).create_new(true).open(&mark) {
        Ok(_) => true,
        Err(error) if error.kind() == ErrorKind::AlreadyExists => false,
        Err(error) => panic!("mark {}: {error}", mark.display()),
    };
    let counter = dir.join("counter");
    let count: u64 = fs::read_to_string(&counter).ok().and_then(|text| text.trim().parse().ok()).unwrap_or(0);
    thread::sleep(Duration::from_millis(2));
    fs::write(&counter, (count + 1).to_string()).expect("write the counter");
    if alone {
        fs::remove_file(&mark).expect("unmark");
    }
    alone
}

/// If this process is E02's second process ([`CHILD_VARIABLE`] set), contends as told, prints
/// its tally and exits; otherwise returns. The `distlock` command calls it first thing.
pub fn serve_e02_child_if_asked() {
    let Ok(spec) = std::env::var(CHILD_VARIABLE) else { return };
    let mut fields = spec.splitn(4, ' ');
    let (Some(endpoints), Some(name), Some(run), Some(dir)) =
        (fields.next(), fields.next(), fields.next().and_then(|ms| ms.parse().ok()), fields.next())
    else {
        eprintln!("E02 child: bad {CHILD_VARIABLE} {spec:?}");
        std::process::exit(2);
    };
    println!("{READY_LINE}");
    let tally = contend(endpoints, name, Duration::from_millis(run), Path::new(dir));
    println!("{DONE_LINE} {} {} {} {}", tally.acquired, tally.overlaps, tally.slow, tally.failed);
    std::process::exit(0);
}

/// The second process: this executable again (with the calling libtest test selected, if there
/// is one), contending on `name` in `dir` for `run`.
fn start_child(endpoints: &str, name: &str, run: Duration, dir: &Path) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().expect("the running executable"));
    // libtest runs each test on a thread named after it.
    if let Some(test) = thread::current().name().filter(|name| *name != "main") {
        command.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    }
    let spec = format!("{endpoints} {name} {} {}", run.as_millis(), dir.display());
    command.env(CHILD_VARIABLE, spec).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    command.spawn().expect("start E02's second process")
}

/// A fresh directory under the system's temp dir.
fn temp_dir() -> PathBuf {
    let nanos = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
    let dir = std::env::temp_dir().join(format!("lock-etcd-e02-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

/// E02, under contention: 2 processes × 4 threads through the leader's `kill -9` (the second
/// process is served by [`serve_e02_child_if_asked`], called first by the scenario).
pub(super) fn contention_through_a_leader_kill() {
    let cluster = EtcdCluster::start(3).expect("a 3-member etcd cluster");
    let endpoints = cluster.endpoints().join(",");
    let name = unique_name("e02");
    let dir = temp_dir();
    let mut child = start_child(&endpoints, name.as_str(), RUN, &dir);
    let mut output = BufReader::new(child.stdout.take().expect("the child's output"));
    // A test binary prints libtest's lines first (and the test's name on the same line).
    let mut line = String::new();
    while !line.trim().ends_with(READY_LINE) {
        line.clear();
        let read = output.read_line(&mut line).expect("the child's output");
        assert!(read > 0, "the second process ended before it was ready");
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).expect("a leader");
    let mine = {
        let (endpoints, name, dir) = (endpoints.clone(), name.clone(), dir.clone());
        thread::spawn(move || contend(&endpoints, name.as_str(), RUN, &dir))
    };
    thread::sleep(RUN / 3);
    cluster.members()[leader].process().kill9().expect("kill -9 the leader");
    let killed_at = Instant::now();
    let mine = mine.join().expect("this process's contenders");
    let mut done = String::new();
    while output.read_line(&mut done).expect("the child's output") > 0 && !done.contains(DONE_LINE) {
        done.clear();
    }
    assert!(child.wait().expect("the child").success(), "the second process failed");
    let tally = done.split_once(DONE_LINE).map_or("", |(_, tally)| tally);
    let numbers: Vec<u64> = tally.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    let [acquired, overlaps, slow, failed] = numbers[..] else { panic!("the child said {done:?}") };
    let theirs = Tally { acquired, overlaps, slow, failed };
    let all = mine.add(theirs);
    let counted: u64 =
        fs::read_to_string(dir.join("counter")).unwrap_or_default().trim().parse().unwrap_or(0);
    eprintln!(
        "E02: {} acquisitions ({} here, {} in the second process), counter {counted}, {} overlaps, {} \
         calls over their bound, {} failed calls; the leader was killed {:?} before the end",
        all.acquired,
        mine.acquired,
        theirs.acquired,
        all.overlaps,
        all.slow,
        all.failed,
        killed_at.elapsed()
    );
    fs::remove_dir_all(&dir).ok();
    assert_eq!(all.overlaps, 0, "two holders inside at once");
    assert_eq!(counted, all.acquired, "updates lost");
    assert_eq!(all.slow, 0, "calls past their bound");
    assert!(mine.acquired > 0 && theirs.acquired > 0, "both processes make progress: {mine:?} {theirs:?}");
}

/// E02, one holder and one waiter: the hold survives the leader's death (the new leader keeps
/// the lease) and excludes meanwhile; the waiter gets the lock once released.
pub(super) fn a_hold_survives_the_leader_s_death() {
    let cluster = EtcdCluster::start(3).expect("a 3-member etcd cluster");
    let endpoints = cluster.endpoints().join(",");
    let (holder, rival) = (LockClient::new(backend(&endpoints)), LockClient::new(backend(&endpoints)));
    let name = unique_name("e02-hold");
    let guard = holder.lock_named(name.as_str()).unwrap().lock().unwrap();
    let token = guard.fencing_token().unwrap();
    let waiter = {
        let (rival, name) = (rival.clone(), name.clone());
        thread::spawn(move || {
            let guard = rival.lock_named(name.as_str()).unwrap().lock().unwrap();
            let (at, token) = (Instant::now(), guard.fencing_token().unwrap());
            guard.unlock().unwrap();
            (at, token)
        })
    };
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
    let killed_at = Instant::now();
    cluster.members()[leader].process().kill9().unwrap();
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
    assert_ne!(new_leader, leader);
    let deadline = Instant::now() + SESSION_TTL;
    while guard.state() != HoldState::Held && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(guard.state(), HoldState::Held, "{:?} after the leader's death", killed_at.elapsed());
    assert!(!waiter.is_finished(), "the waiter must not get the lock while it is held");
    let released_at = Instant::now();
    guard.unlock().unwrap();
    let (acquired_at, rival_token) = waiter.join().unwrap();
    assert!(acquired_at >= released_at);
    assert!(rival_token > token);
    eprintln!(
        "E02 hold: new leader {:?} after the kill; hand-over {:?} after the release",
        killed_at.elapsed(),
        acquired_at - released_at
    );
}
