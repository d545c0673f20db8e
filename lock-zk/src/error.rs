//! How ZooKeeper's errors map onto distlock's [`Error`] by meaning.

use lock_core::Error;
use zookeeper_client as zk;

use crate::blocking::async_context_error;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "zookeeper";

/// What went wrong in one bounded call: the client's own error, no answer in time, or a call
/// refused before anything was sent because it came from a tokio async task.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Zk(zk::Error),
    TimedOut,
    AsyncContext,
}

impl From<zk::Error> for Failure {
    fn from(error: zk::Error) -> Self {
        Failure::Zk(error)
    }
}

impl From<crate::blocking::Unfinished> for Failure {
    fn from(unfinished: crate::blocking::Unfinished) -> Self {
        match unfinished {
            crate::blocking::Unfinished::AsyncContext => Failure::AsyncContext,
            crate::blocking::Unfinished::TimedOut => Failure::TimedOut,
        }
    }
}

impl Failure {
    /// Whether the session this call ran on is over: its nodes are gone.
    pub(crate) fn session_ended(&self) -> bool {
        matches!(self, Failure::Zk(error) if session_ended(error))
    }

    /// Whether the server's answer says what became of the request. A connection lost before
    /// the reply (`ConnectionLoss`, or the client's own error for a server that stopped
    /// answering or reset the socket) or no reply in time leaves it unknown: a create or delete
    /// may or may not have happened.
    pub(crate) fn is_definite(&self) -> bool {
        match self {
            Failure::Zk(error) => is_definite(error),
            Failure::TimedOut => false,
            // Nothing was sent.
            Failure::AsyncContext => true,
        }
    }

    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        match self {
            Failure::TimedOut => Error::Timeout { backend: BACKEND, operation, source: None },
            Failure::AsyncContext => async_context_error(),
            Failure::Zk(error) => match error {
                zk::Error::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(error.into()) }
                }
                // A wrong digest password does not fail the session: it authenticates another
                // identity, which then may not touch the nodes the right one created.
                zk::Error::NoAuth | zk::Error::AuthFailed => {
                    Error::Authentication { backend: BACKEND, source: error.into() }
                }
                zk::Error::ConnectionLoss
                | zk::Error::Custom(_)
                | zk::Error::UnexpectedError(_)
                | zk::Error::NoHosts
                | zk::Error::SessionExpired
                | zk::Error::SessionMoved
                | zk::Error::ClientClosed
                | zk::Error::NotReadOnly
                | zk::Error::Throttled => Error::Connection { backend: BACKEND, source: error.into() },
                zk::Error::BadArguments(_) | zk::Error::InvalidAcl => {
                    Error::InvalidConfig { reason: format!("ZooKeeper refused the request: {error}") }
                }
                other => Error::backend(BACKEND, other),
            },
        }
    }
}

/// Whether `error` means the session is over: its ephemeral nodes are gone.
pub(crate) fn session_ended(error: &zk::Error) -> bool {
    matches!(error, zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed)
}

/// Whether `error` is the server's own answer to the request (see [`Failure::is_definite`]).
pub(crate) fn is_definite(error: &zk::Error) -> bool {
    session_ended(error)
        || matches!(
            error,
            zk::Error::NoNode
                | zk::Error::NodeExists
                | zk::Error::NoAuth
                | zk::Error::BadVersion
                | zk::Error::NotEmpty
                | zk::Error::NoChildrenForEphemerals
                | zk::Error::InvalidAcl
                | zk::Error::BadArguments(_)
        )
}
