//! ZooKeeper: a standalone server and an ensemble.

use super::*;

#[test]
fn zookeeper_answers_restarts_and_is_gone_after_drop() {
    let server = ZooKeeperServer::start().expect("start ZooKeeper");
    let port = server.port();
    assert_eq!(server.mode(), Some(ZooKeeperMode::Standalone));

    let runtime = current_thread_runtime();
    runtime.block_on(async {
        let client = zk::Client::connect(&server.connect_string()).await.unwrap();
        let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/harness", b"hello", &create).await.unwrap();
        let (data, _) = client.get_data("/harness").await.unwrap();
        assert_eq!(data, b"hello");
    });

    let pid = server.process().pid().expect("running");
    server.process().kill9().unwrap();
    assert_reaped(pid);
    assert_gone(&[pid], port);
    server.process().restart().expect("restart ZooKeeper");
    // ZooKeeper writes its transaction log before answering, so the node survived.
    runtime.block_on(async {
        let client = zk::Client::connect(&server.connect_string()).await.unwrap();
        let (data, _) = client.get_data("/harness").await.unwrap();
        assert_eq!(data, b"hello");
    });

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

#[test]
fn zookeeper_ensemble_elects_a_new_leader_when_the_leader_dies() {
    let ensemble = ZooKeeperEnsemble::start(3).expect("start a 3-node ensemble");
    let leader = ensemble.leader().expect("a leader right after start");
    let followers =
        ensemble.nodes().iter().filter(|node| node.mode() == Some(ZooKeeperMode::Follower)).count();
    assert_eq!(followers, 2);

    let runtime = current_thread_runtime();
    let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    runtime.block_on(async {
        let client = zk::Client::connect(&ensemble.connect_string()).await.unwrap();
        client.create("/survives", b"quorum", &create).await.unwrap();
    });

    let old_leader = &ensemble.nodes()[leader];
    old_leader.process().kill9().unwrap();
    let new_leader = ensemble.wait_for_leader(Duration::from_secs(30)).expect("a new leader");
    assert_ne!(new_leader, leader);
    runtime.block_on(async {
        let client = zk::Client::connect(&ensemble.connect_string()).await.unwrap();
        let (data, _) = client.get_data("/survives").await.unwrap();
        assert_eq!(data, b"quorum");
    });

    // The old leader rejoins on its old ports, as a follower of the new one.
    old_leader.process().restart().expect("restart the old leader");
    let deadline = Instant::now() + Duration::from_secs(30);
    while old_leader.mode() != Some(ZooKeeperMode::Follower) {
        assert!(Instant::now() < deadline, "the old leader never rejoined");
        thread::sleep(Duration::from_millis(50));
    }

    let nodes: Vec<(u32, u16)> =
        ensemble.nodes().iter().map(|node| (node.process().pid().expect("running"), node.port())).collect();
    drop(ensemble);
    for (pid, port) in nodes {
        assert_reaped(pid);
        assert_gone(&[pid], port);
    }
}
