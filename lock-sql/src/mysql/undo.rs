//! The MariaDB undo of an unanswered lock-table or permit acquisition (see `crate::undo`).
//!
//! A `mysql` connection that got no complete reply cannot send again (the driver is out of step
//! with the server), so the undo goes out on another connection, and only once the old session
//! is gone: until then the request may still be running (waiting for a row lock) or waiting to
//! be read (a stopped server), and an earlier undo would find nothing to undo. `KILL CONNECTION`
//! of the process-list entry with the old connection's id and, over TCP, its client port (the
//! same id on another server behind one address is another session) ends the session at its
//! next check (the same user may kill its own sessions; without that right the session still
//! ends when the server notices its closed socket), and the undo waits until the session is no
//! longer in the process list. Then the owner-checked release gives the grant back and rings the
//! next waiter, as a release does. Retried with back-off until it succeeds or the grant's lease
//! has passed (`crate::undo::retry_until`). Where the server sees another client port (a NAT, a
//! proxy such as ProxySQL), no entry matches, nothing is killed and the release runs at once,
//! which can come before a late grant: that orphan lapses at its lease end.

use std::time::{Duration, Instant};

use lock_core::Result;

use super::connection::{Broken, MyConnection, Results};
use super::MySqlBackend;

/// How soon the undo looks again for the killed session in the process list; the pause doubles
/// up to [`MAX_LOOK_PAUSE`] (a session that outlives its `KILL` is in a long statement, or the
/// right to kill it is missing and it ends when the server notices its closed socket).
const FIRST_LOOK_PAUSE: Duration = Duration::from_millis(2);
const MAX_LOOK_PAUSE: Duration = Duration::from_millis(100);

impl MySqlBackend {
    /// Runs an acquisition's transaction `sql` on `connection`. `Ok(None)`: InnoDB gave it up
    /// (a deadlock's victim, out of lock-wait time) — contention, which the caller retries after
    /// a short pause. Any other failure is undone with `release` (the attempt's owner-checked
    /// release) when unanswered. Either way the connection is closed, never pooled: closing it
    /// rolls back whatever the server kept of the transaction.
    ///
    /// # Errors
    /// The transaction's failure, other than contention, as `operation`'s.
    pub(super) fn run_acquisition(
        &self,
        connection: &mut MyConnection,
        operation: &'static str,
        sql: &str,
        (release, lease): (String, Duration),
    ) -> Result<Option<Results>> {
        match connection.try_run(sql) {
            Ok(results) => Ok(Some(results)),
            Err(failure) if super::error::is_deadlock(&failure) || super::error::is_busy(&failure) => {
                connection.poison();
                Ok(None)
            }
            Err(failure) => {
                self.undo_unanswered(connection, lease, release);
                connection.poison();
                Err(super::error::map(operation, failure))
            }
        }
    }

    /// After an acquisition on `connection` failed: when it got no complete reply (the server
    /// may still grant it), undoes it in the background with `release`, the owner-checked
    /// release of the attempt's token.
    pub(super) fn undo_unanswered(&self, connection: &mut MyConnection, lease: Duration, release: String) {
        if connection.broken() != Some(Broken::NoAnswer) {
            return;
        }
        // The process list names a TCP session's client as `host:port`: behind one address
        // with several servers (a load balancer), the same id on another server is not this one.
        let session = match connection.local_port() {
            Some(port) => format!("ID = {} AND HOST LIKE '%:{port}'", connection.id()),
            None => format!("ID = {}", connection.id()),
        };
        let until = Instant::now() + lease.min(crate::undo::MAX_WAIT);
        let backend = self.clone();
        let mut killed = false;
        crate::undo::retry_until(until, "undo an unanswered acquisition", move || {
            let mut connection = backend.inner.pool.get()?;
            let outcome = backend.undo_once(&mut connection, &session, &release, &mut killed, until);
            if outcome.is_err() {
                // A release that failed inside its statements: never pool the connection.
                connection.poison();
            }
            outcome
        });
    }

    /// Runs `release`, a kind's owner-checked release, and rings the waiter it names. When it
    /// never left (no connection: a stall), it is sent again in the background until it leaves
    /// or the `lease` is over, so the lock is free as soon as the server answers again, not at
    /// its lease end. A release that left and got no answer is not sent again: the server runs
    /// it when it gets to it, and a second one could take a hold off a later grant to the same
    /// owner (a re-entered lock).
    ///
    /// # Errors
    /// The release's own failure (the background retry is not waited for).
    pub(super) fn run_release(
        &self,
        operation: &'static str,
        release: String,
        lease: Duration,
    ) -> Result<Results> {
        let mut connection = match self.inner.pool.get() {
            Ok(connection) => connection,
            Err(unsent) => {
                if unsent.is_retryable() {
                    let backend = self.clone();
                    crate::undo::retry_until(Instant::now() + lease, operation, move || {
                        let Ok(mut connection) = backend.inner.pool.get() else {
                            return Err(lock_core::Error::backend(
                                super::error::BACKEND,
                                "no connection yet",
                            ));
                        };
                        if let Ok(results) = connection.run(operation, &release) {
                            backend.ring(&results);
                        }
                        Ok(())
                    });
                }
                return Err(unsent);
            }
        };
        let results = connection.run(operation, &release)?;
        self.ring(&results);
        Ok(results)
    }

    fn undo_once(
        &self,
        connection: &mut MyConnection,
        session: &str,
        release: &str,
        killed: &mut bool,
        until: Instant,
    ) -> Result<()> {
        let look = format!("SELECT MIN(ID) FROM information_schema.PROCESSLIST WHERE {session}");
        if !*killed {
            if let Some(id) = connection.run("undo", &look)?.last_value::<u64>() {
                // A server error (the session just ended, no right to kill it) leaves the wait
                // below.
                match connection.try_run(&format!("KILL CONNECTION {id}")) {
                    Ok(_) | Err(mysql::Error::MySqlError(_)) => {}
                    Err(error) => return Err(super::error::map("undo", error)),
                }
            }
            *killed = true;
        }
        let mut pause = FIRST_LOOK_PAUSE;
        while connection.run("undo", &look)?.last_value::<u64>().is_some() {
            if Instant::now() >= until {
                return Err(lock_core::Error::backend(
                    super::error::BACKEND,
                    "the old session is still there",
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_LOOK_PAUSE);
        }
        let results = connection.run("undo", release)?;
        self.ring(&results);
        Ok(())
    }
}

#[cfg(all(test, feature = "testkit"))]
mod server_tests {
    use lock_core::{Deadline, DistributedLock as _, LockName, OwnerToken, Permits as _, Request};
    use lock_testkit::suite::{unique_name, SuiteTarget as _};

    use super::*;
    use crate::mysql::{MySqlLease, MySqlLockKind};
    use crate::testkit::MySqlTarget;

    const LEASE: Duration = Duration::from_secs(30);

    /// Ends the session of `locks`'s pooled connection from `admin` (`KILL CONNECTION`), and waits
    /// until it is gone: what a restart, an administrator or `wait_timeout` does to an idle one.
    fn end_pooled_session(locks: &MySqlBackend, admin: &MySqlBackend) {
        let id = locks.inner.pool.get().unwrap().id();
        let mut connection = admin.inner.pool.get().unwrap();
        connection.run("test", &format!("KILL CONNECTION {id}")).unwrap();
        let gone = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
        while connection.run("test", &gone).unwrap().last_value::<u64>() != Some(0) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn permit(locks: &MySqlBackend, name: &LockName) -> Option<MySqlLease> {
        let owner = OwnerToken::random();
        let request = Request::new(name, &owner, LEASE, Deadline::Now, (Duration::ZERO, Duration::ZERO));
        locks.acquire_permit(&request, 1).unwrap().map(|acquired| acquired.lease)
    }

    /// Calls on pooled connections the server ended while they sat idle (a restart, an
    /// administrator, an idle limit) work, on other connections: an acquisition succeeds, and a
    /// release frees the lock at once, not at its lease end (a lock-table hold, then a permit).
    #[test]
    fn calls_on_connections_the_server_ended_while_idle_work() {
        let target = MySqlTarget::new(MySqlLockKind::Table);
        let (locks, admin) = (target.backend_with(LEASE, 1).unwrap(), target.backend().unwrap());
        let name = unique_name("release-ended");
        end_pooled_session(&locks, &admin);
        let lease = locks.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().expect("free");
        end_pooled_session(&locks, &admin);
        let held_permit = permit(&locks, &name).expect("a free permit");
        end_pooled_session(&locks, &admin);
        assert!(locks.release(lease).unwrap(), "the lock was held");
        assert!(admin.try_acquire(&name, &OwnerToken::random(), LEASE).unwrap().is_some(), "still held");
        end_pooled_session(&locks, &admin);
        assert!(locks.release(held_permit).unwrap(), "the permit was held");
        assert!(permit(&admin, &name).is_some(), "the permit is still taken");
    }
}
