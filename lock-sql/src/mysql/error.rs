//! MySQL/MariaDB failures, and how each maps onto [`lock_core::Error`] by meaning.

use std::io::ErrorKind;

use lock_core::Error;
use mysql::{DriverError, Error as MySqlError};

use crate::tls::{PlaintextRefused, MYSQL};

/// The backend's label in errors and logs.
pub(crate) const BACKEND: &str = "mysql";

/// `ER_LOCK_WAIT_TIMEOUT`: `NOWAIT`/`WAIT n` (MariaDB) or `innodb_lock_wait_timeout` ran out.
const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_LOCK_NOWAIT`: MySQL 8's answer to `NOWAIT` on a held row.
const LOCK_NOWAIT: u16 = 3572;
/// `ER_LOCK_DEADLOCK`: InnoDB rolled this transaction back to break a deadlock.
const DEADLOCK: u16 = 1213;
/// `ER_STATEMENT_TIMEOUT`: MariaDB's `max_statement_time` ran out (it bounds a row-lock wait to
/// the fraction of a second that `innodb_lock_wait_timeout`, whole seconds, cannot).
const STATEMENT_TIMEOUT: u16 = 1969;
/// `ER_ACCESS_DENIED_ERROR`, `ER_DBACCESS_DENIED_ERROR`.
const ACCESS_DENIED: [u16; 2] = [1045, 1044];
/// `ER_CONNECTION_KILLED` (MariaDB), `ER_SERVER_SHUTDOWN`, `ER_QUERY_INTERRUPTED` of a killed
/// connection.
const SESSION_KILLED: [u16; 3] = [1927, 1053, 1317];
/// `ER_SECURE_TRANSPORT_REQUIRED`: MySQL's refusal of a plaintext connection when
/// `require_secure_transport=ON`. MariaDB (10.11 measured) answers `ER_ACCESS_DENIED_ERROR`
/// instead, as for a wrong password: see [`map_plaintext_connect`].
const PLAINTEXT_REFUSED: u16 = 3159;

/// The operation name of opening a connection: TLS failures are recognised there only (a TLS
/// error later, on an open connection, is a broken connection like any other).
pub(crate) const CONNECT: &str = "connect";

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
    /// A statement answered something the backend's statements never return.
    #[error("unexpected reply to {operation}: {detail}")]
    Reply { operation: &'static str, detail: String },
}

impl From<MyFailure> for Error {
    fn from(failure: MyFailure) -> Self {
        match &failure {
            MyFailure::Statement { operation, source } => match meaning(operation, source) {
                Meaning::Authentication => Error::Authentication { backend: BACKEND, source: failure.into() },
                Meaning::Tls => Error::Tls { backend: BACKEND, source: failure.into() },
                Meaning::PlaintextRefused => Error::Tls {
                    backend: BACKEND,
                    source: Box::new(PlaintextRefused { hint: MYSQL.require_hint, source: failure.into() }),
                },
                Meaning::Connection => Error::Connection { backend: BACKEND, source: failure.into() },
                Meaning::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
                }
                Meaning::Config => Error::InvalidConfig { reason: failure.to_string() },
                Meaning::Other => Error::Backend { backend: BACKEND, source: failure.into() },
            },
            MyFailure::Reply { .. } => Error::Backend { backend: BACKEND, source: failure.into() },
        }
    }
}

enum Meaning {
    Authentication,
    /// Connecting failed in TLS (see [`is_tls_failure`]).
    Tls,
    /// The server accepts only TLS, and the connection was plaintext.
    PlaintextRefused,
    Connection,
    Timeout,
    Config,
    Other,
}

fn meaning(operation: &str, error: &MySqlError) -> Meaning {
    if operation == CONNECT && is_tls_failure(error) {
        return Meaning::Tls;
    }
    match error {
        MySqlError::MySqlError(server) if server.code == PLAINTEXT_REFUSED => Meaning::PlaintextRefused,
        MySqlError::MySqlError(server) if ACCESS_DENIED.contains(&server.code) => Meaning::Authentication,
        MySqlError::MySqlError(server) if SESSION_KILLED.contains(&server.code) => Meaning::Connection,
        MySqlError::MySqlError(_) => Meaning::Other,
        MySqlError::IoError(_) | MySqlError::CodecError(_) if io_timed_out(error) => Meaning::Timeout,
        MySqlError::IoError(_) | MySqlError::CodecError(_) => Meaning::Connection,
        MySqlError::DriverError(DriverError::ConnectTimeout | DriverError::Timeout) => Meaning::Timeout,
        MySqlError::DriverError(DriverError::CouldNotConnect(_)) => Meaning::Connection,
        MySqlError::UrlError(_) => Meaning::Config,
        _ => Meaning::Other,
    }
}

/// The socket's I/O error, whether the driver reports it bare or inside its packet codec's error
/// (a read timeout mid-packet comes that way).
fn io_error(error: &MySqlError) -> Option<&std::io::Error> {
    match error {
        MySqlError::IoError(io) => Some(io),
        // The codec's error type is not exported; its `source` is the I/O error, if any.
        MySqlError::CodecError(codec) => std::error::Error::source(codec)?.downcast_ref(),
        _ => None,
    }
}

/// Whether a read or write ran out of time (the socket's timeout): no reply, which proves nothing.
fn io_timed_out(error: &MySqlError) -> bool {
    io_error(error).is_some_and(|io| matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// Whether connecting failed in TLS: the driver's own TLS setup error, a server that offers no
/// TLS when TLS is asked for, or a handshake that rustls failed (an untrusted certificate, a
/// wrong name, a refused client certificate), which the driver reports as the I/O error of
/// its first write or read.
fn is_tls_failure(error: &MySqlError) -> bool {
    match error {
        MySqlError::TlsError(_) | MySqlError::DriverError(DriverError::TlsNotSupported) => true,
        _ => io_error(error)
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
    }
}

/// The lock is held by someone else (`NOWAIT` refused, or a lock wait ran out).
pub(crate) fn is_busy(error: &MySqlError) -> bool {
    matches!(error, MySqlError::MySqlError(server)
        if [LOCK_WAIT_TIMEOUT, LOCK_NOWAIT, STATEMENT_TIMEOUT].contains(&server.code))
}

/// Whether `error` is InnoDB's deadlock verdict (the transaction was rolled back; trying it
/// again is safe).
pub(crate) fn is_deadlock(error: &MySqlError) -> bool {
    matches!(error, MySqlError::MySqlError(server) if server.code == DEADLOCK)
}

/// Whether `error` proves the session is gone (killed, or its connection closed), so that
/// every lock it held is released. A timeout proves nothing.
pub(crate) fn session_ended(error: &MySqlError) -> bool {
    match error {
        MySqlError::MySqlError(server) => SESSION_KILLED.contains(&server.code),
        // A codec error without an I/O error (out of step, garbled) makes the connection
        // unusable, but says nothing of the session.
        MySqlError::IoError(_) | MySqlError::CodecError(_) => io_error(error).is_some_and(|io| {
            matches!(
                io.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::NotConnected
            )
        }),
        _ => false,
    }
}

/// `ER_ACCESS_DENIED_ERROR`: a wrong password or unknown user, and on MariaDB (10.11 measured)
/// also a plaintext login to a server with `require_secure_transport=ON`.
const ACCESS_DENIED_ERROR: u16 = ACCESS_DENIED[0];

/// The hint added to a plaintext login's `ER_ACCESS_DENIED_ERROR`.
#[derive(Debug, thiserror::Error)]
#[error(
    "access denied (MariaDB also reports a server that requires secure transport this way: if it \
     does, connect with ssl-mode=REQUIRED or stronger)"
)]
struct DeniedInPlaintext {
    #[source]
    source: MyFailure,
}

/// Maps a failure to open a plaintext connection: as [`map`], except that
/// `ER_ACCESS_DENIED_ERROR` is [`Error::Authentication`] with a hint that MariaDB answers a
/// plaintext login to a TLS-only server the same way.
pub(crate) fn map_plaintext_connect(source: MySqlError) -> Error {
    match &source {
        MySqlError::MySqlError(server) if server.code == ACCESS_DENIED_ERROR => {
            let failure = MyFailure::Statement { operation: CONNECT, source };
            Error::Authentication {
                backend: BACKEND,
                source: Box::new(DeniedInPlaintext { source: failure }),
            }
        }
        _ => map(CONNECT, source),
    }
}

/// Maps a driver error met while doing `operation`.
pub(crate) fn map(operation: &'static str, source: MySqlError) -> Error {
    MyFailure::Statement { operation, source }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_timeout_is_a_timeout_not_an_ended_session() {
        let timed_out = MySqlError::IoError(ErrorKind::WouldBlock.into());
        assert!(!session_ended(&timed_out));
        assert!(matches!(map("acquire", timed_out), Error::Timeout { .. }));
    }

    #[test]
    fn a_rustls_error_while_connecting_is_a_tls_failure() {
        let handshake = || {
            let certificate = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
            MySqlError::IoError(std::io::Error::new(ErrorKind::InvalidData, certificate))
        };
        let error = map(CONNECT, handshake());
        assert!(matches!(error, Error::Tls { .. }), "{error}");
        assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        // On an open connection it is a broken connection, as any I/O error.
        assert!(matches!(map("acquire", handshake()), Error::Connection { .. }));
        let no_tls = map(CONNECT, MySqlError::DriverError(DriverError::TlsNotSupported));
        assert!(matches!(no_tls, Error::Tls { .. }), "{no_tls}");
    }
}
