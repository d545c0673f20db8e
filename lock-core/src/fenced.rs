//! Guarded writes through a fenced store: what makes a [`FencingToken`] stop a stale write.
//!
//! A lock alone cannot keep a holder that was paused past its lease (a GC pause, a stopped VM, a
//! partition) from writing after the lock has passed to someone else: the holder does not know
//! yet. The store it writes to can: it keeps, per key, the highest token that wrote, and refuses
//! a write carrying a lower one. [`FencedStore`] is that rule; each backend crate implements it on
//! its own kind of server (a Redis script, a SQL upsert, a ZooKeeper conditional `setData`), and
//! [`MemoryFencedStore`] in memory.
//!
//! # The rule, for any store
//! Keep `highest[key]`. A write of `key` with token `t` is accepted when `t >= highest[key]`
//! (or the key is new), and then `highest[key] = t`, **in the same atomic step as the write**
//! (one statement, one script, one compare-and-set): a check and a write apart let a stale
//! writer in between them.
//!
//! Why `>=` and not `>`: tokens strictly increase across *holders*, so a later holder always
//! passes and an earlier one never does; `>=` also lets one holder write the same key more than
//! once. A write with `t < highest` is refused with [`Error::StaleToken`], never dropped in
//! silence.
//!
//! # Shared holds
//! Read locks and semaphore permits are held by several owners at once, with tokens that can be
//! equal (readers of one hold) or interleave (permits). A fenced store cannot tell their writes
//! apart: it refuses a permit holder with a lower token than another live permit holder that
//! already wrote. Fence writes under exclusive holds (mutex, write lock, leadership).
//!
//! # When tokens go backwards
//! Where the token counter itself can be lost (Redis without persistence, a failover without
//! `WAIT`, a restored database), a new holder may get a token below one the store has seen, and
//! the store then refuses every later holder until tokens pass it again. Recover by moving the
//! store's fences down on purpose (delete the key's fence, after making sure no old holder is
//! alive), or by putting an epoch above the counter: a token of `epoch << 40 | counter` bumped on
//! every restore keeps increasing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::FencingToken;
use crate::error::{Error, Result};

/// A store that accepts a write only with a fencing token at least as high as any that wrote
/// the same key (see the module docs for the rule).
///
/// # Contract
/// `write` checks and raises the key's highest token in one atomic step with the write, on the
/// store's side; a refused write changes nothing and is [`Error::StaleToken`]. A key that does
/// not exist yet is created by the first write, whatever its token.
pub trait FencedStore: Send + Sync {
    /// Writes `value` under `key` if `token` is not below the highest token that wrote `key`.
    ///
    /// # Errors
    /// [`Error::StaleToken`] when a higher token has written `key`; the store's own errors
    /// (connection, timeout) otherwise. After a connection or timeout error the write may or may
    /// not have happened: a retry with the same token is safe.
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()>;

    /// The value of `key` and the highest token that wrote it, `None` if never written.
    ///
    /// # Errors
    /// The store's own errors.
    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>>;
}

/// The outcome of the rule for `presented` against the `highest` token that wrote `key`.
///
/// # Errors
/// [`Error::StaleToken`] when `presented < highest`.
pub fn admit(key: &str, highest: Option<FencingToken>, presented: FencingToken) -> Result<()> {
    match highest {
        Some(highest) if presented < highest => {
            Err(Error::StaleToken { key: key.to_owned(), presented, highest })
        }
        _ => Ok(()),
    }
}

/// Each key's highest token and value.
type Keys = HashMap<String, (FencingToken, Vec<u8>)>;

/// A [`FencedStore`] in this process: for tests, and for the in-memory backend. Clones share
/// their keys.
#[derive(Default, Clone)]
pub struct MemoryFencedStore {
    keys: Arc<Mutex<Keys>>,
}

impl MemoryFencedStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl fmt::Debug for MemoryFencedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryFencedStore").field("keys", &self.keys.lock().len()).finish()
    }
}

impl FencedStore for MemoryFencedStore {
    fn write(&self, key: &str, token: FencingToken, value: &[u8]) -> Result<()> {
        let mut keys = self.keys.lock();
        admit(key, keys.get(key).map(|(highest, _)| *highest), token)?;
        keys.insert(key.to_owned(), (token, value.to_vec()));
        Ok(())
    }

    fn read(&self, key: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        Ok(self.keys.lock().get(key).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_tokens_are_refused_equal_and_higher_ones_write() {
        let store = MemoryFencedStore::new();
        let token = FencingToken::new;
        store.write("k", token(5), b"first").unwrap();
        store.write("k", token(5), b"again").unwrap();
        let error = store.write("k", token(4), b"stale").unwrap_err();
        assert!(
            matches!(error, Error::StaleToken { ref key, presented, highest } if key == "k" && presented == token(4) && highest == token(5)),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "write of k refused: fencing token 4 is below 5, which already wrote it"
        );
        store.write("other", token(1), b"a new key takes any token").unwrap();
        store.write("k", token(9), b"next holder").unwrap();
        assert_eq!(store.read("k").unwrap(), Some((token(9), b"next holder".to_vec())));
        assert_eq!(store.read("never").unwrap(), None);
    }
}
