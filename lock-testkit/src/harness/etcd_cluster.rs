//! A throwaway etcd cluster: members on loopback whose leader tests can find and kill.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::binaries::{self, ETCD, ETCDCTL};
use super::etcd::{self, Member, MemberStatus, Timing, KIND};
use super::{logs, ports, EtcdServer, HarnessError, ServerKind, TestDeployment};

/// The members' raft timing: twice etcd's defaults. A member that hears no heartbeat for the
/// election timeout calls an election, and on a loaded two-core machine a 1 s gap happens; a
/// spurious leader change would disturb tests that did not ask for one. A killed leader is
/// replaced within about 2–4 s; leases shorter than 3 s are raised to 3 s.
const CLUSTER_TIMING: Timing = Timing { heartbeat_ms: 200, election_ms: 2000 };

/// How long a new cluster may take until a majority names one leader.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// How many lines of each member's log go into a [`HarnessError::NotConverged`].
const LOG_LINES_PER_MEMBER: usize = 6;

/// Pause between two rounds of asking every member for its status.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A private etcd cluster on loopback, each member its own process with its own client and
/// peer ports and dir, so tests can kill, pause or restart single members.
///
/// To crash a member and bring it back in place (same data dir and ports):
/// `members()[i].process().kill9()`, then `.restart()`, which returns once the member answers
/// `/health` again, i.e. sees a leader. [`wait_for_leader`](Self::wait_for_leader) finds the
/// successor of a killed leader.
#[derive(Debug)]
#[must_use = "the servers stop when this is dropped"]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// The shortest lease TTL the cluster grants: shorter ones are raised to it.
    pub const MIN_LEASE_TTL: Duration = CLUSTER_TIMING.min_lease_ttl();

    /// Starts `size` members (use an odd number, e.g. 3) bootstrapped together with one
    /// `--initial-cluster`, and waits until every member answers `/health` and a majority
    /// names one leader.
    ///
    /// # Errors
    ///
    /// As for [`EtcdServer::start`], plus [`HarnessError::NotConverged`] (with every member's
    /// view and log tail; the dirs are then kept) if no leader emerges in time.
    ///
    /// # Panics
    ///
    /// If `size` is 0.
    pub fn start(size: usize) -> Result<Self, HarnessError> {
        assert!(size > 0, "an etcd cluster needs at least one member");
        let binary = binaries::find(&ETCD)?;
        let etcdctl = binaries::find(&ETCDCTL)?;
        ports::retry_on_port_in_use(|| Self::start_once(&binary, &etcdctl, size))
    }

    fn start_once(binary: &Path, etcdctl: &Path, size: usize) -> Result<Self, HarnessError> {
        let ports = (0..size).map(|_| ports::free_ports::<2>()).collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = (1..=size).map(|id| format!("n{id}")).collect();
        let initial_cluster = names
            .iter()
            .zip(&ports)
            .map(|(name, &[_, peer_port])| format!("{name}={}", etcd::peer_url(peer_port)))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_token = etcd::cluster_token(ports[0][1]);
        // Start every member before waiting for any: none is healthy until a majority runs.
        let mut members = Vec::with_capacity(size);
        for (name, &[client_port, peer_port]) in names.iter().zip(&ports) {
            let member = Member {
                name,
                client_port,
                peer_port,
                initial_cluster: &initial_cluster,
                cluster_token: &cluster_token,
                timing: CLUSTER_TIMING,
                auth_token_ttl_secs: None,
            };
            members.push(EtcdServer::spawn_member(binary, etcdctl, &member)?);
        }
        for member in &members {
            member.process().wait_ready()?;
        }
        let cluster = EtcdCluster { members };
        if let Err(error) = cluster.wait_for_leader(ELECTION_TIMEOUT) {
            for member in &cluster.members {
                member.process().keep_dir_after_drop();
            }
            return Err(error);
        }
        Ok(cluster)
    }

    /// The members, in the order of their names (`n1`, `n2`, …).
    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    /// Every member's client endpoint: `["127.0.0.1:P1", "127.0.0.1:P2", …]`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// The cluster as a distlock URL: `etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// `etcdctl` (API v3) aimed at every member (`--endpoints`); add the command.
    pub fn etcdctl(&self) -> Command {
        etcd::etcdctl_command(self.members[0].etcdctl_binary(), &self.endpoints().join(","), false)
    }

    /// The index of the current leader: the member that says it leads and that a majority of
    /// the members name as their leader. `None` while there is none (during an election, or
    /// without a quorum). A killed or paused member answers nothing, so a killed leader's stale
    /// followers cannot make it count.
    pub fn leader(&self) -> Option<usize> {
        leader_of(&self.statuses())
    }

    /// Waits until [`leader`](Self::leader) finds one and returns its index; after killing the
    /// leader, this finds its successor.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotConverged`], with what every member said and its log's tail, if no
    /// leader emerges in `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, HarnessError> {
        let started = Instant::now();
        loop {
            let statuses = self.statuses();
            if let Some(leader) = leader_of(&statuses) {
                return Ok(leader);
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::NotConverged {
                    goal: "an etcd leader named by a majority of the members".to_owned(),
                    waited: started.elapsed(),
                    state: self.describe(&statuses),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn statuses(&self) -> Vec<Result<MemberStatus, String>> {
        self.members.iter().map(EtcdServer::status).collect()
    }

    /// What each member said, and its log's tail, for a [`HarnessError::NotConverged`].
    fn describe(&self, statuses: &[Result<MemberStatus, String>]) -> String {
        let mut text = String::new();
        for (index, (member, status)) in self.members.iter().zip(statuses).enumerate() {
            let state = match status {
                Ok(MemberStatus { member_id, leader: 0 }) => format!("id {member_id:x}, no leader"),
                Ok(MemberStatus { member_id, leader }) => format!("id {member_id:x}, leader {leader:x}"),
                Err(why) => format!("not answering: {why}"),
            };
            let label = format!("member {index} (port {})", member.port());
            // Writing to a String cannot fail.
            let _ = write!(
                text,
                "{}",
                logs::node_report(&label, &state, member.process().log_path(), LOG_LINES_PER_MEMBER)
            );
        }
        text
    }
}

/// The index of the member that says it leads and that a majority of all members (itself
/// included) name as leader.
fn leader_of(statuses: &[Result<MemberStatus, String>]) -> Option<usize> {
    let majority = statuses.len() / 2 + 1;
    statuses.iter().position(|status| {
        let Ok(MemberStatus { member_id, leader }) = status else {
            return false;
        };
        let named_by =
            statuses.iter().filter(|other| matches!(other, Ok(other) if other.leader == *member_id)).count();
        member_id == leader && named_by >= majority
    })
}

impl TestDeployment for EtcdCluster {
    const KIND: ServerKind = KIND;

    /// A 3-member cluster.
    fn start() -> Result<Self, HarnessError> {
        EtcdCluster::start(3)
    }

    fn address(&self) -> String {
        self.url()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_needs_a_majority_naming_it() {
        let member = |member_id, leader| Ok(MemberStatus { member_id, leader });
        let down = || Err("connection refused".to_owned());
        assert_eq!(leader_of(&[member(1, 2), member(2, 2), member(3, 2)]), Some(1));
        assert_eq!(leader_of(&[down(), member(2, 3), member(3, 3)]), Some(2));
        // A leader cut off from the others still thinks it leads; one vote is no majority.
        assert_eq!(leader_of(&[member(1, 1), member(2, 0), member(3, 0)]), None);
        assert_eq!(leader_of(&[member(1, 1), down(), down()]), None);
        assert_eq!(leader_of(&[member(1, 1)]), Some(0));
    }
}
