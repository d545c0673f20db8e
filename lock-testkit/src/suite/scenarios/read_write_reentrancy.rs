//! RW03 — Java `ReentrantReadWriteLock` rules: a reader re-enters the read lock; a reader asking
//! for the write lock gets `WouldDeadlock` (from `try_write` and `try_write_for`; `write` takes the same path) instead of waiting for itself; a
//! writer re-enters the write lock, takes the read lock too, and keeps it after releasing the
//! write lock (a downgrade), sharing it with other readers from then on — or, where the backend
//! says the server cannot (`ReadWrite::shares_downgraded_reads`), excluding them until released:
//! then n/a, with the reason, once the rest has passed. With fencing, a write token is greater
//! than every token issued before it. Renewal keeps a write, a read and a mutex of one client
//! held past their 1 s leases.

use std::time::Duration;

use lock_core::{Access, DistributedLock, Error, Lock, ReadWriteLock};

use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{
    acquire, acquire_within, client, options, renewed_together, unique_name, ACQUIRE_BOUND, RENEWED_LEASE,
    SECOND,
};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "read_write");
    let name = unique_name("rw03");
    let mine = client(target, options(10 * SECOND, true))?;
    let theirs = client(target, options(10 * SECOND, true))?;
    let lock = ReadWriteLock::new(&mine, name.clone());
    let other = ReadWriteLock::new(&theirs, name.clone());
    let mut tokens = Vec::new();

    // Reads re-enter; an upgrade is refused by every form.
    let read = acquire_within(lock.try_read_for(ACQUIRE_BOUND), &name)?;
    tokens.extend(read.fencing_token());
    let again =
        lock.try_read()?.ok_or_else(|| Failure("a reader could not re-enter the read lock".into()))?;
    ensure!(
        lock.hold_count(Access::Read) == 2,
        "read hold count {} after re-entry",
        lock.hold_count(Access::Read)
    );
    for (form, outcome) in [
        // `write()` takes the same path, unbounded: a regression would hang the suite.
        ("try_write", lock.try_write().map(|guard| guard.is_some())),
        ("try_write_for", lock.try_write_for(Duration::from_millis(200)).map(|guard| guard.is_some())),
    ] {
        ensure!(
            matches!(outcome, Err(Error::WouldDeadlock { .. })),
            "a reader's {form} returned {outcome:?} instead of WouldDeadlock"
        );
    }
    again.unlock()?;
    read.unlock()?;

    // Writes re-enter; a writer takes the read lock and keeps it after the write lock goes.
    let write = acquire_within(lock.try_write_for(ACQUIRE_BOUND), &name)?;
    let write_token = write.fencing_token();
    let nested =
        lock.try_write()?.ok_or_else(|| Failure("a writer could not re-enter the write lock".into()))?;
    ensure!(
        lock.hold_count(Access::Write) == 2,
        "write hold count {} after re-entry",
        lock.hold_count(Access::Write)
    );
    let downgraded =
        lock.try_read()?.ok_or_else(|| Failure("a writer could not take the read lock".into()))?;
    ensure!(other.try_read()?.is_none(), "another client read while the writer held the write lock");
    nested.unlock()?;
    write.unlock()?;
    ensure!(downgraded.is_held(), "the writer's read lock went with its write lock");
    let shares = mine.backend().read_write().is_none_or(|able| able.shares_downgraded_reads());
    if shares {
        let shared = other.try_read_for(ACQUIRE_BOUND)?;
        ensure!(shared.is_some(), "after the downgrade, another reader could not share the read lock");
    } else {
        ensure!(
            other.try_read()?.is_none(),
            "the backend says a downgraded read stays exclusive, yet another read got in"
        );
    }
    ensure!(other.try_write()?.is_none(), "another client wrote while the downgraded reader held the lock");
    downgraded.unlock()?;
    let last = acquire_within(other.try_write_for(ACQUIRE_BOUND), &name)?;

    if target.abilities().fencing {
        let write_token =
            write_token.ok_or_else(|| Failure("a fencing backend gave a write lock no token".into()))?;
        ensure!(
            tokens.iter().all(|token| *token < write_token),
            "a write token {write_token} was not above {tokens:?}"
        );
        let last_token = last.fencing_token().ok_or_else(|| Failure("no token for the last write".into()))?;
        ensure!(last_token > write_token, "write tokens did not rise: {write_token} then {last_token}");
    }
    last.unlock()?;

    // Renewal keeps a write, a read and a mutex of one client held past their leases (one
    // renewal batch of three kinds of lease).
    let short = client(target, options(RENEWED_LEASE, true))?;
    let (written, read_name) = (unique_name("rw03-renewed-w"), unique_name("rw03-renewed-r"));
    let write =
        acquire_within(ReadWriteLock::new(&short, written.clone()).try_write_for(ACQUIRE_BOUND), &written)?;
    let read = acquire_within(
        ReadWriteLock::new(&short, read_name.clone()).try_read_for(ACQUIRE_BOUND),
        &read_name,
    )?;
    let mutex = acquire(&Lock::new(&short, written.clone()))?;
    renewed_together(&[&write, &read, &mutex], || {
        Ok(if ReadWriteLock::new(&theirs, written.clone()).try_read()?.is_some() {
            Some("a write lock".into())
        } else if ReadWriteLock::new(&theirs, read_name.clone()).try_write()?.is_some() {
            Some("a read lock".into())
        } else if Lock::new(&theirs, written.clone()).try_lock()?.is_some() {
            Some("a mutex".into())
        } else {
            None
        })
    })?;
    drop((write, read, mutex));
    if !shares {
        return Ok(Verdict::NotApplicable(format!(
            "{}: a downgraded read stays exclusive until released (the server keeps the writer's \
             exclusive lock until its transaction ends); the rest of RW03 passed",
            mine.backend().backend_name()
        )));
    }
    Ok(Verdict::Pass)
}
