//! The harness's one error type.

use std::error::Error as _;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use super::ServerKind;

/// Why a server could not be started or controlled.
///
/// `Debug` prints the same text as `Display` followed by the chain of causes, so that
/// `.expect("…")` in a test shows readable log tails instead of one escaped line.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A server binary or jar is not installed.
    #[error("`{binary}` not found (searched {searched}); install the Debian package `{package}`")]
    MissingBinary {
        /// The file that was looked for.
        binary: String,
        /// The Debian package that ships it.
        package: &'static str,
        /// Where it was looked for.
        searched: String,
    },

    /// An operating-system call failed (temp dir, file, spawn, signal).
    #[error("{context}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A preparation step failed: `initdb`, `mariadb-install-db`, creating the test database.
    #[error("{kind}: {step} failed: {detail}")]
    Setup {
        /// The server being prepared.
        kind: ServerKind,
        /// The step, e.g. `initdb`.
        step: String,
        /// Exit status, client error and output, as text.
        detail: String,
    },

    /// The server exited before it answered.
    #[error(
        "{kind} server on port {port} exited ({status}) before it was ready; {log:?} ends with:\n{tail}"
    )]
    Exited {
        /// The server.
        kind: ServerKind,
        /// The port it was started on.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },

    /// Another process took the port between the harness choosing it and the server binding it.
    ///
    /// Starts retry with a new port on this error, so callers see it only when that kept failing.
    #[error("{kind} server could not bind port {port} (address in use); {log:?} ends with:\n{tail}")]
    PortInUse {
        /// The server.
        kind: ServerKind,
        /// The port it could not bind.
        port: u16,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },

    /// The server did not answer a real protocol request before the deadline.
    #[error(
        "{kind} server on port {port} did not answer within {waited:?} (last probe: {last_probe}); \
         {log:?} ends with:\n{tail}"
    )]
    NotReady {
        /// The server.
        kind: ServerKind,
        /// The port it was started on.
        port: u16,
        /// How long the harness waited.
        waited: Duration,
        /// Why the last readiness probe failed.
        last_probe: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },

    /// A control that needs a live process was used on a stopped server.
    #[error("the {kind} server on port {port} is not running")]
    NotRunning {
        /// The server.
        kind: ServerKind,
        /// Its port.
        port: u16,
    },

    /// A process control was used on an external server named by an environment variable.
    #[error("the {kind} server comes from ${variable}; the harness has no process to control")]
    External {
        /// The server.
        kind: ServerKind,
        /// The environment variable that named it.
        variable: &'static str,
    },

    /// The shared server of this kind failed to start earlier in this test run.
    #[error("the shared {kind} server could not be started")]
    Shared {
        /// The server.
        kind: ServerKind,
        /// The original failure, shared by every caller.
        #[source]
        source: Arc<HarnessError>,
    },

    /// An environment variable the harness reads has an unusable value.
    #[error("${variable}: {reason}")]
    InvalidEnvironment {
        /// The variable.
        variable: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A ZooKeeper ensemble had no leader before the deadline.
    #[error("no ZooKeeper leader within {waited:?}; node modes: {modes}; node logs: {logs:?}")]
    NoLeader {
        /// How long the harness waited.
        waited: Duration,
        /// What each node said, e.g. `[Follower, not serving, Follower]`.
        modes: String,
        /// Each node's log file.
        logs: Vec<PathBuf>,
    },

    /// A request to a server the harness started was refused or not answered, e.g. a
    /// `CLUSTER SETSLOT` during a slot migration.
    #[error("{kind} server on port {port}: `{request}` failed: {reason}")]
    Request {
        /// The server.
        kind: ServerKind,
        /// Its port.
        port: u16,
        /// The request, e.g. `CLUSTER SETSLOT 42 NODE <id>`.
        request: String,
        /// The error reply, or why there was none.
        reason: String,
    },

    /// A Redis Cluster or Sentinel group is not in the state a call needs, e.g. a primary
    /// without a replica, or a slot to move that its target already serves.
    #[error("{detail}")]
    UnexpectedState {
        /// What was found, and where.
        detail: String,
    },

    /// A group of servers (a Redis Cluster, a Sentinel group) did not reach the state the
    /// harness waited for before the deadline.
    #[error("{goal}: not reached within {waited:?}; last seen:\n{state}")]
    NotConverged {
        /// What was waited for, e.g. `Redis Cluster formed`.
        goal: String,
        /// How long the harness waited.
        waited: Duration,
        /// What each server said last, and the tails of their logs where useful.
        state: String,
    },
}

impl HarnessError {
    /// Whether a start failed only because its port was taken, so a new port may succeed.
    pub fn is_port_in_use(&self) -> bool {
        matches!(self, HarnessError::PortInUse { .. })
    }

    /// An [`Io`](HarnessError::Io) error with what the harness was doing.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io { context: context.into(), source }
    }
}

impl fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut cause = self.source();
        while let Some(error) = cause {
            write!(f, "\n\nCaused by:\n    {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_cause_chain_unescaped() {
        let inner = HarnessError::NotRunning { kind: ServerKind::Redis, port: 1 };
        let outer = HarnessError::Shared { kind: ServerKind::Redis, source: Arc::new(inner) };
        let text = format!("{outer:?}");
        assert!(text.starts_with("the shared Redis server could not be started"));
        assert!(text.contains("Caused by:\n    the Redis server on port 1 is not running"));
    }
}
