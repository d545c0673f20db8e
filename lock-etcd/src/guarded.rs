//! Guarded writes on the lock's own cluster: a transaction that acts only while a hold lasts —
//! Go's `Txn(ctx).If(mutex.IsOwner()).Then(…)`, the comparison etcd itself recommends.
//!
//! The guard is `create_revision(lock key) == the hold's revision`: a key deleted (released, its
//! lease expired or revoked) and created again by a later acquisition has a new create revision,
//! so a holder paused past its lease can never write after a rival acquired, whatever its clock
//! says — the check and the write are one step on the cluster.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::{Error, Result};

use crate::blocking::refuse_async_context;
use crate::lease::EtcdLease;
use crate::EtcdBackend;

impl EtcdLease {
    /// The comparison that holds only while this hold lasts (Go's `Mutex.IsOwner()`): put it in
    /// the `when` of a transaction of your own to make its writes conditional on the hold.
    pub fn is_owner(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.create_revision)
    }
}

impl EtcdBackend {
    /// Puts `value` under the etcd key `key` (as written: no namespace is added) if `lease` still
    /// holds its lock: one transaction guarded by [`EtcdLease::is_owner`]. Call it through
    /// [`LockGuard::with_lease`](lock_core::LockGuard::with_lease):
    /// `guard.with_lease(|etcd, lease| etcd.put_if_held(lease, "app/config", b"v2"))`.
    ///
    /// # Contract
    /// For exclusive holds (a mutex, a write lock, a leadership): a read lock's or a permit's key
    /// proves only that this owner shares the lock. The value is not attached to the lease: it
    /// stays after the hold ends.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold is gone (released, the lease expired or was revoked):
    /// nothing was written; [`Error::InvalidConfig`] for a shared hold; the cluster's errors
    /// otherwise — after a timeout the write may or may not have happened.
    pub fn put_if_held(&self, lease: &EtcdLease, key: &str, value: &[u8]) -> Result<()> {
        refuse_async_context()?;
        if !lease.exclusive {
            return Err(Error::invalid_config(
                "put_if_held needs an exclusive hold (a mutex, a write lock or a leadership): \
                 shared holders cannot tell their writes apart",
            ));
        }
        // The hold already counted lost (lock-core may have told its holder) writes nothing,
        // as a proclaim does; the transaction's compare decides everything else.
        if lease.held.is_none() || lease.lease.is_lost() {
            return Err(Error::NotHeld { name: lease.name.clone() });
        }
        let txn = Txn::new().when([lease.is_owner()]).and_then([TxnOp::put(key, value, None)]);
        let response = self
            .inner
            .session
            .txn(self.io_deadline(), txn)
            .map_err(|failure| failure.into_error("guarded write"))?;
        match response.succeeded() {
            true => Ok(()),
            false => Err(Error::NotHeld { name: lease.name.clone() }),
        }
    }

    /// The value under the etcd key `key` (as [`put_if_held`](Self::put_if_held) left it),
    /// `None` if there is none.
    ///
    /// # Errors
    /// The cluster's errors.
    pub fn get_guarded(&self, key: &str) -> Result<Option<Vec<u8>>> {
        refuse_async_context()?;
        let found = self
            .inner
            .session
            .get(self.io_deadline(), key, None)
            .map_err(|failure| failure.into_error("guarded read"))?;
        Ok(found.kvs().first().map(|kv| kv.value().to_vec()))
    }
}
