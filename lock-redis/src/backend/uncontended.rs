//! The uncontended acquisition of the `SetNx` kind: plain commands in one `MULTI`/`EXEC`
//! transaction ([`crate::transaction`]) instead of a script, which costs the server a fraction
//! of the time (a script's set-up alone costs more than `SET` itself; `distlock bench` shows
//! both).

use std::time::Duration;

use redis::{RedisError, RedisResult, Value};

use crate::connection::RedisConnection;

use crate::keys::RedisKeys;
use crate::transaction;

/// What the transaction found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Uncontended {
    /// `SET NX` refused: the lock is held, or reserved for the queue head's turn.
    Refused,
    /// Acquired, with nobody queued: the fencing token.
    Acquired(i64),
    /// Acquired while waiters were queued (their turn, not the caller's): the fencing token of
    /// a hold the caller must hand back to the queue.
    OutOfTurn(i64),
}

/// `MULTI; EXISTS queue; SET lock <token> NX PX <lease>; INCR fence; EXEC`, packed by hand
/// into one write ([`transaction::Packed`]).
/// Read with one deadline for all replies ([`RedisConnection::exchange`]): a server that stops
/// answering costs one read timeout, not one per reply.
pub(super) fn acquire(
    connection: &mut RedisConnection,
    keys: &RedisKeys,
    token: &str,
    ttl: Duration,
) -> RedisResult<Uncontended> {
    let (lock, fence, queue) = (keys.lock().as_bytes(), keys.fence().as_bytes(), keys.queue().as_bytes());
    let (ms, start) = transaction::decimal(crate::millis(ttl));
    // Each argument's bytes and up to 16 of framing, and the commands' headers.
    let mut request =
        transaction::Packed::with_capacity(192 + 2 * lock.len() + queue.len() + fence.len() + token.len());
    request
        .command(&[b"MULTI"])
        .command(&[b"EXISTS", queue])
        .command(&[b"SET", lock, token.as_bytes(), b"NX", b"PX", &ms[start..]])
        .command(&[b"INCR", fence])
        .command(&[b"EXEC"]);
    let replies = connection.exchange(request.as_bytes(), transaction::replies(3))?;
    parse(replies)
}

/// The transaction's outcome from its replies.
fn parse(replies: Vec<Value>) -> RedisResult<Uncontended> {
    let (queued, set, fence): (i64, Option<String>, i64) =
        redis::from_redis_value(transaction::exec_reply(replies)?).map_err(RedisError::from)?;
    Ok(match (queued, set) {
        (_, None) => Uncontended::Refused,
        (0, Some(_)) => Uncontended::Acquired(fence),
        (_, Some(_)) => Uncontended::OutOfTurn(fence),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(exec: Value) -> Vec<Value> {
        let queued = || Value::SimpleString("QUEUED".into());
        vec![Value::Okay, queued(), queued(), queued(), exec]
    }

    #[test]
    fn the_exec_array_decides() {
        let exec = |queued: i64, set: Value| Value::Array(vec![Value::Int(queued), set, Value::Int(7)]);
        assert_eq!(parse(replies(exec(0, Value::Okay))).unwrap(), Uncontended::Acquired(7));
        assert_eq!(parse(replies(exec(1, Value::Okay))).unwrap(), Uncontended::OutOfTurn(7));
        assert_eq!(parse(replies(exec(0, Value::Nil))).unwrap(), Uncontended::Refused);
    }

    #[test]
    fn a_refused_multi_is_an_error_not_a_panic() {
        let noauth = || redis::parse_redis_value(b"-NOAUTH Authentication required.\r\n").unwrap();
        let error = parse(vec![noauth(), noauth(), noauth(), noauth(), noauth()]).unwrap_err();
        assert!(error.to_string().contains("NOAUTH"), "{error}");
    }
}
