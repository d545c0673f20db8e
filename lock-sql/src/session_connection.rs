//! [`SessionConnection`]: a pooled connection whose session holds a lock.

/// A connection that can end its server session at once (closing or poisoning it, so the pool
/// never hands it out again).
pub(crate) trait EndSession {
    fn end_session(&mut self);
}

/// A pooled connection whose session holds a lock. Dropped without [`give_back`](Self::give_back)
/// — a lease lost, leaked or released with an unknown outcome — its session is ended, never
/// returned to the pool as it is: a connection that may still hold a lock must not serve anyone
/// else, and the server releases the lock when the session ends.
pub(crate) struct SessionConnection<C: EndSession>(Option<C>);

impl<C: EndSession> SessionConnection<C> {
    pub(crate) fn new(connection: C) -> Self {
        Self(Some(connection))
    }

    pub(crate) fn get(&mut self) -> &mut C {
        self.0.as_mut().expect("present until given back or dropped")
    }

    /// Returns the connection to the pool: its session holds nothing any more.
    pub(crate) fn give_back(mut self) {
        drop(self.0.take());
    }
}

impl<C: EndSession> Drop for SessionConnection<C> {
    fn drop(&mut self) {
        if let Some(mut connection) = self.0.take() {
            connection.end_session();
        }
    }
}
