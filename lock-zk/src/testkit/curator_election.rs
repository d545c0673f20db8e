//! LE05 — interop with Apache Curator's `LeaderLatch`: a real Java participant
//! (`tests/curator/CuratorLatch.java`, run through Z03's machinery in `curator.rs`) and distlock
//! candidates share one election path of the shared harness server — the path distlock's docs
//! tell Java users to point the latch at (`<root>/%election/<name>`).
//!
//! - **Each sees the other**: while distlock leads, Java's `hasLeadership()` is false and its
//!   `getLeader().getId()` is distlock's campaign value (a proclaim, which distlock's followers
//!   see, leaves the latch's watch on the leader's node alone); when distlock resigns, the Java latch leads — not the distlock candidate queued behind it — and distlock's
//!   `leader()` and observers show the Java participant's id; when Java closes its latch, the
//!   queued distlock candidate wins at once, with a greater fencing token.
//! - **One leader at any time**: Java latches and two distlock candidates take turns leading,
//!   each entering a critical section guarded by a marker file only its leader may find absent.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockOptions};
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::unique_name;

use super::curator::{critical_section, Java};
use crate::ZooKeeperBackend;

/// The root both sides work under: the election `N` is the latch path `<ROOT>/%election/N`.
const ROOT: &str = "/distlock-le05";

/// The Java helper's class.
const CLASS: &str = "CuratorLatch";

/// The Java side's terms in the contention run; each distlock candidate serves at least half as
/// many.
const JAVA_TERMS: usize = 40;

/// How long the Java helper may take for one answer (a JVM start included).
const JAVA_BOUND: Duration = Duration::from_secs(60);

/// How long a hand-over (a watch firing, one round trip or two) may take on a loaded machine:
/// far below the 5 s re-check of a waiting candidate.
const HAND_OVER: Duration = Duration::from_secs(3);

fn backend(connect_string: &str) -> ZooKeeperBackend {
    // Curator's default ACL is open to anyone; so is a backend without digest authentication.
    ZooKeeperBackend::builder(connect_string).namespace(ROOT).build().unwrap()
}

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

/// `_c_<uuid>-latch-<10 digits>`, the node name of Curator's `LeaderLatch`.
fn assert_layout(node: &str) {
    let rest = node.strip_prefix("_c_").unwrap_or_else(|| panic!("{node}"));
    let (uuid, sequence) = rest.split_once("-latch-").unwrap_or_else(|| panic!("{node}"));
    assert_eq!(uuid.len(), 36, "{node}");
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()), "{node}");
}

/// Asks the Java latch for its status until it is `expected` (its reads may trail distlock's
/// writes on an ensemble by a moment).
fn assert_java_status(java: &mut Java, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        java.tell("status");
        let status = java.line(JAVA_BOUND);
        if status == expected {
            return;
        }
        assert!(Instant::now() < deadline, "the Curator latch says {status:?}, not {expected:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// LE05, visibility: distlock leads, Java follows; Java leads, distlock follows; each side's
/// resignation hands over to the other.
pub(super) fn le05_visibility() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("le05-see");
    let latch_path = format!("{ROOT}/%election/{}", name.as_str());
    let observer = backend(&connect_string);

    // distlock leads first.
    let first = client(backend(&connect_string)).election(name.as_str()).unwrap().with_value("distlock-a");
    let leading = first.try_campaign().unwrap().expect("an election nobody leads");
    let first_token = leading.fencing_token().expect("a token");

    let mut java = Java::run(CLASS, &connect_string, &latch_path, &["latch", "curator-j"]);
    assert_eq!(java.line(JAVA_BOUND), "STARTED");
    java.tell("path");
    let java_path = java.line(JAVA_BOUND);
    let java_node = java_path.rsplit('/').next().unwrap_or_default().to_owned();
    assert_eq!(
        java_path,
        format!("PATH {latch_path}/{java_node}"),
        "the latch's node is not on distlock's path"
    );
    let candidates = observer.candidates(&name).unwrap();
    assert_eq!(candidates.len(), 2, "{candidates:?}");
    assert_eq!(candidates[1], java_node, "the Curator latch does not queue behind distlock's leader");
    candidates.iter().for_each(|node| assert_layout(node));

    // Java sees distlock lead, with the value it campaigned with. A proclaim is for distlock's
    // followers: it leaves the leader's node alone, whose data change would spend the watch the
    // Curator latch behind it relies on to see the leader go (see `election.rs`).
    assert_java_status(&mut java, "STATUS leader=false leaderId=distlock-a");
    leading.proclaim("distlock-a:2").unwrap();
    let seen = first.leader().unwrap().expect("a leader");
    assert_eq!((seen.value.as_slice(), seen.token), (&b"distlock-a:2"[..], Some(first_token)));
    assert_java_status(&mut java, "STATUS leader=false leaderId=distlock-a");

    // A second distlock candidate queues behind the Java latch.
    let (won_tx, won) = mpsc::channel();
    let (resign_tx, resign) = mpsc::channel::<()>();
    let second = {
        let election =
            client(backend(&connect_string)).election(name.as_str()).unwrap().with_value("distlock-b");
        thread::spawn(move || {
            let leadership = election.campaign().unwrap();
            won_tx.send((Instant::now(), leadership.fencing_token())).unwrap();
            resign.recv().unwrap();
            leadership.resign().unwrap();
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || observer.candidates(&name).unwrap().len() == 3),
        "the second distlock candidate never queued"
    );
    let follower = client(observer.clone()).election(name.as_str()).unwrap();
    let mut follower = follower.observe().unwrap();

    // distlock resigns: the Java latch leads, and distlock sees it.
    leading.resign().unwrap();
    let resigned = Instant::now();
    java.tell("await 20");
    assert_eq!(java.line(JAVA_BOUND), "LEADER", "the Curator latch never led after distlock resigned");
    let changed = follower.changed(HAND_OVER).unwrap().expect("the observer missed the hand-over");
    let java_leader = changed.expect("the Curator latch leads");
    println!(
        "LE05: Curator led and distlock's observer saw it {:?} after distlock resigned",
        resigned.elapsed()
    );
    assert_eq!(java_leader.value_lossy(), "curator-j", "distlock's view of the Curator leader");
    assert!(java_leader.token > Some(first_token), "the tokens of successive leaders do not increase");
    assert_eq!(first.leader().unwrap(), Some(java_leader.clone()));
    assert_java_status(&mut java, "STATUS leader=true leaderId=curator-j");
    assert!(won.try_recv().is_err(), "a distlock candidate led beside the Curator latch");

    // Java closes its latch: the queued distlock candidate wins at once.
    java.tell("close");
    let closed = Instant::now();
    assert_eq!(java.line(JAVA_BOUND), "CLOSED");
    java.exit();
    let (won_at, second_token) =
        won.recv_timeout(HAND_OVER * 2).expect("distlock never led after Curator closed");
    println!(
        "LE05: distlock led {:?} after Curator closed its latch",
        won_at.saturating_duration_since(closed)
    );
    assert!(second_token > java_leader.token, "the tokens of successive leaders do not increase");
    let leader = follower.changed(HAND_OVER).unwrap().expect("the observer missed the hand-over");
    assert_eq!(
        leader.map(|leader| (leader.value, leader.token)),
        Some((b"distlock-b".to_vec(), second_token))
    );
    resign_tx.send(()).unwrap();
    second.join().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || observer.candidates(&name).unwrap().is_empty()),
        "nodes left"
    );
    assert_eq!(first.leader().unwrap(), None);
}

/// LE05, one leader at any time: Java latches and two distlock candidates take turns leading a
/// critical section; no two leaders are ever in it together, and each leader is the one the
/// servers name.
pub(super) fn le05_contention() {
    let connect_string = shared::zookeeper().unwrap().address().to_owned();
    let name = unique_name("le05-turns");
    let latch_path = format!("{ROOT}/%election/{}", name.as_str());
    let dir = tempfile::tempdir().unwrap();
    // Java appends `<marker>.log`; so does `critical_section` (`with_extension`).
    let marker = dir.path().join("marker");

    let java = Java::run(
        CLASS,
        &connect_string,
        &latch_path,
        &["cycle", &JAVA_TERMS.to_string(), marker.to_str().unwrap(), "curator-j"],
    );
    let java_done = Arc::new(AtomicBool::new(false));
    let rust: Vec<_> = (0..2)
        .map(|index| {
            let (backend, name, marker, java_done) =
                (backend(&connect_string), name.clone(), marker.clone(), java_done.clone());
            thread::spawn(move || {
                candidate(backend, name.as_str(), &format!("distlock-{index}"), &marker, &java_done)
            })
        })
        .collect();
    let done = java.line(Duration::from_secs(120));
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(done, format!("DONE terms={JAVA_TERMS} overlaps=0 mismatches=0"), "the Curator latch's view");
    java.exit();
    let mut terms = 0;
    for thread in rust {
        let (served, overlaps) = thread.join().unwrap();
        assert_eq!(overlaps, 0, "distlock leaders found the critical section occupied");
        terms += served;
    }
    let log = std::fs::read_to_string(marker.with_extension("log")).unwrap();
    let leaders: Vec<&str> = log.lines().collect();
    let switches = leaders.windows(2).filter(|pair| pair[0] != pair[1]).count();
    println!(
        "LE05: {} terms ({JAVA_TERMS} Curator, {terms} distlock), {switches} hand-overs between the two",
        leaders.len()
    );
    assert!(switches >= 10, "the two sides hardly overlapped in time: {switches} hand-overs");
    let observer = backend(&connect_string);
    assert!(
        eventually(Duration::from_secs(5), || observer.candidates(&name).unwrap().is_empty()),
        "nodes left"
    );
}

/// One distlock candidate of the contention run: campaigns, checks that the servers name it
/// leader, enters the critical section and resigns, until the Java side is done and it served
/// its share. Returns its terms and overlaps.
fn candidate(
    backend: ZooKeeperBackend,
    name: &str,
    value: &str,
    marker: &Path,
    java_done: &AtomicBool,
) -> (usize, usize) {
    let election = client(backend).election(name).unwrap().with_value(value);
    let (mut terms, mut overlaps) = (0, 0);
    while terms < JAVA_TERMS / 2 || !java_done.load(Ordering::SeqCst) {
        let leadership = election.campaign().unwrap();
        terms += 1;
        if !critical_section(marker, "R") {
            overlaps += 1;
        }
        let leader = election.leader().unwrap().expect("a leader while leading");
        assert_eq!((leader.value_lossy(), leader.token), (value.into(), leadership.fencing_token()));
        leadership.resign().unwrap();
    }
    (terms, overlaps)
}
