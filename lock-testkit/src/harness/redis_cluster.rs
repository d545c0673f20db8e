//! A throwaway Redis Cluster: three primaries with a replica each, every node its own
//! `redis-server` on free loopback ports, so tests can kill, pause or restart single nodes,
//! fail primaries over and move slots.

mod migration;
mod topology;

use std::ops::RangeInclusive;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

pub use migration::SlotMigration;
pub use topology::ClusterPrimary;
use topology::Topology;

use super::binaries::{self, REDIS_CLI};
use super::command::CommandSpec;
use super::resp::{self, Connection, PROBE_TIMEOUT};
use super::{logs, HarnessError, RedisServer, ServerKind, TestDeployment};

const KIND: ServerKind = ServerKind::Redis;

/// How many primaries the cluster has; each gets one replica.
const PRIMARIES: usize = 3;

/// How long `redis-cli --cluster create` may take; it waits for the nodes to meet.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a new cluster may take until every node agrees on it and every replica is linked.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// The pause between two looks at every node while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// `redis-cli --cluster create`'s output, in the first node's dir.
const CREATE_LOG: &str = "cluster-create.log";

/// How many lines of each node's log go into a [`HarnessError::NotConverged`].
const LOG_LINES_PER_NODE: usize = 6;

/// A private Redis Cluster of six nodes on loopback: three primaries that split the 16384
/// slots, each with one replica. Every node is a [`RedisServer`] (without persistence or
/// password) with its own ports and dir, so it can be killed, paused or restarted on its own;
/// a restarted node rejoins from its `nodes.conf`.
///
/// Nodes count as failing after `cluster-node-timeout` 1000 ms and any replica may take over
/// (`cluster-replica-validity-factor 0`): a killed primary's replica is serving its slots
/// about 2.5 s later. Roles change with failovers, so [`primaries`](Self::primaries),
/// [`primary_for_slot`](Self::primary_for_slot) and [`replica_of`](Self::replica_of) ask the
/// running nodes each time.
#[derive(Debug)]
#[must_use = "the servers stop when this is dropped"]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts six nodes, joins them with `redis-cli --cluster create … --cluster-replicas 1`,
    /// and waits until every node says `cluster_state:ok`, all agree on three primaries that
    /// serve all 16384 slots with one replica each, and every replica's link is up.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server` or `redis-cli`; as for
    /// [`RedisServer::start`] if a node does not come up; [`HarnessError::Setup`] with
    /// `redis-cli`'s output if it fails or hangs; [`HarnessError::NotConverged`] with every
    /// node's view and log tail if the cluster does not settle. The nodes' dirs are then kept.
    pub fn start() -> Result<Self, HarnessError> {
        let redis_cli = binaries::find(&REDIS_CLI)?;
        let nodes =
            (0..PRIMARIES * 2).map(|_| RedisServer::start_cluster_node()).collect::<Result<_, _>>()?;
        let cluster = RedisCluster { nodes };
        if let Err(error) = cluster.form(&redis_cli) {
            for node in &cluster.nodes {
                node.process().keep_dir_after_drop();
            }
            return Err(error);
        }
        Ok(cluster)
    }

    fn form(&self, redis_cli: &Path) -> Result<(), HarnessError> {
        let log = self.nodes[0].process().dir().join(CREATE_LOG);
        CommandSpec::new(redis_cli)
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port())))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .run(KIND, "redis-cli --cluster create", &log, CREATE_TIMEOUT)?;
        self.wait_for("Redis Cluster formed", FORM_TIMEOUT, |reports| self.formed(reports))
    }

    /// `redis+cluster://127.0.0.1:P1,…,127.0.0.1:P6/`: every node, as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port())).collect();
        format!("redis+cluster://{}/", seeds.join(","))
    }

    /// The six nodes, in the order they were started (not by role: roles change).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node on `port`, if it is one of this cluster's.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|node| node.port() == port)
    }

    /// The primaries that serve slots, by their first slot, as the first running node that
    /// answers sees them now. Right after a kill or a pause the nodes may not have noticed
    /// yet; [`wait_until_ok`](Self::wait_until_ok) waits until they have.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Request`] if no running node answers `CLUSTER NODES`.
    pub fn primaries(&self) -> Result<Vec<ClusterPrimary>, HarnessError> {
        Ok(self.topology()?.primaries())
    }

    /// The port of the primary that serves `slot` (0 to 16383), as [`primaries`](Self::primaries)
    /// sees it. [`migrate_slot`](Self::migrate_slot) and failovers change it.
    ///
    /// # Errors
    ///
    /// As for [`primaries`](Self::primaries); [`HarnessError::UnexpectedState`] if no primary
    /// serves `slot`.
    pub fn primary_for_slot(&self, slot: u16) -> Result<u16, HarnessError> {
        self.topology()?.owner(slot).ok_or_else(|| HarnessError::UnexpectedState {
            detail: format!("no primary of the Redis Cluster serves slot {slot}"),
        })
    }

    /// The port of a replica of the primary on `primary_port` that no node counts as failing.
    ///
    /// # Errors
    ///
    /// As for [`primaries`](Self::primaries); [`HarnessError::UnexpectedState`] if that node
    /// is no primary with slots, or has no such replica.
    pub fn replica_of(&self, primary_port: u16) -> Result<u16, HarnessError> {
        let primaries = self.primaries()?;
        let primary = primaries.iter().find(|primary| primary.port == primary_port);
        primary.and_then(|primary| primary.replicas.first().copied()).ok_or_else(|| {
            let detail =
                format!("the Redis Cluster node on port {primary_port} is no primary with a replica");
            HarnessError::UnexpectedState { detail: format!("{detail}: {primaries:?}") }
        })
    }

    /// Waits until every node that runs and is not paused says `cluster_state:ok`, they all
    /// agree which primary serves each slot, every such primary runs and is not paused, and
    /// none of them counts another as failing. After killing or pausing a primary this
    /// returns once its replica has taken over (about 2.5 s; the nodes keep saying `ok` for a
    /// second or so before they notice); after a restart or resume, once every node has seen
    /// the node back.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotConverged`] with every node's view and log tail after `timeout`.
    pub fn wait_until_ok(&self, timeout: Duration) -> Result<(), HarnessError> {
        self.wait_for("Redis Cluster ok with every slot on a running primary", timeout, |reports| {
            serving(reports).map(drop)
        })
    }

    /// Waits until [`wait_until_ok`](Self::wait_until_ok)'s conditions hold and a node other
    /// than `old_port` serves `slot`; returns that node's port. For failover tests: kill or
    /// pause the primary on `old_port`, then wait for its replica to take over.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotConverged`] with every node's view and log tail after `timeout`.
    pub fn wait_for_new_primary(
        &self,
        slot: u16,
        old_port: u16,
        timeout: Duration,
    ) -> Result<u16, HarnessError> {
        let goal = format!("Redis Cluster ok with slot {slot} on a primary other than {old_port}");
        self.wait_for(&goal, timeout, |reports| {
            let owners = serving(reports)?;
            match owners.iter().find(|(range, _)| range.contains(&slot)) {
                Some(&(_, port)) if port != old_port => Ok(port),
                _ => Err(format!("slot {slot} is still on {old_port}")),
            }
        })
    }

    /// The view of the first running, unpaused node that answers.
    fn topology(&self) -> Result<Topology, HarnessError> {
        let mut failures = Vec::new();
        for node in self.live_nodes() {
            match resp::request(node.port(), &["CLUSTER", "NODES"]).and_then(|reply| reply.into_text()) {
                Ok(text) => {
                    return Topology::parse(&text)
                        .map_err(|reason| resp::failed(node.port(), &["CLUSTER", "NODES"], reason))
                }
                Err(reason) => failures.push(format!("port {}: {reason}", node.port())),
            }
        }
        Err(HarnessError::UnexpectedState {
            detail: format!("no Redis Cluster node answered CLUSTER NODES: [{}]", failures.join("; ")),
        })
    }

    fn live_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|node| node.process().is_running() && !node.process().is_paused())
    }

    /// What every node that runs and is not paused says now.
    fn reports(&self) -> Vec<Report> {
        self.live_nodes().map(|node| Report { port: node.port(), view: view(node.port()) }).collect()
    }

    /// Polls [`reports`](Self::reports) until `check` accepts them, or fails after `timeout`
    /// with the last reason, every node's view and the tails of their logs.
    fn wait_for<T>(
        &self,
        goal: &str,
        timeout: Duration,
        check: impl Fn(&[Report]) -> Result<T, String>,
    ) -> Result<T, HarnessError> {
        let started = Instant::now();
        loop {
            let reports = self.reports();
            let why = match check(&reports) {
                Ok(outcome) => return Ok(outcome),
                Err(why) => why,
            };
            if started.elapsed() >= timeout {
                return Err(HarnessError::NotConverged {
                    goal: goal.to_owned(),
                    waited: started.elapsed(),
                    state: self.describe(&why, &reports),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The check for a new cluster: all six nodes serve ([`serving`]), agree on
    /// three primaries with one replica each, and every replica's link is up.
    fn formed(&self, reports: &[Report]) -> Result<(), String> {
        if reports.len() != self.nodes.len() {
            return Err(format!("only {} of {} nodes run", reports.len(), self.nodes.len()));
        }
        serving(reports)?;
        let views: Vec<Vec<ClusterPrimary>> = reports
            .iter()
            .filter_map(|report| report.view.as_ref().ok())
            .map(|view| view.topology.primaries())
            .collect();
        let primaries = &views[0];
        if let Some(index) = views.iter().position(|view| view != primaries) {
            return Err(format!(
                "nodes {} and {} disagree on the replicas",
                reports[0].port, reports[index].port
            ));
        }
        if primaries.len() != PRIMARIES || primaries.iter().any(|primary| primary.replicas.len() != 1) {
            return Err(format!("not {PRIMARIES} primaries with one replica each: {primaries:?}"));
        }
        for replica in primaries.iter().flat_map(|primary| &primary.replicas) {
            let info =
                resp::request(*replica, &["INFO", "replication"]).and_then(|reply| reply.into_text())?;
            if !info.contains("master_link_status:up") {
                return Err(format!("replica {replica} is not linked to its primary yet"));
            }
        }
        Ok(())
    }

    /// `why`, then each node's state, view and log tail, for a [`HarnessError::NotConverged`].
    fn describe(&self, why: &str, reports: &[Report]) -> String {
        let mut text = why.to_owned();
        for node in &self.nodes {
            let process = node.process();
            let state = match reports.iter().find(|report| report.port == node.port()) {
                None if process.is_paused() => "paused".to_owned(),
                None => "not running".to_owned(),
                Some(Report { view: Err(why), .. }) => format!("no answer: {why}"),
                Some(Report { view: Ok(view), .. }) => {
                    format!(
                        "cluster_state:{}, primaries {:?}",
                        if view.ok { "ok" } else { "not ok" },
                        view.topology.primaries()
                    )
                }
            };
            text += &logs::node_report(
                &format!("node {}", node.port()),
                &state,
                process.log_path(),
                LOG_LINES_PER_NODE,
            );
        }
        text
    }
}

impl TestDeployment for RedisCluster {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        RedisCluster::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

/// The common part of every wait: each live node answers and says `cluster_state:ok`,
/// all agree on the slot owners, every owner is live, and no live node counts another
/// live one as failing. Returns the owners.
fn serving(reports: &[Report]) -> Result<Vec<(RangeInclusive<u16>, u16)>, String> {
    let mut agreed: Option<(u16, &Topology, Vec<_>)> = None;
    for report in reports {
        let view =
            report.view.as_ref().map_err(|why| format!("node {} does not answer: {why}", report.port))?;
        if !view.ok {
            return Err(format!("node {} is not cluster_state:ok", report.port));
        }
        let owners = view.topology.slot_owners();
        match &agreed {
            None => agreed = Some((report.port, &view.topology, owners)),
            Some((first, _, seen)) if *seen != owners => {
                return Err(format!("nodes {first} and {} disagree on the slot owners", report.port));
            }
            Some(_) => {}
        }
    }
    let Some((first, topology, owners)) = agreed else {
        return Err("no node runs".into());
    };
    let unserved = topology.unserved_slots();
    if unserved > 0 {
        return Err(format!("node {first} says {unserved} slots have no primary"));
    }
    let live: Vec<u16> = reports.iter().map(|report| report.port).collect();
    if let Some((_, port)) = owners.iter().find(|(_, port)| !live.contains(port)) {
        return Err(format!("node {port} serves slots but is down or paused"));
    }
    for report in reports {
        let failing = report.view.as_ref().map(|view| view.topology.failing()).unwrap_or_default();
        if let Some(port) = failing.iter().find(|port| live.contains(port)) {
            return Err(format!("node {} still counts node {port} as failing", report.port));
        }
    }
    Ok(owners)
}

/// What one node said when asked.
struct Report {
    port: u16,
    view: Result<View, String>,
}

/// One node's `CLUSTER INFO` state and `CLUSTER NODES` view.
struct View {
    ok: bool,
    topology: Topology,
}

fn view(port: u16) -> Result<View, String> {
    let mut connection = Connection::open(port, PROBE_TIMEOUT)?;
    let info = connection.request(&["CLUSTER", "INFO"])?.into_text()?;
    let nodes = connection.request(&["CLUSTER", "NODES"])?.into_text()?;
    Ok(View {
        ok: info.lines().any(|line| line.trim_end() == "cluster_state:ok"),
        topology: Topology::parse(&nodes)?,
    })
}
