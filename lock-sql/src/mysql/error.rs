//! MySQL/MariaDB failures, and how each maps onto [`lock_core::Error`] by meaning.

use std::io::ErrorKind;
use std::time::Duration;

use lock_core::Error;
use mysql::{DriverError, Error as MySqlError};

/// The backend's label in errors and logs.
pub(crate) const BACKEND: &str = "mysql";

/// `ER_LOCK_WAIT_TIMEOUT`: `NOWAIT`/`WAIT n` (MariaDB) or `innodb_lock_wait_timeout` ran out.
const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_LOCK_NOWAIT`: MySQL 8's answer to `NOWAIT` on a held row.
const LOCK_NOWAIT: u16 = 3572;
/// `ER_ACCESS_DENIED_ERROR`, `ER_DBACCESS_DENIED_ERROR`.
const ACCESS_DENIED: [u16; 2] = [1045, 1044];
/// `ER_CONNECTION_KILLED` (MariaDB), `ER_SERVER_SHUTDOWN`, `ER_QUERY_INTERRUPTED` of a killed
/// connection.
const SESSION_KILLED: [u16; 3] = [1927, 1053, 1317];

/// What went wrong inside the MySQL backend. Kept as the `source` of the public error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MyFailure {
    /// A statement (or the connection setup) failed.
    #[error("{operation}: {source}")]
    Statement {
        operation: &'static str,
        #[source]
        source: MySqlError,
    },
    /// No pooled connection within the pool timeout.
    #[error("no connection to mysql within {timeout:?}: all {max} connections are in use (held row and advisory locks own theirs)")]
    PoolExhausted { timeout: Duration, max: u32 },
    /// A statement answered something the backend's statements never return.
    #[error("unexpected reply to {operation}: {detail}")]
    Reply { operation: &'static str, detail: String },
}

impl From<MyFailure> for Error {
    fn from(failure: MyFailure) -> Self {
        match &failure {
            MyFailure::Statement { operation, source } => match meaning(source) {
                Meaning::Authentication => Error::Authentication { backend: BACKEND, source: failure.into() },
                Meaning::Connection => Error::Connection { backend: BACKEND, source: failure.into() },
                Meaning::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
                }
                Meaning::Config => Error::InvalidConfig { reason: failure.to_string() },
                Meaning::Other => Error::Backend { backend: BACKEND, source: failure.into() },
            },
            MyFailure::PoolExhausted { .. } => {
                Error::Timeout { backend: BACKEND, operation: "connect", source: Some(failure.into()) }
            }
            MyFailure::Reply { .. } => Error::Backend { backend: BACKEND, source: failure.into() },
        }
    }
}

enum Meaning {
    Authentication,
    Connection,
    Timeout,
    Config,
    Other,
}

fn meaning(error: &MySqlError) -> Meaning {
    match error {
        MySqlError::MySqlError(server) if ACCESS_DENIED.contains(&server.code) => Meaning::Authentication,
        MySqlError::MySqlError(server) if SESSION_KILLED.contains(&server.code) => Meaning::Connection,
        MySqlError::MySqlError(_) => Meaning::Other,
        MySqlError::IoError(io) if matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Meaning::Timeout
        }
        MySqlError::IoError(_) | MySqlError::CodecError(_) => Meaning::Connection,
        MySqlError::DriverError(DriverError::ConnectTimeout | DriverError::Timeout) => Meaning::Timeout,
        MySqlError::DriverError(DriverError::CouldNotConnect(_)) => Meaning::Connection,
        MySqlError::UrlError(_) => Meaning::Config,
        _ => Meaning::Other,
    }
}

/// The lock is held by someone else (`NOWAIT` refused, or a lock wait ran out).
pub(crate) fn is_busy(error: &MySqlError) -> bool {
    matches!(error, MySqlError::MySqlError(server) if server.code == LOCK_WAIT_TIMEOUT || server.code == LOCK_NOWAIT)
}

/// Whether `error` proves the session is gone (killed, or its connection closed), so that
/// every lock it held is released. A timeout proves nothing.
pub(crate) fn session_ended(error: &MySqlError) -> bool {
    match error {
        MySqlError::MySqlError(server) => SESSION_KILLED.contains(&server.code),
        MySqlError::IoError(io) => matches!(
            io.kind(),
            ErrorKind::UnexpectedEof
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::NotConnected
        ),
        MySqlError::CodecError(_) => true,
        _ => false,
    }
}

/// Maps a driver error met while doing `operation`.
pub(crate) fn map(operation: &'static str, source: MySqlError) -> Error {
    MyFailure::Statement { operation, source }.into()
}
