//! [`MySqlLease`]: what one acquisition keeps.

use std::fmt;
use std::time::Duration;

use lock_core::{FencingToken, LockName};

use super::connection::MyConnection;

/// One acquisition: its name and fencing token, and either the owner token written in the lock
/// table or the connection whose session holds the row or advisory lock.
pub struct MySqlLease {
    pub(crate) name: LockName,
    pub(crate) fence: FencingToken,
    pub(crate) ttl: Duration,
    pub(crate) hold: Hold,
}

pub(crate) enum Hold {
    /// The owner token as a hex literal.
    Table {
        owner: String,
    },
    Row {
        connection: SessionConnection,
    },
    /// The `GET_LOCK` name as a hex literal.
    Advisory {
        key: String,
        connection: SessionConnection,
    },
}

impl MySqlLease {
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

impl fmt::Debug for MySqlLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.hold {
            Hold::Table { .. } => "table",
            Hold::Row { .. } => "row",
            Hold::Advisory { .. } => "advisory",
        };
        f.debug_struct("MySqlLease")
            .field("name", &self.name)
            .field("kind", &kind)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// A pooled connection whose session holds a lock. Dropped without [`give_back`](Self::give_back)
/// — a lease lost, leaked or released with an unknown outcome — its session is ended (the
/// socket shut down), never returned to the pool as it is: a connection that may still hold a
/// lock must not serve anyone else, and the server releases the lock when the session ends.
pub(crate) struct SessionConnection(Option<MyConnection>);

impl SessionConnection {
    pub(crate) fn new(connection: MyConnection) -> Self {
        Self(Some(connection))
    }

    pub(crate) fn get(&mut self) -> &mut MyConnection {
        self.0.as_mut().expect("present until given back or dropped")
    }

    /// Returns the connection to the pool: its session holds nothing any more.
    pub(crate) fn give_back(mut self) {
        drop(self.0.take());
    }
}

impl Drop for SessionConnection {
    fn drop(&mut self) {
        if let Some(mut connection) = self.0.take() {
            connection.poison();
        }
    }
}
