//! PostgreSQL failures, and how each maps onto [`lock_core::Error`] by meaning.

use std::time::Duration;

use lock_core::Error;
use tokio_postgres::error::SqlState;

use crate::tls::{PlaintextRefused, LIBPQ};

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
    /// Connecting failed in TLS ([`is_tls_failure`]). The public error already says the
    /// handshake failed, so this names the operation and the driver's reason only.
    #[error("{operation}")]
    Handshake {
        operation: &'static str,
        #[source]
        source: HandshakeCause,
    },
    /// The server did not answer within the I/O timeout; the connection is dropped, since the
    /// reply may still come.
    #[error("{operation}: no reply within {timeout:?}")]
    Timeout { operation: &'static str, timeout: Duration },
    /// No pooled connection within the pool timeout: connecting did not succeed in time.
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

impl PgFailure {
    /// The failure of `operation` with the driver's `source`: [`PgFailure::Handshake`] for a
    /// failure in TLS, else [`PgFailure::Statement`].
    pub(crate) fn statement(operation: &'static str, source: tokio_postgres::Error) -> Self {
        if is_tls_failure(&source) {
            PgFailure::Handshake { operation, source: HandshakeCause(source) }
        } else {
            PgFailure::Statement { operation, source }
        }
    }
}

/// The driver's error for a failed TLS handshake, shown without the driver's own "error
/// performing TLS handshake": its text is the driver's cause (the TLS library's error, or "server
/// does not support TLS"), its source that cause's source, so that an error chain names the
/// handshake once (the public [`Error::Tls`] does) and the TLS library's error stays reachable.
#[derive(Debug)]
pub(crate) struct HandshakeCause(tokio_postgres::Error);

impl std::fmt::Display for HandshakeCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::error::Error::source(&self.0) {
            Some(cause) => std::fmt::Display::fmt(cause, f),
            None => std::fmt::Display::fmt(&self.0, f),
        }
    }
}

impl std::error::Error for HandshakeCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)?.source()
    }
}

impl From<PgFailure> for Error {
    fn from(failure: PgFailure) -> Self {
        match &failure {
            PgFailure::Statement { operation, source } => match meaning(source) {
                Meaning::Authentication => Error::Authentication { backend: BACKEND, source: failure.into() },
                Meaning::Tls => Error::Tls { backend: BACKEND, source: failure.into() },
                Meaning::PlaintextRefused => Error::Tls {
                    backend: BACKEND,
                    source: Box::new(PlaintextRefused { hint: LIBPQ.require_hint, source: failure.into() }),
                },
                Meaning::Connection => Error::Connection { backend: BACKEND, source: failure.into() },
                Meaning::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
                }
                Meaning::Other => Error::Backend { backend: BACKEND, source: failure.into() },
                Meaning::SharedSession => Error::Backend {
                    backend: BACKEND,
                    source: Box::new(super::pooler::SharedSession { failure: failure.into() }),
                },
            },
            PgFailure::Handshake { .. } => Error::Tls { backend: BACKEND, source: failure.into() },
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
    /// The TLS handshake failed (or the server declined TLS that `require` asked for).
    Tls,
    /// The server accepts only TLS, and the connection was plaintext.
    PlaintextRefused,
    Connection,
    Timeout,
    /// A pooler shares server sessions the settings did not declare (`pooler.rs`).
    SharedSession,
    Other,
}

fn meaning(error: &tokio_postgres::Error) -> Meaning {
    if is_tls_failure(error) {
        Meaning::Tls
    } else if refuses_plaintext(error) {
        Meaning::PlaintextRefused
    } else if super::pooler::is_shared_session_symptom(error)
        || super::pooler::is_statement_mode_refusal(error)
    {
        Meaning::SharedSession
    } else {
        meaning_of(error.code())
    }
}

/// Whether connecting failed in TLS: the handshake (an untrusted certificate, a wrong name, a
/// refused client certificate) or a server that declined the TLS `require` asked for.
/// tokio-postgres exposes its error kinds only in the text, whose first words for this one
/// ("error performing TLS handshake") have not changed since 0.5; the TLS tests pin them.
fn is_tls_failure(error: &tokio_postgres::Error) -> bool {
    error.code().is_none() && error.to_string().starts_with("error performing TLS handshake")
}

/// Whether the server refused a plaintext connection for being plaintext: `pg_hba.conf`
/// rejects it (a `hostnossl … reject` line, or no `host`/`hostnossl` line for it), and the
/// server says so with ", no encryption" (PostgreSQL 12 and later, English messages;
/// otherwise it stays an authentication failure, which is the SQLSTATE).
fn refuses_plaintext(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::INVALID_AUTHORIZATION_SPECIFICATION && db.message().ends_with("no encryption")
    })
}

/// How a failed connection attempt is reported when only its text is kept (the pool's last
/// failure): its public error variant, and the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectFailure {
    Authentication,
    Tls,
    Other,
}

/// The [`ConnectFailure`] of `failure`, and the text to report it with.
pub(crate) fn connect_failure(failure: &PgFailure) -> (ConnectFailure, String) {
    let text = lock_core::display_chain(failure);
    if matches!(failure, PgFailure::Handshake { .. }) {
        return (ConnectFailure::Tls, text);
    }
    let PgFailure::Statement { source, .. } = failure else { return (ConnectFailure::Other, text) };
    match meaning(source) {
        Meaning::Authentication => (ConnectFailure::Authentication, text),
        Meaning::Tls => (ConnectFailure::Tls, text),
        Meaning::PlaintextRefused => {
            let refused = PlaintextRefused { hint: LIBPQ.require_hint, source: text.into() };
            (ConnectFailure::Tls, lock_core::display_chain(&refused))
        }
        _ => (ConnectFailure::Other, text),
    }
}

/// What a SQLSTATE means (`None`: the connection itself failed — refused, reset, closed, TLS).
fn meaning_of(code: Option<&SqlState>) -> Meaning {
    match code {
        Some(code)
            if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            Meaning::Authentication
        }
        // Before the `57` class below, which it belongs to: a statement timeout or a cancel
        // request, on a session that is still there.
        Some(code) if *code == SqlState::QUERY_CANCELED => Meaning::Timeout,
        // The server ended the session (an administrator, a shutdown, an idle limit), or it is
        // starting up.
        Some(code) if code.code().starts_with("57") || code.code().starts_with("08") => Meaning::Connection,
        Some(code) if *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT => Meaning::Connection,
        Some(_) => Meaning::Other,
        None => Meaning::Connection,
    }
}

/// Whether `error` proves the session is gone — the server ended it or the connection closed —
/// so that every session lock it held is released. A timeout proves nothing. A `FATAL` (or
/// `PANIC`) error is the last message of a connection, whatever its code: a pooler that ends a
/// client (PgBouncer's `server conn crashed?`, its `idle_transaction_timeout`, an admin's
/// `KILL`) sends one with `08P01`, and closes the server connection holding the client's
/// transaction.
pub(crate) fn session_ended(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::Severity;
    error.is_closed()
        || error.code().is_some_and(code_ends_session)
        || error
            .as_db_error()
            .and_then(|db| db.parsed_severity())
            .is_some_and(|severity| matches!(severity, Severity::Fatal | Severity::Panic))
}

/// `57P01`–`57P05` (terminated by an administrator, a shutdown, `idle_session_timeout`) and
/// `25P03` (`idle_in_transaction_session_timeout`): the server ended the session.
fn code_ends_session(code: &SqlState) -> bool {
    code.code().starts_with("57P") || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
}

/// Maps a driver error met while doing `operation`.
pub(crate) fn map(operation: &'static str, source: tokio_postgres::Error) -> Error {
    PgFailure::statement(operation, source).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_statement_is_a_timeout_not_a_connection_failure() {
        assert!(matches!(meaning_of(Some(&SqlState::QUERY_CANCELED)), Meaning::Timeout));
        assert!(matches!(meaning_of(Some(&SqlState::ADMIN_SHUTDOWN)), Meaning::Connection));
        assert!(matches!(meaning_of(None), Meaning::Connection));
        assert!(!code_ends_session(&SqlState::QUERY_CANCELED));
    }

    #[test]
    fn the_idle_limits_end_the_session() {
        assert!(code_ends_session(&SqlState::IDLE_SESSION_TIMEOUT));
        assert!(code_ends_session(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT));
        assert!(matches!(
            meaning_of(Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT)),
            Meaning::Connection
        ));
    }
}
