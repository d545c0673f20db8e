//! `MULTI`/`EXEC` transactions of plain commands, packed ([`Packed`]) and read by hand: what the
//! `SetNx` acquisition and Redlock's votes send instead of a script (a script's set-up costs the
//! server more than the few commands they run).
//!
//! Not redis-rs's atomic pipeline: it mis-counts replies when `MULTI` itself is refused (an
//! unauthenticated connection) and panics in debug builds.

use redis::{RedisResult, Value};

/// How many replies a transaction of `commands` commands gets: `OK`, one `QUEUED` each, and
/// `EXEC`'s.
pub(crate) const fn replies(commands: usize) -> usize {
    commands + 2
}

/// `EXEC`'s reply, the array of the commands' replies, from all of a transaction's replies. The
/// first error anywhere (a refused `MULTI`, a command refused when queued, `EXECABORT`, or an
/// error inside the array) is the outcome.
pub(crate) fn exec_reply(replies: Vec<Value>) -> RedisResult<Value> {
    let mut last = None;
    // Looked for first, without `extract_error`'s rebuilding of every array on the way.
    for reply in replies {
        last = Some(if holds_error(&reply) { reply.extract_error()? } else { reply });
    }
    last.ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Parse, "transaction", "no reply".to_owned()))
    })
}

/// Whether `value` is, or holds at any depth, a server error.
fn holds_error(value: &Value) -> bool {
    match value {
        Value::ServerError(_) => true,
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            items.iter().any(holds_error)
        }
        Value::Map(pairs) => pairs.iter().any(|(key, value)| holds_error(key) || holds_error(value)),
        Value::Attribute { data, attributes } => {
            holds_error(data) || attributes.iter().any(|(key, value)| holds_error(key) || holds_error(value))
        }
        _ => false,
    }
}

/// A request packed by hand, every command into one buffer: the uncontended acquisition's and
/// Redlock's votes (redis-rs's `Cmd` allocates per argument, again per packing, and once more to
/// join them).
/// The bytes are RESP arrays of bulk strings, as `Cmd` packs them.
pub(crate) struct Packed(Vec<u8>);

impl Packed {
    /// An empty request with room for `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self(Vec::with_capacity(capacity))
    }

    /// Appends the command of `args` (its name first; never empty: the server answers an empty
    /// array with nothing, and the replies would be miscounted).
    pub(crate) fn command(&mut self, args: &[&[u8]]) -> &mut Self {
        self.start(args.len());
        for arg in args {
            self.arg(arg);
        }
        self
    }

    /// Starts a command of `count` arguments (its name included, so at least one), which the
    /// next `count` calls of [`arg`](Self::arg) append.
    pub(crate) fn start(&mut self, count: usize) -> &mut Self {
        debug_assert!(count > 0, "a command without a name");
        self.0.push(b'*');
        push_decimal(&mut self.0, count as u64);
        self.0.extend_from_slice(b"\r\n");
        self
    }

    /// Appends one argument of the command begun by [`start`](Self::start).
    pub(crate) fn arg(&mut self, arg: &[u8]) -> &mut Self {
        self.0.push(b'$');
        push_decimal(&mut self.0, arg.len() as u64);
        self.0.extend_from_slice(b"\r\n");
        self.0.extend_from_slice(arg);
        self.0.extend_from_slice(b"\r\n");
        self
    }

    /// The packed bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The packed bytes, owned.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// `value`'s decimal digits in the tail of 20 bytes, and where they start (`&digits[start..]`).
pub(crate) fn decimal(mut value: u64) -> ([u8; 20], usize) {
    let mut digits = [0; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return (digits, start);
        }
    }
}

/// Appends `value`'s decimal digits; the one- and two-digit counts and lengths of most
/// arguments without the general loop.
fn push_decimal(bytes: &mut Vec<u8>, value: u64) {
    match value {
        0..=9 => bytes.push(b'0' + value as u8),
        10..=99 => bytes.extend_from_slice(&[b'0' + (value / 10) as u8, b'0' + (value % 10) as u8]),
        _ => {
            let (digits, start) = decimal(value);
            bytes.extend_from_slice(&digits[start..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::Cmd;

    use super::*;

    /// `commands` between `MULTI` and `EXEC`, as redis-rs packs them: what [`Packed`] must send.
    fn pack(commands: &[Cmd]) -> Vec<u8> {
        let mut request = redis::cmd("MULTI").get_packed_command();
        for command in commands {
            request.extend(command.get_packed_command());
        }
        request.extend(redis::cmd("EXEC").get_packed_command());
        request
    }

    #[test]
    fn hand_packed_commands_are_the_bytes_redis_rs_packs() {
        let lock = "distlock:{a%7Bb}:lock";
        let mut packed = Packed::with_capacity(16);
        let (ms, start) = decimal(30_000);
        packed.command(&[b"MULTI"]).command(&[b"SET", lock.as_bytes(), b"t0k", b"NX", b"PX", &ms[start..]]);
        packed.command(&[b"EXEC"]);
        let by_redis_rs =
            pack(&[redis::cmd("SET").arg(lock).arg("t0k").arg("NX").arg("PX").arg(30_000u64).to_owned()]);
        assert_eq!(packed.as_bytes(), by_redis_rs.as_slice());
        for value in [0, 7, 9, 10, 42, 99, 100, 4_294_967_296, u64::MAX] {
            let (digits, start) = decimal(value);
            assert_eq!(&digits[start..], value.to_string().as_bytes());
            let mut pushed = b"x".to_vec();
            push_decimal(&mut pushed, value);
            assert_eq!(&pushed[1..], value.to_string().as_bytes());
        }
    }

    #[test]
    fn exec_reply_is_the_last_and_any_error_wins() {
        let queued = || Value::SimpleString("QUEUED".into());
        let exec = Value::Array(vec![Value::Int(1)]);
        assert_eq!(exec_reply(vec![Value::Okay, queued(), exec.clone()]).unwrap(), exec);
        let noauth = || redis::parse_redis_value(b"-NOAUTH Authentication required.\r\n").unwrap();
        let error = exec_reply(vec![noauth(), noauth(), noauth()]).unwrap_err();
        assert!(error.to_string().contains("NOAUTH"), "{error}");
        assert!(exec_reply(vec![]).is_err());
        let inner = Value::Array(vec![Value::Int(1), noauth()]);
        let error = exec_reply(vec![Value::Okay, queued(), inner]).unwrap_err();
        assert!(error.to_string().contains("NOAUTH"), "an error inside EXEC's array: {error}");
    }

    #[test]
    fn pack_wraps_the_commands() {
        let text = String::from_utf8(pack(&[redis::cmd("PING").to_owned()])).unwrap();
        assert_eq!(text, "*1\r\n$5\r\nMULTI\r\n*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nEXEC\r\n");
        assert_eq!(replies(1), 3);
    }
}
