//! Asking every node at once without a thread per call: check out one connection per node, write
//! the request to every connection, then read every reply, all within one deadline.
//!
//! Each node is only as slow as its own round trip, and a node that does not answer costs the
//! deadline once, not once per node. A connection whose reply did not come in time is never
//! reused (the late reply would be read as the answer to the next request); it may only carry
//! fire-and-forget requests that must run *after* the unanswered one (a failed acquisition's
//! release), and is then discarded.

use std::thread;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use super::tally::NodeError;
use crate::connection::{ConnectionPool, PooledConnection};
use crate::waiter::WaitHub;

/// The longest sleep between two looks at the nodes whose connection is being opened.
const CHECKOUT_POLL: Duration = Duration::from_millis(2);

/// The first such sleep: a loopback connection opens in a fraction of a millisecond.
const FIRST_CHECKOUT_POLL: Duration = Duration::from_micros(100);

/// One Redlock node: its connections and the subscriber that wakes this backend's waiters.
pub(crate) struct Node {
    /// `host:port`, without credentials, for errors and `Debug`.
    pub(crate) address: String,
    pub(crate) pool: ConnectionPool,
    pub(crate) hub: WaitHub,
}

/// What one node answered: its replies, in order (an error reply is a
/// [`Value::ServerError`]), or why there are none.
pub(crate) type NodeReplies = Result<Vec<Value>, NodeError>;

/// The connection of one operation to one node.
enum Link {
    /// Not checked out (the operation does not concern this node).
    Unused,
    /// In step with the node: every request sent on it has been answered. `reused` when it came
    /// idle from the pool, so it may have died since (a server restart) without our knowing.
    Ready { connection: PooledConnection, reused: bool },
    /// Requests on it were not answered in time; their replies may still come.
    InFlight(PooledConnection),
    /// No connection, and why.
    Failed(NodeError),
}

/// One operation's connections to the nodes. Dropping it gives healthy connections back to their
/// pools and discards the others.
pub(crate) struct Fanout<'a> {
    nodes: &'a [Node],
    timeout: Duration,
    links: Vec<Link>,
}

impl<'a> Fanout<'a> {
    /// Checks out one connection to every node (see [`checkout`](Self::checkout)).
    pub(crate) fn open(nodes: &'a [Node], timeout: Duration) -> Self {
        let all = vec![true; nodes.len()];
        Self::open_only(nodes, timeout, &all)
    }

    /// Checks out one connection to each node `which` marks.
    pub(crate) fn open_only(nodes: &'a [Node], timeout: Duration, which: &[bool]) -> Self {
        let mut fanout = Self { nodes, timeout, links: nodes.iter().map(|_| Link::Unused).collect() };
        fanout.checkout(which, Instant::now() + timeout);
        fanout
    }

    /// How many nodes have a connection in step, ready for a request.
    pub(crate) fn ready(&self) -> usize {
        self.links.iter().filter(|link| matches!(link, Link::Ready { .. })).count()
    }

    /// Why each node without a connection has none.
    pub(crate) fn failures(&self) -> impl Iterator<Item = (usize, &NodeError)> {
        self.links.iter().enumerate().filter_map(|(index, link)| match link {
            Link::Failed(error) => Some((index, error)),
            _ => None,
        })
    }

    /// Checks out a connection for each node `which` marks that has none: an idle one at once,
    /// or one opened in the background, waited for until `deadline`. A node whose latest
    /// connection attempt failed (down, refusing, wrong password) is not waited for: the pool
    /// keeps trying in the background, and the node rejoins once an attempt succeeds.
    fn checkout(&mut self, which: &[bool], deadline: Instant) {
        let mut pending = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if !which.get(index).copied().unwrap_or(false)
                || matches!(self.links[index], Link::Ready { .. } | Link::InFlight(_))
            {
                continue;
            }
            let seen = node.pool.failure_count();
            self.links[index] = match node.pool.known_down() {
                // The pool retries in the background already: take what is idle, open nothing.
                Some(error) => match node.pool.idle() {
                    Some(connection) => Link::Ready { connection, reused: true },
                    None => Link::Failed(NodeError::from_redis("connect", error)),
                },
                None => match node.pool.try_get() {
                    Some(connection) => Link::Ready { connection, reused: true },
                    None => {
                        pending.push((index, seen));
                        Link::Failed(NodeError::no_connection(self.timeout))
                    }
                },
            };
        }
        let mut poll = FIRST_CHECKOUT_POLL;
        while !pending.is_empty() {
            pending.retain(|&(index, seen)| {
                let pool = &self.nodes[index].pool;
                if let Some(connection) = pool.idle() {
                    self.links[index] = Link::Ready { connection, reused: false };
                    false
                } else if let Some(error) = pool.failure_since(seen) {
                    self.links[index] = Link::Failed(NodeError::from_redis("connect", error));
                    false
                } else {
                    true
                }
            });
            let now = Instant::now();
            if pending.is_empty() || now >= deadline {
                break; // The rest keep their "no connection in time" failure.
            }
            thread::sleep(poll.min(deadline - now));
            poll = (poll * 2).min(CHECKOUT_POLL);
        }
    }

    /// Sends `requests[i]` (one packed command or a pipeline) to node `i`, skipping `None`s, then
    /// reads `replies` replies from every node it reached, until the fan-out's timeout plus
    /// `extra` from now. Returns each node's replies (`None` where nothing was asked).
    ///
    /// A reused connection that turns out dead (the node restarted, or closed it while idle) is
    /// retried once on a fresh connection, within a deadline of its own: the scripts are safe to
    /// run twice.
    pub(crate) fn exchange(
        &mut self,
        requests: &[Option<&[u8]>],
        replies: usize,
        extra: Duration,
        operation: &'static str,
    ) -> Vec<Option<NodeReplies>> {
        let mut outcomes: Vec<Option<NodeReplies>> = self.links.iter().map(|_| None).collect();
        let mut dead = Vec::new();
        let deadline = Instant::now() + self.timeout + extra;
        self.send_and_receive(requests, replies, deadline, operation, &mut outcomes, Some(&mut dead));
        if !dead.is_empty() {
            let mut again = vec![false; self.links.len()];
            for &index in &dead {
                // The node's other idle connections were opened before the one that died.
                self.nodes[index].pool.discard_idle();
                again[index] = true;
            }
            let deadline = Instant::now() + self.timeout + extra;
            self.checkout(&again, deadline);
            let retry: Vec<Option<&[u8]>> = requests
                .iter()
                .enumerate()
                .map(|(index, request)| request.filter(|_| again[index]))
                .collect();
            self.send_and_receive(&retry, replies, deadline, operation, &mut outcomes, None);
        }
        outcomes
    }

    fn send_and_receive(
        &mut self,
        requests: &[Option<&[u8]>],
        replies: usize,
        deadline: Instant,
        operation: &'static str,
        outcomes: &mut [Option<NodeReplies>],
        mut dead: Option<&mut Vec<usize>>,
    ) {
        // Write to every node first, so that all of them work on it at once.
        let mut sent = Vec::new();
        for (index, request) in requests.iter().enumerate() {
            let Some(request) = request else { continue };
            match &mut self.links[index] {
                Link::Ready { connection, reused } => match connection.send_packed(request) {
                    Ok(()) => sent.push(index),
                    Err(error) => {
                        if *reused && is_dead_connection(&error) {
                            if let Some(dead) = dead.as_deref_mut() {
                                dead.push(index);
                            }
                        }
                        let error = NodeError::from_redis(operation, error);
                        outcomes[index] = Some(Err(error.clone()));
                        self.links[index] = Link::Failed(error);
                    }
                },
                Link::InFlight(_) => outcomes[index] = Some(Err(NodeError::unanswered())),
                Link::Failed(error) => outcomes[index] = Some(Err(error.clone())),
                Link::Unused => outcomes[index] = Some(Err(NodeError::no_connection(Duration::ZERO))),
            }
        }
        // Then read every reply, all against the one deadline.
        for index in sent {
            let Link::Ready { connection, reused } = &mut self.links[index] else { continue };
            let mut values = Vec::with_capacity(replies);
            let mut failure = None;
            for _ in 0..replies {
                match connection.recv_until(deadline) {
                    Ok(value) => values.push(value),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
            let Some(error) = failure else {
                outcomes[index] = Some(Ok(values));
                continue;
            };
            if error.is_timeout() {
                outcomes[index] = Some(Err(NodeError::timeout(operation, self.timeout)));
                if let Link::Ready { connection, .. } =
                    std::mem::replace(&mut self.links[index], Link::Unused)
                {
                    self.links[index] = Link::InFlight(connection);
                }
                continue;
            }
            if *reused && is_dead_connection(&error) {
                if let Some(dead) = dead.as_deref_mut() {
                    dead.push(index);
                }
            }
            let error = NodeError::from_redis(operation, error);
            outcomes[index] = Some(Err(error.clone()));
            self.links[index] = Link::Failed(error);
        }
    }

    /// Writes `request` after the unanswered request on every node `which` marks whose reply did
    /// not come in time, without waiting for anything, and discards those connections. The node
    /// runs it right after the unanswered one, whenever it gets to them.
    pub(crate) fn follow_unanswered(&mut self, which: &[bool], request: &[u8]) {
        for (index, link) in self.links.iter_mut().enumerate() {
            if !which.get(index).copied().unwrap_or(false) {
                continue;
            }
            if let Link::InFlight(connection) = link {
                if let Err(error) = connection.send_packed(request) {
                    tracing::debug!(%error, "writing a follow-up to an unanswered redlock node failed");
                }
                connection.discard();
                // Done with for this operation: not reconnected, not asked again.
                *link = Link::Unused;
            }
        }
    }

    /// Whether node `index` has a connection in step, ready for a request.
    pub(crate) fn is_ready(&self, index: usize) -> bool {
        matches!(self.links.get(index), Some(Link::Ready { .. }))
    }

    /// Checks out connections again for the nodes `which` marks whose connection failed.
    pub(crate) fn reconnect(&mut self, which: &[bool]) {
        let failed: Vec<bool> = self
            .links
            .iter()
            .enumerate()
            .map(|(index, link)| {
                which.get(index).copied().unwrap_or(false) && matches!(link, Link::Failed(_))
            })
            .collect();
        if failed.contains(&true) {
            self.checkout(&failed, Instant::now() + self.timeout);
        }
    }
}

/// Whether `error` says the connection was closed underneath us (as opposed to a slow server).
fn is_dead_connection(error: &RedisError) -> bool {
    !error.is_timeout() && error.is_connection_dropped()
}
