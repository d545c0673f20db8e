//! Leader election on every kind of both databases: one leader among threads; followers read
//! the leader's value and token (the leadership's own); a proclaim shows; a leader deposed
//! behind its back (its row freed, its session killed) cannot proclaim and its value is never
//! shown for the next leader; an election never contends with the mutex of its name; a
//! resignation hands over to a waiting campaign at once; on PostgreSQL a follower's watch wakes
//! on a proclaim and a resignation well before its re-check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Elections, Error, Leader, LockClient, LockName, LockOptions};
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_sql::testkit::{SqlKind, SqlTarget};
use lock_testkit::suite::{unique_name, SuiteTarget};

/// Long, so that every change seen comes from a notice or a release, not an expiry.
const LEASE: Duration = Duration::from_secs(30);
/// How long a step that should be prompt may take (the lease is 30 s, the re-check 1 s).
const PROMPT: Duration = Duration::from_millis(900);

/// The backends' own ways to depose a leader.
trait Deposable: Elections + Clone {
    fn break_leadership(&self, name: &LockName) -> lock_core::Result<()>;
}

impl Deposable for PostgresBackend {
    fn break_leadership(&self, name: &LockName) -> lock_core::Result<()> {
        PostgresBackend::break_leadership(self, name)
    }
}

impl Deposable for MySqlBackend {
    fn break_leadership(&self, name: &LockName) -> lock_core::Result<()> {
        MySqlBackend::break_leadership(self, name)
    }
}

fn backend<K: SqlKind>(kind: K) -> K::Backend {
    SqlTarget::new(kind).without_restart_delay().backend().unwrap()
}

fn client<B: Deposable>(backend: &B) -> LockClient<B> {
    LockClient::with_options(backend.clone(), LockOptions::builder().lease(LEASE).build().unwrap())
}

/// Polls `check` until it holds or 10 s pass (the state under test has no notice of its own).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn one_leader_among_threads<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let name = unique_name("one-leader");
    let (leading, most, terms) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), 12);
    let won = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (client, name) = (client(&backend), name.as_str());
            let (leading, most, won) = (leading.clone(), most.clone(), won.clone());
            scope.spawn(move || {
                let election = client.election(name).unwrap();
                while won.load(Ordering::SeqCst) < terms {
                    let Some(leadership) = election.campaign_for(Duration::from_secs(20)).unwrap() else {
                        continue;
                    };
                    let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    won.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    leading.fetch_sub(1, Ordering::SeqCst);
                    leadership.resign().unwrap();
                }
            });
        }
    });
    assert_eq!(most.load(Ordering::SeqCst), 1, "{}: two leaders at once", kind.label());
}

fn followers_see_the_leader<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let client = client(&backend);
    let name = unique_name("followers");
    let election = client.election(name.as_str()).unwrap().with_value("host-1:7000");
    assert_eq!(election.leader().unwrap(), None, "{}: a leader before any campaign", kind.label());
    let leadership = election.try_campaign().unwrap().expect("nobody leads");
    let token = leadership.fencing_token();
    assert!(token.is_some(), "{}: no token", kind.label());
    assert_eq!(election.leader().unwrap(), Some(Leader::new("host-1:7000", token)), "{}", kind.label());
    leadership.proclaim("host-1:7001").unwrap();
    // Read by another client, as a follower would.
    let follower = client_of(&backend).election(name.as_str()).unwrap();
    assert_eq!(follower.leader().unwrap(), Some(Leader::new("host-1:7001", token)), "{}", kind.label());
    leadership.resign().unwrap();
    eventually("the leader gone after its resignation", || follower.leader().unwrap().is_none());
}

fn client_of<B: Deposable>(backend: &B) -> LockClient<B> {
    client(backend)
}

fn a_deposed_leader_cannot_proclaim<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let name = unique_name("deposed");
    let old = client(&backend).election(name.as_str()).unwrap().with_value("old");
    let deposed = old.try_campaign().unwrap().expect("nobody leads");
    backend.break_leadership(&LockName::new(name.as_str()).unwrap()).unwrap();
    eventually("the deposed leader gone", || old.leader().unwrap().is_none());
    let refused = deposed.proclaim("stale");
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{}: {refused:?}", kind.label());

    let rival = client(&backend).election(name.as_str()).unwrap().with_value("new");
    let next = rival.campaign_for(Duration::from_secs(10)).unwrap().expect("the election is free");
    // From the win on, the deposed leader's value is never shown.
    for _ in 0..20 {
        let seen = rival.leader().unwrap().expect("a leader");
        assert_ne!(seen.value, b"old", "{}", kind.label());
        assert_ne!(seen.value, b"stale", "{}", kind.label());
        assert!(seen.token >= next.fencing_token(), "{}: {seen:?}", kind.label());
    }
    assert_eq!(rival.leader().unwrap(), Some(Leader::new("new", next.fencing_token())), "{}", kind.label());
    let refused = deposed.proclaim("stale");
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{}: {refused:?}", kind.label());
    assert_eq!(rival.leader().unwrap().unwrap().value, b"new", "{}", kind.label());
    drop(deposed);
    next.resign().unwrap();
}

fn election_and_mutex_do_not_contend<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let (one, other) = (client(&backend), client(&backend));
    let name = unique_name("no-contention");
    let guard = one.lock_named(name.as_str()).unwrap().try_lock().unwrap().expect("the mutex is free");
    let leadership = other.election(name.as_str()).unwrap().try_campaign().unwrap();
    assert!(leadership.is_some(), "{}: the election waited for the mutex", kind.label());
    let again = one.lock_named(name.as_str()).unwrap();
    drop(guard);
    let guard = again.try_lock().unwrap();
    assert!(guard.is_some(), "{}: the mutex waited for the election", kind.label());
}

fn resigning_hands_over_promptly<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let name = unique_name("hand-over");
    let first = client(&backend).election(name.as_str()).unwrap().with_value("first");
    let leadership = first.try_campaign().unwrap().expect("nobody leads");
    let second = client(&backend).election(name.as_str()).unwrap().with_value("second");
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let won = second.campaign().unwrap();
            let won_at = Instant::now();
            let seen = second.leader().unwrap();
            let token = won.fencing_token();
            won.resign().unwrap();
            (won_at, seen, token)
        });
        // The rival's wait has no outside sign: give it time to queue.
        std::thread::sleep(Duration::from_millis(300));
        assert!(!waiting.is_finished(), "{}: won while the leader led", kind.label());
        let resigned = Instant::now();
        leadership.resign().unwrap();
        let (won_at, seen, token) = waiting.join().unwrap();
        let took = won_at.duration_since(resigned);
        assert!(took < PROMPT, "{}: handed over after {took:?}", kind.label());
        assert_eq!(seen, Some(Leader::new("second", token)), "{}", kind.label());
    });
}

fn run<K: SqlKind>(kinds: &[K], test: fn(K))
where
    K::Backend: Deposable,
{
    for &kind in kinds {
        test(kind);
    }
}

const PG: [PostgresLockKind; 3] =
    [PostgresLockKind::Table, PostgresLockKind::Row, PostgresLockKind::Advisory];
const MY: [MySqlLockKind; 3] = [MySqlLockKind::Table, MySqlLockKind::Row, MySqlLockKind::Advisory];

#[test]
fn postgres_one_leader_among_threads() {
    run(&PG, one_leader_among_threads);
}

#[test]
fn mysql_one_leader_among_threads() {
    run(&MY, one_leader_among_threads);
}

#[test]
fn postgres_followers_see_the_leader_and_its_proclaims() {
    run(&PG, followers_see_the_leader);
}

#[test]
fn mysql_followers_see_the_leader_and_its_proclaims() {
    run(&MY, followers_see_the_leader);
}

#[test]
fn postgres_a_deposed_leader_cannot_proclaim() {
    run(&PG, a_deposed_leader_cannot_proclaim);
}

#[test]
fn mysql_a_deposed_leader_cannot_proclaim() {
    run(&MY, a_deposed_leader_cannot_proclaim);
}

#[test]
fn postgres_election_and_mutex_do_not_contend() {
    run(&PG, election_and_mutex_do_not_contend);
}

#[test]
fn mysql_election_and_mutex_do_not_contend() {
    run(&MY, election_and_mutex_do_not_contend);
}

#[test]
fn postgres_resigning_hands_over_promptly() {
    run(&PG, resigning_hands_over_promptly);
}

#[test]
fn mysql_resigning_hands_over_promptly() {
    run(&MY, resigning_hands_over_promptly);
}

/// PostgreSQL's watch is armed when made and wakes on a proclaim and on a resignation, well
/// before the 1 s re-check of a 30 s lease.
#[test]
fn postgres_watches_wake_on_proclaim_and_resignation() {
    for kind in PG {
        let backend = backend(kind);
        let client = client(&backend);
        let name = unique_name("watch");
        let lock_name = LockName::new(name.as_str()).unwrap();
        let election = client.election(name.as_str()).unwrap().with_value("a");
        let leadership = election.try_campaign().unwrap().expect("nobody leads");
        let mut watch = backend.watch_leader(&lock_name).unwrap();
        let told = Instant::now();
        leadership.proclaim("b").unwrap();
        assert!(watch.wait(told + Duration::from_secs(5)).unwrap(), "{}: no notice", kind.label());
        assert!(told.elapsed() < Duration::from_millis(500), "{}: {:?}", kind.label(), told.elapsed());
        assert_eq!(election.leader().unwrap().unwrap().value, b"b");

        let mut observer = election.observe().unwrap();
        let told = Instant::now();
        leadership.resign().unwrap();
        assert!(watch.wait(told + Duration::from_secs(5)).unwrap(), "{}: no notice", kind.label());
        assert_eq!(observer.changed(Duration::from_secs(5)).unwrap(), Some(None), "{}", kind.label());
        assert!(told.elapsed() < Duration::from_millis(500), "{}: {:?}", kind.label(), told.elapsed());
    }
}

/// A leadership is renewed like a lock's hold: it outlives several leases, stays the leader
/// followers see, and keeps rivals out.
fn a_leadership_is_renewed<K: SqlKind>(kind: K)
where
    K::Backend: Deposable,
{
    let backend = backend(kind);
    let short = LockOptions::builder().lease(Duration::from_secs(1)).build().unwrap();
    let client = LockClient::with_options(backend.clone(), short);
    let name = unique_name("renewed");
    let election = client.election(name.as_str()).unwrap().with_value("renewed");
    let leadership = election.try_campaign().unwrap().expect("nobody leads");
    let rival = client_of(&backend).election(name.as_str()).unwrap();
    let until = Instant::now() + Duration::from_millis(3_500);
    while Instant::now() < until {
        assert!(leadership.is_leader(), "{}: the leadership lapsed ({:?})", kind.label(), leadership.state());
        assert!(rival.try_campaign().unwrap().is_none(), "{}: a rival won", kind.label());
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = election.leader().unwrap().expect("a leader");
    assert_eq!((seen.value.as_slice(), seen.token), (&b"renewed"[..], leadership.fencing_token()));
    leadership.resign().unwrap();
}

#[test]
fn postgres_a_leadership_is_renewed() {
    run(&PG, a_leadership_is_renewed);
}

#[test]
fn mysql_a_leadership_is_renewed() {
    run(&MY, a_leadership_is_renewed);
}
