//! The subscriber thread of a [`WaitHub`](super::WaitHub): one connection that SUBSCRIBEs to
//! the channels waiters wait on, hands release messages to them, and reconnects with capped
//! backoff when the connection breaks.

use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult};

use super::{Channels, HubShared, REFUSED_RETRY, TICK};

/// Longest pause between reconnection attempts of the subscriber.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The first pause before the subscriber reconnects.
const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// A connection that served this long was healthy: the next reconnect starts at the shortest
/// delay again.
const HEALTHY_AFTER: Duration = Duration::from_secs(5);

/// The payload of the permission probe published on the control channel (see
/// [`ChannelRights`]); the subscriber ignores everything on that channel anyway.
const PROBE_PAYLOAD: &str = "-";

/// The subscriber thread: connect, serve until the connection breaks, reconnect; until closed.
///
/// Reconnection backs off exponentially up to [`MAX_RECONNECT_DELAY`], also when a connection
/// opens but breaks at once (a server that accepts and drops connections must not be hammered);
/// only a connection that served for a while resets the delay.
pub(super) fn run(shared: &HubShared) {
    let mut delay = MIN_RECONNECT_DELAY;
    while !shared.is_closed() {
        let started = Instant::now();
        let outcome =
            shared.connector.open(&shared.settings).and_then(|mut connection| match shared.channels {
                Channels::Classic => serve(shared, &mut connection),
                Channels::Sharded => super::sharded::serve(shared, &mut connection),
            });
        if let Err(error) = outcome {
            tracing::debug!(%error, "redis subscriber connection failed; reconnecting");
            shared.connection_lost();
            if started.elapsed() >= HEALTHY_AFTER {
                delay = MIN_RECONNECT_DELAY;
            }
            if !shared.is_closed() {
                thread::sleep(delay);
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
        }
    }
    shared.state.lock().thread_running = false;
}

/// Whether the server lets this client use the backend's channels, learnt by publishing
/// [`PROBE_PAYLOAD`] on the hub's own control channel over a plain connection.
///
/// redis-rs's `PubSub::subscribe` swallows an error reply to SUBSCRIBE (it returns `Ok` either
/// way), so a refusal has to be learnt another way. Redis grants PUBLISH and SUBSCRIBE by the
/// same channel patterns, and the control channel (`<prefix>:subscriber:<id>`) lies under the
/// documented grant `&<prefix>:*` just like every lock channel; probing it (nobody else listens
/// there) does not put anything on the lock channels. A grant narrower than the prefix that
/// still covers some lock channels is not told apart: those channels are then subscribed blind,
/// as before, and their waiters still re-check at least once a second.
struct ChannelRights {
    probe: Option<Connection>,
    /// The latest answer and when it came; `None` before the first probe.
    answer: Option<(Result<(), redis::RedisError>, Instant)>,
}

impl ChannelRights {
    fn new() -> Self {
        Self { probe: None, answer: None }
    }

    /// The server's refusal, if it refuses; asked again once a refusal is [`REFUSED_RETRY`] old.
    fn refusal(&mut self, shared: &HubShared) -> Option<&redis::RedisError> {
        let ask = match &self.answer {
            None => true,
            Some((Err(_), at)) => at.elapsed() >= REFUSED_RETRY,
            Some((Ok(()), _)) => false,
        };
        if ask {
            self.answer = Some((self.ask(shared), Instant::now()));
        }
        self.answer.as_ref().and_then(|(answer, _)| answer.as_ref().err())
    }

    fn ask(&mut self, shared: &HubShared) -> Result<(), redis::RedisError> {
        if self.probe.is_none() {
            self.probe = shared.connector.open(&shared.settings).ok();
        }
        // Without a probe connection (it failed to open) the answer is yes: subscribe blind.
        let Some(connection) = self.probe.as_mut() else { return Ok(()) };
        let published =
            redis::cmd("PUBLISH").arg(&shared.control_channel).arg(PROBE_PAYLOAD).query::<i64>(connection);
        match published {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
                Err(error)
            }
            Err(error) => {
                if !matches!(error.kind(), redis::ErrorKind::Server(_)) {
                    // Out of step or closed: open another next time.
                    self.probe = None;
                }
                tracing::debug!(%error, "probing the redis channel rights failed; subscribing blind");
                Ok(())
            }
        }
    }
}

/// Serves one connection; returns `Ok` when the hub closed, the error when the connection broke.
fn serve(shared: &HubShared, connection: &mut Connection) -> RedisResult<()> {
    let mut rights = ChannelRights::new();
    let mut pubsub = connection.as_pubsub();
    // Commands wait for their reply as long as any command does; only the idle read for the
    // next message is cut at a TICK, so the thread can look at its to-do list.
    let command_timeout = Some(shared.settings.read_timeout);
    pubsub.set_read_timeout(command_timeout)?;
    pubsub.subscribe(&shared.control_channel)?;
    pubsub.set_read_timeout(Some(TICK))?;
    // Messages published before this connection subscribed are lost: every current waiter
    // re-checks once (the first connection finds at most the waiters that started the thread).
    shared.wake_all();
    loop {
        if shared.is_closed() {
            return Ok(());
        }
        let (subscribe, unsubscribe) = shared.pending(Instant::now());
        let commands = !subscribe.is_empty() || !unsubscribe.is_empty();
        if commands {
            pubsub.set_read_timeout(command_timeout)?;
        }
        for name in subscribe {
            // A channel the server would refuse is not reported subscribed: its waiters fall
            // back to re-checking on their own.
            if let Some(error) = rights.refusal(shared) {
                shared.mark_refused(&name, error);
                continue;
            }
            // One channel per command: the reply confirms exactly that one, and only then are
            // its waiters told (they re-check after that, so no release can slip between).
            pubsub.subscribe(&name)?;
            shared.mark_subscribed(&name);
        }
        for name in unsubscribe {
            // Reported unsubscribed even if the server answered with an error: a channel that
            // stays subscribed only brings messages nobody waits for.
            pubsub.unsubscribe(&name)?;
            shared.mark_unsubscribed(&name);
        }
        if commands {
            pubsub.set_read_timeout(Some(TICK))?;
        }
        match pubsub.get_message() {
            Ok(message) => {
                let name = message.get_channel_name();
                if name != shared.control_channel {
                    shared.dispatch(name, message.get_payload_bytes());
                }
            }
            Err(error) if error.is_timeout() => {}
            Err(error) => return Err(error),
        }
    }
}
