//! [`FencedResource`]: the storage service of the docs' fencing story.

use lock_core::FencingToken;
use parking_lot::Mutex;

/// A resource that accepts a write only with a fencing token at least as high as any it has seen,
/// the way the docs' storage service rejects token 33 after it has processed token 34.
#[derive(Debug, Default)]
pub struct FencedResource {
    state: Mutex<Accepted>,
}

#[derive(Debug, Default)]
struct Accepted {
    highest: Option<FencingToken>,
    writes: Vec<(FencingToken, String)>,
}

/// A write carried a token lower than one the resource has already accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {presented}; the resource has seen {highest}")]
pub struct StaleToken {
    /// The token the rejected write carried.
    pub presented: FencingToken,
    /// The highest token accepted so far.
    pub highest: FencingToken,
}

impl FencedResource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` if `token` is not older than the newest token seen.
    ///
    /// # Errors
    /// [`StaleToken`] when a higher token has already written.
    pub fn write(&self, token: FencingToken, value: impl Into<String>) -> Result<(), StaleToken> {
        let mut state = self.state.lock();
        if let Some(highest) = state.highest.filter(|highest| token < *highest) {
            return Err(StaleToken { presented: token, highest });
        }
        state.highest = Some(token);
        state.writes.push((token, value.into()));
        Ok(())
    }

    /// The accepted writes, oldest first.
    pub fn writes(&self) -> Vec<(FencingToken, String)> {
        self.state.lock().writes.clone()
    }
}
