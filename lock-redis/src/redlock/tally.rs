//! Counting the nodes' answers against the quorum, and the error when too few answered.

use std::fmt;
use std::time::Duration;

use lock_core::Error;
use redis::RedisError;

use crate::error::{self, error_chain};

/// The backend's label in errors and logs.
pub(crate) const BACKEND: &str = "redlock";

/// Why one node gave no usable answer. Cheap to clone: one failure (a node that is down) is
/// reported for every lease of a batch.
#[derive(Debug, Clone)]
pub(crate) struct NodeError {
    kind: NodeErrorKind,
    message: String,
}

/// What a node's failure means for the caller, in [`Error`]'s terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeErrorKind {
    /// The node rejected our credentials.
    Authentication,
    /// The node could not be reached, or did not answer in time.
    Unreachable,
    /// The node answered with an error (a wrong key type, a read-only replica, …).
    Other,
}

impl NodeError {
    /// A driver error met while doing `operation`, classified as the single-node backend does.
    pub(crate) fn from_redis(operation: &'static str, error: RedisError) -> Self {
        Self::from_error(&error::map(operation, error))
    }

    fn from_error(error: &Error) -> Self {
        let kind = match error {
            Error::Authentication { .. } => NodeErrorKind::Authentication,
            Error::Connection { .. } | Error::Timeout { .. } => NodeErrorKind::Unreachable,
            _ => NodeErrorKind::Other,
        };
        Self { kind, message: error_chain(error) }
    }

    /// No reply within `after`.
    pub(crate) fn timeout(operation: &'static str, after: Duration) -> Self {
        Self { kind: NodeErrorKind::Unreachable, message: format!("{operation}: no reply within {after:?}") }
    }

    /// No connection within `after`.
    pub(crate) fn no_connection(after: Duration) -> Self {
        Self { kind: NodeErrorKind::Unreachable, message: format!("connect: no connection within {after:?}") }
    }

    /// The connection still owes the reply to an earlier request of this operation.
    pub(crate) fn unanswered() -> Self {
        Self { kind: NodeErrorKind::Unreachable, message: "an earlier request is still unanswered".into() }
    }

    /// A reply the scripts never give.
    pub(crate) fn reply(operation: &'static str, detail: impl fmt::Debug) -> Self {
        Self { kind: NodeErrorKind::Other, message: format!("unexpected reply to {operation}: {detail:?}") }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The answers of the nodes to one request: how many confirmed, how many answered at all, and
/// why the others did not.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    quorum: usize,
    nodes: usize,
    answered: usize,
    confirmed: usize,
    failures: Vec<(usize, NodeError)>,
}

impl Tally {
    pub(crate) fn new(nodes: usize, quorum: usize) -> Self {
        Self { quorum, nodes, answered: 0, confirmed: 0, failures: Vec::new() }
    }

    /// A node answered yes (granted, extended, released).
    pub(crate) fn confirm(&mut self) {
        self.answered += 1;
        self.confirmed += 1;
    }

    /// A node answered no.
    pub(crate) fn deny(&mut self) {
        self.answered += 1;
    }

    /// Node `index` gave no usable answer.
    pub(crate) fn fail(&mut self, index: usize, error: NodeError) {
        self.failures.push((index, error));
    }

    /// Whether a quorum answered yes.
    pub(crate) fn confirmed_by_quorum(&self) -> bool {
        self.confirmed >= self.quorum
    }

    /// Whether a quorum answered at all: a "no" from a quorum is an answer, not a failure.
    pub(crate) fn answered_by_quorum(&self) -> bool {
        self.answered >= self.quorum
    }

    /// The error for an operation that too few nodes answered, naming each node's failure
    /// (`addresses` are the nodes' `host:port`, by index).
    ///
    /// [`Error::Authentication`] if any node rejected our credentials; otherwise
    /// [`Error::Connection`] if any node was unreachable or silent; otherwise (every failure was
    /// an error reply) [`Error::Backend`].
    pub(crate) fn failure(&self, operation: &'static str, addresses: &[&str]) -> Error {
        let failure = QuorumFailure {
            operation,
            nodes: self.nodes,
            quorum: self.quorum,
            answered: self.answered,
            failures: self
                .failures
                .iter()
                .map(|(index, error)| {
                    (addresses.get(*index).copied().unwrap_or("?").to_owned(), error.clone())
                })
                .collect(),
        };
        let any = |kind| self.failures.iter().any(|(_, error)| error.kind == kind);
        if any(NodeErrorKind::Authentication) {
            Error::Authentication { backend: BACKEND, source: Box::new(failure) }
        } else if any(NodeErrorKind::Unreachable) || self.failures.is_empty() {
            Error::Connection { backend: BACKEND, source: Box::new(failure) }
        } else {
            Error::Backend { backend: BACKEND, source: Box::new(failure) }
        }
    }
}

/// Too few nodes answered to ever form a quorum: the source of the public error.
#[derive(Debug, thiserror::Error)]
#[error(
    "{operation}: {answered} of {nodes} nodes answered, a quorum is {quorum}; {}",
    describe(.failures)
)]
struct QuorumFailure {
    operation: &'static str,
    nodes: usize,
    quorum: usize,
    answered: usize,
    failures: Vec<(String, NodeError)>,
}

fn describe(failures: &[(String, NodeError)]) -> String {
    let parts: Vec<String> = failures.iter().map(|(address, error)| format!("{address}: {error}")).collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRESSES: [&str; 5] = ["a:1", "b:2", "c:3", "d:4", "e:5"];

    #[test]
    fn a_quorum_of_answers_is_not_a_quorum_of_grants() {
        let mut tally = Tally::new(5, 3);
        tally.confirm();
        tally.deny();
        tally.deny();
        tally.fail(3, NodeError::timeout("acquire", Duration::from_millis(50)));
        assert!(tally.answered_by_quorum());
        assert!(!tally.confirmed_by_quorum());
    }

    #[test]
    fn failures_map_by_meaning_and_name_every_node() {
        let mut tally = Tally::new(5, 3);
        tally.confirm();
        tally.fail(1, NodeError::timeout("acquire", Duration::from_millis(50)));
        tally.fail(2, NodeError::reply("acquire", "nonsense"));
        let error = tally.failure("acquire", &ADDRESSES);
        assert!(matches!(error, Error::Connection { backend: BACKEND, .. }), "{error:?}");
        let text = error_chain(&error);
        assert!(text.contains("1 of 5 nodes answered, a quorum is 3"), "{text}");
        assert!(text.contains("b:2: acquire: no reply within 50ms"), "{text}");
        assert!(text.contains("c:3: unexpected reply"), "{text}");

        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "bad password"));
        tally.fail(3, NodeError::from_redis("connect", auth));
        assert!(matches!(tally.failure("acquire", &ADDRESSES), Error::Authentication { .. }));

        let mut replies = Tally::new(3, 2);
        replies.fail(0, NodeError::reply("extend", 7));
        assert!(matches!(replies.failure("extend", &ADDRESSES), Error::Backend { .. }));
    }
}
