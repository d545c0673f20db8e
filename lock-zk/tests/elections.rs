//! Leader election on the ZooKeeper backend (Curator's `LeaderLatch` layout, `election.rs`), on
//! the shared harness server: one leader among threads, what followers read and when they wake,
//! conditional proclaims, hand-overs. LE05 (a real Curator latch) is in `curator.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Deadline, Election, Elections, Error, LockClient, LockOptions, OwnerToken, Request};
use lock_testkit::eventually;
use lock_testkit::harness::shared;
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_testkit::FaultProxies;
use lock_zk::testkit::ZooKeeperTarget;
use lock_zk::ZooKeeperBackend;

/// The lease of every client: its follower re-check ([`lock_core::leader_recheck`]) is 1 s.
const LEASE: Duration = Duration::from_secs(30);

/// How long a watch-driven wake-up may take on a loaded two-core machine: well below the
/// followers' 1 s re-check and a waiting candidate's 5 s one.
const PROMPT: Duration = Duration::from_millis(500);

fn backend() -> ZooKeeperBackend {
    ZooKeeperTarget::new().backend().unwrap()
}

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(LEASE).build().unwrap())
}

fn election(backend: &ZooKeeperBackend, name: &str, value: &str) -> Election<ZooKeeperBackend> {
    client(backend.clone()).election(name).unwrap().with_value(value)
}

#[test]
fn one_leader_at_a_time_among_candidates_in_threads() {
    let name = unique_name("le-one");
    let leaders = Arc::new(AtomicUsize::new(0));
    // Two sessions, two rival threads on each.
    let backends = [backend(), backend()];
    let threads: Vec<_> = (0..4)
        .map(|index| {
            let election = election(&backends[index % 2], name.as_str(), &format!("candidate-{index}"));
            let leaders = Arc::clone(&leaders);
            thread::spawn(move || {
                for _ in 0..10 {
                    let leadership = election.campaign().unwrap();
                    assert_eq!(leaders.fetch_add(1, Ordering::SeqCst), 0, "two leaders at once");
                    let leader = election.leader().unwrap().expect("a leader while leading");
                    assert_eq!(leader.value_lossy(), format!("candidate-{index}"));
                    assert_eq!(leader.token, leadership.fencing_token());
                    thread::sleep(Duration::from_millis(2));
                    leaders.fetch_sub(1, Ordering::SeqCst);
                    leadership.resign().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(backends[0].candidates(&name).unwrap().is_empty(), "candidates left");
}

#[test]
fn leader_is_none_then_the_winners_value_and_token() {
    let backend = backend();
    let name = unique_name("le-read");
    let first = election(&backend, name.as_str(), "host-1:7000");
    assert_eq!(first.leader().unwrap(), None, "an election never held");

    let leadership = first.try_campaign().unwrap().expect("nobody leads");
    let token = leadership.fencing_token().expect("ZooKeeper issues tokens");
    let leader = first.leader().unwrap().expect("a leader");
    assert_eq!((leader.value.as_slice(), leader.token), (&b"host-1:7000"[..], Some(token)));
    let node = backend.candidates(&name).unwrap();
    assert_eq!(node.len(), 1);
    assert!(node[0].starts_with("_c_") && node[0].contains("-latch-"), "{node:?}");

    let rival = election(&ZooKeeperTarget::new().backend().unwrap(), name.as_str(), "host-2:7000");
    assert!(rival.try_campaign().unwrap().is_none(), "a second leader");
    // A failed try deletes its node (in the background: the delete leaves at once).
    assert!(
        eventually(Duration::from_secs(5), || backend.candidates(&name).unwrap().len() == 1),
        "a failed try left its node"
    );

    leadership.resign().unwrap();
    assert_eq!(first.leader().unwrap(), None, "a resigned leader still read");
    let next = rival.try_campaign().unwrap().expect("nobody leads");
    let leader = rival.leader().unwrap().expect("a leader");
    assert_eq!(leader.value_lossy(), "host-2:7000");
    assert!(leader.token > Some(token), "tokens of successive leaders must increase");
    next.resign().unwrap();
}

#[test]
fn proclaims_are_read_in_the_same_term_and_not_after_it() {
    let backend = backend();
    let name = unique_name("le-proclaim");
    let first = election(&backend, name.as_str(), "v1");
    let leadership = first.campaign().unwrap();
    leadership.proclaim("v2").unwrap();
    let leader = first.leader().unwrap().expect("a leader");
    assert_eq!(
        (leader.value_lossy().into_owned(), leader.token),
        ("v2".to_owned(), leadership.fencing_token())
    );
    leadership.proclaim([0xff, b'\n', 0x00]).unwrap();
    assert_eq!(first.leader().unwrap().unwrap().value, [0xff, b'\n', 0x00]);
    assert!(
        matches!(leadership.proclaim(vec![0; 2_000_000]), Err(Error::InvalidConfig { .. })),
        "a value no ZooKeeper request can carry"
    );

    // The next leader is read with its own campaign value, not its predecessor's last proclaim.
    leadership.resign().unwrap();
    let second = election(&backend, name.as_str(), "w1");
    let next = second.campaign().unwrap();
    assert_eq!(second.leader().unwrap().unwrap().value_lossy(), "w1");
    next.proclaim("w2").unwrap();
    assert_eq!(second.leader().unwrap().unwrap().value_lossy(), "w2");
    next.resign().unwrap();
}

/// The leader's connections are cut (a partition) until the servers expire its session and a
/// rival leads; then the deposed leader, reconnected, may not proclaim — through its
/// [`Leadership`](lock_core::Leadership) or a raw lease of the backend.
#[test]
fn a_leader_whose_session_expired_behind_its_back_cannot_proclaim() {
    let target = ZooKeeperTarget::new();
    let mut proxies = FaultProxies::default();
    let cut_backend = target
        .backend_routed(&mut |server| proxies.route(server), Duration::from_secs(1), 1)
        .expect("a server kind")
        .expect("a client through the proxy");
    let name = unique_name("le-deposed");
    let deposed = election(&cut_backend, name.as_str(), "old").campaign().unwrap();
    let raw_name = unique_name("le-deposed-raw");
    let mut raw_lease = {
        let owner = OwnerToken::random();
        let request = Request::new(&raw_name, &owner, LEASE, Deadline::Now, (LEASE, LEASE));
        cut_backend.campaign(&request, b"raw").unwrap().expect("nobody leads").lease
    };
    cut_backend.proclaim(&mut raw_lease, b"raw:2").unwrap();

    proxies.cut();
    let rival_backend = backend();
    let rival = election(&rival_backend, name.as_str(), "new");
    // The servers expire the cut session one session timeout (3 s) after they last heard of it.
    let successor =
        rival.campaign_for(Duration::from_secs(15)).unwrap().expect("the cut session never expired");
    successor.proclaim("new:2").unwrap();
    proxies.restore();

    // Until the deposed client hears that its session is over, an attempt may go unanswered.
    let not_held = |mut proclaim: Box<dyn FnMut() -> lock_core::Result<()> + '_>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match proclaim() {
                Err(Error::NotHeld { .. }) => break,
                Err(Error::Connection { .. } | Error::Timeout { .. }) if Instant::now() < deadline => {}
                other => panic!("a deposed leader's proclaim: {other:?}"),
            }
        }
    };
    not_held(Box::new(|| deposed.proclaim("stale")));
    not_held(Box::new(|| cut_backend.proclaim(&mut raw_lease, b"stale")));
    let leader = rival.leader().unwrap().expect("the successor leads");
    assert_eq!(
        (leader.value_lossy().into_owned(), leader.token),
        ("new:2".to_owned(), successor.fencing_token())
    );
    assert_eq!(rival_backend.leader(&raw_name).unwrap(), None);
    successor.resign().unwrap();
}

#[test]
fn an_election_and_the_mutex_of_one_name_do_not_contend() {
    let backend = backend();
    let name = unique_name("le-mutex");
    let client = client(backend.clone());
    let guard = client.lock_named(name.as_str()).unwrap().try_lock().unwrap().expect("a free lock");
    let leadership = client
        .election(name.as_str())
        .unwrap()
        .try_campaign()
        .unwrap()
        .expect("the mutex of the same name kept the election from its leader");
    assert_eq!(backend.contenders(&name).unwrap().len(), 1);
    assert_eq!(backend.candidates(&name).unwrap().len(), 1);
    assert_ne!(backend.contenders(&name).unwrap(), backend.candidates(&name).unwrap());
    leadership.resign().unwrap();
    assert!(backend.holder(&name).unwrap().is_some(), "the resignation released the mutex");
    guard.unlock().unwrap();
}

#[test]
fn watches_fire_on_a_first_candidate_a_proclaim_and_a_resignation() {
    let backend = backend();
    let name = unique_name("le-watch");
    let far = || Instant::now() + Duration::from_secs(20);
    // No election node yet: the watch is on its creation.
    let mut watch = backend.watch_leader(&name).unwrap();
    let leading = election(&backend, name.as_str(), "v1").campaign().unwrap();
    assert!(watch.wait(far()).unwrap(), "no notice of a first candidate");
    // Each wait after a notice blocks on a watch set again before it returned.
    leading.proclaim("v2").unwrap();
    assert!(watch.wait(far()).unwrap(), "no notice of a proclaim");
    leading.resign().unwrap();
    assert!(watch.wait(far()).unwrap(), "no notice of a resignation");
    // Nothing changes: the wait runs to its end.
    assert!(!watch.wait(Instant::now() + Duration::from_millis(200)).unwrap(), "a notice without a change");
}

#[test]
fn observers_wake_on_resign_and_proclaim_well_before_the_recheck() {
    let backend = backend();
    let name = unique_name("le-observe");
    let leader = election(&backend, name.as_str(), "v1");
    let leadership = leader.campaign().unwrap();
    let follower_backend = ZooKeeperTarget::new().backend().unwrap();
    let follower = election(&follower_backend, name.as_str(), "");
    let mut observer = follower.observe().unwrap();
    assert_eq!(observer.current().map(|leader| leader.value_lossy().into_owned()), Some("v1".into()));

    leadership.proclaim("v2").unwrap();
    let proclaimed = Instant::now();
    let seen = observer.changed(Duration::from_secs(10)).unwrap().expect("no change seen");
    assert_eq!(seen.map(|leader| leader.value), Some(b"v2".to_vec()));
    assert!(proclaimed.elapsed() < PROMPT, "a proclaim seen after {:?}", proclaimed.elapsed());

    leadership.resign().unwrap();
    let resigned = Instant::now();
    assert_eq!(observer.changed(Duration::from_secs(10)).unwrap(), Some(None), "the resignation not seen");
    assert!(resigned.elapsed() < PROMPT, "a resignation seen after {:?}", resigned.elapsed());
    assert_eq!(observer.changed(Duration::from_millis(300)).unwrap(), None, "a change without one");
}

#[test]
fn a_resignation_hands_over_to_a_waiting_campaign_promptly() {
    let name = unique_name("le-hand-over");
    let leader_backend = backend();
    let leadership = election(&leader_backend, name.as_str(), "first").campaign().unwrap();

    let waiter_backend = backend();
    let wake_ups = waiter_backend.clone();
    let (won_tx, won) = mpsc::channel();
    let waiter = {
        let election = election(&waiter_backend, name.as_str(), "second");
        thread::spawn(move || {
            let leadership = election.campaign().unwrap();
            won_tx.send(Instant::now()).unwrap();
            leadership.resign().unwrap();
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || leader_backend.candidates(&name).unwrap().len() == 2),
        "the second candidate never queued"
    );
    // Resign only once the waiter watches the leader's node: else it would find the node gone
    // when it sets the watch, and win without being woken.
    let leader_node = format!(
        "{}/%election/{}/{}",
        leader_backend.namespace(),
        name.as_str(),
        leader_backend.candidates(&name).unwrap()[0]
    );
    let watched = eventually(Duration::from_secs(10), || match shared::zookeeper().unwrap().server() {
        Ok(server) => server.four_letter_word("wchp").is_ok_and(|watches| watches.contains(&leader_node)),
        // An external ensemble may not answer four-letter words: give the waiter a moment.
        Err(_) => {
            thread::sleep(Duration::from_secs(1));
            true
        }
    });
    assert!(watched, "the waiting candidate never watched the leader's node");
    assert!(won.try_recv().is_err(), "two leaders");
    leadership.resign().unwrap();
    let resigned = Instant::now();
    let won_at = won.recv_timeout(Duration::from_secs(10)).expect("the waiting candidate never won");
    let took = won_at.saturating_duration_since(resigned);
    assert!(took < PROMPT, "handed over after {took:?}");
    waiter.join().unwrap();
    assert_eq!(wake_ups.wake_ups(), 1, "the waiting candidate was not woken by its watch");
}
