//! [`WriteHolds`]: where a backend finds, by name and owner, the write lock that a read asked
//! under the same owner downgrades from.
//!
//! A writer's own read lock is asked under the write lease's owner (see
//! [`ReadWriteLock`](crate::ReadWriteLock)); the backend must grant it past its own write lock, and
//! on the writer's session or node, or the read would wait for the write. Every backend with
//! read-write locks keeps this map, so it is written once here.

use std::collections::HashMap;
use std::fmt;

use parking_lot::Mutex;

use crate::name::LockName;
use crate::owner::OwnerToken;

/// The write locks a backend holds, each with what a downgrade needs of it (a shared session,
/// a node path): keyed by name *and* owner, so a read of one name never finds another name's
/// writer.
pub struct WriteHolds<T> {
    map: Mutex<HashMap<(LockName, OwnerToken), T>>,
}

impl<T> Default for WriteHolds<T> {
    fn default() -> Self {
        Self { map: Mutex::new(HashMap::new()) }
    }
}

impl<T> fmt::Debug for WriteHolds<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteHolds").field("held", &self.map.lock().len()).finish()
    }
}

impl<T> WriteHolds<T> {
    /// Notes the write lock of `name` held by `owner`, replacing an earlier one, and first
    /// forgets the entries `stale` says are gone (leases dropped without a release).
    pub fn insert(&self, name: &LockName, owner: &OwnerToken, hold: T, stale: impl Fn(&T) -> bool) {
        let mut map = self.map.lock();
        map.retain(|_, held| !stale(held));
        map.insert((name.clone(), *owner), hold);
    }

    /// What was noted for the write lock of `name` held by `owner`, through `view` (e.g. an
    /// upgraded weak reference), if anything.
    pub fn find<R>(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        view: impl FnOnce(&T) -> Option<R>,
    ) -> Option<R> {
        self.map.lock().get(&(name.clone(), *owner)).and_then(view)
    }

    /// Forgets the write lock of `name` held by `owner` (it is being released).
    pub fn remove(&self, name: &LockName, owner: &OwnerToken) -> Option<T> {
        self.map.lock().remove(&(name.clone(), *owner))
    }

    /// Forgets the write locks of `name` that `is_released` picks, for a backend whose lease
    /// does not keep its owner (it knows the hold, e.g. its node).
    pub fn remove_where(&self, name: &LockName, is_released: impl Fn(&T) -> bool) {
        self.map.lock().retain(|(held, _), hold| held != name || !is_released(hold));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_finds_only_its_own_name_and_owner_s_writer() {
        let holds = WriteHolds::default();
        let (a, b) = (LockName::new("a").unwrap(), LockName::new("b").unwrap());
        let (owner, other) = (OwnerToken::random(), OwnerToken::random());
        holds.insert(&a, &owner, "a's node", |_| false);
        assert_eq!(holds.find(&a, &owner, |node| Some(*node)), Some("a's node"));
        assert_eq!(holds.find(&b, &owner, |node| Some(*node)), None, "another name's writer");
        assert_eq!(holds.find(&a, &other, |node| Some(*node)), None, "another owner's writer");
        holds.insert(&b, &other, "stale", |_| false);
        holds.insert(&b, &owner, "b's node", |node| *node == "stale");
        assert_eq!(holds.find(&b, &other, |node| Some(*node)), None, "stale entries are pruned");
        assert_eq!(holds.remove(&a, &owner), Some("a's node"));
        assert_eq!(holds.find(&a, &owner, |node| Some(*node)), None);
        holds.remove_where(&a, |node| *node == "b's node");
        assert_eq!(holds.find(&b, &owner, |node| Some(*node)), Some("b's node"), "another name's");
        holds.remove_where(&b, |node| *node == "b's node");
        assert_eq!(holds.find(&b, &owner, |node| Some(*node)), None);
    }
}
