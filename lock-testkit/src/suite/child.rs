//! Holder processes: this very test binary, re-run with only the calling test selected and
//! [`HOLD_VAR`] set, so the child runs exactly the backend code and configuration under test and
//! needs no separately built helper. S04, RW04, SEM02 and LE02 kill one holding a lock (or
//! leading) with SIGKILL; SEM01 and LE01 run contending threads in one beside their own.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Election, Lock, LockName, ReadWriteLock, Semaphore};

use crate::suite::breach::HELD_AFTER_CRASH;
use crate::suite::support::{acquire_within, client, options, ACQUIRE_BOUND, SECOND};
use crate::suite::terms::serve_terms;
use crate::suite::{Failure, SuiteTarget};

/// Set in a holder process: what to hold (a mutex, a read or write lock, a permit) or how to
/// contend (SEM01). A binary that is not a libtest harness (`distlock compare`) must recognise it
/// and run S04 on the same target again, which then plays the role.
pub const HOLD_VAR: &str = "DISTLOCK_S04_HOLD";
/// What the child prints once it holds what it was asked to.
const READY_LINE: &str = "DISTLOCK-CHILD-READY";
/// What a contending child prints when done: the line, then its overlaps and rounds.
const DONE_LINE: &str = "DISTLOCK-CHILD-DONE";
/// What a fenced writer prints once it holds: the line, then its token.
const TOKEN_LINE: &str = "DISTLOCK-CHILD-TOKEN";
/// What a fenced writer prints after its late writes: the line, then the fenced store's outcome
/// (`accepted`, `stale`, `error:<what>`) and the on-server write's (`written`, `not-held`, `n/a`,
/// `error:<what>`).
const WROTE_LINE: &str = "DISTLOCK-CHILD-WROTE";
/// A child whose parent died exits on its own after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(120);
/// The lease a holder process takes.
pub(crate) const CHILD_LEASE: Duration = Duration::from_secs(2);

/// What a child process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// Holds the mutex until killed.
    Mutex(LockName),
    /// Holds the read lock until killed.
    Read(LockName),
    /// Holds the write lock until killed.
    Write(LockName),
    /// Holds one of `permits` permits until killed.
    Permit { name: LockName, permits: u32 },
    /// SEM01: `threads` threads take one of `permits` permits `rounds` times each, and check in
    /// `dir` that no more than `permits` holders are inside at once.
    Contend { name: LockName, permits: u32, threads: usize, rounds: usize, dir: String },
    /// GW01: holds the mutex, writes to the target's fenced store under the lock's name, and
    /// once the file `trigger` exists (the parent stopped it and let a rival in meanwhile)
    /// writes again with its old token.
    FencedWriter { name: LockName, trigger: String },
    /// Leads the election until killed, with the value [`LEADER_VALUE`].
    Leader(LockName),
    /// LE01: `candidates` threads serve `terms` terms each of the election, marking their terms
    /// in `dir` (see [`serve_terms`]).
    Campaign { name: LockName, candidates: usize, terms: usize, dir: String },
}

/// The value a [`Role::Leader`] child campaigns with.
pub(crate) const LEADER_VALUE: &str = "the child process";

impl Role {
    fn encode(&self) -> String {
        match self {
            Role::Mutex(name) => format!("mutex {name}"),
            Role::Read(name) => format!("read {name}"),
            Role::Write(name) => format!("write {name}"),
            Role::Permit { name, permits } => format!("permit {permits} {name}"),
            Role::Contend { name, permits, threads, rounds, dir } => {
                format!("contend {permits} {threads} {rounds} {name} {dir}")
            }
            // The path last: the rest of the line, spaces and all.
            Role::FencedWriter { name, trigger } => format!("fenced {name} {trigger}"),
            Role::Leader(name) => format!("leader {name}"),
            Role::Campaign { name, candidates, terms, dir } => {
                format!("campaign {candidates} {terms} {name} {dir}")
            }
        }
    }

    fn decode(text: &str) -> Option<Self> {
        let mut words = text.splitn(2, ' ');
        let (kind, rest) = (words.next()?, words.next()?);
        let name = |text: &str| LockName::new(text).ok();
        let mut fields = rest.split(' ');
        let mut next = || fields.next();
        Some(match kind {
            "mutex" => Role::Mutex(name(rest)?),
            "read" => Role::Read(name(rest)?),
            "write" => Role::Write(name(rest)?),
            "permit" => {
                let permits = next()?.parse().ok()?;
                Role::Permit { name: name(next()?)?, permits }
            }
            "leader" => Role::Leader(name(rest)?),
            "campaign" => {
                let (candidates, terms) = (next()?.parse().ok()?, next()?.parse().ok()?);
                let name = name(next()?)?;
                let dir = fields.collect::<Vec<_>>().join(" ");
                Role::Campaign { name, candidates, terms, dir }
            }
            "contend" => {
                let (permits, threads, rounds) =
                    (next()?.parse().ok()?, next()?.parse().ok()?, next()?.parse().ok()?);
                let name = name(next()?)?;
                // The path last: the rest of the line, spaces and all.
                let dir = fields.collect::<Vec<_>>().join(" ");
                Role::Contend { name, permits, threads, rounds, dir }
            }
            "fenced" => {
                let (name_text, trigger) = rest.split_once(' ')?;
                Role::FencedWriter { name: name(name_text)?, trigger: trigger.to_owned() }
            }
            _ => return None,
        })
    }
}

/// If this process is a holder ([`HOLD_VAR`] set), plays its role and exits; otherwise returns.
/// A backend scenario that runs the suite's scenarios with holder processes (PB01, PB02) calls
/// it first, on the target it runs them on: the holder re-runs that scenario's test.
pub fn serve_if_child<T: SuiteTarget>(target: &T) {
    let Ok(text) = std::env::var(HOLD_VAR) else { return };
    let outcome = match Role::decode(&text) {
        Some(role) => play(target, role),
        None => Err(Failure(format!("unknown holder role {text:?}"))),
    };
    match outcome {
        Ok(()) => std::process::exit(0),
        Err(failure) => {
            eprintln!("holder process failed: {failure}");
            std::process::exit(2);
        }
    }
}

fn play<T: SuiteTarget>(target: &T, role: Role) -> Result<(), Failure> {
    let client = client(target, options(CHILD_LEASE, true))?;
    let guard = match &role {
        Role::Mutex(name) => {
            acquire_within(Lock::new(&client, name.clone()).try_lock_for(ACQUIRE_BOUND), name)?
        }
        Role::Read(name) => {
            acquire_within(ReadWriteLock::new(&client, name.clone()).try_read_for(ACQUIRE_BOUND), name)?
        }
        Role::Write(name) => {
            acquire_within(ReadWriteLock::new(&client, name.clone()).try_write_for(ACQUIRE_BOUND), name)?
        }
        Role::Permit { name, permits } => acquire_within(
            Semaphore::new(&client, name.clone(), *permits)?.try_acquire_for(ACQUIRE_BOUND),
            name,
        )?,
        Role::FencedWriter { name, trigger } => return write_late(target, &client, name, Path::new(trigger)),
        Role::Leader(name) => {
            let election = Election::new(&client, name.clone()).with_value(LEADER_VALUE);
            let leadership = acquire_within(election.campaign_for(ACQUIRE_BOUND), name)?;
            println!("{READY_LINE}");
            std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
            thread::sleep(CHILD_LIFETIME);
            drop(leadership);
            return Ok(());
        }
        Role::Campaign { name, candidates, terms, dir } => {
            println!("{READY_LINE}");
            let seen = serve_terms(&client, name, (*candidates, *terms), Path::new(dir))?;
            println!("{DONE_LINE} {} {}", seen.overlaps, seen.served);
            std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
            return Ok(());
        }
        Role::Contend { name, permits, threads, rounds, dir } => {
            println!("{READY_LINE}");
            let (overlaps, done) = contend(&client, name, *permits, *threads, *rounds, Path::new(dir))?;
            println!("{DONE_LINE} {overlaps} {done}");
            std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
            return Ok(());
        }
    };
    println!("{READY_LINE}");
    std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
    thread::sleep(CHILD_LIFETIME);
    drop(guard);
    Ok(())
}

/// GW01's child: holds `name`, writes with its token, and writes again with it once `trigger`
/// exists; prints the token and the late write's outcome.
fn write_late<T: SuiteTarget>(
    target: &T,
    client: &lock_core::LockClient<T::Backend>,
    name: &LockName,
    trigger: &Path,
) -> Result<(), Failure> {
    let store = target.fenced_store().map_err(|why| Failure(why.0.into()))??;
    let guard = acquire_within(Lock::new(client, name.clone()).try_lock_for(ACQUIRE_BOUND), name)?;
    let token = guard.fencing_token().ok_or_else(|| Failure("no fencing token".into()))?;
    store.write(name.as_str(), token, b"the holder, before its pause")?;
    if let Ok(written) = target.write_if_held(&guard, name.as_str(), b"the holder, before its pause") {
        written?;
    }
    println!("{READY_LINE}");
    println!("{TOKEN_LINE} {token}");
    std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
    let deadline = Instant::now() + CHILD_LIFETIME;
    while !trigger.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let late = b"the holder, after its pause";
    let fenced = match store.write(name.as_str(), token, late) {
        Ok(()) => "accepted".to_owned(),
        Err(lock_core::Error::StaleToken { .. }) => "stale".to_owned(),
        Err(error) => format!("error:{error}"),
    };
    let on_server = match target.write_if_held(&guard, name.as_str(), late) {
        Err(_) => "n/a".to_owned(),
        Ok(Ok(())) => "written".to_owned(),
        Ok(Err(lock_core::Error::NotHeld { .. })) => "not-held".to_owned(),
        Ok(Err(error)) => format!("error:{error}"),
    };
    println!("{WROTE_LINE} {fenced} {}", on_server.replace(' ', "_"));
    std::io::stdout().flush().map_err(|e| Failure(e.to_string()))?;
    drop(guard);
    Ok(())
}

/// SEM01's critical sections: `threads` threads of `client` take a permit `rounds` times each;
/// inside, each leaves a file in `dir` and counts the files there (every holder's, from every
/// process). Returns how many times a count exceeded `permits`, and the rounds done.
pub(crate) fn contend<B: lock_core::DistributedLock>(
    client: &lock_core::LockClient<B>,
    name: &LockName,
    permits: u32,
    threads: usize,
    rounds: usize,
    dir: &Path,
) -> Result<(usize, usize), Failure> {
    let semaphore = Semaphore::new(client, name.clone(), permits)?;
    let pid = std::process::id();
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|index| {
                let semaphore = &semaphore;
                s.spawn(move || -> Result<(usize, usize), Failure> {
                    let (mut overlaps, mut done) = (0, 0);
                    let marker = dir.join(format!("holder-{pid}-{index}"));
                    for _ in 0..rounds {
                        let permit = acquire_within(semaphore.try_acquire_for(ACQUIRE_BOUND), name)?;
                        std::fs::write(&marker, b"")
                            .map_err(|e| Failure(format!("cannot mark a holder: {e}")))?;
                        let inside = std::fs::read_dir(dir).map_err(|e| Failure(e.to_string()))?.count();
                        if inside > permits as usize {
                            overlaps += 1;
                        }
                        thread::sleep(Duration::from_millis(2));
                        std::fs::remove_file(&marker).map_err(|e| Failure(format!("cannot unmark: {e}")))?;
                        permit.unlock()?;
                        done += 1;
                    }
                    Ok((overlaps, done))
                })
            })
            .collect();
        workers.into_iter().try_fold((0, 0), |(overlaps, done), worker| {
            let (o, d) = worker.join().map_err(|_| Failure("a contending thread panicked".into()))??;
            Ok((overlaps + o, done + d))
        })
    })
}

/// A running holder process; killed and reaped when dropped, so none is left behind.
pub(crate) struct Holder {
    child: Child,
    lines: Receiver<String>,
}

impl Holder {
    /// Starts a holder of `role` for the test `test_name` with `env` (the target's
    /// [`child_env`](SuiteTarget::child_env)) and waits until it says it holds.
    pub(crate) fn start(test_name: &str, env: &[(String, String)], role: &Role) -> Result<Self, Failure> {
        let exe =
            std::env::current_exe().map_err(|e| Failure(format!("cannot find the test binary: {e}")))?;
        let mut child = Command::new(exe)
            .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
            .env(HOLD_VAR, role.encode())
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Failure(format!("cannot start the holder process: {e}")))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure("no stdout from the holder".into()));
        };
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let holder = Self { child, lines };
        holder.wait_for_line(READY_LINE, 60 * SECOND)?;
        Ok(holder)
    }

    /// Waits for a line that ends with `marker` (libtest may print the test's name first on the
    /// same line); returns what follows the marker.
    fn wait_for_line(&self, marker: &str, within: Duration) -> Result<String, Failure> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some((_, rest)) = line.split_once(marker) {
                        return Ok(rest.trim().to_owned());
                    }
                }
                Err(_) => return Err(Failure(format!("the holder process never printed {marker}"))),
            }
        }
    }

    /// SEM01 and LE01: the contending child's overlaps and rounds (or terms), once it is done.
    pub(crate) fn contention_result(&self, within: Duration) -> Result<(usize, usize), Failure> {
        let rest = self.wait_for_line(DONE_LINE, within)?;
        let numbers: Vec<usize> = rest.split(' ').filter_map(|word| word.parse().ok()).collect();
        match numbers[..] {
            [overlaps, done] => Ok((overlaps, done)),
            _ => Err(Failure(format!("a garbled result from the contending process: {rest:?}"))),
        }
    }

    /// GW01: the fenced writer's token, once it holds and has written.
    pub(crate) fn token(&self) -> Result<lock_core::FencingToken, Failure> {
        let rest = self.wait_for_line(TOKEN_LINE, 60 * SECOND)?;
        rest.parse()
            .map(lock_core::FencingToken::new)
            .map_err(|_| Failure(format!("a garbled token: {rest:?}")))
    }

    /// GW01: the outcomes of the fenced writer's late writes, through the fenced store and on
    /// the lock's server (see [`WROTE_LINE`]).
    pub(crate) fn late_writes(&self, within: Duration) -> Result<(String, String), Failure> {
        let rest = self.wait_for_line(WROTE_LINE, within)?;
        let (fenced, on_server) = rest.split_once(' ').unwrap_or((&rest, "?"));
        Ok((fenced.to_owned(), on_server.to_owned()))
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the holder: a pause its threads cannot see, as
    /// a long GC pause or a stopped VM.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) -> Result<(), Failure> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX));
        nix::sys::signal::kill(pid, signal)
            .map_err(|e| Failure(format!("cannot send {signal} to the holder: {e}")))
    }

    /// Kills the holder with SIGKILL and reaps it; returns when it is gone.
    pub(crate) fn kill(&mut self) -> Result<Instant, Failure> {
        self.child.kill().map_err(|e| Failure(format!("cannot kill the holder: {e}")))?;
        self.child.wait().map_err(|e| Failure(format!("cannot reap the holder: {e}")))?;
        Ok(Instant::now())
    }

    /// Kills the holder, then calls `acquire_for` with a timeout past `bound`: what the holder
    /// held (`what`) must be free again within `bound` of its death. Returns the guard.
    pub(crate) fn kill_and_take<G>(
        &mut self,
        what: &str,
        bound: Duration,
        acquire_for: impl FnOnce(Duration) -> lock_core::Result<Option<G>>,
    ) -> Result<G, Failure> {
        let killed = self.kill()?;
        let acquired = acquire_for(bound + 5 * SECOND)?;
        let after = killed.elapsed();
        let guard =
            acquired.ok_or_else(|| Failure(format!("{what} {HELD_AFTER_CRASH} ({after:?} later)")))?;
        if after > bound {
            return Err(Failure(format!(
                "{what} {HELD_AFTER_CRASH} for {after:?}, past the bound of {bound:?}"
            )));
        }
        Ok(guard)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_survive_their_encoding_paths_with_spaces_included() {
        let name = LockName::new("gw01-x").unwrap();
        for role in [
            Role::Mutex(name.clone()),
            Role::Permit { name: name.clone(), permits: 3 },
            Role::FencedWriter { name: name.clone(), trigger: "/tmp/a dir/resume-0".into() },
            Role::Leader(name.clone()),
            Role::Campaign { name: name.clone(), candidates: 4, terms: 5, dir: "/tmp/my tests/le01".into() },
            Role::Contend { name, permits: 2, threads: 4, rounds: 9, dir: "/tmp/my tests/sem01".into() },
        ] {
            assert_eq!(Role::decode(&role.encode()), Some(role));
        }
    }
}
