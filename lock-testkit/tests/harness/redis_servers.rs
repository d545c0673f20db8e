//! Redis: single nodes, replicas, Cluster and Sentinel groups.

use super::*;

#[test]
fn redis_answers_rejects_wrong_passwords_and_is_gone_after_drop() {
    let server =
        RedisServer::start_with(RedisOptions::new().password("s3cret:/@")).expect("start redis-server");
    let port = server.port();

    let mut connection = redis_connection(&server.url());
    let () = connection.set("greeting", "hello").unwrap();
    let value: Option<String> = connection.get("greeting").unwrap();
    assert_eq!(value.as_deref(), Some("hello"));

    let wrong = redis::Client::open(format!("redis://:wrong@127.0.0.1:{port}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .map(|_| ())
        .expect_err("a wrong password must be rejected");
    assert_eq!(wrong.kind(), redis::ErrorKind::AuthenticationFailed, "{wrong}");
    let mut anonymous = redis_connection(&format!("redis://127.0.0.1:{port}/"));
    let refused = anonymous.get::<_, Option<String>>("greeting").expect_err("no password must be rejected");
    assert!(refused.to_string().contains("NOAUTH"), "{refused}");

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

#[test]
fn redis_replica_copies_the_primary() {
    let primary = RedisServer::start().expect("start the primary");
    let replica = RedisServer::start_replica_of(&primary).expect("start the replica");
    assert_ne!(primary.port(), replica.port());

    let () = redis_connection(&primary.url()).set("copied", "yes").unwrap();
    let mut from_replica = redis_connection(&replica.url());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let value: Option<String> = from_replica.get("copied").unwrap();
        if value.as_deref() == Some("yes") {
            break;
        }
        assert!(Instant::now() < deadline, "the key never reached the replica");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redis_kill9_then_restart_answers_on_the_same_port_without_the_data() {
    let server = RedisServer::start().expect("start redis-server");
    let port = server.port();
    let () = redis_connection(&server.url()).set("doomed", "1").unwrap();
    let old_pid = server.process().pid().expect("running");

    server.process().kill9().unwrap();
    assert!(!server.process().is_running());
    assert_eq!(server.process().pid(), None);
    assert_reaped(old_pid);
    assert_gone(&[old_pid], port);
    assert!(server.process().pause().is_err(), "a dead server cannot be paused");

    server.process().restart().expect("restart redis-server");
    assert!(server.process().is_running());
    assert_ne!(server.process().pid(), Some(old_pid));
    assert_eq!(server.port(), port);
    let value: Option<String> = redis_connection(&server.url()).get("doomed").unwrap();
    assert_eq!(value, None, "nothing is persisted across a crash");
}

#[test]
fn redis_pause_stalls_reads_and_resume_recovers() {
    let server = RedisServer::start().expect("start redis-server");
    let mut connection = redis_connection(&server.url());
    connection.set_read_timeout(Some(Duration::from_millis(300))).unwrap();

    server.process().pause().unwrap();
    assert!(server.process().is_running(), "a paused server still runs");
    let stalled =
        connection.get::<_, Option<String>>("anything").expect_err("a paused server must not answer");
    assert!(stalled.is_timeout(), "{stalled}");

    server.process().resume().unwrap();
    // The stalled connection's late reply would be out of step; use a fresh one.
    let value: Option<String> = redis_connection(&server.url()).get("anything").unwrap();
    assert_eq!(value, None);
}

#[test]
fn redis_start_many_gives_independent_nodes() {
    let nodes = RedisServer::start_many(3).expect("start three nodes");
    let () = redis_connection(&nodes[0].url()).set("only-here", "1").unwrap();
    for node in &nodes[1..] {
        assert_ne!(node.port(), nodes[0].port());
        let value: Option<String> = redis_connection(&node.url()).get("only-here").unwrap();
        assert_eq!(value, None);
    }
}

/// Every process of a group and its port, to check after the drop that none is left.
fn pids_and_ports<'a>(
    servers: impl IntoIterator<Item = &'a lock_testkit::harness::ServerProcess>,
) -> Vec<(u32, u16)> {
    servers.into_iter().filter_map(|process| Some((process.pid()?, process.port()))).collect()
}

fn assert_all_gone(processes: Vec<(u32, u16)>) {
    for (pid, port) in processes {
        assert_reaped(pid);
        assert_gone(&[pid], port);
    }
}

/// The hash slot of `key`, as the node on `port` computes it.
fn key_slot(port: u16, key: &str) -> u16 {
    redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut redis_connection(&node_url(port))).unwrap()
}

fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

#[test]
fn redis_cluster_has_three_primaries_with_a_linked_replica_each_and_is_gone_after_drop() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let ports: Vec<u16> = cluster.nodes().iter().map(RedisServer::port).collect();
    let seeds: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
    assert_eq!(cluster.url(), format!("redis+cluster://{}/", seeds.join(",")));

    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    assert_eq!(primaries.iter().map(|primary| primary.slot_count()).sum::<usize>(), 16384);
    let mut roles: Vec<u16> = Vec::new();
    for primary in &primaries {
        assert!(primary.slot_count() > 0 && primary.id.len() == 40, "{primary:?}");
        assert_eq!(primary.replicas.len(), 1, "{primary:?}");
        let replica = cluster.replica_of(primary.port).unwrap();
        assert_eq!(replica, primary.replicas[0]);
        let info: String =
            redis::cmd("INFO").arg("replication").query(&mut redis_connection(&node_url(replica))).unwrap();
        assert!(info.contains(&format!("master_port:{}", primary.port)), "{info}");
        assert!(info.contains("master_link_status:up"), "{info}");
        roles.extend([primary.port, replica]);
        for slot in [primary.slots[0].start(), primary.slots[0].end()] {
            assert_eq!(cluster.primary_for_slot(*slot).unwrap(), primary.port);
        }
    }
    roles.sort_unstable();
    let mut sorted = ports.clone();
    sorted.sort_unstable();
    assert_eq!(roles, sorted, "every node is a primary or a replica");

    // A key is written on the primary of its slot; any other primary redirects.
    let slot = key_slot(ports[0], "greeting");
    let owner = cluster.primary_for_slot(slot).unwrap();
    let () = redis_connection(&node_url(owner)).set("greeting", "hello").unwrap();
    let other = primaries.iter().map(|primary| primary.port).find(|&port| port != owner).unwrap();
    let moved = redis_connection(&node_url(other)).get::<_, Option<String>>("greeting").unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    assert_eq!(moved.redirect_node(), Some((format!("127.0.0.1:{owner}").as_str(), slot)), "{moved}");

    let processes = pids_and_ports(cluster.nodes().iter().map(RedisServer::process));
    assert_eq!(processes.len(), 6);
    drop(cluster);
    assert_all_gone(processes);
}

#[test]
fn redis_cluster_migrate_slot_moves_its_keys_and_redirects_while_half_moved() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let any = cluster.nodes()[0].port();
    let keys = ["{moving}1", "{moving}2", "{moving}3", "{moving}4"];
    let slot = key_slot(any, keys[0]);
    let source = cluster.primary_for_slot(slot).unwrap();
    let target =
        cluster.primaries().unwrap().iter().map(|primary| primary.port).find(|&port| port != source).unwrap();
    let mut on_source = redis_connection(&node_url(source));
    for key in keys {
        let () = on_source.set(key, format!("value of {key}")).unwrap();
    }

    // Half moved: the source asks clients to try the target for keys it no longer has, and
    // refuses multi-key requests over keys on both sides.
    let migration = cluster.begin_slot_migration(slot, target).unwrap();
    assert_eq!((migration.slot, migration.source, migration.target), (slot, source, target));
    assert_eq!(cluster.move_slot_keys(&migration, 1).unwrap(), 1);
    let redirects: Vec<redis::RedisError> =
        keys.iter().filter_map(|key| on_source.get::<_, Option<String>>(*key).err()).collect();
    assert_eq!(redirects.len(), 1, "exactly one key left the source: {redirects:?}");
    let ask = &redirects[0];
    assert_eq!(ask.code(), Some("ASK"), "{ask}");
    assert_eq!(ask.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{ask}");
    let both_sides = on_source.mget::<_, Vec<Option<String>>>(&keys[..]).unwrap_err();
    assert_eq!(both_sides.code(), Some("TRYAGAIN"), "{both_sides}");

    assert_eq!(cluster.move_slot_keys(&migration, usize::MAX).unwrap(), 3);
    cluster.finish_slot_migration(&migration).unwrap();
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), target);
    let mut on_target = redis_connection(&node_url(target));
    for key in keys {
        let value: Option<String> = on_target.get(key).unwrap();
        assert_eq!(value, Some(format!("value of {key}")));
    }
    let moved = on_source.get::<_, Option<String>>(keys[0]).unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    assert_eq!(moved.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{moved}");

    // And back in one call.
    cluster.migrate_slot(slot, source).unwrap();
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), source);
    let value: Option<String> = on_source.get(keys[3]).unwrap();
    assert_eq!(value, Some(format!("value of {}", keys[3])));
    assert!(cluster.migrate_slot(slot, source).is_err(), "the slot is already there");
}

#[test]
fn redis_cluster_promotes_the_replica_of_a_killed_primary_and_takes_it_back_as_a_replica() {
    let cluster = RedisCluster::start().expect("start a Redis Cluster");
    let slot = key_slot(cluster.nodes()[0].port(), "survivor");
    let old_primary = cluster.primary_for_slot(slot).unwrap();
    let replica = cluster.replica_of(old_primary).unwrap();
    let mut connection = redis_connection(&node_url(old_primary));
    let () = connection.set("survivor", "1").unwrap();
    // Let the replica copy it before the crash.
    let copies: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut connection).unwrap();
    assert_eq!(copies, 1);

    let node = cluster.node(old_primary).unwrap();
    let killed = Instant::now();
    node.process().kill9().unwrap();
    let new_primary =
        cluster.wait_for_new_primary(slot, old_primary, Duration::from_secs(10)).expect("a failover");
    let failover = killed.elapsed();
    assert_eq!(new_primary, replica);
    cluster.wait_until_ok(Duration::from_secs(5)).unwrap();
    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3);
    assert!(primaries.iter().all(|primary| primary.port != old_primary));
    let mut connection = redis_connection(&node_url(new_primary));
    let value: Option<String> = connection.get("survivor").unwrap();
    assert_eq!(value.as_deref(), Some("1"), "the replica had the primary's data");
    let () = connection.set("survivor", "2").unwrap();
    eprintln!("cluster failover took {failover:?}");

    // The old primary comes back from its nodes.conf as the new primary's replica.
    node.process().restart().expect("restart the old primary");
    let mut restarted = redis_connection(&node.url());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut restarted).unwrap();
        let linked =
            info.contains(&format!("master_port:{new_primary}")) && info.contains("master_link_status:up");
        // The other nodes list it as a replica once they have heard from it again.
        if linked && cluster.replica_of(new_primary).ok() == Some(old_primary) {
            break;
        }
        assert!(Instant::now() < deadline, "the old primary never rejoined as a replica:\n{info}");
        thread::sleep(Duration::from_millis(50));
    }
    cluster.wait_until_ok(Duration::from_secs(5)).unwrap();
}

#[test]
fn redis_sentinel_group_names_a_new_primary_when_the_primary_dies_and_is_gone_after_drop() {
    let group = RedisSentinelGroup::start().expect("start a Redis Sentinel group");
    let sentinels: Vec<String> =
        group.sentinels().iter().map(|sentinel| format!("127.0.0.1:{}", sentinel.port())).collect();
    assert_eq!(group.url(), format!("redis+sentinel://{}/distlock-primary", sentinels.join(",")));
    assert_eq!(group.master_name(), "distlock-primary");
    assert_eq!(group.data_nodes().len(), 3);
    let old_primary = group.current_primary_port().unwrap();
    assert_eq!(old_primary, group.data_nodes()[0].port());
    let () = redis_connection(&node_url(old_primary)).set("before", "1").unwrap();

    let killed = Instant::now();
    group.data_node(old_primary).unwrap().process().kill9().unwrap();
    let new_primary = group.wait_for_new_primary(old_primary, Duration::from_secs(10)).expect("a failover");
    eprintln!("sentinel failover took {:?}", killed.elapsed());
    assert!(group.data_nodes()[1..].iter().any(|node| node.port() == new_primary));
    assert_eq!(group.current_primary_port().unwrap(), new_primary);
    let mut connection = redis_connection(&node_url(new_primary));
    let value: Option<String> = connection.get("before").unwrap();
    assert_eq!(value.as_deref(), Some("1"), "the replica had the primary's data");
    let () = connection.set("after", "2").unwrap();

    let processes = pids_and_ports(
        group
            .sentinels()
            .iter()
            .map(|sentinel| sentinel.process())
            .chain(group.data_nodes().iter().map(RedisServer::process)),
    );
    assert_eq!(processes.len(), 5, "the killed primary is not running");
    drop(group);
    assert_all_gone(processes);
}

#[test]
fn shared_redis_cluster_and_sentinel_group_start_once_and_answer() {
    let cluster = shared::redis_cluster().expect("shared Redis Cluster");
    assert!(std::ptr::eq(cluster, shared::redis_cluster().unwrap()), "started twice");
    assert!(cluster.address().starts_with("redis+cluster://127.0.0.1:"), "{}", cluster.address());
    let started = cluster.server().unwrap();
    let port = started.primary_for_slot(0).unwrap();
    let state: String =
        redis::cmd("CLUSTER").arg("INFO").query(&mut redis_connection(&node_url(port))).unwrap();
    assert!(state.contains("cluster_state:ok"), "{state}");

    let sentinel = shared::redis_sentinel().expect("shared Redis Sentinel group");
    assert!(std::ptr::eq(sentinel, shared::redis_sentinel().unwrap()), "started twice");
    assert!(sentinel.address().ends_with("/distlock-primary"), "{}", sentinel.address());
    let primary = sentinel.server().unwrap().current_primary_port().unwrap();
    let pong: String = redis::cmd("PING").query(&mut redis_connection(&node_url(primary))).unwrap();
    assert_eq!(pong, "PONG");
}
