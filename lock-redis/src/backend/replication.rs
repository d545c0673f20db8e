//! `WAIT` after acquiring ([`RedisLockBuilder::wait_for_replicas`](crate::RedisLockBuilder::wait_for_replicas)):
//! an acquisition counts only once enough replicas acknowledged it.

use std::time::Duration;

use lock_core::{Error, Result};

use super::{RedisBackend, RedisLease};
use crate::cleanup;
use crate::connection::PooledConnection;
use crate::error;
use crate::millis;

/// `WAIT` after acquiring: how many replicas must acknowledge, within how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl RedisBackend {
    /// `WAIT`s for the acquisition to reach `wait.replicas` replicas; releases it and reports
    /// [`Error::NotReplicated`] if fewer acknowledged in time, since a failover could otherwise
    /// hand the lock to a second holder (source 003's WAIT recipe).
    pub(super) fn confirm_replicated(
        &self,
        connection: &mut PooledConnection,
        lease: &RedisLease,
        wait: ReplicaWait,
    ) -> Result<()> {
        // The server answers WAIT only after its timeout, so the socket must wait that long too.
        let read_timeout = self.inner.io_timeout + wait.timeout;
        let acknowledged = connection.run_with_read_timeout(read_timeout, |c| {
            redis::cmd("WAIT").arg(wait.replicas).arg(millis(wait.timeout)).query::<i64>(c)
        });
        let acknowledged = match acknowledged {
            Ok(count) => u32::try_from(count).unwrap_or(0),
            Err(e) => {
                // Not known to be replicated: give it back, on another connection (this one may
                // still owe the WAIT reply) and another thread — this one holds a pooled
                // connection, and with a pool of one a second checkout here would wait in vain.
                let copy =
                    RedisLease::possible_grant(&lease.name, &lease.keys, lease.token.clone(), lease.lease)
                        .with_primitive(lease.primitive);
                cleanup::release_in_background(self, copy, "WAIT failed");
                return Err(error::map("wait for replicas", e));
            }
        };
        if acknowledged >= wait.replicas {
            return Ok(());
        }
        if let Err(error) = self.release_on(connection, lease) {
            tracing::warn!(lock = %lease.name, %error, "releasing an unreplicated lock failed; it will expire");
        }
        Err(Error::NotReplicated { name: lease.name.clone(), acknowledged, required: wait.replicas })
    }
}
