//! How etcd's errors map onto distlock's [`Error`] by meaning.
//!
//! etcd answers with gRPC status codes and fixed messages (`rpctypes` in etcd's source):
//!
//! | etcd says | code | distlock |
//! | --- | --- | --- |
//! | `etcdserver: authentication failed, invalid user ID or password` | `InvalidArgument` | [`Error::Authentication`] |
//! | `etcdserver: invalid auth token` (after one refresh) | `Unauthenticated` | [`Error::Authentication`] |
//! | `etcdserver: permission denied` | `PermissionDenied` | [`Error::Authentication`] |
//! | `etcdserver: no leader`, `request timed out`, `server stopped`, a broken connection | `Unavailable` | [`Error::Connection`] |
//! | the call's own deadline | `DeadlineExceeded` | [`Error::Timeout`] |
//! | `etcdserver: requested lease not found` | `NotFound` | the client's lease is gone: its holds are lost |
//! | anything else | | [`Error::Backend`] |

use etcd_client::Error as EtcdError;
use lock_core::Error;
use tonic::Code;

use crate::blocking::async_context_error;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "etcd";

/// What went wrong in one bounded call: the client's own error, no answer in time, a call
/// refused before anything was sent (from a tokio async task), or the client's lease gone.
#[derive(Debug)]
pub(crate) enum Failure {
    Etcd(EtcdError),
    TimedOut,
    AsyncContext,
    /// The lease the call needed was revoked or expired on the server (or, by this client's
    /// clock, went unconfirmed for its whole TTL).
    LeaseLost,
    /// The server's state broke an assumption of the recipe; the text says which.
    Unexpected(&'static str),
}

impl From<EtcdError> for Failure {
    fn from(error: EtcdError) -> Self {
        Failure::Etcd(error)
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
    /// Whether the server's answer says what became of the request. A broken connection or no
    /// answer in time leaves it unknown: a put or delete may or may not have happened.
    pub(crate) fn is_definite(&self) -> bool {
        match self {
            Failure::Etcd(EtcdError::GRpcStatus(status)) => !matches!(
                status.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled | Code::Internal
            ),
            Failure::Etcd(EtcdError::TransportError(_) | EtcdError::IoError(_)) => false,
            Failure::Etcd(_) => true,
            Failure::TimedOut => false,
            Failure::AsyncContext | Failure::LeaseLost | Failure::Unexpected(_) => true,
        }
    }

    /// Whether etcd refused the lease as unknown (revoked or expired).
    pub(crate) fn is_lease_gone(&self) -> bool {
        match self {
            Failure::LeaseLost => true,
            Failure::Etcd(EtcdError::GRpcStatus(status)) => {
                status.code() == Code::NotFound && status.message().contains("lease not found")
            }
            Failure::Etcd(EtcdError::LeaseKeepAliveError(message)) => message.contains("lease not found"),
            _ => false,
        }
    }

    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        let lease_gone = self.is_lease_gone();
        match self {
            Failure::LeaseLost => lease_lost(operation),
            Failure::Etcd(_) if lease_gone => lease_lost(operation),
            Failure::Etcd(error) => etcd_error(error, operation),
            Failure::TimedOut => Error::Timeout { backend: BACKEND, operation, source: None },
            Failure::AsyncContext => async_context_error(),
            Failure::Unexpected(what) => Error::backend(BACKEND, format!("{operation}: {what}")),
        }
    }
}

/// A call that needed the client's lease, which is gone: retryable (the next call gets a new
/// lease).
fn lease_lost(operation: &'static str) -> Error {
    let source = format!("{operation}: the client's lease was revoked or expired");
    Error::Connection { backend: BACKEND, source: source.into() }
}

/// `error` by meaning.
fn etcd_error(error: EtcdError, operation: &'static str) -> Error {
    let tls = match &error {
        EtcdError::GRpcStatus(status) => is_tls_failure(status),
        EtcdError::TransportError(transport) => is_tls_failure(transport),
        _ => false,
    };
    if tls {
        return Error::Tls { backend: BACKEND, source: error.into() };
    }
    let status = match error {
        EtcdError::GRpcStatus(status) => status,
        EtcdError::TransportError(_) | EtcdError::IoError(_) | EtcdError::LeaseKeepAliveError(_) => {
            return Error::Connection { backend: BACKEND, source: error.into() }
        }
        EtcdError::InvalidArgs(_) | EtcdError::InvalidUri(_) | EtcdError::InvalidMetadataValue(_) => {
            return Error::InvalidConfig { reason: format!("etcd client: {error}") }
        }
        other => return Error::backend(BACKEND, other),
    };
    let message = status.message();
    match status.code() {
        Code::Unauthenticated | Code::PermissionDenied => {
            Error::Authentication { backend: BACKEND, source: status.into() }
        }
        Code::InvalidArgument if is_credentials_refused(message) => {
            Error::Authentication { backend: BACKEND, source: status.into() }
        }
        Code::DeadlineExceeded => Error::Timeout { backend: BACKEND, operation, source: Some(status.into()) },
        Code::Unavailable | Code::Cancelled | Code::Aborted | Code::Unknown => {
            Error::Connection { backend: BACKEND, source: status.into() }
        }
        _ => Error::backend(BACKEND, status),
    }
}

/// Whether `error` says the request never left: the connection to the member the channel
/// picked could not be made (tonic returns a refused connect to the request that waited for
/// it, rather than trying another endpoint). Sending it again is safe, and picks a member
/// anew. A failed TLS handshake is not counted: trying again would fail again.
pub(crate) fn is_unsent(error: &EtcdError) -> bool {
    let EtcdError::GRpcStatus(status) = error else { return false };
    status.code() == Code::Unavailable && !is_tls_failure(status) && has_cause::<tonic::ConnectError>(status)
}

/// Whether `error` or one of its causes is an `E`.
fn has_cause<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(cause) = next {
        if cause.is::<E>() {
            return true;
        }
        next = cause.source();
    }
    false
}

/// Whether a TLS handshake failed somewhere down `error`'s causes: tonic reports a refused
/// certificate as an unavailable transport, with rustls's error (inside an I/O error) below.
fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(cause) = next {
        #[cfg(feature = "tls")]
        {
            let inner = cause.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
            if cause.is::<rustls::Error>() || inner.is_some_and(|inner| inner.is::<rustls::Error>()) {
                return true;
            }
        }
        next = cause.source();
    }
    false
}

/// Whether an `InvalidArgument` status is etcd refusing the credentials.
fn is_credentials_refused(message: &str) -> bool {
    message.contains("authentication failed") || message.contains("user name is empty")
}

/// Whether `error` says the server has authentication disabled (credentials were given anyway).
pub(crate) fn is_auth_not_enabled(error: &EtcdError) -> bool {
    matches!(error, EtcdError::GRpcStatus(status) if status.message().contains("authentication is not enabled"))
}
