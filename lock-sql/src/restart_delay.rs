//! The session kinds' delay after a server restart (Chubby's lock-delay): no lock is granted
//! while the server's sessions are younger than the lease.
//!
//! # Why
//! A row or advisory lock lives in its holder's session. A server that restarts — or resets its
//! backends after one of them crashed — ends every session at once, and with them every lock;
//! nobody tells the holders. A holder learns of the loss only at its next liveness check, and
//! until then may believe its hold for up to a lease after its last confirmed check (lock-core's
//! rule: `lease − drift margin` from the send time of the last request the server confirmed).
//! A waiter that reconnects as soon as the server is back would get the lock while the old
//! holder still acts on it.
//!
//! So an acquisition of a session kind first asks how long ago the server's current sessions
//! began — by the server's own clock — and grants nothing until that is at least the lease the
//! caller asks for: every confirmation a holder got came from a session of before the restart,
//! at least a lease ago, so every holder's belief has ended (the drift margin lock-core takes
//! off the lease covers a server clock running fast against the holder's). A `try_lock` on a
//! server younger than that reports the lock busy; a wait sleeps until the server is old enough
//! (or its deadline).
//!
//! # What marks "every session was dropped"
//! - PostgreSQL: the later of `pg_postmaster_start_time()` (a restart) and the reset time of the
//!   archiver's statistics, `pg_stat_archiver.stats_reset`. The postmaster's start time does not
//!   change when it only resets its backends after one crashed (`kill -9` of one backend, an out-
//!   of-memory kill): crash recovery discards the statistics, and their reset time is then the
//!   reset's. Both are visible to any user. (The checkpointer's `backend_start` in
//!   `pg_stat_activity` also restarts with every reset, but is hidden from users without
//!   `pg_read_all_stats`.) A `pg_stat_reset_shared('archiver')` also moves it: a needless delay,
//!   never an unsafe grant.
//! - MariaDB and MySQL: the `Uptime` status (whole seconds since the server started, so one
//!   second is taken off it); a crash is always a restart of the one process.
//!
//! Which deployments this covers and what it costs: the crate docs, "Session holds across a server
//! restart".

use std::time::{Duration, Instant};

use lock_core::Result;

use crate::queue_wait::Wait;

/// What one connection learned about the age of its server's sessions: at least `age` at
/// `seen` (by this process's clock). Valid for the connection's life: a restart or reset ends it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SessionsAge(Option<(Duration, Instant)>);

/// The age a connection of a client without the delay counts its server's sessions as.
const EXEMPT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl SessionsAge {
    /// What a new connection knows: nothing when the delay is `enabled`, else that its sessions
    /// are old enough for any lease.
    pub(crate) fn new(enabled: bool) -> Self {
        Self((!enabled).then(|| (EXEMPT, Instant::now())))
    }

    /// The least age the sessions can have now, if it was ever asked.
    fn now(self) -> Option<Duration> {
        self.0.map(|(age, seen)| age + seen.elapsed())
    }
}

/// Whether a session lock for a lease of `ttl` may be granted on this connection now: asks the
/// server's sessions' age with `ask` unless the connection already knows it; if it is younger, sleeps until it is old enough when `wait` allows that long (`true`), else
/// for as long as `wait` allows (`false`: busy).
///
/// # Errors
/// What `ask` returns.
pub(crate) fn settled(
    known: &mut SessionsAge,
    ttl: Duration,
    wait: Wait,
    ask: impl FnOnce() -> Result<Duration>,
) -> Result<bool> {
    // Known once, known for the connection's life: the sessions only grow older.
    let age = match known.now() {
        Some(age) => age,
        None => {
            let age = ask()?;
            *known = SessionsAge(Some((age, Instant::now())));
            age
        }
    };
    let young_for = ttl.saturating_sub(age);
    Ok(young_for.is_zero() || wait_out(young_for, wait))
}

/// Sleeps through the `young_for` a server's sessions still lack, as far as `wait` allows;
/// returns whether they are now old enough (`false` at once for a `try`).
pub(crate) fn wait_out(young_for: Duration, wait: Wait) -> bool {
    let Some(length) = wait.length() else { return false };
    std::thread::sleep(young_for.min(length));
    young_for <= length
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    #[test]
    fn an_old_server_is_asked_once_per_connection() {
        let mut known = SessionsAge::default();
        let mut asked = 0;
        for _ in 0..3 {
            let granted = settled(&mut known, LEASE, Wait::No, || {
                asked += 1;
                Ok(Duration::from_secs(3600))
            });
            assert!(granted.unwrap());
        }
        assert_eq!(asked, 1);
    }

    #[test]
    fn a_young_server_is_busy_for_a_try_and_waited_for_by_a_wait() {
        let young = || Ok(LEASE - Duration::from_millis(30));
        let mut known = SessionsAge::default();
        assert!(!settled(&mut known, LEASE, Wait::No, young).unwrap(), "a try on a young server");
        let started = Instant::now();
        let wait = Wait::Until(Instant::now() + Duration::from_secs(5));
        assert!(settled(&mut known, LEASE, wait, || panic!("asked again")).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(25));
        let short = Wait::Until(Instant::now() + Duration::from_millis(5));
        let mut fresh = SessionsAge::default();
        assert!(!settled(&mut fresh, LEASE, short, young).unwrap(), "a wait shorter than the delay");
    }
}
