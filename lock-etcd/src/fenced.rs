//! [`EtcdFencedStore`]: a [`FencedStore`] in etcd keys, written by a transaction guarded by the
//! key's mod revision as read, so the fence check and the write are one atomic step on the
//! cluster.
//!
//! A key `K` is the etcd key `[namespace/]%fenced/<K, encoded as lock names are>`; its value is
//! the fence, 8 bytes big-endian, then the value. A write reads the key, applies the rule, and
//! puts the new value only if the key's mod revision is still the one read (0 for a key that
//! does not exist): etcd's compare-and-swap. Another writer in between makes it read again.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::{Error, FencedStore, FencingToken, LockName, Result};

use crate::blocking::refuse_async_context;
use crate::error::BACKEND;
use crate::EtcdBackend;

/// How many times a write reads again after another writer changed the key in between.
const ATTEMPTS: usize = 16;

/// A [`FencedStore`] on the cluster of an [`EtcdBackend`], under its namespace (see the module
/// docs for the keys). Fence it with the tokens of any kind, etcd's create revisions included.
///
/// # Contract
/// Keys follow the lock name rules ([`LockName`]); values are limited by etcd's request size
/// (`--max-request-bytes`, 1.5 MiB by default) less 8 bytes.
#[derive(Debug, Clone)]
pub struct EtcdFencedStore {
    backend: EtcdBackend,
}

impl EtcdFencedStore {
    /// The store on `backend`'s cluster, under its namespace.
    pub fn new(backend: EtcdBackend) -> Self {
        Self { backend }
    }

    /// `key`'s etcd key, for one call from this (blocking) thread.
    fn etcd_key(&self, key: &str) -> Result<String> {
        refuse_async_context()?;
        LockName::new(key)?;
        Ok(self.backend.inner.namespace.fenced_key(key))
    }
}

fn encode(token: FencingToken, value: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(8 + value.len());
    data.extend_from_slice(&token.get().to_be_bytes());
    data.extend_from_slice(value);
    data
}

fn decode(key: &str, data: &[u8]) -> Result<(FencingToken, Vec<u8>)> {
    let (fence, value) = data.split_first_chunk::<8>().ok_or_else(|| Error::Backend {
        backend: BACKEND,
        source: format!("{key} holds no fence: {} bytes", data.len()).into(),
    })?;
    Ok((FencingToken::new(u64::from_be_bytes(*fence)), value.to_vec()))
}

impl FencedStore for EtcdFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        let etcd_key = self.etcd_key(key)?;
        let session = &self.backend.inner.session;
        let data = encode(token, value);
        // One I/O timeout for the whole write, however many times it reads again.
        let deadline = self.backend.io_deadline();
        for _ in 0..ATTEMPTS {
            let found = session
                .get(deadline, etcd_key.as_str(), None)
                .map_err(|failure| failure.into_error("fenced read"))?;
            let (highest, seen) = match found.kvs().first() {
                Some(kv) => (Some(decode(&etcd_key, kv.value())?.0), kv.mod_revision()),
                None => (None, 0),
            };
            lock_core::admit(key, highest, token)?;
            let txn = Txn::new()
                .when([Compare::mod_revision(etcd_key.as_str(), CompareOp::Equal, seen)])
                .and_then([TxnOp::put(etcd_key.as_str(), data.clone(), None)]);
            let written = session.txn(deadline, txn).map_err(|failure| failure.into_error("fenced write"))?;
            if written.succeeded() {
                return Ok(());
            }
        }
        Err(Error::Timeout {
            backend: BACKEND,
            operation: "fenced write (the key kept changing for as many reads)",
            source: None,
        })
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let etcd_key = self.etcd_key(key)?;
        let found = self
            .backend
            .inner
            .session
            .get(self.backend.io_deadline(), etcd_key.as_str(), None)
            .map_err(|failure| failure.into_error("fenced read"))?;
        found.kvs().first().map(|kv| decode(&etcd_key, kv.value())).transpose()
    }
}
