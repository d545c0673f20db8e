//! The backend's own errors, and how each maps onto [`lock_core::Error`] by meaning.

use std::time::Duration;

use lock_core::Error;
use redis::{ErrorKind, RedisError};

/// The backend's label in errors and logs.
pub(crate) const BACKEND: &str = "redis";

/// What went wrong inside the Redis backend. Kept as the `source` of the public error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RedisFailure {
    /// A command (or the connection setup) failed.
    #[error("{operation}: {source}")]
    Command {
        /// What was being done (`"acquire"`, `"connect"`, …).
        operation: &'static str,
        #[source]
        source: RedisError,
    },
    /// No pooled connection became available in time, and no connection attempt failed: every
    /// connection is busy, or the server accepts connections but does not answer.
    #[error("no connection to redis within {timeout:?} (pool exhausted, or the server does not answer)")]
    PoolTimeout { timeout: Duration },
    /// The TLS handshake failed (or a TLS record was refused): rustls's error, which redis-rs
    /// hides inside an I/O error.
    #[cfg(feature = "tls")]
    #[error("{operation}: {source}")]
    Tls {
        operation: &'static str,
        #[source]
        source: rustls::Error,
    },
}

impl RedisFailure {
    pub(crate) fn command(operation: &'static str, source: RedisError) -> Self {
        RedisFailure::Command { operation, source }
    }
}

impl From<RedisFailure> for Error {
    fn from(failure: RedisFailure) -> Self {
        match &failure {
            #[cfg(feature = "tls")]
            // A failed handshake. A TLS error on a connection already open is a broken
            // connection like any other (retryable), not a configuration to change.
            RedisFailure::Command { operation, source }
                if *operation == "connect" && crate::tls::rustls_cause(source).is_some() =>
            {
                let source = crate::tls::rustls_cause(source).expect("just found");
                let failure = RedisFailure::Tls { operation, source };
                Error::Tls { backend: BACKEND, source: failure.into() }
            }
            RedisFailure::Command { operation, source } => match classify(source) {
                Meaning::Authentication => Error::Authentication { backend: BACKEND, source: failure.into() },
                Meaning::Timeout => {
                    Error::Timeout { backend: BACKEND, operation, source: Some(failure.into()) }
                }
                Meaning::Connection => Error::Connection { backend: BACKEND, source: failure.into() },
                Meaning::Config => Error::InvalidConfig { reason: failure.to_string() },
                Meaning::Other => Error::Backend { backend: BACKEND, source: failure.into() },
            },
            RedisFailure::PoolTimeout { .. } => {
                Error::Timeout { backend: BACKEND, operation: "connect", source: Some(failure.into()) }
            }
            #[cfg(feature = "tls")]
            RedisFailure::Tls { .. } => Error::Tls { backend: BACKEND, source: failure.into() },
        }
    }
}

/// Maps a driver error met while doing `operation`.
pub(crate) fn map(operation: &'static str, source: RedisError) -> Error {
    RedisFailure::command(operation, source).into()
}

enum Meaning {
    Authentication,
    Timeout,
    Connection,
    Config,
    Other,
}

fn classify(error: &RedisError) -> Meaning {
    // The driver reports a failed AUTH during connection setup as AuthenticationFailed; a
    // command sent without (valid) credentials gets NOAUTH, and an AUTH of its own WRONGPASS.
    if error.kind() == ErrorKind::AuthenticationFailed || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        return Meaning::Authentication;
    }
    // Redis refuses longer commands (EVALSHA with its keys and arguments) from a client that
    // has not authenticated with a protocol error instead of NOAUTH, and closes the connection.
    if error.detail().is_some_and(|detail| detail.contains("unauthenticated")) {
        return Meaning::Authentication;
    }
    if error.is_timeout() {
        return Meaning::Timeout;
    }
    if error.is_connection_refusal() || error.is_connection_dropped() || error.is_io_error() {
        return Meaning::Connection;
    }
    if error.kind() == ErrorKind::InvalidClientConfig {
        return Meaning::Config;
    }
    Meaning::Other
}

/// Whether `error` says a slot migration refused the request, which was not run: `TRYAGAIN`
/// (the migration split its keys between two nodes) or `ASK` (the keys are on the importing
/// node; the caller's retries ran out before it took the request).
pub(crate) fn is_split_by_migration(error: &Error) -> bool {
    redis_cause(error).is_some_and(|cause| {
        matches!(
            cause.kind(),
            ErrorKind::Server(redis::ServerErrorKind::TryAgain | redis::ServerErrorKind::Ask)
        )
    })
}

/// The Redis error behind `error`, if a Redis command or connection failed (what the server
/// replied: `MOVED`, `READONLY`, …).
pub(crate) fn redis_cause(error: &Error) -> Option<&RedisError> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(RedisFailure::Command { source, .. }) = cause.downcast_ref::<RedisFailure>() {
            return Some(source);
        }
        if let Some(redis) = cause.downcast_ref::<RedisError>() {
            return Some(redis);
        }
        source = cause.source();
    }
    None
}

/// Whether a connection that returned `error` can still be trusted with the next command.
///
/// Only a complete error *reply* from the server leaves the connection in step. After an I/O
/// error or a read timeout the reply may still arrive later and would be read as the answer to
/// the next command, so such a connection must be thrown away.
pub(crate) fn leaves_connection_usable(error: &RedisError) -> bool {
    // The server closes a connection after a protocol error.
    let protocol_error = error.detail().is_some_and(|detail| detail.starts_with("Protocol error"));
    matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType)
        && !error.is_io_error()
        && !protocol_error
}

/// `error` and its causes, as one line (its `Display` shows them, each once).
pub(crate) fn error_chain(error: &Error) -> String {
    error.to_string()
}

/// A copy of `error` with the same variant (so the same meaning and `is_retryable`) and its
/// message as the source, but no Redis error behind it: for another item of the same failed
/// batch, and for a failure that must not be taken for a redirect and sent again
/// ([`redis_cause`] finds nothing in it).
pub(crate) fn detached(error: &Error) -> Error {
    let source = || -> lock_core::BoxError { error_chain(error).into() };
    match error {
        Error::Connection { backend, .. } => Error::Connection { backend, source: source() },
        Error::Authentication { backend, .. } => Error::Authentication { backend, source: source() },
        Error::Tls { backend, .. } => Error::Tls { backend, source: source() },
        Error::Timeout { backend, operation, .. } => {
            Error::Timeout { backend, operation, source: Some(source()) }
        }
        Error::InvalidConfig { reason } => Error::InvalidConfig { reason: reason.clone() },
        _ => Error::Backend { backend: BACKEND, source: source() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::new(kind, "test"))
    }

    #[test]
    fn errors_map_by_meaning() {
        let mapped = |e: RedisError| Error::from(RedisFailure::command("acquire", e));
        assert!(matches!(mapped(io(std::io::ErrorKind::ConnectionRefused)), Error::Connection { .. }));
        assert!(matches!(mapped(io(std::io::ErrorKind::ConnectionReset)), Error::Connection { .. }));
        assert!(matches!(
            mapped(io(std::io::ErrorKind::TimedOut)),
            Error::Timeout { operation: "acquire", .. }
        ));
        assert!(matches!(mapped(io(std::io::ErrorKind::WouldBlock)), Error::Timeout { .. }));
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed"));
        assert!(matches!(mapped(auth), Error::Authentication { .. }));
        let config = RedisError::from((ErrorKind::InvalidClientConfig, "Redis URL did not parse"));
        assert!(matches!(mapped(config), Error::InvalidConfig { .. }));
        let pool = Error::from(RedisFailure::PoolTimeout { timeout: Duration::from_secs(1) });
        assert!(matches!(pool, Error::Timeout { operation: "connect", .. }));
    }

    #[test]
    fn only_complete_server_replies_keep_a_connection() {
        assert!(!leaves_connection_usable(&io(std::io::ErrorKind::TimedOut)));
        assert!(!leaves_connection_usable(&io(std::io::ErrorKind::UnexpectedEof)));
        let reply = RedisError::from((ErrorKind::Server(redis::ServerErrorKind::ResponseError), "WRONGTYPE"));
        assert!(leaves_connection_usable(&reply));
    }
}
