//! The subscriber connection of a cluster node's hub: lock channels are shard channels
//! (`SSUBSCRIBE`, released with `SPUBLISH`), which live on the node serving their slot.
//!
//! redis-rs's `PubSub` has no shard commands and, on RESP2, drops `smessage` pushes as unknown,
//! so this speaks the protocol itself, on a RESP3 connection (pub/sub traffic arrives as push
//! values, told apart from command replies): a command, then the values up to its
//! confirmation, handing every message read meanwhile to its waiters. When a slot moves, the
//! node unsubscribes its shard channels itself (`sunsubscribe` pushes); their waiters are woken
//! to re-check, which finds the slot's new primary and subscribes there
//! ([`HubShared::mark_moved`]). The control channel, on which waiters poke the thread, stays a
//! classic channel: its `PUBLISH` reaches every node.
//!
//! A read that times out makes redis-rs skip the next non-push reply (it takes it for the late
//! answer of a timed-out command). So after each idle [`IDLE_READ`] without a message the
//! thread sends two `PING`s and reads up to a `PONG`: one reply is skipped, the other checks
//! that the node still answers, and no command reply is ever lost to the skip.

use std::time::{Duration, Instant};

use redis::{Connection, RedisError, RedisResult, Value};

use super::HubShared;

/// How long the thread waits for a message before it checks the node (and its to-do list; new
/// subscriptions do not wait for it: waiters poke the thread on the control channel).
const IDLE_READ: Duration = Duration::from_secs(1);

/// What one value read from the subscriber connection is.
#[derive(Debug, PartialEq)]
enum Push {
    /// A message on `channel` (`message` or `smessage`).
    Message { channel: String, payload: Vec<u8> },
    /// A (un)subscription of `channel`: `subscribe`, `ssubscribe`, `sunsubscribe`, …
    Confirmation { kind: String, channel: String },
    /// An error reply (to the command being confirmed).
    Refusal(redis::ServerError),
    /// A `PONG`.
    Pong,
    /// Anything else: ignored.
    Other,
}

/// How a command to (un)subscribe ended.
enum Answer {
    Confirmed,
    Refused(redis::ServerError),
}

/// Serves one connection (RESP3); returns `Ok` when the hub closed, the error when the
/// connection broke or stopped answering.
pub(super) fn serve(shared: &HubShared, connection: &mut Connection) -> RedisResult<()> {
    let command_timeout = Some(shared.settings.read_timeout);
    connection.set_read_timeout(command_timeout)?;
    if let Answer::Refused(error) = command(shared, connection, "SUBSCRIBE", &shared.control_channel)? {
        return Err(RedisError::from(error));
    }
    // Messages published before this connection subscribed are lost: every current waiter
    // re-checks once.
    shared.wake_all();
    loop {
        if shared.is_closed() {
            return Ok(());
        }
        let (subscribe, unsubscribe) = shared.pending(Instant::now());
        for name in subscribe {
            match command(shared, connection, "SSUBSCRIBE", &name)? {
                Answer::Confirmed => shared.mark_subscribed(&name),
                Answer::Refused(error) if error.code() == "NOPERM" => {
                    shared.mark_refused(&name, &RedisError::from(error));
                }
                // MOVED (the slot is another node's now), CLUSTERDOWN, …: the waiters re-check
                // and find where the slot went.
                Answer::Refused(error) => {
                    tracing::debug!(channel = %name, ?error, "a cluster node refused a shard channel");
                    shared.mark_moved(&name);
                }
            }
        }
        for name in unsubscribe {
            // Reported unsubscribed even if refused: a channel that stays subscribed only brings
            // messages nobody waits for.
            command(shared, connection, "SUNSUBSCRIBE", &name)?;
            shared.mark_unsubscribed(&name);
        }
        connection.set_read_timeout(Some(IDLE_READ))?;
        let read = connection.recv_response();
        connection.set_read_timeout(command_timeout)?;
        match read {
            Ok(value) => take(shared, parse(value)),
            Err(error) if error.is_timeout() => check_alive(shared, connection)?,
            Err(error) => return Err(error),
        }
    }
}

/// Sends two `PING`s and reads up to a `PONG` (see the module docs); a node that does not
/// answer within the read timeout ends the connection.
fn check_alive(shared: &HubShared, connection: &mut Connection) -> RedisResult<()> {
    let ping = redis::cmd("PING").get_packed_command();
    connection.send_packed_command(&[ping.as_slice(), ping.as_slice()].concat())?;
    loop {
        match parse(connection.recv_response()?) {
            Push::Pong => return Ok(()),
            other => take(shared, other),
        }
    }
}

/// Sends `verb channel` and reads until its confirmation (or refusal), handling every other
/// push on the way.
fn command(
    shared: &HubShared,
    connection: &mut Connection,
    verb: &str,
    channel: &str,
) -> RedisResult<Answer> {
    connection.send_packed_command(&redis::cmd(verb).arg(channel).get_packed_command())?;
    let expected = verb.to_ascii_lowercase();
    loop {
        match parse(connection.recv_response()?) {
            Push::Confirmation { kind, channel: confirmed } if kind == expected && confirmed == channel => {
                return Ok(Answer::Confirmed);
            }
            Push::Refusal(error) => return Ok(Answer::Refused(error)),
            other => take(shared, other),
        }
    }
}

/// Acts on a push that is not the reply being waited for.
fn take(shared: &HubShared, push: Push) {
    match push {
        Push::Message { channel, payload } if channel != shared.control_channel => {
            shared.dispatch(&channel, &payload);
        }
        // Not asked for: the node gave up the channel's slot.
        Push::Confirmation { kind, channel } if kind == "sunsubscribe" => shared.mark_moved(&channel),
        Push::Refusal(error) => {
            tracing::debug!(?error, "a cluster node sent an error to the subscriber unasked");
        }
        _ => {}
    }
}

fn parse(value: Value) -> Push {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let (kind, data) = match value {
        Value::ServerError(error) => return Push::Refusal(error),
        Value::SimpleString(text) if text.eq_ignore_ascii_case("PONG") => return Push::Pong,
        Value::Push { kind, data } => (kind.to_string(), data),
        // RESP2's form, where the kind is the first item.
        Value::Array(mut items) if !items.is_empty() => match text(&items.remove(0)) {
            Some(kind) => (kind, items),
            None => return Push::Other,
        },
        _ => return Push::Other,
    };
    let Some(channel) = data.first().and_then(text) else {
        return if kind == "pong" { Push::Pong } else { Push::Other };
    };
    match kind.as_str() {
        "message" | "smessage" => match data.get(1) {
            Some(Value::BulkString(payload)) => Push::Message { channel, payload: payload.clone() },
            _ => Push::Other,
        },
        "subscribe" | "ssubscribe" | "unsubscribe" | "sunsubscribe" => Push::Confirmation { kind, channel },
        "pong" => Push::Pong,
        _ => Push::Other,
    }
}

#[cfg(test)]
mod tests {
    use redis::PushKind;

    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn resp3_pushes_parse() {
        let message =
            Value::Push { kind: PushKind::SMessage, data: vec![bulk("p:{a}:released"), bulk("tok")] };
        assert_eq!(
            parse(message),
            Push::Message { channel: "p:{a}:released".into(), payload: b"tok".to_vec() }
        );
        let confirmation = Value::Push { kind: PushKind::SSubscribe, data: vec![bulk("ch"), Value::Int(1)] };
        assert_eq!(
            parse(confirmation),
            Push::Confirmation { kind: "ssubscribe".into(), channel: "ch".into() }
        );
        let moved_away = Value::Push { kind: PushKind::SUnsubscribe, data: vec![bulk("ch"), Value::Int(0)] };
        assert_eq!(
            parse(moved_away),
            Push::Confirmation { kind: "sunsubscribe".into(), channel: "ch".into() }
        );
        assert_eq!(parse(Value::SimpleString("PONG".into())), Push::Pong);
        let moved = redis::parse_redis_value(b"-MOVED 3999 127.0.0.1:7001\r\n").unwrap();
        assert!(matches!(parse(moved), Push::Refusal(error) if error.code() == "MOVED"));
        assert_eq!(parse(Value::Int(3)), Push::Other);
    }

    #[test]
    fn resp2_pushes_parse_too() {
        let message = Value::Array(vec![bulk("smessage"), bulk("ch"), bulk("")]);
        assert_eq!(parse(message), Push::Message { channel: "ch".into(), payload: Vec::new() });
        assert_eq!(parse(Value::Array(vec![bulk("pong"), bulk("")])), Push::Pong);
    }
}
