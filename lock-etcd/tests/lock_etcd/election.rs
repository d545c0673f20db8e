//! Elections against a real etcd, in etcd's `concurrency.Election` layout: campaign, proclaim,
//! leader and resign; a follower's watch woken by the server; and one election shared with
//! `etcdctl elect` (Go's `concurrency.Election`), both ways.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Elections, Error, LockClient, LockName};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::{shared, EtcdServer};

/// How long anything that should happen at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(3);

/// The shared harness server (etcdctl is run against it).
fn server() -> &'static EtcdServer {
    let shared = shared::etcd().expect("the shared etcd server");
    shared.server().expect("these tests run etcdctl against the harness's own etcd server")
}

fn client() -> LockClient<EtcdBackend> {
    LockClient::new(EtcdBackend::from_url(&server().url()).expect("connect"))
}

/// A name no other test or run uses.
fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

/// `etcdctl get --prefix <prefix>/`: every key and value of the election's candidates.
fn candidates(prefix: &str) -> Vec<(String, String)> {
    let output = server().etcdctl().args(["get", "--prefix", &format!("{prefix}/")]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines.chunks(2).map(|pair| (pair[0].to_owned(), pair.get(1).copied().unwrap_or("").to_owned())).collect()
}

#[test]
fn campaign_proclaim_leader_and_resign_in_etcd_s_layout() {
    let (a, b) = (client(), client());
    let text = unique("le-basic");
    let name = LockName::new(&text).unwrap();
    let prefix = a.backend().election_prefix(&name);
    assert_eq!(prefix, format!("%election/{text}"));
    let first = a.election(&text).unwrap().with_value("a-1").campaign_for(SOON).unwrap().expect("leads");
    assert!(first.is_leader());
    let key = format!("{prefix}/{:x}", a.backend().lease_id());
    assert_eq!(candidates(&prefix), [(key.clone(), "a-1".to_owned())], "Go's Election layout");
    let follower = b.election(&text).unwrap();
    let leader = follower.leader().unwrap().expect("a leader");
    assert_eq!((leader.value.as_slice(), leader.token), (&b"a-1"[..], first.fencing_token()));

    // A rival cannot lead, and its try leaves no key behind.
    assert!(follower.clone().with_value("b").try_campaign().unwrap().is_none());
    assert!(follower.clone().with_value("b").campaign_for(Duration::from_millis(300)).unwrap().is_none());
    assert_eq!(candidates(&prefix).len(), 1);

    first.proclaim("a-2").unwrap();
    let leader = follower.leader().unwrap().expect("a leader");
    assert_eq!((leader.value.as_slice(), leader.token), (&b"a-2"[..], first.fencing_token()));

    // A waiting candidate (guards stay on their thread) leads once the leader resigns, with a
    // higher token and its own value; deposed, it proclaims when told.
    let (won, winner) = mpsc::channel();
    let (deposed, told) = mpsc::channel::<()>();
    let waiter = {
        let election = follower.clone().with_value("b-1");
        thread::spawn(move || {
            let second = election.campaign().unwrap();
            won.send(second.fencing_token().unwrap()).unwrap();
            told.recv().unwrap();
            second.proclaim("b-2")
        })
    };
    assert!(
        winner.recv_timeout(Duration::from_millis(300)).is_err(),
        "a second leader while the first leads"
    );
    let first_token = first.fencing_token().unwrap();
    first.resign().unwrap();
    let second_token = winner.recv_timeout(SOON).expect("the waiting candidate leads");
    assert!(second_token > first_token);
    assert_eq!(follower.leader().unwrap().unwrap().value, b"b-1");

    // Deposed (its key deleted by hand), the leader can no longer proclaim — not even over a
    // later leader's value.
    let second_key = format!("{prefix}/{:x}", b.backend().lease_id());
    assert!(server().etcdctl().args(["del", &second_key]).output().unwrap().status.success());
    let third = a.election(&text).unwrap().with_value("a-3").campaign_for(SOON).unwrap().expect("leads");
    deposed.send(()).unwrap();
    assert!(matches!(waiter.join().unwrap(), Err(Error::NotHeld { .. })));
    let leader = follower.leader().unwrap().expect("a leader");
    assert_eq!((leader.value.as_slice(), leader.token), (&b"a-3"[..], third.fencing_token()));
    third.resign().unwrap();
    assert_eq!(follower.leader().unwrap(), None);
    assert!(candidates(&prefix).is_empty());
}

#[test]
fn threads_of_one_client_take_turns_as_leader() {
    let a = client();
    let text = unique("le-threads");
    let election = a.election(&text).unwrap();
    let first = election.clone().with_value("t-1").campaign_for(SOON).unwrap().expect("leads");
    let rival = {
        let election = election.clone().with_value("t-2");
        thread::spawn(move || election.campaign_for(Duration::from_millis(300)).unwrap().is_none())
    };
    assert!(rival.join().unwrap(), "another thread of the client led while the first did");
    let waiter = {
        let election = election.clone().with_value("t-2");
        thread::spawn(move || {
            let leadership = election.campaign().unwrap();
            let value = election.leader().unwrap().unwrap().value;
            leadership.resign().unwrap();
            value
        })
    };
    thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished());
    first.resign().unwrap();
    assert_eq!(waiter.join().unwrap(), b"t-2");
}

#[test]
fn a_follower_s_watch_wakes_on_a_proclaim_and_on_a_resign_without_polling() {
    let (leader_client, follower) = (client(), client());
    let text = unique("le-watch");
    let name = LockName::new(&text).unwrap();
    let leadership =
        leader_client.election(&text).unwrap().with_value("v-1").campaign_for(SOON).unwrap().expect("leads");
    let backend = follower.backend();
    let mut watch = backend.watch_leader(&name).unwrap();
    // Nothing changes: the wait lasts until its end and says so.
    let started = Instant::now();
    assert!(!watch.wait(started + Duration::from_millis(300)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Far-off deadlines: only the server's notice can end these waits in time. The follower
    // waits on a thread of its own (the watch is Send; the leadership stays on its thread).
    let far = Duration::from_secs(60);
    let mut woken_by = |act: &dyn Fn()| {
        thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let started = Instant::now();
                (watch.wait(started + far).unwrap(), started.elapsed())
            });
            thread::sleep(Duration::from_millis(200));
            act();
            let (woken, waited) = waiter.join().unwrap();
            assert!(woken && waited < SOON, "woken: {woken}, after {waited:?}");
        });
    };
    woken_by(&|| leadership.proclaim("v-2").unwrap());
    assert_eq!(backend.leader(&name).unwrap().unwrap().value, b"v-2");
    let leadership = std::cell::Cell::new(Some(leadership));
    woken_by(&|| leadership.take().unwrap().resign().unwrap());
    assert_eq!(backend.leader(&name).unwrap(), None);

    // The observer on top: it sees the next leader, pushed (its re-check is a second away).
    let election = follower.election(&text).unwrap();
    let mut observer = election.observe().unwrap();
    assert_eq!(observer.current(), None);
    let next = leader_client.election(&text).unwrap().with_value("v-3").campaign_for(SOON).unwrap().unwrap();
    let seen = observer.changed(SOON).unwrap().expect("a change");
    assert_eq!(seen.map(|leader| leader.value), Some(b"v-3".to_vec()));
    next.resign().unwrap();
}

/// An `etcdctl` child whose stdout lines come through a channel; interrupted (SIGINT: `etcdctl
/// elect` resigns) and reaped when dropped.
struct Etcdctl {
    child: Child,
    lines: Receiver<String>,
}

impl Etcdctl {
    fn spawn(args: &[&str]) -> Self {
        let mut child = server()
            .etcdctl()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        // Reads until etcdctl exits: the pipe stays open, so etcdctl never dies of SIGPIPE.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next `key`, `value` pair etcdctl prints, within `timeout`.
    fn next_pair(&self, timeout: Duration) -> Option<(String, String)> {
        let deadline = Instant::now() + timeout;
        let key = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()?;
        let value = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()?;
        Some((key, value))
    }

    /// Waits, at most `timeout`, for a printed pair whose value is `value`; its key.
    fn sees(&self, value: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_pair(left) {
                Some((key, seen)) if seen == value => return key,
                Some(_) => {}
                None => panic!("etcdctl did not print the value {value:?} within {timeout:?}"),
            }
        }
    }

    /// SIGINT, and its exit within [`SOON`].
    fn interrupt(&mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
        let deadline = Instant::now() + SOON;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "etcdctl did not exit on SIGINT");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[test]
fn etcdctl_elect_and_distlock_candidates_share_one_election() {
    let distlock = client();
    let text = unique("le-etcdctl");
    let name = LockName::new(&text).unwrap();
    let prefix = distlock.backend().election_prefix(&name);
    let election = distlock.election(&text).unwrap();
    let observer = Etcdctl::spawn(&["elect", "-l", &prefix]);

    // etcdctl leads: distlock followers see its proposal, distlock candidates wait.
    let mut first = Etcdctl::spawn(&["elect", &prefix, "etcdctl-1"]);
    let (key, value) = first.next_pair(SOON).expect("etcdctl leads an empty election");
    assert!(key.starts_with(&format!("{prefix}/")) && value == "etcdctl-1", "{key:?} {value:?}");
    let leader = election.leader().unwrap().expect("etcdctl leads");
    assert_eq!(leader.value, b"etcdctl-1");
    assert!(election.clone().with_value("distlock-1").try_campaign().unwrap().is_none());
    let (won, winner) = mpsc::channel();
    let (step, steps) = mpsc::channel::<&str>();
    let candidate = {
        let election = election.clone().with_value("distlock-1");
        thread::spawn(move || {
            let leadership = election.campaign().unwrap();
            won.send((Instant::now(), leadership.fencing_token())).unwrap();
            // Proclaims what the test says, until told to resign.
            while let Ok(value) = steps.recv() {
                match value {
                    "resign" => break,
                    value => leadership.proclaim(value).unwrap(),
                }
            }
            leadership.resign().unwrap();
        })
    };
    assert!(winner.recv_timeout(Duration::from_millis(500)).is_err(), "two leaders");

    // etcdctl resigns (on SIGINT): the distlock candidate leads at once, and etcdctl's observer
    // sees its key and value, then what it proclaims.
    let resigned_at = Instant::now();
    first.interrupt();
    let (won_at, token) = winner.recv_timeout(SOON).expect("the distlock candidate leads");
    assert!(won_at.duration_since(resigned_at) < SOON);
    let distlock_key = format!("{prefix}/{:x}", distlock.backend().lease_id());
    assert_eq!(observer.sees("distlock-1", SOON), distlock_key);
    step.send("distlock-2").unwrap();
    assert_eq!(observer.sees("distlock-2", SOON), distlock_key);
    let leader = election.leader().unwrap().expect("distlock leads");
    assert_eq!((leader.value.as_slice(), leader.token), (&b"distlock-2"[..], token));

    // etcdctl waits while distlock leads, and leads once it resigns.
    let mut second = Etcdctl::spawn(&["elect", &prefix, "etcdctl-2"]);
    assert_eq!(second.next_pair(Duration::from_millis(700)), None, "etcdctl led beside distlock");
    step.send("resign").unwrap();
    candidate.join().unwrap();
    let (key, value) = second.next_pair(SOON).expect("etcdctl leads after distlock resigned");
    assert!(key.starts_with(&format!("{prefix}/")) && key != distlock_key && value == "etcdctl-2", "{key}");
    assert_eq!(observer.sees("etcdctl-2", SOON), key);
    let leader = election.leader().unwrap().expect("etcdctl leads");
    assert_eq!(leader.value, b"etcdctl-2");
    assert!(leader.token > token, "{:?} after {token:?}", leader.token);
    second.interrupt();
    assert_eq!(election.leader().unwrap(), None);
    drop(observer);
}
