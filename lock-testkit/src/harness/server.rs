//! What every single-process server the harness starts has in common.

use super::{HarnessError, ServerKind, ServerProcess};

/// A server the harness can start on its own, so code can be generic over the backends
/// (the shared servers and the conformance suite are).
pub trait TestServer: Sized {
    /// Which server this is.
    const KIND: ServerKind;

    /// Starts a private instance with default options, waiting until it answers.
    ///
    /// # Errors
    ///
    /// See [`HarnessError`]: a missing binary, a failed setup step, or a server that exited or
    /// did not answer in time.
    fn start() -> Result<Self, HarnessError>;

    /// What a client connects to: a URL (`redis://…`, `postgres://…`, `mysql://…`) or, for
    /// ZooKeeper, a connect string (`127.0.0.1:PORT`).
    fn address(&self) -> String;

    /// The server's process, for fault injection.
    fn process(&self) -> &ServerProcess;
}
