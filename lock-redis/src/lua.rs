//! The Lua scripts (in `scripts/`) and [`LuaScript`], the one script type every caller uses:
//! single commands ([`LuaScript::query`]), renewal pipelines and Redlock's packed requests
//! ([`LuaScript::invoke`] after [`LuaScript::load`] in the same write).

use redis::{Cmd, Connection, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

use crate::connection::RedisConnection;
use crate::transaction::{decimal, Packed};

/// The wait-queue helpers of every acquiring, releasing or dequeuing script, put where it says
/// [`QUEUE_MARKER`].
pub(crate) const QUEUE: &str = include_str!("scripts/queue.lua");

/// Where a script wants the queue helpers: after its fast path, which then does not pay for
/// defining them.
const QUEUE_MARKER: &str = "--[[ queue.lua ]]";

/// `held_by(lock_key, token)`, the owner check of the scripts that write on a holder's behalf
/// (guarded writes, an election's proclaim), put where it says [`HELD_BY_MARKER`].
const HELD_BY: &str = include_str!("scripts/held_by.lua");
const HELD_BY_MARKER: &str = "--[[ held_by.lua ]]";

/// One script: its text and its SHA-1, run with `EVALSHA`.
///
/// A server that forgot the script (restart, `SCRIPT FLUSH`) answers `NOSCRIPT`: a single command
/// is loaded and retried by [`query`](Self::query); a pipeline or a packed request, which cannot
/// retry mid-way, starts with [`load`](Self::load) in the same write.
pub(crate) struct LuaScript {
    source: String,
    hash: String,
}

impl LuaScript {
    pub(crate) fn new(source: String) -> Self {
        let hash = redis::Script::new(&source).get_hash().to_owned();
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

    /// `EVALSHA` of this script with `keys`, then `args`, packed by hand into one buffer (what
    /// [`invoke`](Self::invoke) builds, without a `Cmd`'s allocation per argument).
    pub(crate) fn packed(&self, keys: &[&str], args: &[&[u8]]) -> Packed {
        let (count, start) = decimal(keys.len() as u64);
        let size = 64
            + keys.iter().map(|key| key.len() + 16).sum::<usize>()
            + args.iter().map(|arg| arg.len() + 16).sum::<usize>();
        let mut request = Packed::with_capacity(size);
        request
            .start(3 + keys.len() + args.len())
            .arg(b"EVALSHA")
            .arg(self.hash.as_bytes())
            .arg(&count[start..]);
        for key in keys {
            request.arg(key.as_bytes());
        }
        for arg in args {
            request.arg(arg);
        }
        request
    }

    /// `SCRIPT LOAD <text>`, packed, to put before an `EVALSHA` in the same write.
    pub(crate) fn load(&self) -> Vec<u8> {
        redis::cmd("SCRIPT").arg("LOAD").arg(&self.source).get_packed_command()
    }

    /// Runs `command` (built by [`invoke`](Self::invoke)); on `NOSCRIPT`, loads the script and
    /// runs it once more.
    pub(crate) fn query<T: FromRedisValue>(
        &self,
        connection: &mut Connection,
        command: &Cmd,
    ) -> RedisResult<T> {
        match command.query(connection) {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                redis::cmd("SCRIPT").arg("LOAD").arg(&self.source).query::<String>(connection)?;
                command.query(connection)
            }
            result => result,
        }
    }

    /// Like [`query`](Self::query), with `command` (built by [`invoke`](Self::invoke)) sent
    /// packed and read with [`RedisConnection::exchange`]: one deadline, and a reply that times
    /// out leaves the connection ready for a follow-up that the server runs right after it
    /// ([`RedisConnection::follow_unanswered`]).
    pub(crate) fn exchange<T: FromRedisValue>(
        &self,
        connection: &mut RedisConnection,
        command: &Cmd,
    ) -> RedisResult<T> {
        self.exchange_packed(connection, &command.get_packed_command())
    }

    /// [`exchange`](Self::exchange) of a request built by [`packed`](Self::packed) (or any
    /// packed `EVALSHA` of this script).
    pub(crate) fn exchange_packed<T: FromRedisValue>(
        &self,
        connection: &mut RedisConnection,
        packed: &[u8],
    ) -> RedisResult<T> {
        // One deadline for the reply, also when it takes a second exchange.
        let deadline = connection.reply_deadline();
        let mut reply = last(&mut connection.exchange_until(packed, 1, deadline)?);
        if matches!(&reply, Value::ServerError(error) if error.code() == "NOSCRIPT") {
            let mut again = self.load();
            again.extend_from_slice(packed);
            let mut replies = connection.exchange_until(&again, 2, deadline)?;
            reply = last(&mut replies);
            // A refused `SCRIPT LOAD` (an ACL, out of memory) is the error to report, not the
            // `NOSCRIPT` that followed it; an `EVALSHA` that ran all the same (someone else
            // loaded the script in between) is what happened, and is reported.
            if let (Value::ServerError(_), Some(loaded)) = (&reply, replies.pop()) {
                loaded.extract_error()?;
            }
        }
        redis::from_redis_value(reply.extract_error()?).map_err(RedisError::from)
    }

    /// The script's text.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    #[cfg(test)]
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }
}

/// `body` with [`HELD_BY`] where its one marker says.
///
/// # Panics
/// When `body` has no `held_by` marker, or more than one (a test runs every script).
pub(crate) fn with_held_by(body: &str) -> String {
    assert_eq!(body.matches(HELD_BY_MARKER).count(), 1, "a script without one held_by marker:\n{body}");
    body.replacen(HELD_BY_MARKER, HELD_BY, 1)
}

/// The last of `replies`: the one that answers the request's own command.
fn last(replies: &mut Vec<Value>) -> Value {
    replies.pop().unwrap_or(Value::Nil)
}

/// The scripts of one single-node lock kind. Both kinds take the same `KEYS` and `ARGV`
/// (documented at the top of each script), so the backend drives them alike.
pub(crate) struct LockScripts {
    /// Acquire; for `SetNx`, the queued attempt only (the uncontended one is a transaction).
    pub(crate) acquire: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) release: LuaScript,
    /// A waiter that gives up leaves the queue.
    pub(crate) dequeue: LuaScript,
}

impl LockScripts {
    /// # Panics
    /// When `acquire`, `release` or `dequeue` lacks the queue marker (a test runs every kind's).
    pub(crate) fn new(acquire: &str, extend: &str, release: &str, dequeue: &str) -> Self {
        Self {
            acquire: LuaScript::new(with_queue(acquire)),
            extend: LuaScript::new(extend.to_owned()),
            release: LuaScript::new(with_queue(release)),
            dequeue: LuaScript::new(with_queue(dequeue)),
        }
    }

    /// The same scripts publishing wake-ups with `SPUBLISH` (Redis 7 sharded pub/sub) instead of
    /// `PUBLISH`, for a cluster: the message then stays on the slot's primary (and its replicas)
    /// instead of being forwarded to every node of the cluster.
    pub(crate) fn sharded(&self) -> Self {
        let shard = |script: &LuaScript| LuaScript::new(script.source.replace(PUBLISH, SPUBLISH));
        Self {
            acquire: shard(&self.acquire),
            extend: shard(&self.extend),
            release: shard(&self.release),
            dequeue: shard(&self.dequeue),
        }
    }
}

/// How every script publishes a wake-up, and its sharded form ([`LockScripts::sharded`]).
pub(crate) const PUBLISH: &str = "redis.pcall('PUBLISH',";
pub(crate) const SPUBLISH: &str = "redis.pcall('SPUBLISH',";

/// `body` with the queue helpers where its one marker says.
///
/// # Panics
/// When `body` has no queue marker, or more than one (a test runs every script).
pub(crate) fn with_queue(body: &str) -> String {
    assert_eq!(body.matches(QUEUE_MARKER).count(), 1, "a script without one queue marker:\n{body}");
    body.replacen(QUEUE_MARKER, QUEUE, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> [&'static LockScripts; 2] {
        [crate::set_nx::scripts(), crate::reentrant_hash::scripts()]
    }

    #[test]
    fn sharded_scripts_publish_only_with_spublish() {
        for scripts in every_kind() {
            let sharded = scripts.sharded();
            for script in [&sharded.acquire, &sharded.release, &sharded.dequeue] {
                assert!(script.source().contains(SPUBLISH), "{}", script.source());
                assert!(!script.source().contains("'PUBLISH'"), "{}", script.source());
            }
            assert_ne!(sharded.release.hash(), scripts.release.hash());
        }
    }

    #[test]
    fn a_hand_packed_evalsha_is_the_bytes_redis_rs_packs() {
        let script = &crate::set_nx::scripts().release;
        let keys = ["distlock:{a}:lock", "distlock:{a}:queue", "distlock:{a}:queue:timeouts"];
        for keys in [&keys[..1], &keys[..]] {
            let by_hand = script.packed(keys, &[b"t0k", b"", b"1"]);
            let by_redis_rs = script.invoke(keys).arg("t0k").arg("").arg(1).get_packed_command();
            assert_eq!(by_hand.as_bytes(), by_redis_rs.as_slice());
        }
    }

    #[test]
    fn the_hash_is_the_sha1_of_the_full_text() {
        for scripts in every_kind() {
            for script in [&scripts.acquire, &scripts.release, &scripts.dequeue] {
                assert_eq!(script.hash().len(), 40);
                assert_eq!(script.hash(), redis::Script::new(script.source()).get_hash());
                assert!(script.source().contains(QUEUE) && !script.source().contains(QUEUE_MARKER));
            }
            assert!(!scripts.extend.source().contains("server_time"), "extend needs no queue");
        }
    }

    #[test]
    fn invoke_names_the_hash_and_the_keys() {
        let dequeue = &crate::set_nx::scripts().dequeue;
        let packed = dequeue.invoke(&["a", "b"]).arg("x").get_packed_command();
        let text = String::from_utf8(packed).unwrap();
        assert!(text.contains("EVALSHA") && text.contains(dequeue.hash()));
        assert!(text.contains("\r\n2\r\n") && text.ends_with("$1\r\nx\r\n"));
    }
}
