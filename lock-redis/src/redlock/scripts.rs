//! Redlock's Lua scripts (`scripts/redlock_*.lua`), sent with `EVALSHA` in packed requests. A
//! node that answers `NOSCRIPT` (it restarted, or its script cache was flushed) gets `SCRIPT LOAD`
//! and the same `EVALSHA` again, in one write. (The acquisition needs no script: a transaction of
//! plain commands, in `acquire.rs`.)

use std::sync::LazyLock;

use crate::lua::LuaScript;

/// The fencing helper the extend and release scripts start with.
const FENCE: &str = include_str!("../scripts/redlock_fence.lua");

/// Extends the lease on one node if the token still holds it; raises the fencing counter.
pub(crate) fn extend() -> &'static LuaScript {
    static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
        LuaScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_extend.lua")))
    });
    &SCRIPT
}

/// Deletes the lock on one node if the token still holds it and announces the release; raises
/// the fencing counter.
pub(crate) fn release() -> &'static LuaScript {
    static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
        LuaScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_release.lua")))
    });
    &SCRIPT
}

/// Raises one node's fencing counter to a token issued from the other nodes' counters.
pub(crate) fn raise() -> &'static LuaScript {
    static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
        LuaScript::new(format!("{FENCE}\n{}", include_str!("../scripts/redlock_raise.lua")))
    });
    &SCRIPT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha1_of_the_full_text() {
        for script in [extend(), release(), raise()] {
            assert_eq!(script.hash(), redis::Script::new(script.source()).get_hash());
        }
        assert!(extend().source().contains("local function raise_fence"));
    }
}
