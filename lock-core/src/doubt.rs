//! [`DoubtSignal`]: how a backend tells the holders of leases, without I/O, that the server
//! holding them may have lost them — a replicated deployment whose primary stopped answering
//! (Redis Sentinel or Cluster, where a failover can promote a replica that never got the lease).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A flag shared by one hold and its backend: raised by the backend when the hold's server may
/// have lost it (its primary unreachable: a failover may follow), cleared when the server
/// confirms the lease again. While raised, the hold's [`HoldState`](crate::HoldState) is
/// `InDoubt` — Curator's SUSPENDED for a lease.
///
/// Cloning shares the flag.
#[derive(Debug, Clone, Default)]
pub struct DoubtSignal(Arc<AtomicBool>);

impl DoubtSignal {
    /// A lowered flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hold may be lost: its holder must not act on it until [`clear`](Self::clear)ed.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// The server confirmed the hold again.
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether the flag is raised.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Whether another clone than this one still exists (a backend's registry of signals drops
    /// those whose hold is gone).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let signal = DoubtSignal::new();
        let registry = signal.clone();
        assert!(!signal.is_raised() && registry.is_shared());
        registry.raise();
        assert!(signal.is_raised());
        signal.clear();
        assert!(!registry.is_raised());
        drop(signal);
        assert!(!registry.is_shared());
    }
}
