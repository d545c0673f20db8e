//! Redlock's Lua scripts (`scripts/redlock_*.lua`), sent with `EVALSHA`. A node that answers
//! `NOSCRIPT` (it restarted, or its script cache was flushed) gets `SCRIPT LOAD` and the same
//! `EVALSHA` again, in one write.

use std::sync::LazyLock;

use redis::{Cmd, Script};

/// The fencing helper the extend and release scripts start with.
const FENCE: &str = include_str!("../scripts/redlock_fence.lua");

/// One script: its text and its SHA-1.
pub(crate) struct RedlockScript {
    source: String,
    hash: String,
}

impl RedlockScript {
    fn new(source: String) -> Self {
        let hash = Script::new(&source).get_hash().to_owned();
        Self { source, hash }
    }

    /// `EVALSHA <sha> <number of keys> <keys…>`; the caller adds the arguments.
    pub(crate) fn invoke(&self, keys: &[&str]) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command.arg(&self.hash).arg(keys.len());
        for key in keys {
            command.arg(*key);
        }
        command
    }

    /// `SCRIPT LOAD <text>`, packed, to put before an `EVALSHA` in the same write.
    pub(crate) fn load(&self) -> Vec<u8> {
        redis::cmd("SCRIPT").arg("LOAD").arg(&self.source).get_packed_command()
    }
}

/// Takes the lock on one node: `SET NX PX` plus the node's next fencing number.
pub(crate) fn acquire() -> &'static RedlockScript {
    static SCRIPT: LazyLock<RedlockScript> =
        LazyLock::new(|| RedlockScript::new(include_str!("../scripts/redlock_acquire.lua").to_owned()));
    &SCRIPT
}

/// Extends the lease on one node if the token still holds it; raises the fencing counter.
pub(crate) fn extend() -> &'static RedlockScript {
    static SCRIPT: LazyLock<RedlockScript> = LazyLock::new(|| {
        RedlockScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_extend.lua")))
    });
    &SCRIPT
}

/// Deletes the lock on one node if the token still holds it and announces the release; raises
/// the fencing counter.
pub(crate) fn release() -> &'static RedlockScript {
    static SCRIPT: LazyLock<RedlockScript> = LazyLock::new(|| {
        RedlockScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_release.lua")))
    });
    &SCRIPT
}

/// Raises one node's fencing counter to a token issued from the other nodes' counters.
pub(crate) fn raise() -> &'static RedlockScript {
    static SCRIPT: LazyLock<RedlockScript> = LazyLock::new(|| {
        RedlockScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_raise.lua")))
    });
    &SCRIPT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha1_of_the_full_text() {
        for script in [acquire(), extend(), release(), raise()] {
            assert_eq!(script.hash.len(), 40);
            assert_eq!(script.hash, Script::new(&script.source).get_hash());
        }
        assert!(extend().source.contains("local function raise_fence"));
        assert!(!acquire().source.contains("raise_fence"));
    }
}
