//! [`PostgresLease`]: what one acquisition keeps.

use std::fmt;
use std::time::Duration;

use lock_core::{FencingToken, LockName};

use super::connection::PooledPg;

/// One acquisition: its name and fencing token, and either the owner token written in the lock
/// table or the connection whose session holds the row or advisory lock.
pub struct PostgresLease {
    pub(crate) name: LockName,
    pub(crate) fence: FencingToken,
    pub(crate) ttl: Duration,
    pub(crate) hold: Hold,
}

pub(crate) enum Hold {
    Table { owner: String },
    Row { connection: SessionConnection },
    Advisory { key: i64, connection: SessionConnection },
}

impl PostgresLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token issued with this acquisition.
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }

    /// The lease (lock table) or session timeout (row, advisory) last granted.
    pub fn lease(&self) -> Duration {
        self.ttl
    }
}

impl fmt::Debug for PostgresLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.hold {
            Hold::Table { .. } => "table",
            Hold::Row { .. } => "row",
            Hold::Advisory { .. } => "advisory",
        };
        f.debug_struct("PostgresLease")
            .field("name", &self.name)
            .field("kind", &kind)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// A pooled connection whose session holds a lock. Dropped without [`give_back`](Self::give_back)
/// — a lease lost, leaked or released with an unknown outcome — it is closed, never returned to
/// the pool: a connection that may still hold a lock must not serve anyone else (the server
/// releases the lock when the session ends).
pub(crate) struct SessionConnection(Option<PooledPg>);

impl SessionConnection {
    pub(crate) fn new(connection: PooledPg) -> Self {
        Self(Some(connection))
    }

    pub(crate) fn get(&self) -> &PooledPg {
        self.0.as_ref().expect("present until given back or dropped")
    }

    /// Returns the connection to the pool: its session holds nothing any more.
    pub(crate) fn give_back(mut self) {
        drop(self.0.take());
    }
}

impl Drop for SessionConnection {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            connection.discard();
        }
    }
}
