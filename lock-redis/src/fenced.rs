//! [`RedisFencedStore`]: a [`FencedStore`] on the lock's own Redis deployment, one script per
//! write (`scripts/fenced_write.lua`), so the check of the token and the write are one atomic
//! step on the server.
//!
//! A key `k` is the hash `<prefix>:{k}:fenced` with the fields `fence` (the highest token that
//! wrote, in decimal) and `value`: in the slot of the lock named `k`, so a cluster routes both
//! to the same node, and readable by any client (`HGET <prefix>:{k}:fenced value`).

use std::sync::OnceLock;

use lock_core::{FencedStore, FencingToken, LockName, Result};

use crate::backend::RedisBackend;
use crate::error;
use crate::lua::LuaScript;

/// A [`FencedStore`] on the servers of a [`RedisBackend`] (see the module docs for the keys).
///
/// # Contract
/// Keys are lock names ([`LockName`] rules). The store is only as durable as the deployment:
/// without persistence and `WAIT`, a restart or failover can lose a fence, and then a stale write
/// can pass once (the lock's own tokens have the same limit; `docs/guarded-writes.md`).
#[derive(Debug, Clone)]
pub struct RedisFencedStore {
    backend: RedisBackend,
}

impl RedisFencedStore {
    /// The store on `backend`'s deployment, under its namespace.
    pub fn new(backend: RedisBackend) -> Self {
        Self { backend }
    }

    /// The Redis key that holds `key`'s value and fence.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidName`] when `key` breaks the lock name rules.
    pub fn redis_key(&self, key: &str) -> Result<String> {
        Ok(self.backend.keys(&LockName::new(key)?).fenced())
    }
}

fn script() -> &'static LuaScript {
    static SCRIPT: OnceLock<LuaScript> = OnceLock::new();
    SCRIPT.get_or_init(|| LuaScript::new(include_str!("scripts/fenced_write.lua").to_owned()))
}

impl FencedStore for RedisFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        let keys = self.backend.keys(&LockName::new(key)?);
        let hash = keys.fenced();
        let refused: Option<String> = self.backend.routed(&keys, |hop| {
            let mut command = script().invoke(&[&hash]);
            command.arg(token.get()).arg(value);
            hop.connection()?.run(|c| script().query(c, &command)).map_err(|e| error::map("fenced write", e))
        })?;
        let Some(highest) = refused else { return Ok(()) };
        let highest = highest.parse().map(FencingToken::new).map_err(|_| lock_core::Error::Backend {
            backend: error::BACKEND,
            source: format!("fenced write: the key's fence is not a number: {highest:?}").into(),
        })?;
        lock_core::admit(key, Some(highest), token)?;
        // Refused by a fence the rule would pass: not one this store wrote (not canonical decimal).
        Err(lock_core::Error::Backend {
            backend: error::BACKEND,
            source: format!("fenced write: the key's fence {highest} refused token {token}").into(),
        })
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let keys = self.backend.keys(&LockName::new(key)?);
        let hash = keys.fenced();
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = self.backend.routed(&keys, |hop| {
            hop.connection()?
                .run(|c| redis::cmd("HMGET").arg(&hash).arg("fence").arg("value").query(c))
                .map_err(|e| error::map("fenced read", e))
        })?;
        Ok(fence.map(|fence| (FencingToken::new(fence), value.unwrap_or_default())))
    }
}
