//! Doubt about leases on a replicated deployment (Sentinel, Cluster): when a lease's primary
//! stops answering, a failover may follow and promote a replica that never got the lease — the
//! rival that then acquires it would be a second holder. So the holder is told first: every
//! lease on such a deployment carries a [`DoubtSignal`] registered with its node; the node's
//! signals are raised the moment a request or a heartbeat finds it unreachable (or no longer
//! the primary), and a lease's own signal when its renewal goes unanswered. A signal is cleared
//! only by an extension of its own lease sent after the doubt arose, and then follows the
//! lease to the node that confirmed it (a failover, a slot move): the old node's failures no
//! longer concern it.
//!
//! The heartbeat thread (one per backend, while it has leases) asks every node holding a lease
//! for its `ROLE` every [`HEARTBEAT_EVERY`], all nodes at once, waiting at most
//! [`HEARTBEAT_TIMEOUT`]: a killed or demoted primary is noticed within one period, a stopped
//! one within one period plus the timeout — far inside
//! the time Sentinel (`down-after-milliseconds`) or the cluster (`cluster-node-timeout`) take
//! to declare it failed, as long as those stay above ~2 s (their defaults are 30 s and 15 s).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::DoubtSignal;
use parking_lot::Mutex;

use super::{ClusterNodes, Node};
use crate::error::RedisFailure;

/// How often each node that holds leases is pinged.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);

/// How long a heartbeat waits for the `PONG` (less, if the I/O timeout is shorter).
pub(crate) const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);

/// The name of the heartbeat thread (Linux shows 15 bytes).
const NAME: &str = "distlock-rbeat";

/// The doubt signals of the leases one node holds.
#[derive(Default)]
pub(crate) struct Watched {
    signals: Mutex<Vec<DoubtSignal>>,
}

impl Watched {
    fn add(&self, signal: &DoubtSignal) {
        self.signals.lock().push(signal.clone());
    }

    fn remove(&self, signal: &DoubtSignal) {
        self.signals.lock().retain(|known| !known.same_as(signal));
    }

    /// Raises every live signal: the node may have lost its leases.
    pub(crate) fn raise_all(&self) {
        let mut signals = self.signals.lock();
        signals.retain(DoubtSignal::is_shared);
        for signal in signals.iter() {
            signal.raise();
        }
    }

    /// Whether any lease still holds a signal (those gone are forgotten).
    fn any(&self) -> bool {
        let mut signals = self.signals.lock();
        signals.retain(DoubtSignal::is_shared);
        !signals.is_empty()
    }
}

/// The heartbeat of one backend: the nodes it watches, and whether its thread runs.
pub(crate) struct Heartbeat {
    state: Mutex<HeartbeatState>,
    /// The cluster whose slot map a failed heartbeat marks out of date.
    cluster: Option<Arc<ClusterNodes>>,
    /// How long a heartbeat waits for its answer.
    timeout: Duration,
}

#[derive(Default)]
struct HeartbeatState {
    nodes: Vec<Arc<Node>>,
    running: bool,
}

impl Heartbeat {
    /// A heartbeat for a backend on `cluster` (or on one node, `None`) whose I/O timeout is
    /// `io_timeout`.
    pub(crate) fn new(cluster: Option<Arc<ClusterNodes>>, io_timeout: Duration) -> Self {
        Self { state: Mutex::default(), cluster, timeout: HEARTBEAT_TIMEOUT.min(io_timeout) }
    }

    /// A signal for a lease just granted on `node`, watched from now on.
    pub(crate) fn watch(self: &Arc<Self>, node: &Arc<Node>) -> DoubtSignal {
        let signal = DoubtSignal::new();
        self.add(&signal, node);
        signal
    }

    /// The lease of `signal`, watched on `from`, was just confirmed on `to` (its slot moved, its
    /// primary failed over): from now on `to`'s failures put it in doubt, and `from`'s no more.
    pub(crate) fn move_watch(self: &Arc<Self>, signal: &DoubtSignal, from: &Node, to: &Arc<Node>) {
        from.watched.remove(signal);
        self.add(signal, to);
    }

    fn add(self: &Arc<Self>, signal: &DoubtSignal, node: &Arc<Node>) {
        node.watched.add(signal);
        let mut state = self.state.lock();
        if !state.nodes.iter().any(|known| Arc::ptr_eq(known, node)) {
            state.nodes.push(Arc::clone(node));
        }
        if !state.running {
            state.running = true;
            let heartbeat = Arc::clone(self);
            if let Err(error) = thread::Builder::new().name(NAME.into()).spawn(move || heartbeat.run()) {
                tracing::warn!(%error, "cannot start the redis heartbeat thread; doubt comes from failed calls only");
                state.running = false;
            }
        }
    }

    /// Every [`HEARTBEAT_EVERY`], checks every node that holds leases — all at once, so a node
    /// that does not answer delays no other's check — until none does.
    fn run(&self) {
        loop {
            let nodes = {
                let mut state = self.state.lock();
                state.nodes.retain(|node| node.watched.any());
                if state.nodes.is_empty() {
                    state.running = false;
                    return;
                }
                state.nodes.clone()
            };
            let round = Instant::now();
            thread::scope(|scope| {
                let mut inline = Vec::new();
                for node in &nodes {
                    let spawned =
                        thread::Builder::new().name(NAME.into()).spawn_scoped(scope, || self.check(node));
                    if spawned.is_err() {
                        inline.push(node);
                    }
                }
                // No thread to be had: check those here, one after the other.
                for node in inline {
                    self.check(node);
                }
            });
            thread::sleep(HEARTBEAT_EVERY.saturating_sub(round.elapsed()));
        }
    }

    fn check(&self, node: &Node) {
        if let Err(error) = confirm_primary(node, self.timeout) {
            tracing::debug!(node = %node.address, %error, "a redis primary holding leases did not answer as one; its leases are in doubt");
            node.watched.raise_all();
            if let Some(cluster) = &self.cluster {
                cluster.mark_stale();
            }
        }
    }
}

/// `ROLE` on a pooled connection, answered `master` within `timeout`. A pool whose connections
/// are all busy says nothing about the node: that is no failure.
fn confirm_primary(node: &Node, timeout: Duration) -> Result<(), String> {
    let mut connection = match node.pool.get() {
        Ok(connection) => connection,
        Err(RedisFailure::PoolTimeout { .. }) => return Ok(()),
        Err(error) => return Err(error.to_string()),
    };
    let replies = connection
        .exchange_within(&redis::cmd("ROLE").get_packed_command(), 1, timeout)
        .map_err(|e| e.to_string())?;
    match replies.first() {
        Some(role) if super::sentinel::is_master(role) => Ok(()),
        other => Err(format!("ROLE answered {other:?}")),
    }
}
