//! What the SQL backends' leases share: the [`Hold`] (lock-table owner, or a connection whose
//! session holds the lock), and the public lease types' fields, accessors and `Debug` output.

use lock_core::{Access, Error, LockName, OwnerToken};

use crate::session_connection::{EndSession, SessionConnection};
use crate::shared_session::SharedSession;

/// How a lease holds its lock. `C` is the database's pooled connection, `K` its advisory-lock
/// key.
pub(crate) enum Hold<C: EndSession, K> {
    /// A lock-table row owned by this owner token (as the statements write it).
    Table { owner: String },
    /// A row lock: an open transaction on the connection.
    Row { connection: SessionConnection<C> },
    /// An advisory lock held by the connection's session.
    Advisory { key: K, connection: SessionConnection<C> },
    /// A read-write lock held by a session (row or advisory kind), under this owner token: a
    /// writer's session is shared with the read lease its owner asks for (a downgrade).
    ReadWrite { access: Access, owner: OwnerToken, session: SharedSession<C> },
    /// A semaphore permit: this owner token's entry in the permits table.
    Permit { owner: String },
}

impl<C: EndSession, K> Hold<C, K> {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Hold::Table { .. } => "table",
            Hold::Row { .. } => "row",
            Hold::Advisory { .. } => "advisory",
            Hold::ReadWrite { access: Access::Read, .. } => "read",
            Hold::ReadWrite { access: Access::Write, .. } => "write",
            Hold::Permit { .. } => "permit",
        }
    }
}

/// A guarded write on a session hold whose first step failed: a broken connection means the
/// session, and the lock with it, is gone, and nothing was written ([`Error::NotHeld`]); other
/// errors say nothing of the hold.
pub(crate) fn session_gone(error: Error, name: &LockName) -> Error {
    match error {
        Error::Connection { .. } => Error::NotHeld { name: name.clone() },
        other => other,
    }
}

/// Defines a public lease type: `name`, `fence`, `ttl` and a crate-private [`Hold`].
macro_rules! sql_lease {
    ($(#[$doc:meta])* $lease:ident, $connection:ty, $key:ty) => {
        $(#[$doc])*
        pub struct $lease {
            pub(crate) name: lock_core::LockName,
            pub(crate) fence: lock_core::FencingToken,
            pub(crate) ttl: std::time::Duration,
            pub(crate) hold: crate::lease::Hold<$connection, $key>,
            /// Whether this is the lock of the election `name` (keyed apart from the mutex).
            pub(crate) election: bool,
        }

        impl $lease {
            pub(crate) fn new(
                name: &lock_core::LockName,
                fence: u64,
                ttl: std::time::Duration,
                hold: crate::lease::Hold<$connection, $key>,
            ) -> Self {
                Self { name: name.clone(), fence: lock_core::FencingToken::new(fence), ttl, hold, election: false }
            }

            /// A lease of `key`'s lock (a mutex or an election's).
            pub(crate) fn keyed(
                key: &crate::lock_key::LockKey,
                fence: u64,
                ttl: std::time::Duration,
                hold: crate::lease::Hold<$connection, $key>,
            ) -> Self {
                Self { election: key.is_election(), ..Self::new(key.name(), fence, ttl, hold) }
            }

            /// The key this lease holds on the server.
            pub(crate) fn lock_key(&self) -> crate::lock_key::LockKey {
                match self.election {
                    true => crate::lock_key::LockKey::election(&self.name),
                    false => crate::lock_key::LockKey::mutex(&self.name),
                }
            }

            /// The lock's name.
            pub fn name(&self) -> &lock_core::LockName {
                &self.name
            }

            /// The fencing token issued with this acquisition.
            pub fn fencing_token(&self) -> lock_core::FencingToken {
                self.fence
            }

            /// The lease (lock table) or session timeout (row, advisory) last granted.
            pub fn lease(&self) -> std::time::Duration {
                self.ttl
            }
        }

        impl std::fmt::Debug for $lease {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($lease))
                    .field("name", &self.name)
                    .field("kind", &self.hold.kind())
                    .field("fence", &self.fence)
                    .field("election", &self.election)
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use sql_lease;

/// How the row and advisory kinds of both databases work, for reports.
pub(crate) const SESSION_PROFILE: lock_core::BackendProfile = lock_core::BackendProfile::new(
    "a sequence, in the statement that grants the lock (never rolled back)",
    "the database's own lock queue: a timed wait keeps its place until its deadline (first come, \
     first served); lock() without a deadline re-queues every I/O timeout (at least 1 s) to \
     notice a silent server, and can lose its place to later waiters then",
    "the holding session ends with its server: the lock is released, the holder told; a holder \
     cut off from the server loses the lock there one lease after its last check (the session's \
     idle limit), not before it is told",
)
.with_guarded_writes(
    "fenced stores (one upsert checks and raises the row's fence); execute_if_held: inside the \
     holding transaction (row kind) or on the holding session after a check (advisory kind)",
);
