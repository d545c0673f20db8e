//! A server's process tree, read from `/proc`: signalling it whole and waiting for it to die.
//!
//! Signalling only the server's own pid is not enough: PostgreSQL's backends each call
//! `setsid`, so they escape the server's process group, and a postmaster killed alone leaves
//! them running until they notice.

use std::collections::HashMap;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// One `/proc/PID/stat` entry: parent pid and whether the process is dead (zombie or exiting).
struct Status {
    parent: i32,
    dead: bool,
}

fn status(pid: i32) -> Option<Status> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so split after the last ')'.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    Some(Status { parent, dead: matches!(state, "Z" | "X" | "x") })
}

/// Whether `pid` names a process that still runs (or is stopped). Zombies count as dead: they
/// hold no resources and whoever adopted them reaps them in its own time.
pub(crate) fn is_alive(pid: u32) -> bool {
    i32::try_from(pid).ok().and_then(status).is_some_and(|status| !status.dead)
}

/// The live descendants of `root`, parents before their children.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else {
            continue;
        };
        if let Some(status) = status(pid).filter(|status| !status.dead) {
            children.entry(status.parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        let Ok(parent) = i32::try_from(parent) else {
            continue;
        };
        for &child in children.get(&parent).into_iter().flatten() {
            // `child` came from a non-negative /proc entry name.
            let child = child.unsigned_abs();
            found.push(child);
            next.push(child);
        }
    }
    found
}

/// Sends `signal` to `pid`; a process that is already gone is not an error.
pub(crate) fn signal(pid: u32, signal: Signal) -> Result<(), Errno> {
    let pid = i32::try_from(pid).map_err(|_| Errno::ESRCH)?;
    match kill(Pid::from_raw(pid), signal) {
        Err(Errno::ESRCH) => Ok(()),
        result => result,
    }
}

/// Stops `root` and everything below it (SIGSTOP), parents first so nothing forks meanwhile.
/// Returns the descendants that were stopped.
pub(crate) fn stop(root: u32) -> Result<Vec<u32>, Errno> {
    signal(root, Signal::SIGSTOP)?;
    let mut stopped = Vec::new();
    // A child forked just before its parent stopped shows up on the next scan.
    loop {
        let fresh: Vec<u32> = descendants(root).into_iter().filter(|pid| !stopped.contains(pid)).collect();
        if fresh.is_empty() {
            return Ok(stopped);
        }
        for pid in fresh {
            signal(pid, Signal::SIGSTOP)?;
            stopped.push(pid);
        }
    }
}

/// Resumes `root` and everything below it (SIGCONT).
pub(crate) fn resume(root: u32) -> Result<(), Errno> {
    for pid in descendants(root) {
        signal(pid, Signal::SIGCONT)?;
    }
    signal(root, Signal::SIGCONT)
}

/// SIGKILLs `root` and everything below it. Freezes the tree first, so no process can fork a
/// new child between the scan and the kill. The caller reaps `root`; the returned descendants
/// are reaped by whoever adopts them (see [`wait_dead`]).
pub(crate) fn kill_all(root: u32) -> Result<Vec<u32>, Errno> {
    let below = stop(root)?;
    signal(root, Signal::SIGKILL)?;
    for &pid in &below {
        signal(pid, Signal::SIGKILL)?;
    }
    Ok(below)
}

/// Waits until none of `pids` is alive, or `timeout` passed. Returns those still alive.
pub(crate) fn wait_dead(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&pid| is_alive(pid)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn kills_grandchildren_that_left_the_process_group() {
        // `setsid` puts the grandchild in its own session, as PostgreSQL's backends do.
        let mut child = Command::new("sh").args(["-c", "setsid sleep 30 & wait"]).spawn().unwrap();
        let root = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let below = loop {
            let below = descendants(root);
            if below.iter().any(|&pid| {
                fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "sleep")
            }) {
                break below;
            }
            assert!(Instant::now() < deadline, "grandchild never appeared");
            thread::sleep(Duration::from_millis(10));
        };

        let killed = kill_all(root).unwrap();
        assert_eq!(killed, below);
        child.wait().unwrap();
        assert!(!is_alive(root));
        assert_eq!(wait_dead(&killed, Duration::from_secs(5)), Vec::<u32>::new());
    }
}
