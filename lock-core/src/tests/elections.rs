//! Elections over the memory backend: one leader, values and tokens as followers see them,
//! hand-over on resign, loss when the lease runs out, observers woken by changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use super::{name, options, MS};
use crate::{Error, HoldState, LockClient, MemoryBackend};

#[test]
fn one_leader_among_threads_and_resign_hands_over() {
    let backend = MemoryBackend::new();
    let election = name("one-leader");
    let leaders = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let client = LockClient::with_options(backend.clone(), options(10_000, true));
            let (election, leaders, terms, start) =
                (election.clone(), Arc::clone(&leaders), Arc::clone(&terms), Arc::clone(&start));
            thread::spawn(move || {
                let election = client.election(&election).unwrap().with_value(format!("candidate-{i}"));
                start.wait();
                for _ in 0..5 {
                    let leadership = election.campaign().unwrap();
                    assert_eq!(leaders.fetch_add(1, Ordering::SeqCst), 0, "two leaders at once");
                    assert!(leadership.is_leader());
                    let seen = election.leader().unwrap().expect("a leader is seen");
                    assert_eq!(seen.value, format!("candidate-{i}").into_bytes());
                    assert_eq!(seen.token, leadership.fencing_token());
                    thread::sleep(MS);
                    leaders.fetch_sub(1, Ordering::SeqCst);
                    terms.fetch_add(1, Ordering::SeqCst);
                    leadership.resign().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(terms.load(Ordering::SeqCst), 20);
}

#[test]
fn proclaim_is_seen_and_a_deposed_leader_cannot_overwrite_its_successor() {
    let backend = MemoryBackend::new();
    let client = LockClient::with_options(backend.clone(), options(100, false));
    let election = client.election(&name("proclaim")).unwrap().with_value("first");
    assert_eq!(election.leader().unwrap(), None);
    let old = election.campaign().unwrap();
    old.proclaim("second").unwrap();
    assert_eq!(election.leader().unwrap().unwrap().value, b"second");
    // The lease runs out (renewal off): the leader is told, and nobody leads.
    assert!(old.lost_signal().wait_timeout(Duration::from_secs(5)));
    assert!(!old.is_leader());
    assert_eq!(old.state(), HoldState::Lost);
    // Told a drift margin before the server drops the lease; followers see nobody after that.
    let deadline = Instant::now() + Duration::from_secs(5);
    while election.leader().unwrap().is_some() {
        assert!(Instant::now() < deadline, "the server never dropped the leader");
        thread::sleep(MS);
    }
    let rival = LockClient::with_options(backend, options(10_000, true));
    let successor =
        rival.election(election.name().as_str()).unwrap().with_value("successor").try_campaign().unwrap();
    let successor = successor.expect("the old lease ran out");
    assert!(successor.fencing_token() > old.fencing_token());
    assert!(matches!(old.proclaim("stale"), Err(Error::NotHeld { .. })));
    let seen = election.leader().unwrap().unwrap();
    assert_eq!((seen.value.as_slice(), seen.token), (&b"successor"[..], successor.fencing_token()));
}

#[test]
fn an_election_is_not_the_mutex_of_its_name_and_a_leading_thread_does_not_reenter() {
    let client = LockClient::new(MemoryBackend::new());
    let name = name("separate");
    let _mutex = client.lock_named(&name).unwrap().lock().unwrap();
    let election = client.election(&name).unwrap();
    let leadership = election.try_campaign().unwrap().expect("the mutex does not contend");
    assert!(election.try_campaign().unwrap().is_none(), "a leadership is never re-entered");
    assert!(matches!(election.campaign_for(MS * 10), Err(Error::WouldDeadlock { .. })));
    leadership.resign().unwrap();
}

#[test]
fn observers_are_woken_by_wins_proclaims_and_resignations() {
    let backend = MemoryBackend::new();
    let follower = LockClient::with_options(backend.clone(), options(30_000, true));
    let leader = LockClient::with_options(backend, options(30_000, true));
    let name = name("observe");
    let watched = follower.election(&name).unwrap();
    let mut observer = watched.observe().unwrap();
    assert_eq!(observer.current(), None);
    let start = Instant::now();
    let campaign = thread::spawn(move || {
        let election = leader.election(&name).unwrap().with_value("a");
        let leadership = election.campaign().unwrap();
        thread::sleep(MS * 20);
        leadership.proclaim("b").unwrap();
        thread::sleep(MS * 20);
        leadership.resign().unwrap();
    });
    let mut values = Vec::new();
    while values.len() < 3 {
        let change = observer.changed(Duration::from_secs(5)).unwrap().expect("a change within 5 s");
        values.push(change.map(|leader| leader.value));
    }
    campaign.join().unwrap();
    assert_eq!(values, [Some(b"a".to_vec()), Some(b"b".to_vec()), None]);
    // Each change was a wake-up, not the one-second re-check of a 30 s lease.
    assert!(start.elapsed() < Duration::from_millis(900), "{:?}", start.elapsed());
}
