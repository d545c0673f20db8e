//! Doubt about leases on a replicated deployment (Sentinel, Cluster): when a lease's primary
//! stops answering, a failover may follow and promote a replica that never got the lease — the
//! rival that then acquires it would be a second holder. So the holder is told first: every
//! lease on such a deployment carries a [`DoubtSignal`] registered with its node; the node's
//! signals are raised the moment a request or a heartbeat finds it unreachable, and each is
//! cleared only when an extension of its own lease succeeds (on whichever node serves it then).
//!
//! The heartbeat thread (one per backend, while it has leases) `PING`s every node holding a
//! lease every [`HEARTBEAT_EVERY`], waiting at most [`HEARTBEAT_TIMEOUT`]: a killed primary is
//! noticed within one period, a stopped one within one period plus the timeout — far inside
//! the time Sentinel (`down-after-milliseconds`) or the cluster (`cluster-node-timeout`) take
//! to declare it failed, as long as those stay above ~2 s (their defaults are 30 s and 15 s).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::DoubtSignal;
use parking_lot::Mutex;

use super::{ClusterNodes, Node};

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
    fn add(&self) -> DoubtSignal {
        let signal = DoubtSignal::new();
        self.signals.lock().push(signal.clone());
        signal
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
#[derive(Default)]
pub(crate) struct Heartbeat {
    state: Mutex<HeartbeatState>,
    /// The cluster whose slot map a failed heartbeat marks out of date.
    cluster: Option<Arc<ClusterNodes>>,
}

#[derive(Default)]
struct HeartbeatState {
    nodes: Vec<Arc<Node>>,
    running: bool,
}

impl Heartbeat {
    /// A heartbeat for a backend on `cluster` (or on one node, `None`).
    pub(crate) fn new(cluster: Option<Arc<ClusterNodes>>) -> Self {
        Self { state: Mutex::default(), cluster }
    }

    /// A signal for a lease just granted on `node`, watched from now on.
    pub(crate) fn watch(self: &Arc<Self>, node: &Arc<Node>, io_timeout: Duration) -> DoubtSignal {
        let signal = node.watched.add();
        let mut state = self.state.lock();
        if !state.nodes.iter().any(|known| Arc::ptr_eq(known, node)) {
            state.nodes.push(Arc::clone(node));
        }
        if !state.running {
            state.running = true;
            let heartbeat = Arc::clone(self);
            let timeout = HEARTBEAT_TIMEOUT.min(io_timeout);
            if let Err(error) = thread::Builder::new().name(NAME.into()).spawn(move || heartbeat.run(timeout))
            {
                tracing::warn!(%error, "cannot start the redis heartbeat thread; doubt comes from failed calls only");
                state.running = false;
            }
        }
        signal
    }

    fn run(&self, timeout: Duration) {
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
            for node in nodes {
                if let Err(error) = ping(&node, timeout) {
                    tracing::debug!(node = %node.address, %error, "a redis primary holding leases did not answer; its leases are in doubt");
                    node.watched.raise_all();
                    if let Some(cluster) = &self.cluster {
                        cluster.mark_stale();
                    }
                }
            }
            thread::sleep(HEARTBEAT_EVERY.saturating_sub(round.elapsed()));
        }
    }
}

/// One `PING` on a pooled connection, answered within `timeout`.
fn ping(node: &Node, timeout: Duration) -> Result<(), String> {
    let mut connection = node.pool.get().map_err(|e| e.to_string())?;
    let replies = connection
        .exchange_within(&redis::cmd("PING").get_packed_command(), 1, timeout)
        .map_err(|e| e.to_string())?;
    match replies.first() {
        Some(redis::Value::SimpleString(pong)) if pong == "PONG" => Ok(()),
        other => Err(format!("PING answered {other:?}")),
    }
}
