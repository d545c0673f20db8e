//! [`ZooKeeperFencedStore`]: a [`FencedStore`] in znodes, written with `setData` at the version
//! read, so the fence check and the write are one atomic step on the ensemble.
//!
//! A key is the persistent node `<root>/%fenced/<escaped key>`; its data is the fence, 8 bytes
//! big-endian, then the value. A write reads the node, applies the rule, and sets the data only
//! if the node's version is still the one read (else it reads again): ZooKeeper's
//! compare-and-set.

use std::time::Instant;

use lock_core::{Error, FencedStore, FencingToken, LockName, Result};
use zookeeper_client as zk;

use crate::backend::ZooKeeperBackend;
use crate::blocking::refuse_async_context;
use crate::error::Failure;

/// How many times a write reads again after another writer changed the node in between.
const ATTEMPTS: usize = 16;

/// A [`FencedStore`] on the ensemble of a [`ZooKeeperBackend`], under its root (see the module
/// docs for the nodes).
///
/// # Contract
/// Keys follow the lock name rules ([`LockName`]); values are limited by the server's
/// `jute.maxbuffer` (1 MiB by default) less 8 bytes.
#[derive(Debug, Clone)]
pub struct ZooKeeperFencedStore {
    backend: ZooKeeperBackend,
}

impl ZooKeeperFencedStore {
    /// The store on `backend`'s ensemble, under its root.
    pub fn new(backend: ZooKeeperBackend) -> Self {
        Self { backend }
    }

    /// The session's client and `key`'s node, for one call from this (blocking) thread.
    fn node(&self, key: &str) -> Result<(zk::Client, String)> {
        refuse_async_context()?;
        LockName::new(key)?;
        let inner = &self.backend.inner;
        Ok((inner.session.client()?, inner.root.fenced_path(key)))
    }
}

fn encode(token: FencingToken, value: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(8 + value.len());
    data.extend_from_slice(&token.get().to_be_bytes());
    data.extend_from_slice(value);
    data
}

fn decode(path: &str, data: &[u8]) -> Result<(FencingToken, Vec<u8>)> {
    let (fence, value) = data.split_first_chunk::<8>().ok_or_else(|| Error::Backend {
        backend: "zookeeper",
        source: format!("{path} holds no fence: {} bytes", data.len()).into(),
    })?;
    Ok((FencingToken::new(u64::from_be_bytes(*fence)), value.to_vec()))
}

impl FencedStore for ZooKeeperFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        let (client, path) = self.node(key)?;
        let inner = &self.backend.inner;
        let session = &inner.session;
        let data = encode(token, value);
        let fail = |failure: Failure| failure.into_error("fenced write");
        // One I/O timeout for the whole write, however often another writer makes it read again.
        let deadline = Instant::now() + session.settings().io_timeout;
        for _ in 0..ATTEMPTS {
            match session.call_until(deadline, client.get_data(&path)) {
                Ok((current, stat)) => {
                    lock_core::admit(key, Some(decode(&path, &current)?.0), token)?;
                    match session.call_until(deadline, client.set_data(&path, &data, Some(stat.version))) {
                        Ok(_) => return Ok(()),
                        Err(Failure::Zk(zk::Error::BadVersion | zk::Error::NoNode)) => continue,
                        Err(failure) => return Err(fail(failure)),
                    }
                }
                Err(Failure::Zk(zk::Error::NoNode)) => {
                    let options = zk::CreateMode::Persistent.with_acls(inner.acls);
                    match session.call_until(deadline, client.create(&path, &data, &options)) {
                        Ok(_) => return Ok(()),
                        Err(Failure::Zk(zk::Error::NodeExists)) => continue,
                        Err(Failure::Zk(zk::Error::NoNode)) => {
                            let parent = &path[..path.rfind('/').unwrap_or(0)];
                            let container = zk::CreateMode::Container.with_acls(inner.acls);
                            match session.call_until(deadline, client.mkdir(parent, &container)) {
                                Ok(()) | Err(Failure::Zk(zk::Error::NodeExists)) => continue,
                                Err(failure) => return Err(fail(failure)),
                            }
                        }
                        Err(failure) => return Err(fail(failure)),
                    }
                }
                Err(failure) => return Err(fail(failure)),
            }
        }
        Err(Error::Timeout {
            backend: "zookeeper",
            operation: "fenced write (the node kept changing)",
            source: None,
        })
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let (client, path) = self.node(key)?;
        let session = &self.backend.inner.session;
        match session.call(session.settings().io_timeout, client.get_data(&path)) {
            Ok((data, _)) => decode(&path, &data).map(Some),
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(None),
            Err(failure) => Err(failure.into_error("fenced read")),
        }
    }
}
