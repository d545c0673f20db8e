//! Read-write locks and semaphores on the single-node layout (one server, Sentinel's primary, or
//! a cluster's slot primary: every key of a name shares its hash tag).
//!
//! - **Read-write lock** (`scripts/rw_*.lua`): a sorted set of readers (owner token → lease end,
//!   by the server's clock), a writer string with the lease as TTL, and a sorted set of waiting
//!   writers. A writer that is refused marks its place in line for as long as its next attempt
//!   may take, and readers of other owners are refused while a mark lasts: writers are not
//!   starved. A reader under the writer's own owner token (the core's downgrade path) is
//!   admitted past that write lock.
//! - **Semaphore** (`scripts/sem_*.lua`): a sorted set of holders (owner token → lease end) and
//!   the count they use; a request with another count while permits are held is refused.
//! - Waiters are woken by the release's pub/sub message (every waiter of the name: readers may
//!   all go at once) and re-check at the client's backoff's pace besides (at least once a
//!   second), in the crate's one wait loop (`wait_loop.rs`), which follows the lock's slot to
//!   its new primary in a cluster; both primitives take their fencing tokens from counters of
//!   their own.

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::{
    check_lease, poll_until, Access, Acquired, Deadline, Error, Permits, Primitive, ReadWrite, Request,
    Result,
};

use super::wait::{NodeWaiter, Wakeups};
use super::{Attempt, RedisBackend, RedisLease};
use crate::error;
use crate::lua::{self, LuaScript};
use crate::millis;
use crate::topology::Hop;
use crate::wait_loop::{self, Refusal};

/// The scripts of the read-write lock and the semaphore.
struct SharedScripts {
    rw_acquire: LuaScript,
    rw_extend: LuaScript,
    rw_release: LuaScript,
    rw_withdraw: LuaScript,
    sem_acquire: LuaScript,
    sem_extend: LuaScript,
    sem_release: LuaScript,
}

/// The scripts; with `sharded`, the release scripts publish with `SPUBLISH` (a cluster's shard
/// channels, as the mutex's do).
fn scripts(sharded: bool) -> &'static SharedScripts {
    static SCRIPTS: LazyLock<[SharedScripts; 2]> = LazyLock::new(|| {
        [false, true].map(|sharded| {
            let script = |text: &str| {
                let text = if sharded { text.replace(lua::PUBLISH, lua::SPUBLISH) } else { text.to_owned() };
                LuaScript::new(text)
            };
            SharedScripts {
                rw_acquire: script(include_str!("../scripts/rw_acquire.lua")),
                rw_extend: script(include_str!("../scripts/rw_extend.lua")),
                rw_release: script(include_str!("../scripts/rw_release.lua")),
                rw_withdraw: script(include_str!("../scripts/rw_withdraw.lua")),
                sem_acquire: script(include_str!("../scripts/sem_acquire.lua")),
                sem_extend: script(include_str!("../scripts/sem_extend.lua")),
                sem_release: script(include_str!("../scripts/sem_release.lua")),
            }
        })
    });
    &SCRIPTS[usize::from(sharded)]
}

/// The mode argument of the read-write scripts.
fn mode(primitive: Primitive) -> &'static str {
    if primitive == Primitive::Write {
        "w"
    } else {
        "r"
    }
}

/// The one key a read-write `lease` lives in (readers, or the writer): its extend and release
/// name no other, since Redis refuses a script whose keys are partly absent while their slot
/// migrates (`TRYAGAIN`), and the other mode's key usually is absent.
fn own_key(lease: &RedisLease) -> String {
    let [readers, writer, ..] = lease.keys.read_write();
    if lease.primitive == Primitive::Write {
        writer
    } else {
        readers
    }
}

/// The script and command that extend a read-write or permit `lease` to `ttl`.
pub(super) fn extend_command(lease: &RedisLease, ttl: Duration) -> (&'static LuaScript, redis::Cmd) {
    // Extending publishes nothing: the classic scripts serve a cluster too.
    let scripts = scripts(false);
    match lease.primitive {
        Primitive::Permit => {
            let [holders, count, _] = lease.keys.semaphore();
            let command =
                scripts.sem_extend.invoke(&[&holders, &count]).arg(&lease.token).arg(millis(ttl)).to_owned();
            (&scripts.sem_extend, command)
        }
        primitive => {
            let command = scripts
                .rw_extend
                .invoke(&[&own_key(lease)])
                .arg(&lease.token)
                .arg(mode(primitive))
                .arg(millis(ttl))
                .to_owned();
            (&scripts.rw_extend, command)
        }
    }
}

/// The script and command that release a read-write or permit `lease`, announcing it on the
/// primitive's channel (`SPUBLISH` when `sharded`).
pub(super) fn release_command(lease: &RedisLease, sharded: bool) -> (&'static LuaScript, redis::Cmd) {
    let scripts = scripts(sharded);
    match lease.primitive {
        Primitive::Permit => {
            let [holders, count, _] = lease.keys.semaphore();
            let command = scripts
                .sem_release
                .invoke(&[&holders, &count])
                .arg(&lease.token)
                .arg(lease.keys.semaphore_channel())
                .to_owned();
            (&scripts.sem_release, command)
        }
        primitive => {
            let command = scripts
                .rw_release
                .invoke(&[&own_key(lease)])
                .arg(&lease.token)
                .arg(mode(primitive))
                .arg(lease.keys.read_write_channel())
                .to_owned();
            (&scripts.rw_release, command)
        }
    }
}

impl RedisBackend {
    /// One attempt with `command` of `script`, whose reply `read` turns into a fencing token
    /// (`Ok(Some)`), a refusal (`Ok(None)`) or an error. A request that got no answer is
    /// followed on its own connection by the release of what it may have granted, which the
    /// server runs right after it; failing that, the grant runs out with its lease.
    fn shared_attempt<T: redis::FromRedisValue>(
        &self,
        request: &Request<'_>,
        (script, command): (&LuaScript, redis::Cmd),
        primitive: Primitive,
        read: impl Fn(T) -> Result<Option<i64>>,
    ) -> Result<Option<RedisLease>> {
        let keys = self.keys(request.name);
        let token = request.owner.to_hex();
        // A waiting request retries in its wait loop, within its deadline.
        let until = match request.deadline {
            Deadline::At(at) => Some(at),
            Deadline::Now | Deadline::Never => None,
        };
        let attempt = self.routed_until(&keys, until, |hop: &Hop| {
            let mut connection = hop.connection()?;
            let reply = script.exchange::<T>(&mut connection, &command).map_err(|failure| {
                let possible = RedisLease::possible_grant(request.name, &keys, token.clone(), request.ttl).with_primitive(primitive);
                let (undo, undo_command) = release_command(&possible, self.inner.nodes.cluster().is_some());
                let mut follow_up = undo.load();
                follow_up.extend(undo_command.get_packed_command());
                if !connection.follow_unanswered(&follow_up) && failure.is_timeout() {
                    tracing::debug!(lock = %request.name, "an unanswered acquisition may hold until its lease ends");
                }
                error::map("acquire", failure)
            })?;
            let Some(fence) = read(reply)? else { return Ok(Attempt::Held { retry_in: None }) };
            self.granted(hop, &mut connection, request.name, &keys, token.clone(), fence, (request.ttl, primitive))
        })?;
        Ok(match attempt {
            Attempt::Acquired(lease) => Some(lease),
            Attempt::Held { .. } => None,
        })
    }
}

impl RedisBackend {
    /// Calls `attempt` until it grants or the request's deadline passes, in the crate's one
    /// wait loop ([`wait_loop::wait_until`]); a single attempt for [`Deadline::Now`].
    fn wait_on_releases(
        &self,
        request: &Request<'_>,
        channel: &str,
        mut attempt: impl FnMut(Option<Duration>) -> Result<Option<RedisLease>>,
    ) -> Result<Option<Acquired<RedisLease>>> {
        let deadline = match request.deadline {
            Deadline::Now => return poll_until(request, attempt),
            Deadline::At(at) => Some(at),
            Deadline::Never => None,
        };
        let keys = self.keys(request.name);
        let mark = request.queue_mark();
        // The next re-check's delay, doubling from the request's backoff's lower bound to its cap
        // (and to the loop's fallback re-check): a lost message, a holder whose lease ran out or
        // a subscription the server refused costs at most one delay, and a waiting writer renews
        // its place in line before it lapses.
        let (mut delay, max) = request.backoff;
        let attempt = || {
            Ok(attempt(mark)?.ok_or_else(|| {
                let retry_in = delay;
                delay = (delay * 2).min(max);
                Refusal { retry_in: Some(retry_in), back_off: None }
            }))
        };
        let mut waiter = NodeWaiter { wakeups: Wakeups::new(self, &keys, channel, request.owner), attempt };
        wait_loop::wait_until(&mut waiter, deadline)
    }
}

impl RedisBackend {
    /// Takes a writer that gave up out of the line (`rw_withdraw.lua`, owner-checked in one
    /// step): its mark would otherwise refuse new readers until it lapses (up to twice the
    /// backoff's cap plus half a second). Best effort: a mark left behind only delays readers
    /// until then, so a failure is logged, not retried.
    fn withdraw_writer(&self, request: &Request<'_>) {
        let keys = self.keys(request.name);
        let [_, _, waiting, _] = keys.read_write();
        let script = &scripts(self.inner.nodes.cluster().is_some()).rw_withdraw;
        let command =
            script.invoke(&[&waiting]).arg(request.owner.to_hex()).arg(keys.read_write_channel()).to_owned();
        let result = self.routed(&keys, |hop: &Hop| {
            script
                .exchange::<i64>(&mut *hop.connection()?, &command)
                .map_err(|e| error::map("leave the writers' line", e))
        });
        if let Err(error) = result {
            tracing::debug!(%error, lock = %request.name, "a writer that gave up could not take back its place in line; it lapses on its own");
        }
    }
}

impl ReadWrite for RedisBackend {
    /// Tries `rw_acquire.lua` on every release message and at the client's backoff's pace; a
    /// waiting writer's attempts keep its place in line, which holds new readers back, and a
    /// writer that gives up (its deadline passed, or an error the server answered) takes it back.
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<RedisLease>>> {
        check_lease(request.ttl)?;
        let primitive = Primitive::from(access);
        let keys: [String; 4] = self.keys(request.name).read_write();
        let script = &scripts(false).rw_acquire;
        let channel = self.keys(request.name).read_write_channel();
        // Whether an answered attempt left a mark in the writers' line.
        let mut marked = false;
        let outcome = self.wait_on_releases(request, &channel, |mark| {
            let mark = if access == Access::Write { mark.map_or(0, millis) } else { 0 };
            let command = script
                .invoke(&keys.each_ref().map(String::as_str))
                .arg(request.owner.to_hex())
                .arg(mode(primitive))
                .arg(millis(request.ttl))
                .arg(mark)
                .to_owned();
            let attempt = self.shared_attempt(request, (script, command), primitive, |fence: i64| {
                Ok((fence >= 0).then_some(fence))
            });
            marked |= mark > 0 && matches!(attempt, Ok(None));
            attempt
        });
        match &outcome {
            // A grant takes the mark out itself; a server that just failed to answer would only
            // cost the caller another timeout (the mark lapses on its own).
            Ok(Some(_)) => {}
            Err(error) if error.is_retryable() => {}
            _ if marked => self.withdraw_writer(request),
            _ => {}
        }
        outcome
    }
}

impl Permits for RedisBackend {
    /// Tries `sem_acquire.lua` on every release message and at the client's backoff's pace.
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<RedisLease>>> {
        check_lease(request.ttl)?;
        lock_core::check_permits(permits)?;
        let keys: [String; 3] = self.keys(request.name).semaphore();
        let script = &scripts(false).sem_acquire;
        let channel = self.keys(request.name).semaphore_channel();
        self.wait_on_releases(request, &channel, |_| {
            let command = script
                .invoke(&keys.each_ref().map(String::as_str))
                .arg(request.owner.to_hex())
                .arg(permits)
                .arg(millis(request.ttl))
                .to_owned();
            self.shared_attempt(
                request,
                (script, command),
                Primitive::Permit,
                |(fence, count): (i64, i64)| match fence {
                    -2 => Err(Error::PermitsMismatch {
                        name: request.name.clone(),
                        asked: permits,
                        held_with: u32::try_from(count).unwrap_or(0),
                    }),
                    fence => Ok((fence >= 0).then_some(fence)),
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::RedisKeys;

    #[test]
    fn only_the_sharded_release_scripts_publish_with_spublish() {
        for sharded in [false, true] {
            let scripts = scripts(sharded);
            for release in [&scripts.rw_release, &scripts.sem_release] {
                assert_eq!(release.source().contains(lua::SPUBLISH), sharded, "{}", release.source());
                assert_eq!(release.source().contains(lua::PUBLISH), !sharded, "{}", release.source());
            }
        }
    }

    #[test]
    fn read_write_and_semaphore_keys_share_the_mutex_hash_tag() {
        let keys = RedisKeys::new("distlock", &lock_core::LockName::new("a").unwrap());
        let slot = |key: &str| crate::topology::slot_of(key);
        for key in keys.read_write().iter().chain(&keys.semaphore()) {
            assert_eq!(slot(key), slot(keys.lock()), "{key}");
        }
    }
}
