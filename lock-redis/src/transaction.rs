//! `MULTI`/`EXEC` transactions of plain commands, packed and read by hand: what the `SetNx`
//! acquisition and Redlock's votes send instead of a script (a script's set-up costs the server
//! more than the few commands they run).
//!
//! Not redis-rs's atomic pipeline: it mis-counts replies when `MULTI` itself is refused (an
//! unauthenticated connection) and panics in debug builds.

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

use crate::keys::RedisKeys;
use crate::millis;

/// `commands` between `MULTI` and `EXEC`, packed for one write. The server answers with
/// [`replies`]`(commands.len())` replies.
pub(crate) fn pack(commands: &[Cmd]) -> Vec<u8> {
    let mut request = redis::cmd("MULTI").get_packed_command();
    for command in commands {
        request.extend(command.get_packed_command());
    }
    request.extend(redis::cmd("EXEC").get_packed_command());
    request
}

/// How many replies a transaction of `commands` commands gets: `OK`, one `QUEUED` each, and
/// `EXEC`'s.
pub(crate) const fn replies(commands: usize) -> usize {
    commands + 2
}

/// `EXEC`'s reply, the array of the commands' replies, from all of a transaction's replies. The
/// first error anywhere (a refused `MULTI`, a command refused when queued, `EXECABORT`, or an
/// error inside the array) is the outcome.
pub(crate) fn exec_reply(replies: Vec<Value>) -> RedisResult<Value> {
    match Value::Array(replies).extract_error()? {
        Value::Array(mut replies) => replies.pop().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "transaction", "no reply".to_owned()))
        }),
        _ => unreachable!("extract_error keeps an array an array"),
    }
}

/// `SET <lock> <value> NX PX <lease>`: the acquisition both transactions make.
pub(crate) fn set_nx_px(keys: &RedisKeys, value: &str, lease: Duration) -> Cmd {
    redis::cmd("SET").arg(keys.lock()).arg(value).arg("NX").arg("PX").arg(millis(lease)).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_reply_is_the_last_and_any_error_wins() {
        let queued = || Value::SimpleString("QUEUED".into());
        let exec = Value::Array(vec![Value::Int(1)]);
        assert_eq!(exec_reply(vec![Value::Okay, queued(), exec.clone()]).unwrap(), exec);
        let noauth = || redis::parse_redis_value(b"-NOAUTH Authentication required.\r\n").unwrap();
        let error = exec_reply(vec![noauth(), noauth(), noauth()]).unwrap_err();
        assert!(error.to_string().contains("NOAUTH"), "{error}");
        assert!(exec_reply(vec![]).is_err());
    }

    #[test]
    fn pack_wraps_the_commands() {
        let text = String::from_utf8(pack(&[redis::cmd("PING").to_owned()])).unwrap();
        assert_eq!(text, "*1\r\n$5\r\nMULTI\r\n*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nEXEC\r\n");
        assert_eq!(replies(1), 3);
    }
}
