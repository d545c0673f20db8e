//! PostgreSQL failures, and how each maps onto [`lock_core::Error`] by meaning.

use std::time::Duration;

use lock_core::Error;
use tokio_postgres::error::SqlState;

/// The backend's label in errors and logs.
pub(crate) const BACKEND: &str = "postgres";

/// What went wrong inside the PostgreSQL backend. Kept as the `source` of the public error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PgFailure {
    /// A statement (or the connection setup) failed.
    #[error("{operation}: {source}")]
    Statement {
        operation: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server did not answer within the I/O timeout; the connection is dropped, since the
    /// reply may still come.
    #[error("{operation}: no reply within {timeout:?}")]
    Timeout { operation: &'static str, timeout: Duration },
    /// No pooled connection within the pool timeout: every connection is in use (held locks own
    /// theirs), or connecting did not succeed in time.
    #[error("no connection to postgres within {timeout:?}: {detail}")]
    Pool { timeout: Duration, detail: String },
    /// The server closed the connection under a call (it ended the session).
    #[error("{operation}: the server closed the connection")]
    Closed { operation: &'static str },
    /// A connection's runtime could not start.
    #[error("starting a postgres connection's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A statement answered something the backend's statements never return.
    #[error("unexpected reply to {operation}: {detail}")]
    Reply { operation: &'static str, detail: String },
}

impl From<PgFailure> for Error {
    fn from(failure: PgFailure) -> Self {
        match &failure {
            PgFailure::Statement { operation, source } => match meaning(source) {
                Meaning::Authentication => Error::Authentication { backend: BACKEND, source: failure.into() },
                Meaning::Connection => Error::Connection { backend: BACKEND, source: failure.into() },
                Meaning::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
                }
                Meaning::Other => Error::Backend { backend: BACKEND, source: failure.into() },
            },
            PgFailure::Timeout { operation, .. } => {
                Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
            }
            PgFailure::Closed { .. } => Error::Connection { backend: BACKEND, source: failure.into() },
            PgFailure::Pool { .. } => {
                Error::Timeout { backend: BACKEND, operation: "connect", source: Some(failure.into()) }
            }
            PgFailure::Runtime(_) | PgFailure::Reply { .. } => {
                Error::Backend { backend: BACKEND, source: failure.into() }
            }
        }
    }
}

enum Meaning {
    Authentication,
    Connection,
    Timeout,
    Other,
}

fn meaning(error: &tokio_postgres::Error) -> Meaning {
    match error.code() {
        Some(code)
            if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            Meaning::Authentication
        }
        // The server ended the session (an administrator, a shutdown), or it is starting up.
        Some(code) if code.code().starts_with("57") || code.code().starts_with("08") => Meaning::Connection,
        Some(code) if *code == SqlState::QUERY_CANCELED => Meaning::Timeout,
        Some(_) => Meaning::Other,
        // No SQLSTATE: the connection itself failed (refused, reset, closed, TLS, timeout).
        None => Meaning::Connection,
    }
}

/// Whether the server refused the credentials.
pub(crate) fn is_authentication(error: &tokio_postgres::Error) -> bool {
    matches!(meaning(error), Meaning::Authentication)
}

/// Whether `error` proves the session is gone — the server ended it or the connection closed —
/// so that every session lock it held is released. A timeout proves nothing.
pub(crate) fn session_ended(error: &tokio_postgres::Error) -> bool {
    error.is_closed() || error.code().is_some_and(|code| code.code().starts_with("57P"))
}

/// Maps a driver error met while doing `operation`.
pub(crate) fn map(operation: &'static str, source: tokio_postgres::Error) -> Error {
    PgFailure::Statement { operation, source }.into()
}
