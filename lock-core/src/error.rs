//! The one error type of every distlock operation.

use std::fmt;

use crate::name::LockName;

/// A boxed error from a backend's driver, kept as the [`std::error::Error::source`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with distlock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, grouped by meaning rather than by backend.
///
/// Contention is not an error: a lock held by someone else is `Ok(None)` from the `try_` methods.
/// Backends keep their own error detail as the `source`.
///
/// `Display` shows the meaning and then every cause once (`postgres: acquire: relation
/// "distlock_locks" does not exist`): print it alone. [`source`](std::error::Error::source) is
/// there to match on a driver's error, not to print it again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server could not be reached, or the connection broke.
    #[error("{backend}: connection failed{}", Causes(Some(&**.source)))]
    Connection {
        /// The backend that failed (`"redis"`, `"postgres"`, …).
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The TLS handshake failed: the server's certificate is not signed by a trusted CA, does
    /// not name the host, or the server does not speak TLS on that port (or the client's
    /// certificate was refused). Also the other way round: a server that accepts only TLS
    /// refused a plaintext connection (the source says so). Retrying does not help: the
    /// configuration must change.
    #[error("{backend}: TLS handshake failed{}", Causes(Some(&**.source)))]
    Tls {
        /// The backend that failed.
        backend: &'static str,
        /// The TLS library's or driver's error.
        #[source]
        source: BoxError,
    },
    /// The server rejected the credentials.
    #[error("{backend}: authentication failed{}", Causes(Some(&**.source)))]
    Authentication {
        /// The backend that failed.
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// An operation did not complete within its configured time limit.
    #[error("{backend}: {operation} timed out{}", Causes(.source.as_deref()))]
    Timeout {
        /// The backend that failed.
        backend: &'static str,
        /// What was being done (`"connect"`, `"acquire"`, …).
        operation: &'static str,
        /// The driver's error, where there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The lock is not (or no longer) held by this owner: its lease expired, someone else took it
    /// over, or it was deleted underneath the holder.
    #[error("lock {name} is not held by this owner (expired, taken over or deleted)")]
    NotHeld {
        /// The lock concerned.
        name: LockName,
    },
    /// The name breaks the rules of [`LockName`].
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Which rule it breaks.
        reason: String,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong with it.
        reason: String,
    },
    /// The backend cannot do what was asked, by design.
    #[error("{backend} does not support {feature}")]
    Unsupported {
        /// The backend concerned.
        backend: &'static str,
        /// The missing ability.
        feature: &'static str,
    },
    /// The lock was acquired on a primary but not confirmed by enough replicas in time, so it was
    /// released again (a failover could otherwise hand it to a second holder).
    #[error("lock {name}: {acknowledged} of {required} replicas acknowledged the acquisition in time")]
    NotReplicated {
        /// The lock concerned.
        name: LockName,
        /// How many replicas acknowledged.
        acknowledged: u32,
        /// How many were required.
        required: u32,
    },
    /// A non-reentrant lock was asked to block for a lock its own thread already holds: waiting
    /// could never end.
    #[error("lock {name} is already held by this thread and is not reentrant")]
    WouldDeadlock {
        /// The lock concerned.
        name: LockName,
    },
    /// A semaphore was asked for with another number of permits than the one its current
    /// holders use: admitting it would let more holders in than either count allows.
    #[error("semaphore {name} has {held_with} permits on the server; this client asked for {asked}")]
    PermitsMismatch {
        /// The semaphore concerned.
        name: LockName,
        /// The count this client asked for.
        asked: u32,
        /// The count the semaphore's current holders use.
        held_with: u32,
    },
    /// Every connection of the client's pool is in use (session holds own one each): a `try_`
    /// call reports this at once instead of waiting for a connection to come back.
    #[error("{backend}: all {size} connections of the pool are in use")]
    PoolExhausted {
        /// The backend concerned.
        backend: &'static str,
        /// The pool's size.
        size: u32,
    },
    /// A fenced store refused a write: a higher fencing token has written the key, so this
    /// writer's lock has passed to someone else (see [`FencedStore`](crate::FencedStore)).
    #[error("write of {key} refused: fencing token {presented} is below {highest}, which already wrote it")]
    StaleToken {
        /// The key written.
        key: String,
        /// The token the refused write carried.
        presented: crate::FencingToken,
        /// The highest token that wrote the key.
        highest: crate::FencingToken,
    },
    /// The client was closed ([`LockClient::close`](crate::LockClient::close), or its last
    /// handle dropped): it hands out no more locks.
    #[error("the lock client is closed")]
    Closed,
    /// The backend failed in a way none of the other variants describes.
    #[error("{backend}{}", Causes(Some(&**.source)))]
    Backend {
        /// The backend that failed.
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Whether trying the same operation again may succeed: a broken connection, a timeout or an
    /// exhausted pool.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Connection { .. } | Error::Timeout { .. } | Error::PoolExhausted { .. })
    }

    /// The lock an error is about, where it names one.
    pub(crate) fn lock_name(&self) -> Option<&LockName> {
        match self {
            Error::NotHeld { name }
            | Error::NotReplicated { name, .. }
            | Error::WouldDeadlock { name }
            | Error::PermitsMismatch { name, .. } => Some(name),
            _ => None,
        }
    }

    /// An [`Error::InvalidConfig`] with this reason.
    pub fn invalid_config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig { reason: reason.into() }
    }

    /// An [`Error::Backend`] wrapping `source`.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend { backend, source: source.into() }
    }
}

/// A source and its own sources, each after `": "` and each once: a cause whose text the causes
/// before it already contain (drivers often repeat their source in their own message) is left out.
struct Causes<'a>(Option<&'a (dyn std::error::Error + Send + Sync + 'static)>);

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&causes(self.0.map(|source| source as _), String::new()))
    }
}

/// `error`'s text and then each of its causes once, after `": "` — the one formatter [`Error`]'s
/// `Display` uses too — for a driver's error kept as text (a pool's last connection failure).
pub fn display_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let top = error.to_string();
    format!("{top}{}", causes(error.source(), top.clone()))
}

/// `": cause"` for `first` and each of its sources whose text `shown` (and the causes before it)
/// do not already contain: drivers often repeat their source in their own message.
fn causes(first: Option<&(dyn std::error::Error + 'static)>, mut shown: String) -> String {
    let mut out = String::new();
    let mut next = first;
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !shown.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
            shown.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("acquire: {0}")]
    struct Wrapper(#[source] std::io::Error);

    #[test]
    fn display_shows_each_cause_once() {
        let refused = || {
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)")
        };
        let error = Error::Connection { backend: "redis", source: Box::new(Wrapper(refused())) };
        assert_eq!(error.to_string(), "redis: connection failed: acquire: Connection refused (os error 111)");
        let error = Error::backend("postgres", "relation \"distlock_locks\" does not exist");
        assert_eq!(error.to_string(), "postgres: relation \"distlock_locks\" does not exist");
        let error = Error::Timeout { backend: "mysql", operation: "acquire", source: None };
        assert_eq!(error.to_string(), "mysql: acquire timed out");
        assert_eq!(display_chain(&Wrapper(refused())), "acquire: Connection refused (os error 111)");
    }
}
