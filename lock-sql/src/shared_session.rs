//! [`SharedSession`]: a session that holds a read-write lock, shared by a writer's lease and the
//! read lease its owner asks for while writing (a downgrade), and [`Writers`], where the backend
//! finds the writer's session again by name and owner.
//!
//! Why share: each session lease owns its connection, but a read lease asked on another session
//! would wait for the writer's own exclusive lock. On the writer's session the read is granted
//! at once (PostgreSQL lets one session hold an advisory key in both modes) and, once the write
//! is released, the session keeps the read alone — the write is never let go before the read is
//! held, so no other writer can slip in between.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use lock_core::{LockName, OwnerToken, WriteHolds};

use crate::session_connection::{EndSession, SessionConnection};

type Cell<C> = Mutex<SessionConnection<C>>;

/// A session connection held by one or more read-write leases. The last lease to let go gives
/// the connection back (or, dropped, ends the session, as [`SessionConnection`] does).
pub(crate) struct SharedSession<C: EndSession>(Arc<Cell<C>>);

impl<C: EndSession> SharedSession<C> {
    pub(crate) fn new(connection: SessionConnection<C>) -> Self {
        Self(Arc::new(Mutex::new(connection)))
    }

    /// The connection, for one call (a lease's calls on a shared session take turns).
    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionConnection<C>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether another lease shares the session.
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// The connection, when this is the last lease on it.
    pub(crate) fn into_only(self) -> Result<SessionConnection<C>, Self> {
        Arc::try_unwrap(self.0)
            .map(|cell| cell.into_inner().unwrap_or_else(PoisonError::into_inner))
            .map_err(Self)
    }
}

/// The sessions of write leases by name and owner: where a read asked under a write lease's
/// owner finds the session to share. Holds no session alive by itself.
pub(crate) struct Writers<C: EndSession>(WriteHolds<Weak<Cell<C>>>);

impl<C: EndSession> Default for Writers<C> {
    fn default() -> Self {
        Self(WriteHolds::default())
    }
}

impl<C: EndSession> Writers<C> {
    /// Notes a write lease's session.
    pub(crate) fn insert(&self, name: &LockName, owner: &OwnerToken, session: &SharedSession<C>) {
        // Entries of leases gone without a release (dropped) go here.
        self.0.insert(name, owner, Arc::downgrade(&session.0), |weak| weak.strong_count() == 0);
    }

    /// The session of the write lease of `name` under `owner`, if it is still held.
    pub(crate) fn find(&self, name: &LockName, owner: &OwnerToken) -> Option<SharedSession<C>> {
        self.0.find(name, owner, Weak::upgrade).map(SharedSession)
    }

    /// Forgets a write lease's session (it is being released).
    pub(crate) fn remove(&self, name: &LockName, owner: &OwnerToken) {
        self.0.remove(name, owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(std::rc::Rc<std::cell::Cell<bool>>);
    impl EndSession for Fake {
        fn end_session(&mut self) {
            self.0.set(true);
        }
    }

    #[test]
    fn the_last_lease_gets_the_connection_and_writers_hold_nothing_alive() {
        let ended = std::rc::Rc::new(std::cell::Cell::new(false));
        let writers = Writers::default();
        let (n, m) = (LockName::new("n").unwrap(), LockName::new("m").unwrap());
        let (o, other) = (OwnerToken::random(), OwnerToken::random());
        let write = SharedSession::new(SessionConnection::new(Fake(ended.clone())));
        writers.insert(&n, &o, &write);
        let read = writers.find(&n, &o).expect("registered");
        assert!(writers.find(&n, &other).is_none());
        assert!(write.is_shared());
        let Err(write) = write.into_only() else { panic!("the read shares it") };
        writers.remove(&n, &o);
        drop(write);
        assert!(!read.is_shared());
        let only = read.into_only().ok().expect("last");
        only.give_back();
        assert!(!ended.get());
        let lone = SharedSession::new(SessionConnection::new(Fake(ended.clone())));
        writers.insert(&m, &o, &lone);
        drop(lone);
        assert!(ended.get(), "dropped, the session ends");
        assert!(writers.find(&m, &o).is_none());
    }
}
