//! Guarded writes on the lock's own server: [`RedisBackend::set_if_held`] sets a key only while
//! the caller's lease still holds the lock, the owner check and the write in one script
//! (`scripts/set_if_held.lua`) on the lock's node.

use std::sync::OnceLock;

use lock_core::{Error, LockName, Primitive, Result};

use crate::backend::{RedisBackend, RedisLease};
use crate::error;
use crate::lua::LuaScript;

fn script() -> &'static LuaScript {
    static SCRIPT: OnceLock<LuaScript> = OnceLock::new();
    SCRIPT.get_or_init(|| LuaScript::new(crate::lua::with_held_by(include_str!("scripts/set_if_held.lua"))))
}

impl RedisBackend {
    /// Sets the data key `key` of the lock's name ([`RedisKeys::data`](crate::RedisKeys::data),
    /// in the lock's hash slot) to `value`, if `lease` still holds the lock: the check of the
    /// owner and the `SET` are one script on the lock's node. Call it through
    /// [`LockGuard::with_lease`](lock_core::LockGuard::with_lease):
    /// `guard.with_lease(|redis, lease| redis.set_if_held(lease, "balance", b"100"))`.
    ///
    /// # Contract
    /// For exclusive holds (the mutex, a write lock, a leadership). On a replicated deployment the check runs
    /// on the primary: a failover that lost the lock can lose the write with it (`WAIT`).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the server no longer has the lock under this owner (nothing was
    /// written); [`Error::InvalidConfig`] for a read lock or a permit; the server's errors.
    pub fn set_if_held(&self, lease: &RedisLease, key: &str, value: &[u8]) -> Result<()> {
        let keys = self.keys(&lease.name);
        // The data keys are the name's, whichever exclusive hold guards them; the lock is the
        // lease's own (an election's lock has keys of its own).
        let lock = match lease.primitive {
            Primitive::Mutex | Primitive::Leader => lease.keys.lock().to_owned(),
            Primitive::Write => keys.read_write()[1].clone(),
            _ => {
                return Err(Error::invalid_config(
                    "set_if_held needs an exclusive hold (a mutex, a write lock or a leadership): shared holders \
                     cannot tell their writes apart",
                ))
            }
        };
        let data = keys.data(key);
        let written: i64 = self.routed(&keys, |hop| {
            let mut command = script().invoke(&[&lock, &data]);
            command.arg(&lease.token).arg(value);
            hop.connection()?.run(|c| script().query(c, &command)).map_err(|e| error::map("guarded write", e))
        })?;
        if written == 1 {
            Ok(())
        } else {
            Err(Error::NotHeld { name: lease.name.clone() })
        }
    }

    /// The value [`set_if_held`](Self::set_if_held) last wrote to the data key `key` of `name`.
    ///
    /// # Errors
    /// The server's errors.
    pub fn get_guarded(&self, name: &LockName, key: &str) -> Result<Option<Vec<u8>>> {
        let keys = self.keys(name);
        let data = keys.data(key);
        self.routed(&keys, |hop| {
            hop.connection()?
                .run(|c| redis::cmd("GET").arg(&data).query(c))
                .map_err(|e| error::map("guarded read", e))
        })
    }
}
