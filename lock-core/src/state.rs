//! [`HoldState`]: what a holder may believe about its lock right now.

/// The state of one acquisition, as [`LockGuard::state`](crate::LockGuard::state) reports it.
///
/// Only [`Held`](Self::Held) lets the holder act on the protected resource;
/// [`LockGuard::is_held`](crate::LockGuard::is_held) is `state() == HoldState::Held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldState {
    /// Held: for a lease, the last expiry the server confirmed has not passed by this process's
    /// clock; for a session-bound hold, the last liveness check succeeded within the session
    /// timeout.
    Held,
    /// A session-bound hold whose last liveness check failed (the connection or session may be
    /// gone, or only slow): not held until a later check succeeds (back to `Held`) or the session
    /// timeout passes since the last success (`Lost`) — Curator's SUSPENDED before LOST. A lease
    /// is in doubt only where its backend says so ([`DoubtSignal`](crate::DoubtSignal)): on a
    /// replicated deployment (Redis Sentinel, Redis Cluster) whose primary stopped answering, a
    /// failover may promote a replica without the lease; a single server keeps a lease until
    /// its confirmed expiry, whatever the connection does.
    InDoubt,
    /// Lost: the lease ran out, the session timed out, or the server said the lock is no longer
    /// held. The guard's [`LostSignal`](crate::LostSignal) has fired.
    Lost,
    /// Released by this holder (unlock, drop, [`LockClient::close`](crate::LockClient::close) or
    /// [`Lock::force_unlock`](crate::Lock::force_unlock)).
    Released,
}
