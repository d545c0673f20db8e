//! [`FencedResource`]: the storage service of the docs' fencing story, with the history of the
//! writes it accepted (the rule is [`lock_core::admit`], the one every fenced store applies).

use lock_core::FencingToken;
use parking_lot::Mutex;

/// A resource that accepts a write only with a fencing token at least as high as any it has seen,
/// the way the docs' storage service rejects token 33 after it has processed token 34.
#[derive(Debug, Default)]
pub struct FencedResource {
    writes: Mutex<Vec<(FencingToken, String)>>,
}

impl FencedResource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` if `token` is not older than the newest token seen.
    ///
    /// # Errors
    /// [`lock_core::Error::StaleToken`] when a higher token has already written.
    pub fn write(&self, token: FencingToken, value: impl Into<String>) -> lock_core::Result<()> {
        let mut writes = self.writes.lock();
        let highest = writes.iter().map(|(token, _)| *token).max();
        lock_core::admit("the resource", highest, token)?;
        writes.push((token, value.into()));
        Ok(())
    }

    /// The accepted writes, oldest first.
    pub fn writes(&self) -> Vec<(FencingToken, String)> {
        self.writes.lock().clone()
    }
}
