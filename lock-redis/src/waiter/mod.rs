//! Wake-ups without polling: one subscriber connection per backend, shared by every waiter.
//!
//! A release publishes on the lock's channel (see `scripts/queue.lua`). Each backend value (with
//! its clones) has one subscriber thread with one connection that SUBSCRIBEs to the channel of
//! every name a thread of this backend is waiting for, and hands each message to the waiters of
//! that channel. Threads waiting for the same name share the subscription; a channel stays
//! subscribed for a while after its last waiter leaves, so a hot lock is not re-subscribed on
//! every wait.
//!
//! Messages are fire-and-forget: one can be lost (a reconnect, a slow subscriber), and a user
//! without ACL rights on the channels gets none at all (the server refuses the subscription; the
//! thread logs that once per channel and does not report the channel subscribed). So waiters
//! never rely on them alone; they also re-check on their own after a bounded time (see
//! `backend/wait.rs`). On a lost connection the thread (`subscriber.rs`) reconnects,
//! resubscribes and wakes every waiter once to re-check.
//!
//! The thread starts with the first wait and exits (within [`TICK`]) once the last clone of its
//! backend is dropped.
//!
//! Redlock has one hub per node, and registers each waiter's one [`Slot`] with all of them: a
//! release message from any node wakes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::connection::PoolSettings;
use crate::topology::Connector;

mod sharded;
mod subscriber;

/// How long the subscriber blocks in a read before it looks at its to-do list and whether its
/// backend is gone. Subscriptions wanted meanwhile do not wait for it: the waiter pokes the
/// thread through the control channel (see [`WaitHub::register`]).
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(5);

/// How long a channel whose subscription the server refused (ACL) is left before trying again.
const REFUSED_RETRY: Duration = Duration::from_secs(5);

/// The name of the subscriber threads, one per backend that has waited (Linux shows 15 bytes
/// of a thread name).
pub const SUBSCRIBER_THREAD_NAME: &str = "distlock-rsub";

/// The waiters of one backend (and its clones) and their subscriber thread.
pub(crate) struct WaitHub {
    shared: Arc<HubShared>,
}

/// How a hub subscribes to lock channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channels {
    /// `SUBSCRIBE`: one server, a Sentinel primary, a Redlock node.
    Classic,
    /// `SSUBSCRIBE` on the node serving the channel's slot (`sharded.rs`).
    Sharded,
}

struct HubShared {
    connector: Connector,
    channels: Channels,
    settings: PoolSettings,
    /// Where waiters poke the subscriber thread so it subscribes at once; unique per hub.
    control_channel: String,
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    channels: HashMap<String, Channel>,
    thread_running: bool,
    /// Set when the last backend clone is dropped; the thread exits.
    closed: bool,
    /// Channels whose refused subscription was logged already (a warning once per channel).
    warned: std::collections::HashSet<String>,
}

#[derive(Default)]
struct Channel {
    waiters: Vec<Arc<Slot>>,
    subscribed: bool,
    /// When the last waiter left; `None` while there are waiters.
    idle_since: Option<Instant>,
    /// When the server last refused to subscribe it (no ACL rights on the channel).
    refused_at: Option<Instant>,
}

/// One waiting thread: what it waits for and how it is woken.
///
/// A slot may be registered with several hubs at once (Redlock waits on every node): a message
/// from any of them wakes it.
pub(crate) struct Slot {
    /// The waiter's owner token, as the release message names it; empty for a slot that hears
    /// every message of its channel ([`Slot::hearing_all`]).
    token: String,
    state: Mutex<SlotState>,
    changed: Condvar,
}

#[derive(Default)]
struct SlotState {
    subscribed: bool,
    woken: bool,
}

impl Slot {
    /// A slot for the waiter with owner token `token`.
    pub(crate) fn new(token: &str) -> Arc<Self> {
        Arc::new(Slot { token: token.to_owned(), state: Mutex::default(), changed: Condvar::new() })
    }

    /// A slot that every message of its channel wakes, whomever it names: a leader watch,
    /// which follows releases, hand-overs and an election's own notices alike.
    pub(crate) fn hearing_all() -> Arc<Self> {
        Self::new("")
    }

    /// Whether a message with `payload` is for this slot: it names the slot's waiter, or nobody
    /// (an empty payload), or the slot hears every message.
    fn hears(&self, payload: &[u8]) -> bool {
        payload.is_empty() || self.token.is_empty() || payload == self.token.as_bytes()
    }

    fn update(&self, change: impl FnOnce(&mut SlotState)) {
        change(&mut self.state.lock());
        self.changed.notify_all();
    }

    /// Waits until a hub has subscribed the channel, or until `until`; returns whether one has.
    pub(crate) fn wait_subscribed(&self, until: Instant) -> bool {
        let mut state = self.state.lock();
        while !state.subscribed {
            if self.changed.wait_until(&mut state, until).timed_out() {
                return state.subscribed;
            }
        }
        true
    }

    /// Waits until a message wakes this waiter, or until `until`; returns whether it was woken.
    /// A wake-up that came since the last call (or [`clear`](Self::clear)) returns at once.
    pub(crate) fn wait(&self, until: Instant) -> bool {
        let mut state = self.state.lock();
        while !state.woken {
            if self.changed.wait_until(&mut state, until).timed_out() {
                break;
            }
        }
        std::mem::take(&mut state.woken)
    }

    /// Forgets wake-ups received so far: the caller is about to look at the lock itself, so
    /// they are answered by what it sees.
    pub(crate) fn clear(&self) {
        self.state.lock().woken = false;
    }
}

/// A thread's place among the waiters of one channel; leaves on drop.
pub(crate) struct Registration {
    hub: Arc<HubShared>,
    channel: String,
    slot: Arc<Slot>,
}

impl WaitHub {
    /// A hub whose subscriber connects like the pool does. `control_channel` must be unique to
    /// this hub.
    pub(crate) fn new(connector: Connector, settings: PoolSettings, control_channel: String) -> Self {
        Self::with_channels(connector, settings, control_channel, Channels::Classic)
    }

    /// A hub for one cluster node, whose lock channels are shard channels (`SSUBSCRIBE`; the
    /// releases `SPUBLISH`).
    pub(crate) fn sharded(connector: Connector, settings: PoolSettings, control_channel: String) -> Self {
        Self::with_channels(connector, settings, control_channel, Channels::Sharded)
    }

    fn with_channels(
        connector: Connector,
        settings: PoolSettings,
        control_channel: String,
        channels: Channels,
    ) -> Self {
        let shared = Arc::new(HubShared {
            connector,
            settings,
            control_channel,
            channels,
            state: Mutex::new(HubState::default()),
        });
        Self { shared }
    }

    /// The channel on which [`register`](Self::register)'s callers poke the subscriber thread.
    pub(crate) fn control_channel(&self) -> &str {
        &self.shared.control_channel
    }

    /// Adds a waiter with owner token `token` on `channel`, starting the subscriber thread if
    /// needed. The second value says whether the caller should poke the thread (publish on the
    /// control channel) because the channel still needs subscribing.
    pub(crate) fn register(&self, channel: &str, token: &str) -> (Registration, bool) {
        self.register_slot(channel, Slot::new(token))
    }

    /// Like [`register`](Self::register), with a slot the caller may register with other hubs
    /// too.
    pub(crate) fn register_slot(&self, channel: &str, slot: Arc<Slot>) -> (Registration, bool) {
        let mut state = self.shared.state.lock();
        let entry = state.channels.entry(channel.to_owned()).or_default();
        entry.waiters.push(Arc::clone(&slot));
        entry.idle_since = None;
        let subscribed = entry.subscribed;
        if subscribed {
            slot.update(|s| s.subscribed = true);
        }
        let mut poke = !subscribed;
        if !state.thread_running && !state.closed {
            state.thread_running = true;
            let shared = Arc::clone(&self.shared);
            let spawned = thread::Builder::new()
                .name(SUBSCRIBER_THREAD_NAME.into())
                .spawn(move || subscriber::run(&shared));
            match spawned {
                // A fresh thread subscribes to everything wanted when it connects.
                Ok(_) => poke = false,
                Err(error) => {
                    // Waiters still re-check on their own; they are slower, not stuck.
                    tracing::warn!(%error, "cannot start the redis subscriber thread; waiters will poll");
                    state.thread_running = false;
                }
            }
        }
        drop(state);
        (Registration { hub: Arc::clone(&self.shared), channel: channel.to_owned(), slot }, poke)
    }

    /// Whether `channel` is subscribed: a waiter registering now would be woken by the next
    /// message without a round trip of its own.
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        self.shared.state.lock().channels.get(channel).is_some_and(|entry| entry.subscribed)
    }

    /// Stops the subscriber thread (within [`TICK`]).
    pub(crate) fn close(&self) {
        self.shared.state.lock().closed = true;
    }
}

impl Registration {
    /// Waits until the channel is subscribed, or until `until`; returns whether it is.
    pub(crate) fn wait_subscribed(&self, until: Instant) -> bool {
        self.slot.wait_subscribed(until)
    }

    /// Waits until a message wakes this waiter, or until `until`; returns whether it was woken.
    /// A wake-up that came since the last call returns at once.
    pub(crate) fn wait(&self, until: Instant) -> bool {
        self.slot.wait(until)
    }

    /// Forgets wake-ups received so far (see [`Slot::clear`]).
    pub(crate) fn clear(&self) {
        self.slot.clear();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = self.hub.state.lock();
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.waiters.retain(|slot| !Arc::ptr_eq(slot, &self.slot));
            if entry.waiters.is_empty() {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

impl HubShared {
    fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Channels to subscribe (waited on, not yet subscribed) and to drop (idle past the linger).
    /// Channels that were never subscribed and have no waiters left are simply forgotten.
    fn pending(&self, now: Instant) -> (Vec<String>, Vec<String>) {
        let mut state = self.state.lock();
        state.channels.retain(|_, channel| channel.subscribed || !channel.waiters.is_empty());
        let mut subscribe = Vec::new();
        let mut unsubscribe = Vec::new();
        for (name, channel) in &state.channels {
            let idle_for = channel.idle_since.map(|since| now.saturating_duration_since(since));
            let refused_lately =
                channel.refused_at.is_some_and(|at| now.saturating_duration_since(at) < REFUSED_RETRY);
            match (channel.subscribed, idle_for) {
                (false, _) if refused_lately => {}
                (false, _) => subscribe.push(name.clone()),
                (true, Some(idle)) if idle >= LINGER => unsubscribe.push(name.clone()),
                (true, _) => {}
            }
        }
        (subscribe, unsubscribe)
    }

    /// The channel is subscribed: its waiters are told, and re-check once (a waiter that came
    /// while the channel was being unsubscribed may have missed a release meanwhile).
    fn mark_subscribed(&self, name: &str) {
        if let Some(channel) = self.state.lock().channels.get_mut(name) {
            channel.subscribed = true;
            channel.refused_at = None;
            for slot in &channel.waiters {
                slot.update(|s| {
                    s.subscribed = true;
                    s.woken = true;
                });
            }
        }
    }

    /// The server refused to subscribe `name` (no ACL rights on it): it stays unsubscribed, its
    /// waiters keep re-checking on their own, and it is tried again after [`REFUSED_RETRY`].
    /// Logged at warn once per channel.
    fn mark_refused(&self, name: &str, error: &redis::RedisError) {
        let mut state = self.state.lock();
        if let Some(channel) = state.channels.get_mut(name) {
            channel.subscribed = false;
            channel.refused_at = Some(Instant::now());
        }
        if state.warned.insert(name.to_owned()) {
            tracing::warn!(
                channel = name,
                %error,
                "redis refused to subscribe to a lock channel (ACL channel rights?); its waiters re-check once a second instead of being woken"
            );
        }
    }

    /// Forgets an unsubscribed channel, unless a waiter came back meanwhile: then that waiter
    /// (told "subscribed" when it registered) learns it is not, and the channel is subscribed
    /// again on the next round, which wakes it to re-check.
    fn mark_unsubscribed(&self, name: &str) {
        let mut state = self.state.lock();
        let Some(channel) = state.channels.get_mut(name) else { return };
        channel.subscribed = false;
        if channel.waiters.is_empty() {
            state.channels.remove(name);
        } else {
            for slot in &channel.waiters {
                slot.update(|s| s.subscribed = false);
            }
        }
    }

    /// The server says the channel's slot is no longer its own (a sharded hub: `SSUBSCRIBE`
    /// answered `MOVED`, or a `sunsubscribe` came after the slot moved): it is not subscribed,
    /// is not tried again here for [`REFUSED_RETRY`], and its waiters are woken to re-check —
    /// which finds the slot's new primary, and subscribes there.
    fn mark_moved(&self, name: &str) {
        if let Some(channel) = self.state.lock().channels.get_mut(name) {
            channel.subscribed = false;
            channel.refused_at = Some(Instant::now());
            for slot in &channel.waiters {
                slot.update(|s| {
                    s.subscribed = false;
                    s.woken = true;
                });
            }
        }
    }

    /// Hands a release message to the waiters of `name`: the one it names, or all of them when
    /// it names nobody; and to the slots that hear every message.
    fn dispatch(&self, name: &str, payload: &[u8]) {
        let state = self.state.lock();
        let Some(channel) = state.channels.get(name) else { return };
        for slot in &channel.waiters {
            if slot.hears(payload) {
                slot.update(|s| s.woken = true);
            }
        }
    }

    /// After the connection broke: nothing is subscribed any more. Waiters are not woken here
    /// but once the next connection listens ([`wake_all`](Self::wake_all)): a wake-up before
    /// that would only have them re-check against a server that may still be unreachable.
    fn connection_lost(&self) {
        let mut state = self.state.lock();
        state.channels.retain(|_, channel| !channel.waiters.is_empty());
        for channel in state.channels.values_mut() {
            channel.subscribed = false;
            for slot in &channel.waiters {
                slot.update(|s| s.subscribed = false);
            }
        }
    }

    /// A new connection listens: every waiter re-checks once, since messages published while no
    /// connection listened are lost.
    fn wake_all(&self) {
        let state = self.state.lock();
        for slot in state.channels.values().flat_map(|channel| &channel.waiters) {
            slot.update(|s| s.woken = true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_hears_its_own_token_and_nobody_s_while_a_watch_hears_everything() {
        let waiter = Slot::new("ab12");
        assert!(waiter.hears(b"ab12") && waiter.hears(b""));
        assert!(!waiter.hears(b"cd34") && !waiter.hears(b"elected"));
        let watch = Slot::hearing_all();
        assert!(watch.hears(b"ab12") && watch.hears(b"") && watch.hears(b"elected"));
    }
}
