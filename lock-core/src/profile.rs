//! [`BackendProfile`]: how a backend describes itself, for reports that compare backends.

/// What a backend says about how it works, in words, for reports (`distlock compare`). The rest
/// of a backend's properties come from the trait itself: its
/// [`hold_kind`](crate::DistributedLock::hold_kind), whether it has
/// [`fencing`](crate::DistributedLock::fencing) and a
/// [`native_wait`](crate::DistributedLock::native_wait).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendProfile {
    /// Where its fencing tokens come from (`"INCR of a per-name counter, in the acquire
    /// script"`); ignored without [`Fencing`](crate::Fencing).
    pub fencing: &'static str,
    /// What wakes a waiter when the lock is released; ignored without
    /// [`NativeWait`](crate::NativeWait) (waiters then back off).
    pub wake_up: &'static str,
    /// What a server failover, restart or crash does to a held lock.
    pub failover: &'static str,
    /// Reentrancy beyond the client's own per-thread hold counts (written once in this crate for
    /// every backend), if the server also counts holds.
    pub server_reentrancy: Option<&'static str>,
    /// Which guarded writes the backend offers (its [`FencedStore`](crate::FencedStore) and
    /// what makes the check atomic), or why it has none.
    pub guarded_writes: &'static str,
    /// How the backend elects a leader and tells followers (its [`Elections`](crate::Elections)
    /// layout and notices), or why it has no elections.
    pub elections: &'static str,
}

impl BackendProfile {
    /// A profile; see the fields.
    pub const fn new(fencing: &'static str, wake_up: &'static str, failover: &'static str) -> Self {
        Self {
            fencing,
            wake_up,
            failover,
            server_reentrancy: None,
            guarded_writes: "none",
            elections: "none",
        }
    }

    /// The same profile, saying which guarded writes the backend offers.
    pub const fn with_guarded_writes(mut self, how: &'static str) -> Self {
        self.guarded_writes = how;
        self
    }

    /// The same profile, saying how the backend elects a leader, or why it does not.
    pub const fn with_elections(mut self, how: &'static str) -> Self {
        self.elections = how;
        self
    }

    /// The same profile, saying how the server also counts holds.
    pub const fn with_server_reentrancy(mut self, how: &'static str) -> Self {
        self.server_reentrancy = Some(how);
        self
    }
}

impl Default for BackendProfile {
    fn default() -> Self {
        Self::new("not described", "not described", "not described")
    }
}
