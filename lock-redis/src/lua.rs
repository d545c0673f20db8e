//! The Lua scripts (in `scripts/`), loaded once per process and run with `EVALSHA` (reloaded on
//! `NOSCRIPT` by [`redis::Script`]).

use std::sync::LazyLock;

use redis::Script;

/// The wait-queue helpers every acquiring or releasing script starts with.
pub(crate) const QUEUE: &str = include_str!("scripts/queue.lua");

/// The three scripts of one lock kind. Both kinds take the same `KEYS` and `ARGV` (documented at
/// the top of each script), so the backend drives them alike.
pub(crate) struct LockScripts {
    pub(crate) acquire: Script,
    pub(crate) extend: Script,
    /// The extend script's text, for `SCRIPT LOAD` at the head of a renewal pipeline (a
    /// pipeline cannot reload a script that the server forgot mid-way).
    pub(crate) extend_source: &'static str,
    pub(crate) release: Script,
}

impl LockScripts {
    pub(crate) fn new(acquire: &str, extend: &'static str, release: &str) -> Self {
        Self {
            acquire: Script::new(&with_queue(acquire)),
            extend: Script::new(extend),
            extend_source: extend,
            release: Script::new(&with_queue(release)),
        }
    }
}

/// A waiter that gives up leaves the queue (kind-independent).
pub(crate) fn dequeue() -> &'static Script {
    static DEQUEUE: LazyLock<Script> =
        LazyLock::new(|| Script::new(&with_queue(include_str!("scripts/dequeue.lua"))));
    &DEQUEUE
}

fn with_queue(body: &str) -> String {
    format!("{QUEUE}\n{body}")
}
