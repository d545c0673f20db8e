//! What every server and every group of servers the harness starts has in common.

use super::{HarnessError, ServerKind, ServerProcess};

/// A server, or a group of servers clients reach through one address (a Redis Cluster, a
/// Sentinel group), that the harness can start on its own, so code can be generic over the
/// backends (the shared servers are).
pub trait TestDeployment: Sized {
    /// Which server software this is.
    const KIND: ServerKind;

    /// Starts a private instance with default options, waiting until it answers.
    ///
    /// # Errors
    ///
    /// See [`HarnessError`]: a missing binary, a failed setup step, or a server that exited or
    /// did not answer in time.
    fn start() -> Result<Self, HarnessError>;

    /// What a client connects to: a URL (`redis://…`, `redis+cluster://…`,
    /// `redis+sentinel://…`, `postgres://…`, `mysql://…`; `rediss://…?cacert=…` for a TLS-only
    /// server) or, for ZooKeeper, a connect string (`127.0.0.1:PORT`; a `zk+tls://…?cacert=…`
    /// URL for a TLS-only server).
    fn address(&self) -> String;
}

/// A single-process server the harness can start on its own, so code can be generic over the
/// backends (the conformance suite is).
pub trait TestServer: TestDeployment {
    /// The server's process, for fault injection.
    fn process(&self) -> &ServerProcess;
}
