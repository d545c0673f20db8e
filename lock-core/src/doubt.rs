//! [`DoubtSignal`]: how a backend tells the holders of leases, without I/O, that the server
//! holding them may have lost them — a replicated deployment whose primary stopped answering
//! (Redis Sentinel or Cluster, where a failover can promote a replica that never got the lease).

use std::sync::Arc;

use parking_lot::Mutex;

/// A flag shared by one hold and its backend: raised by the backend when the hold's server may
/// have lost it (its primary unreachable: a failover may follow), cleared when the server
/// confirms the lease again. While raised, the hold's [`HoldState`](crate::HoldState) is
/// `InDoubt` — Curator's SUSPENDED for a lease.
///
/// A confirmation clears only the doubt raised before its request was sent
/// ([`mark`](Self::mark), then [`clear_since`](Self::clear_since)): a reply that was on its
/// way when the primary failed does not wipe out the doubt the failure raised.
///
/// Cloning shares the flag.
#[derive(Debug, Clone, Default)]
pub struct DoubtSignal(Arc<Mutex<Doubt>>);

#[derive(Debug, Default)]
struct Doubt {
    raised: bool,
    /// How many times it was raised so far.
    raises: u64,
}

/// When a request that may confirm a hold was sent, as its [`DoubtSignal`] counts
/// ([`DoubtSignal::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoubtMark(u64);

impl DoubtSignal {
    /// A lowered flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hold may be lost: its holder must not act on it until the server confirms it.
    pub fn raise(&self) {
        let mut doubt = self.0.lock();
        doubt.raised = true;
        doubt.raises += 1;
    }

    /// Taken before sending a request that may confirm the hold.
    pub fn mark(&self) -> DoubtMark {
        DoubtMark(self.0.lock().raises)
    }

    /// The server confirmed the hold in answer to a request sent at `mark`: lowers the flag,
    /// unless it was raised again since.
    pub fn clear_since(&self, mark: DoubtMark) {
        let mut doubt = self.0.lock();
        if doubt.raises == mark.0 {
            doubt.raised = false;
        }
    }

    /// Whether the flag is raised.
    pub fn is_raised(&self) -> bool {
        self.0.lock().raised
    }

    /// Whether `other` is this same flag.
    pub fn same_as(&self, other: &DoubtSignal) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
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
        assert!(!signal.is_raised() && registry.is_shared() && registry.same_as(&signal));
        registry.raise();
        assert!(signal.is_raised());
        signal.clear_since(signal.mark());
        assert!(!registry.is_raised());
        drop(signal);
        assert!(!registry.is_shared());
    }

    #[test]
    fn a_confirmation_keeps_a_doubt_raised_after_its_request() {
        let signal = DoubtSignal::new();
        let sent = signal.mark();
        signal.raise();
        signal.clear_since(sent);
        assert!(signal.is_raised(), "the doubt came after the request: the reply cannot lift it");
        let again = signal.mark();
        signal.clear_since(again);
        assert!(!signal.is_raised());
    }
}
