//! Deferred clean-up: undoing what a failed call may have left on the server — a grant nobody
//! will use, a queue entry nobody will refresh — without making the caller wait for it.
//!
//! Two ways, by how the call failed:
//! - **Its request went out and the reply did not come in time** (a stalled server, a slow
//!   network): the undo is written behind it on the same connection
//!   ([`RedisConnection::follow_unanswered`](crate::connection::RedisConnection::follow_unanswered)),
//!   without waiting for anything. The server runs the two in order whenever it catches up, so a
//!   grant it makes after the caller gave up is given back at once and a queue entry it
//!   refreshes is removed at once; an undo sent on another connection could overtake the request
//!   and find nothing to undo.
//! - **Otherwise** (the connection broke, `WAIT` failed, a waiter gave up without reaching the
//!   server): a job for this backend's clean-up thread ([`Cleanup`]), which sends every pending
//!   undo in one pipeline per round and retries with back-off until the server answers, or until
//!   what it would undo has lapsed on its own anyway (a grant at its lease end, a queue entry
//!   after [`QUEUE_ENTRY_TTL`]).
//!
//! Both undos are bound to the failed call's owner token (fresh for every acquisition), so they
//! can never touch another holder's lock or another waiter's place.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::backend::{RedisBackend, RedisLease, QUEUE_ENTRY_TTL};
use crate::error;
use crate::keys::RedisKeys;
use crate::lua::LockScripts;
use crate::topology::Node;

/// The clean-up threads' name, one per backend with undos pending (Linux shows 15 bytes of a
/// thread name).
const NAME: &str = "distlock-rclean";

/// The pause after the first failed round; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// At most this many undos wait per backend; past that, what they would undo lapses on its own
/// (a server that fails every call must not grow a client's memory without bound).
const MAX_PENDING: usize = 10_000;

/// One thing to undo under a failed call's owner token. Both scripts take the same keys and
/// arguments (`KEYS`: lock, queue, queue timeouts; `ARGV`: owner token, release channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undo {
    /// Compare-and-delete: give back a grant the token may hold (the kind's release script,
    /// which hands a lock with waiters to the head of the queue).
    Release,
    /// Leave the wait queue (passing on the turn if it was the token's).
    LeaveQueue,
}

impl Undo {
    /// The script that does it.
    fn script(self, scripts: &LockScripts) -> &crate::lua::LuaScript {
        match self {
            Undo::Release => &scripts.release,
            Undo::LeaveQueue => &scripts.dequeue,
        }
    }
}

/// `undos` for `token` on the lock of `keys`, packed for one write, with the scripts loaded
/// first (the undo runs on a rare path, maybe on a server that never saw these scripts: no
/// `NOSCRIPT` round may be left for later). Returns the request and how many replies it gets.
pub(crate) fn undo_request(scripts: &LockScripts, undos: &[(Undo, &RedisKeys, &str)]) -> (Vec<u8>, usize) {
    let mut request = Vec::new();
    let mut replies = 0;
    for undo in [Undo::Release, Undo::LeaveQueue] {
        if undos.iter().any(|(wanted, ..)| *wanted == undo) {
            request.extend(undo.script(scripts).load());
            replies += 1;
        }
    }
    for &(undo, keys, token) in undos {
        let mut command = undo.script(scripts).invoke(&[keys.lock(), keys.queue(), keys.queue_timeouts()]);
        command.arg(token).arg(keys.channel());
        if undo == Undo::Release {
            // Tell every waiter (as a non-fair client's release does): the client's fairness is
            // not known here, and a non-fair waiter, which does not queue, would otherwise hear
            // nothing of a grant given back while nobody queues. A fair one re-checks in vain.
            command.arg(1);
        }
        let command = command.get_packed_command();
        request.extend(command);
        replies += 1;
    }
    (request, replies)
}

/// One pending undo.
struct Job {
    undo: Undo,
    keys: RedisKeys,
    token: String,
    /// When what it would undo has lapsed on its own: no point asking after that.
    give_up_at: Instant,
    why: &'static str,
}

/// The undos of one backend (and its clones) still to be sent, and whether its thread runs.
#[derive(Default)]
pub(crate) struct Cleanup {
    state: Mutex<CleanupState>,
}

#[derive(Default)]
struct CleanupState {
    jobs: Vec<Job>,
    thread_running: bool,
}

/// Gives back `lease` in the background, retrying until the server answers or the lease would
/// have run out anyway.
pub(crate) fn release_in_background(backend: &RedisBackend, lease: RedisLease, why: &'static str) {
    let give_up_at = Instant::now() + lease.lease;
    if !lease.on_mutex_keys() {
        release_shared_mode_in_background(backend, lease, give_up_at, why);
        return;
    }
    let job = Job { undo: Undo::Release, keys: lease.keys, token: lease.token, give_up_at, why };
    schedule(backend, job);
}

/// Takes `token` out of the wait queue of `keys` in the background, retrying until the server
/// answers or the entry would have lapsed anyway.
pub(crate) fn leave_queue_in_background(
    backend: &RedisBackend,
    keys: &RedisKeys,
    token: String,
    why: &'static str,
) {
    let give_up_at = Instant::now() + QUEUE_ENTRY_TTL;
    let job = Job { undo: Undo::LeaveQueue, keys: keys.clone(), token, give_up_at, why };
    schedule(backend, job);
}

/// A read-write or permit grant, given back by a thread of its own (a rare path: a failed
/// acquisition or `WAIT`), with the same retries as the mutex's jobs.
fn release_shared_mode_in_background(
    backend: &RedisBackend,
    lease: RedisLease,
    give_up_at: Instant,
    why: &'static str,
) {
    let backend = backend.clone();
    let spawned = thread::Builder::new().name(NAME.into()).spawn(move || {
        let mut pause = FIRST_PAUSE;
        while Instant::now() < give_up_at {
            match backend.release_in_place(&lease) {
                Ok(()) => {
                    tracing::debug!(why, "cleaned up after a failed call");
                    return;
                }
                Err(error) if error.is_retryable() => {
                    thread::sleep(pause.min(give_up_at.saturating_duration_since(Instant::now())));
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(error) => {
                    tracing::warn!(why, %error, "the server refused a clean-up");
                    return;
                }
            }
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(why, %error, "no thread for a clean-up; the grant runs out with its lease");
    }
}

fn schedule(backend: &RedisBackend, job: Job) {
    let cleanup = backend.cleanup();
    let mut state = cleanup.state.lock();
    if state.jobs.len() >= MAX_PENDING {
        tracing::debug!(why = job.why, "too many clean-ups pending; what this one would undo will lapse");
        return;
    }
    state.jobs.push(job);
    if state.thread_running {
        return;
    }
    state.thread_running = true;
    // The thread keeps the backend (its pool) alive until its jobs are done or given up.
    let owned = backend.clone();
    if let Err(error) = thread::Builder::new().name(NAME.into()).spawn(move || run(&owned)) {
        tracing::warn!(%error, "cannot start the redis clean-up thread; what failed calls left will lapse");
        state.jobs.clear();
        state.thread_running = false;
    }
}

/// The clean-up thread: one pipeline of every pending undo per round, until none is left.
fn run(backend: &RedisBackend) {
    let cleanup = backend.cleanup();
    let mut pause = FIRST_PAUSE;
    loop {
        let jobs = {
            let mut state = cleanup.state.lock();
            let now = Instant::now();
            state.jobs.retain(|job| {
                let keep = job.give_up_at > now;
                if !keep {
                    tracing::warn!(why = job.why, undo = ?job.undo, "the server did not answer a clean-up in time; what it would undo lapses on its own");
                }
                keep
            });
            if state.jobs.is_empty() {
                state.thread_running = false;
                return;
            }
            std::mem::take(&mut state.jobs)
        };
        let failed = send_to_each_node(backend, jobs);
        if failed.is_empty() {
            pause = FIRST_PAUSE;
        } else {
            cleanup.state.lock().jobs.extend(failed);
            thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// Sends `jobs`, one pipeline per node they live on (one in all but a cluster); returns the jobs
/// whose node did not answer.
fn send_to_each_node(backend: &RedisBackend, jobs: Vec<Job>) -> Vec<Job> {
    let mut groups: Vec<(Option<Arc<Node>>, Vec<Job>)> = Vec::new();
    for job in jobs {
        let node = backend.nodes().hop(&job.keys).ok().map(|hop| hop.node);
        let same = |(other, _): &&mut (Option<Arc<Node>>, Vec<Job>)| match (&node, other) {
            (Some(node), Some(other)) => Arc::ptr_eq(node, other),
            _ => false,
        };
        match groups.iter_mut().find(same) {
            Some((_, group)) => group.push(job),
            None => groups.push((node, vec![job])),
        }
    }
    let mut failed = Vec::new();
    for (node, jobs) in groups {
        let outcome = match &node {
            Some(node) => send(node, backend, &jobs),
            None => Err(lock_core::Error::Connection {
                backend: crate::error::BACKEND,
                source: "the slot's primary is unknown".into(),
            }),
        };
        if let Err(error) = outcome {
            tracing::debug!(%error, pending = jobs.len(), "a redis clean-up round failed; retrying");
            failed.extend(jobs);
        }
    }
    failed
}

/// Sends `jobs` in one pipeline on one connection to `node`, read with one deadline. `Ok` once the server
/// answered them all (an error reply to one of them is logged: asking again would get the same).
fn send(node: &Node, backend: &RedisBackend, jobs: &[Job]) -> lock_core::Result<()> {
    let undos: Vec<(Undo, &RedisKeys, &str)> =
        jobs.iter().map(|job| (job.undo, &job.keys, job.token.as_str())).collect();
    let (request, replies) = undo_request(backend.scripts(), &undos);
    let mut connection = node.pool.get()?;
    let values = connection.exchange(&request, replies).map_err(|e| error::map("clean up", e))?;
    let answers = values.len().saturating_sub(jobs.len());
    // A slot that moved (or is moving) meanwhile, a primary demoted: the whole round again, on
    // a fresh map or connection (an undo is idempotent: compare-and-delete under a token no
    // acquisition reuses, leave the queue).
    let redirected = values.iter().skip(answers).find_map(|value| match value {
        Value::ServerError(error)
            if matches!(error.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY") =>
        {
            Some(error.clone())
        }
        _ => None,
    });
    if let Some(redirect) = redirected {
        if let Some(cluster) = backend.nodes().cluster() {
            cluster.mark_stale();
        }
        if redirect.code() == "READONLY" {
            // A demoted primary: fresh connections find the new one.
            node.pool.discard_idle();
        }
        return Err(error::map("clean up", redis::RedisError::from(redirect)));
    }
    for (job, value) in jobs.iter().zip(values.into_iter().skip(answers)) {
        match value {
            Value::ServerError(error) => {
                tracing::warn!(why = job.why, undo = ?job.undo, ?error, "the server refused a clean-up");
            }
            value => {
                tracing::debug!(why = job.why, undo = ?job.undo, ?value, "cleaned up after a failed call")
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lock_core::LockName;

    use super::*;

    #[test]
    fn an_undo_loads_its_scripts_first_and_counts_every_reply() {
        let scripts = crate::reentrant_hash::scripts();
        let keys = RedisKeys::new("p", &LockName::new("n").unwrap());
        let both = [(Undo::Release, &keys, "t"), (Undo::LeaveQueue, &keys, "t")];
        let (request, replies) = undo_request(scripts, &both);
        assert_eq!(replies, 4, "two loads, two scripts");
        let text = String::from_utf8(request).unwrap();
        let release = text.find(scripts.release.hash()).unwrap();
        let dequeue = text.find(scripts.dequeue.hash()).unwrap();
        assert!(text.rfind("SCRIPT").unwrap() < text.find("EVALSHA").unwrap(), "loads come first");
        assert!(release < dequeue, "in the order given");
        let (request, replies) = undo_request(scripts, &both[..1]);
        assert_eq!(replies, 2);
        assert!(!String::from_utf8(request).unwrap().contains(scripts.dequeue.hash()));
    }
}
