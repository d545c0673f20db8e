//! Leader election (`Elections`) on a real server: one leader among rival threads, what
//! followers read (`leader`: value and token, none after a resign or an expiry), proclaims a
//! deposed leader cannot make, an election that never contends with the mutex of its name, and
//! followers and waiting candidates woken by the server's messages, well before any re-check.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{
    Deadline, DistributedLock, Election, Elections, Error, Leader, Lock, LockClient, LockName, LockOptions,
    OwnerToken, Request,
};
use lock_redis::redis::Commands as _;
use lock_redis::{RedisBackend, RedisLockKind};
use lock_testkit::eventually;
use lock_testkit::suite::unique_name;

use super::{backend, connection, shared_url, SECOND};

/// Far below the one-second re-check a 30 s lease gives followers (`leader_recheck`), and the
/// waiters' fallback re-check: a change seen this soon came from a message.
const PROMPT: Duration = Duration::from_millis(500);

/// A client with 30 s leases: followers re-check every second, so anything faster is a notice.
fn client(kind: RedisLockKind) -> LockClient<RedisBackend> {
    let options = LockOptions::builder().lease(30 * SECOND).build().unwrap();
    LockClient::with_options(backend(&shared_url(), kind), options)
}

/// A one-shot campaign of the trait, with a lease nobody renews.
fn campaign_once(
    redis: &RedisBackend,
    name: &LockName,
    ttl: Duration,
    value: &[u8],
) -> Option<lock_redis::RedisLease> {
    let owner = OwnerToken::random();
    let request = Request::new(name, &owner, ttl, Deadline::Now, (SECOND / 100, SECOND / 10));
    redis.campaign(&request, value).unwrap().map(|won| won.lease)
}

#[test]
fn one_leader_among_rival_threads_and_each_sees_its_own_value() {
    const CANDIDATES: usize = 6;
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let client = client(kind);
        let election = Election::new(&client, unique_name("rivals"));
        let leading = AtomicBool::new(false);
        let (wins, start) = (AtomicUsize::new(0), Barrier::new(CANDIDATES));
        thread::scope(|scope| {
            for candidate in 0..CANDIDATES {
                let (election, leading, wins, start) = (&election, &leading, &wins, &start);
                scope.spawn(move || {
                    let value = format!("candidate-{candidate}");
                    let election = election.clone().with_value(value.clone());
                    start.wait();
                    let leadership = election.campaign_for(30 * SECOND).unwrap().expect("elected in turn");
                    assert!(!leading.swap(true, Ordering::SeqCst), "{kind:?}: two leaders at once");
                    assert_eq!(election.leader().unwrap().expect("a leader").value, value.as_bytes());
                    leadership.proclaim(format!("{value}-again")).unwrap();
                    let leader = election.leader().unwrap().expect("a leader");
                    assert_eq!(leader.value, format!("{value}-again").as_bytes());
                    assert_eq!(leader.token, leadership.fencing_token());
                    thread::sleep(Duration::from_millis(20));
                    leading.store(false, Ordering::SeqCst);
                    wins.fetch_add(1, Ordering::SeqCst);
                    leadership.resign().unwrap();
                });
            }
        });
        assert_eq!(wins.load(Ordering::SeqCst), CANDIDATES, "{kind:?}");
        assert_eq!(election.leader().unwrap(), None, "{kind:?}: nobody leads after the last resign");
    }
}

#[test]
fn followers_read_nobody_then_the_value_and_token_then_nobody() {
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let client = client(kind);
        let election = client.election(unique_name("read").as_str()).unwrap().with_value("host-1:7000");
        assert_eq!(election.leader().unwrap(), None, "{kind:?}");

        let first = election.try_campaign().unwrap().expect("nobody leads");
        let token = first.fencing_token();
        assert!(token.is_some());
        assert_eq!(election.leader().unwrap(), Some(Leader::new("host-1:7000", token)), "{kind:?}");
        first.proclaim("host-1:7001").unwrap();
        assert_eq!(election.leader().unwrap(), Some(Leader::new("host-1:7001", token)), "{kind:?}");
        // A guarded write under the leadership, on the election's own lock.
        first.with_lease(|redis, lease| redis.set_if_held(lease, "epoch", b"1")).unwrap();

        // A rival's one-shot campaign is refused and leaves no place in the queue behind.
        let rival = election.clone().with_value("host-2:7000");
        let refused =
            thread::scope(|scope| scope.spawn(|| rival.try_campaign().unwrap().is_none()).join().unwrap());
        assert!(refused, "{kind:?}");
        let queue = client.backend().keys(election.name()).election().queue().to_owned();
        assert!(
            !connection(&shared_url()).exists::<_, bool>(queue).unwrap(),
            "{kind:?}: a try joined the queue"
        );

        first.resign().unwrap();
        assert_eq!(election.leader().unwrap(), None, "{kind:?}");
        let second = rival.try_campaign().unwrap().expect("free after the resign");
        let leader = election.leader().unwrap().expect("the second leader");
        assert_eq!(leader.value, b"host-2:7000", "{kind:?}: the first leader's value is not the second's");
        assert!(leader.token > token, "{kind:?}: tokens increase with every term");
        second.resign().unwrap();
    }
}

#[test]
fn a_deposed_leader_cannot_proclaim_or_overwrite_its_successor() {
    let url = shared_url();
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let redis = backend(&url, kind);
        let name = unique_name("deposed");
        let mut old = campaign_once(&redis, &name, 30 * SECOND, b"old").expect("free");
        // Taken away behind the leader's back (an expiry, an operator's DEL).
        let _: () = connection(&url).del(redis.keys(&name).election().lock()).unwrap();
        assert!(matches!(redis.proclaim(&mut old, b"stale"), Err(Error::NotHeld { .. })), "{kind:?}");
        assert_eq!(redis.leader(&name).unwrap(), None, "{kind:?}");

        let mut new = campaign_once(&redis, &name, 30 * SECOND, b"new").expect("free again");
        assert!(matches!(redis.proclaim(&mut old, b"stale"), Err(Error::NotHeld { .. })), "{kind:?}");
        redis.proclaim(&mut new, b"newer").unwrap();
        let leader = redis.leader(&name).unwrap().expect("the new leader");
        assert_eq!(leader, Leader::new("newer", Some(new.fencing_token())), "{kind:?}");
        assert!(!redis.release(old).unwrap(), "{kind:?}: the old lease releases nothing");
        assert!(redis.release(new).unwrap());
    }
}

#[test]
fn an_election_and_the_lock_of_its_name_do_not_contend() {
    let client = client(RedisLockKind::SetNx);
    let name = unique_name("same-name");
    let lock = Lock::new(&client, name.clone());
    let election = Election::new(&client, name.clone()).with_value("leader");
    thread::scope(|scope| {
        scope
            .spawn(|| {
                let guard = lock.try_lock().unwrap().expect("the mutex is free");
                let leadership = election.try_campaign().unwrap().expect("the election is free too");
                assert!(guard.is_held() && leadership.is_leader());
                assert_eq!(election.leader().unwrap().expect("a leader").value, b"leader");
                leadership.resign().unwrap();
                assert!(guard.is_held(), "a resign leaves the mutex alone");
                guard.unlock().unwrap();
            })
            .join()
            .unwrap();
    });
    // The mutex's holder is no leader: its lock is another key.
    let _guard = lock.try_lock().unwrap().expect("free");
    assert_eq!(election.leader().unwrap(), None);
}

#[test]
fn observers_are_woken_by_proclaims_and_resigns_well_before_the_recheck() {
    let client = client(RedisLockKind::SetNx);
    let election = client.election(unique_name("observed").as_str()).unwrap().with_value("a");
    let leadership = election.try_campaign().unwrap().expect("free");
    let mut observer = election.observe().unwrap();
    assert_eq!(observer.current().map(|leader| leader.value.as_slice()), Some(b"a".as_slice()));

    let proclaimed = Instant::now();
    leadership.proclaim("b").unwrap();
    let change = observer.changed(5 * SECOND).unwrap().expect("a change");
    assert_eq!(change.map(|leader| leader.value), Some(b"b".to_vec()));
    assert!(proclaimed.elapsed() < PROMPT, "the proclaim was seen after {:?}", proclaimed.elapsed());

    // A fair client's resign with nobody queued still tells the election's watchers.
    let resigned = Instant::now();
    leadership.resign().unwrap();
    assert_eq!(observer.changed(5 * SECOND).unwrap(), Some(None));
    assert!(resigned.elapsed() < PROMPT, "the resign was seen after {:?}", resigned.elapsed());

    // The watch itself says a message woke it, not its deadline.
    let redis = client.backend();
    let mut watch = redis.watch_leader(election.name()).unwrap();
    let until = Instant::now() + 5 * SECOND;
    let won = thread::scope(|scope| {
        let winner = scope.spawn(|| {
            campaign_once(redis, election.name(), 30 * SECOND, b"c").expect("free");
        });
        let woken = watch.wait(until).unwrap();
        winner.join().unwrap();
        woken
    });
    assert!(won, "a win wakes the watch with a message");
    assert!(Instant::now() < until - 4 * SECOND, "the win was announced late");
}

#[test]
fn a_resign_hands_over_to_a_waiting_campaign_promptly() {
    for fair in [true, false] {
        let options = LockOptions::builder().lease(30 * SECOND).build().unwrap();
        let redis = RedisBackend::builder(shared_url()).fair(fair).build().unwrap();
        let client = LockClient::with_options(redis, options);
        let election = client.election(unique_name("handover").as_str()).unwrap();
        let first = election.clone().with_value("first").try_campaign().unwrap().expect("free");
        let keys = client.backend().keys(election.name()).election();
        let mut raw = connection(&shared_url());
        thread::scope(|scope| {
            // Leaderships stay on the thread that won them: the candidate checks and resigns.
            let waiting = scope.spawn(|| {
                let second = election.clone().with_value("second").campaign_for(10 * SECOND).unwrap();
                let won_at = Instant::now();
                let second = second.expect("elected after the resign");
                let leader = election.leader().unwrap().expect("the second leader");
                assert_eq!(
                    (leader.value.as_slice(), leader.token),
                    (b"second".as_slice(), second.fencing_token())
                );
                second.resign().unwrap();
                won_at
            });
            // The candidate waits, as the server shows: queued (fair) or subscribed (non-fair).
            assert!(eventually(5 * SECOND, || if fair {
                raw.exists::<_, bool>(keys.queue()).unwrap()
            } else {
                subscribers(&mut raw, keys.channel()) > 0
            }));
            let resigned_at = Instant::now();
            first.resign().unwrap();
            let won_at = waiting.join().unwrap();
            assert!(
                won_at - resigned_at < PROMPT,
                "fair {fair}: handed over after {:?}",
                won_at - resigned_at
            );
        });
    }
}

/// `PUBSUB NUMSUB <channel>`: how many connections subscribe to it.
fn subscribers(raw: &mut lock_redis::redis::Connection, channel: &str) -> i64 {
    let counts: Vec<(String, i64)> =
        lock_redis::redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(raw).unwrap();
    counts.first().map_or(0, |(_, count)| *count)
}

#[test]
fn nobody_leads_once_the_leaders_lease_runs_out_unreleased() {
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let redis = backend(&shared_url(), kind);
        let name = unique_name("expired");
        let crashed = campaign_once(&redis, &name, Duration::from_millis(300), b"gone").expect("free");
        assert_eq!(redis.leader(&name).unwrap().map(|leader| leader.value), Some(b"gone".to_vec()));
        assert!(eventually(5 * SECOND, || redis.leader(&name).unwrap().is_none()), "{kind:?}");
        // The record stays, but is never the next leader's.
        let next = campaign_once(&redis, &name, 30 * SECOND, b"next").expect("free after the expiry");
        assert_eq!(redis.leader(&name).unwrap().map(|leader| leader.value), Some(b"next".to_vec()));
        drop(crashed);
        assert!(redis.release(next).unwrap());
    }
}

#[test]
fn the_profile_describes_elections() {
    let redis = backend(&shared_url(), RedisLockKind::SetNx);
    assert!(redis.elections().is_some());
    assert_ne!(redis.profile().elections, "none");
}
