//! Guarded writes on the lock's own ensemble: [`ZooKeeperBackend::set_data_if_held`] writes a
//! node only while the caller's lock node exists, one `multi` of a `check` of the lock node and
//! the write (etcd's `IsOwner()` comparison, in ZooKeeper's terms).

use std::time::Instant;

use lock_core::{Error, Result};
use zookeeper_client as zk;

use crate::backend::ZooKeeperBackend;
use crate::blocking::refuse_async_context;
use crate::error::Failure;
use crate::lease::ZooKeeperLease;

/// Transactions tried before giving up on a node that keeps appearing and vanishing.
const ATTEMPTS: usize = 4;

impl ZooKeeperBackend {
    /// Sets the data of `path` (an absolute path under the backend's chroot, created as a
    /// persistent node with its parents if missing) to `data`, if `lease`'s lock node still
    /// exists: one transaction of a `check` of the lock node and the write. Call it through
    /// [`LockGuard::with_lease`](lock_core::LockGuard::with_lease):
    /// `guard.with_lease(|zk, lease| zk.set_data_if_held(lease, "/app/config", b"v2"))`.
    ///
    /// # Contract
    /// For exclusive holds: a read lock's or permit's node proves only that this owner shares the
    /// lock.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock node is gone (the session expired, the node was deleted):
    /// nothing was written; the ensemble's errors otherwise.
    pub fn set_data_if_held(&self, lease: &ZooKeeperLease, path: &str, data: &[u8]) -> Result<()> {
        refuse_async_context()?;
        if !crate::path::is_exclusive_node(&lease.node) {
            return Err(Error::invalid_config(
                "set_data_if_held needs an exclusive hold (a mutex or a write lock): shared holders \
                 cannot tell their writes apart",
            ));
        }
        let session = &self.inner.session;
        let client = session.client()?;
        let fail = |error: zk::Error| Failure::Zk(error).into_error("guarded write");
        let not_held = || Error::NotHeld { name: lease.name.clone() };
        let mut create = false;
        // One request timeout for the whole write, however many tries it takes.
        let deadline = Instant::now() + session.settings().io_timeout;
        for _ in 0..ATTEMPTS {
            let mut transaction = client.new_check_writer(&lease.node, None).map_err(fail)?;
            if create {
                let options = zk::CreateMode::Persistent.with_acls(self.inner.acls);
                transaction.add_create(path, data, &options).map_err(fail)?;
            } else {
                transaction.add_set_data(path, data, None).map_err(fail)?;
            }
            let outcome =
                session.call_until(deadline, async { Ok::<_, zk::Error>(transaction.commit().await) });
            match outcome.map_err(|failure| failure.into_error("guarded write"))? {
                Ok(_) => return Ok(()),
                Err(zk::CheckWriteError::CheckFailed { .. }) => return Err(not_held()),
                Err(zk::CheckWriteError::OperationFailed { source: zk::Error::NoNode, .. }) if !create => {
                    create = true
                }
                Err(zk::CheckWriteError::OperationFailed { source: zk::Error::NodeExists, .. }) => {
                    create = false
                }
                Err(zk::CheckWriteError::OperationFailed { source: zk::Error::NoNode, .. }) => {
                    // The parent is missing: made outside the transaction (an empty parent
                    // proves nothing), then the write is tried again under the check.
                    let parent = &path[..path.rfind('/').unwrap_or(0)];
                    let options = zk::CreateMode::Persistent.with_acls(self.inner.acls);
                    match session.call_until(deadline, client.mkdir(parent, &options)) {
                        Ok(()) | Err(Failure::Zk(zk::Error::NodeExists)) => {}
                        Err(failure) => return Err(failure.into_error("guarded write")),
                    }
                }
                Err(
                    zk::CheckWriteError::OperationFailed { source, .. }
                    | zk::CheckWriteError::RequestFailed { source },
                ) => return Err(fail(source)),
            }
        }
        Err(Error::Timeout {
            backend: "zookeeper",
            operation: "guarded write (the node kept changing)",
            source: None,
        })
    }

    /// The data of `path` (as [`set_data_if_held`](Self::set_data_if_held) left it), `None` if
    /// the node does not exist.
    ///
    /// # Errors
    /// The ensemble's errors.
    pub fn get_guarded(&self, path: &str) -> Result<Option<Vec<u8>>> {
        refuse_async_context()?;
        let session = &self.inner.session;
        let client = session.client()?;
        match session.call(session.settings().io_timeout, client.get_data(path)) {
            Ok((data, _)) => Ok(Some(data)),
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(None),
            Err(failure) => Err(failure.into_error("guarded read")),
        }
    }
}
