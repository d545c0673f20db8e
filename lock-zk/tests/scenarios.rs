//! The ZooKeeper scenarios of `docs/scenarios.md` (Z01, Z02; their bodies ship in the crate's
//! testkit, which `distlock compare` runs too) and the backend's own checks on real harness
//! servers: names, bad input, leases, fencing tokens.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, LockClient, LockName, LockOptions, OwnerToken};
use lock_testkit::harness::{free_port, ZooKeeperServer};
use lock_testkit::run_backend_scenario;
use lock_testkit::suite::{unique_name, SuiteTarget};
use lock_zk::testkit::{scenarios, ZooKeeperTarget};
use lock_zk::ZooKeeperBackend;

#[test]
fn z01_one_release_wakes_one_waiter_in_arrival_order() {
    run_backend_scenario(scenarios(), "Z01");
}

#[test]
fn z02_session_expiry_and_ensemble_member_loss() {
    run_backend_scenario(scenarios(), "Z02");
}

fn client(backend: ZooKeeperBackend) -> LockClient<ZooKeeperBackend> {
    LockClient::with_options(backend, LockOptions::builder().lease(Duration::from_secs(30)).build().unwrap())
}

#[test]
fn awkward_names_are_distinct_locks() {
    let target = ZooKeeperTarget::new();
    let client = client(target.backend().unwrap());
    let prefix = unique_name("names");
    let names = [
        format!("{prefix}/a/b"),
        format!("{prefix}%2Fa%2Fb"),
        "..".to_owned(),
        ".".to_owned(),
        "zookeeper".to_owned(),
        "x".repeat(LockName::MAX_LEN),
        format!("{prefix}\u{e000}\u{fff0}🔒锁"),
    ];
    let guards: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = client.lock_named(name).unwrap();
            lock.try_lock().unwrap().unwrap_or_else(|| panic!("{name:?} was held by another name"))
        })
        .collect();
    for guard in guards {
        guard.unlock().unwrap();
    }
}

/// A closed port, a server that never answers, and bad settings: typed errors within the
/// configured timeouts, never a hang or a panic.
#[test]
fn unreachable_servers_and_bad_settings_are_typed_errors() {
    let timeout = Duration::from_secs(1);
    let closed = format!("127.0.0.1:{}", free_port().unwrap());
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = silent.local_addr().unwrap().to_string();
    for (what, connect_string) in [("closed port", closed), ("silent server", silent)] {
        let started = Instant::now();
        let built = ZooKeeperBackend::builder(connect_string).connect_timeout(timeout).build();
        assert!(
            matches!(built, Err(Error::Connection { .. } | Error::Timeout { .. })),
            "{what}: {:?}",
            built.map(drop)
        );
        assert!(
            started.elapsed() < timeout + Duration::from_millis(500),
            "{what} took {:?}",
            started.elapsed()
        );
    }
    for root in ["relative", "/", "/zookeeper", "/a/../b"] {
        let built = ZooKeeperBackend::builder("127.0.0.1:1").namespace(root).build();
        assert!(matches!(built, Err(Error::InvalidConfig { .. })), "root {root:?}");
    }
    let backend = ZooKeeperTarget::new().backend().unwrap();
    let name = unique_name("bad-lease");
    let zero = backend.try_acquire(&name, &OwnerToken::random(), Duration::ZERO);
    assert!(matches!(zero, Err(Error::InvalidConfig { .. })));
}

/// A hold is believed for at most the negotiated session timeout after its last check, less the
/// clock-drift margin of that timeout, whatever the lease: the servers may expire the session one
/// timeout (by their clock) after the check reached them.
#[test]
fn the_session_timeout_caps_the_lease_a_holder_counts_on() {
    let target = ZooKeeperTarget::new();
    let backend = target.backend().unwrap();
    let session = backend.session_timeout();
    assert_eq!(backend.lease_margin(Duration::from_secs(30)), Duration::from_secs(30) - session);
    assert_eq!(backend.lease_margin(session), Duration::ZERO);
    assert_eq!(backend.lease_margin(session / 2), Duration::ZERO);

    // The user's clock drift is taken off the session timeout: with a 2 s session and a 30 s
    // lease, a hold unconfirmed since its acquisition counts for 2 s − 10 % − 2 ms = 1,798 ms
    // with `clock_drift(0.1)`, and 1,978 ms with the default 1 %.
    let backend = target.builder().session_timeout(Duration::from_secs(2)).build().unwrap();
    assert_eq!(backend.session_timeout(), Duration::from_secs(2));
    let guard_with = |drift: Option<f64>| {
        let mut options = LockOptions::builder().lease(Duration::from_secs(30)).renewal(false);
        if let Some(drift) = drift {
            options = options.clock_drift(drift);
        }
        let client = LockClient::with_options(backend.clone(), options.build().unwrap());
        client.lock_named(unique_name("drift").as_str()).unwrap().try_lock().unwrap().unwrap()
    };
    let (drifting, default) = (guard_with(Some(0.1)), guard_with(None));
    let acquired = Instant::now();
    thread::sleep(Duration::from_millis(1_850).saturating_sub(acquired.elapsed()));
    assert!(!drifting.is_held(), "clock_drift(0.1) was not taken off the session timeout");
    assert!(
        default.is_held() || acquired.elapsed() >= Duration::from_millis(1_950),
        "the default drift cut the hold short"
    );
}

/// The servers negotiate the session timeout into their `minSessionTimeout..=maxSessionTimeout`
/// (the harness: 2 ticks of 200 ms, and 60 s); the holder counts on the negotiated one, not the
/// one asked for nor the lease.
#[test]
fn the_negotiated_session_timeout_is_the_one_a_holder_counts_on() {
    let target = ZooKeeperTarget::new();
    let asked = Duration::from_millis(100);
    let backend = target.builder().session_timeout(asked).build().unwrap();
    let negotiated = backend.session_timeout();
    assert_eq!(negotiated, Duration::from_millis(400), "asked for {asked:?}");
    let lease = Duration::from_secs(3);
    let options = LockOptions::builder().lease(lease).renewal(false).build().unwrap();
    let client = LockClient::with_options(backend, options);
    let guard = client.lock_named(unique_name("negotiated").as_str()).unwrap().try_lock().unwrap().unwrap();
    let acquired = Instant::now();
    thread::sleep(Duration::from_millis(200));
    assert!(guard.is_held() || acquired.elapsed() >= negotiated, "lost before the negotiated timeout");
    thread::sleep(negotiated.saturating_sub(acquired.elapsed()));
    assert!(!guard.is_held(), "held past the negotiated session timeout, unconfirmed");
    drop(guard);

    let long = target.builder().session_timeout(Duration::from_secs(120)).build().unwrap();
    assert_eq!(long.session_timeout(), Duration::from_secs(60), "the servers' maxSessionTimeout");
    assert_eq!(long.lease_margin(Duration::from_secs(90)), Duration::from_secs(30));
}

/// The fencing token is the node's creation zxid: it grows across holders and across a new
/// client, and the lock node sits where Curator's `InterProcessMutex` puts it.
#[test]
fn tokens_are_creation_zxids_in_curator_layout() {
    let target = ZooKeeperTarget::new();
    let backend = target.backend().unwrap();
    let name = unique_name("fence");
    let owner = OwnerToken::random();
    let first = backend.try_acquire(&name, &owner, Duration::from_secs(10)).unwrap().unwrap();
    let node = first.node().to_owned();
    let prefix = format!("{}/{}/_c_", backend.namespace(), name.as_str());
    assert!(node.starts_with(&prefix), "{node}");
    let sequence = node.rsplit_once("-lock-").map(|(_, sequence)| sequence).unwrap();
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()), "{node}");
    let first_token = first.fencing_token();
    assert!(backend.release(first).unwrap());

    let other = target.backend().unwrap();
    let second = other.try_acquire(&name, &owner, Duration::from_secs(10)).unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
    assert!(other.release(second).unwrap());
}

/// `distlock bench`'s request floor times both kinds of pair on one session, and removes its
/// parent node (which fails while a node of it is left).
#[test]
fn the_request_floor_times_both_kinds_of_pair() {
    let backend = ZooKeeperTarget::new().backend().unwrap();
    let floor = backend.request_floor(20).unwrap();
    assert!(floor.write_pair > Duration::ZERO && floor.lock_requests_pair > Duration::ZERO, "{floor:?}");
    assert!(floor.ceiling() > 0.0, "{floor}");
}

/// Liveness costs per client, not per lock: 2,000 holds of one client at a 10 s session send
/// about two liveness batches (a `sync` each) per renew interval, not one request per hold.
#[test]
fn two_thousand_holds_cost_a_few_packets_a_second() {
    const HOLDS: usize = 2_000;
    let server = ZooKeeperServer::start().unwrap();
    let session = Duration::from_secs(10);
    let backend =
        ZooKeeperBackend::builder(server.connect_string()).session_timeout(session).build().unwrap();
    let client = LockClient::with_options(backend, LockOptions::builder().lease(session).build().unwrap());
    let interval = client.options().renew_interval();
    let prefix = unique_name("liveness-cost");
    let locks: Vec<_> = (0..HOLDS).map(|i| client.lock_named(&format!("{prefix}-{i}")).unwrap()).collect();
    let guards: Vec<_> = locks.iter().map(|lock| lock.try_lock().unwrap().expect("free")).collect();
    // One interval for the holds' schedules to fall into step, then two to count over.
    thread::sleep(interval);
    let received = || -> u64 {
        let stats = server.four_letter_word("mntr").unwrap();
        let line = stats.lines().find_map(|line| line.strip_prefix("zk_packets_received")).unwrap();
        line.trim().parse().unwrap()
    };
    let (before, started) = (received(), Instant::now());
    thread::sleep(interval * 2);
    let rate = (received() - before) as f64 / started.elapsed().as_secs_f64();
    println!("{HOLDS} holds, session {session:?}: {rate:.1} packets/s at the server");
    assert!(rate <= 20.0, "{rate:.1} packets/s for {HOLDS} holds of one client");
    assert!(guards.iter().all(|guard| guard.is_held()));
    drop(guards);
}
