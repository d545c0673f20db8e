//! [`LockKey`]: what a hold locks on the server — a name's mutex, keyed by the name itself, or
//! the lock of an election of that name, keyed by [`election_key`], which no lock name makes.

use std::fmt;

use lock_core::LockName;

/// The longest key: the lock tables' `VARBINARY(255)` (MySQL) primary key, as a lock name's.
const MAX_KEY: usize = LockName::MAX_LEN;

/// The key of the election `name`'s lock: `\u{1}` and the name, or, when that would be longer
/// than 255 bytes, `\u{2}` and 16 hex digits of a stable hash of the name. Lock names have no
/// control characters, so no mutex, read-write lock or semaphore ever has this key (two long
/// election names that share a hash contend: a false "busy", never two leaders).
pub(crate) fn election_key(name: &LockName) -> String {
    if name.as_str().len() < MAX_KEY {
        format!("\u{1}{name}")
    } else {
        format!("\u{2}{:016x}", crate::key_hash::key("election", name.as_str()))
    }
}

/// The key under which a semaphore's waiters queue (MariaDB's doorbell queue): `\u{3}` and the
/// name, or `\u{4}` and 16 hex digits of a stable hash of a name too long for that. No lock name
/// or election key is one (two long names that share a hash share a queue: a wasted wake-up,
/// never a permit too many).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn semaphore_queue_key(name: &LockName) -> String {
    if name.as_str().len() < MAX_KEY {
        format!("\u{3}{name}")
    } else {
        format!("\u{4}{:016x}", crate::key_hash::key("semaphore", name.as_str()))
    }
}

/// The start of the [`semaphore_queue_key`] of every name that starts with `prefix` (but a
/// hashed one's).
#[cfg_attr(not(all(feature = "testkit", feature = "mysql")), allow(dead_code))]
pub(crate) fn semaphore_queue_prefix(prefix: &str) -> String {
    format!("\u{3}{prefix}")
}

/// A lock name with the key its hold has on the server.
#[derive(Clone)]
pub(crate) struct LockKey {
    name: LockName,
    /// The election key, for an election's lock; `None` for the name's mutex.
    election: Option<String>,
}

impl LockKey {
    /// The mutex of `name`.
    pub(crate) fn mutex(name: &LockName) -> Self {
        Self { name: name.clone(), election: None }
    }

    /// The lock of the election `name`.
    pub(crate) fn election(name: &LockName) -> Self {
        Self { name: name.clone(), election: Some(election_key(name)) }
    }

    /// The key as the server has it (row key, hashed for advisory locks).
    pub(crate) fn as_str(&self) -> &str {
        self.election.as_deref().unwrap_or(self.name.as_str())
    }

    /// The name the caller asked for (for errors and leases).
    pub(crate) fn name(&self) -> &LockName {
        &self.name
    }

    /// The key prefix of the elections whose names start with `prefix` (short names only: a
    /// hashed key has no prefix), for clean-ups by prefix.
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn election_prefix(prefix: &str) -> String {
        format!("\u{1}{prefix}")
    }

    pub(crate) fn is_election(&self) -> bool {
        self.election.is_some()
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockKey").field("name", &self.name).field("election", &self.is_election()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_keys_are_no_lock_name_and_fit_the_key_column() {
        for name in ["a", "orders", &"x".repeat(254), &"y".repeat(255), &"é".repeat(127)] {
            let name = LockName::new(name).unwrap();
            let key = election_key(&name);
            assert!(LockName::new(key.as_str()).is_err(), "{key:?}");
            assert!(key.len() <= MAX_KEY, "{}", key.len());
            assert_eq!(LockKey::election(&name).as_str(), key);
            assert_eq!(LockKey::mutex(&name).as_str(), name.as_str());
        }
        for name in ["a", &"x".repeat(254), &"y".repeat(255)] {
            let name = LockName::new(name).unwrap();
            let key = semaphore_queue_key(&name);
            assert!(LockName::new(key.as_str()).is_err(), "{key:?}");
            assert!(key.len() <= MAX_KEY, "{}", key.len());
            assert_ne!(key, election_key(&name));
        }
        let long = LockName::new("z".repeat(255)).unwrap();
        assert_ne!(election_key(&long), election_key(&LockName::new("z".repeat(254)).unwrap()));
    }
}
