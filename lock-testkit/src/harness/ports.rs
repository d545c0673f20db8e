//! Free loopback ports, and retrying a start that lost its port.
//!
//! Test binaries run side by side, each starting servers. Two rules keep them off each other's
//! ports: ports come from below the kernel's ephemeral range, so no outgoing connection is
//! given one, and every port handed out is written to a registry that all test processes of
//! this user share, so a port stays one process's until that process exits, across a server
//! restart in place as well. (Before this, two binaries were once given the same port by
//! `bind(0)`: the second server failed to bind, but its readiness probe reached the first.)

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use parking_lot::Mutex;

use super::{tree, HarnessError};

/// The ports of the machine's own services; a test server must never take one of them.
const STANDARD_PORTS: [u16; 6] = [2181, 2888, 3306, 3888, 5432, 6379];

/// How many times a start is tried with fresh ports before giving up.
const START_ATTEMPTS: usize = 3;

/// The lowest port handed out: above the registered services most machines run.
const LOWEST_PORT: u16 = 16_384;

/// Where the ephemeral range starts when the kernel does not say (Linux's default; macOS's
/// starts higher, at 49152).
const DEFAULT_EPHEMERAL_START: u16 = 32_768;

/// The fewest ports a candidate range may have.
const ROOM: u16 = 1_024;

/// How many candidate ports are tried before giving up.
const CANDIDATES: usize = 10_000;

/// Ports already handed out by this process.
static ISSUED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback TCP port nothing listens on right now, handed out to no other live test process
/// and never before to this one.
///
/// Besides starting servers, this gives tests an address that refuses connections. A process
/// outside the test run may still take the port before it is used; server starts retry on that.
///
/// # Errors
///
/// [`HarnessError::Io`] if the port registry cannot be used or no candidate port is free.
pub fn free_port() -> Result<u16, HarnessError> {
    let range = candidate_range();
    for _ in 0..CANDIDATES {
        let port = rand::random_range(range.clone());
        if STANDARD_PORTS.contains(&port) || ISSUED.lock().contains(&port) || !is_bindable(port) {
            continue;
        }
        if claim(&registry_path(), port)? {
            ISSUED.lock().insert(port);
            return Ok(port);
        }
    }
    Err(HarnessError::io(
        format!("finding a free loopback port in {range:?}"),
        std::io::Error::from(std::io::ErrorKind::AddrInUse),
    ))
}

/// Ports outside the ephemeral range (read from `/proc/sys/net/ipv4/ip_local_port_range`):
/// below it, or above it where it starts too low to leave room below (some containers use
/// `1024 65535`; then no range is free of it, and the registry alone keeps test runs apart).
fn candidate_range() -> Range<u16> {
    let (start, end) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|bound| bound.parse::<u16>().ok());
            Some((bounds.next()??, bounds.next()??))
        })
        .unwrap_or((DEFAULT_EPHEMERAL_START, u16::MAX));
    if start >= LOWEST_PORT + ROOM {
        LOWEST_PORT..start
    } else if end <= u16::MAX - ROOM {
        end + 1..u16::MAX
    } else {
        LOWEST_PORT..u16::MAX
    }
}

fn is_bindable(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Records `port` as this process's in the shared registry, unless a live process has it.
fn claim(path: &Path, port: u16) -> Result<bool, HarnessError> {
    let io = |action: &str, source| HarnessError::io(format!("{action} the port registry {path:?}"), source);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| io("opening", source))?;
    // Held for a read and a rewrite of a few hundred bytes; released on drop. No time limit: a
    // holder stopped in those microseconds (SIGSTOP) stops the other test processes' starts too.
    let mut file = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io("locking", std::io::Error::from(errno)))?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|source| io("reading", source))?;
    let mut entries = live_entries(&text);
    if entries.iter().any(|&(taken, _)| taken == port) {
        return Ok(false);
    }
    entries.push((port, std::process::id()));
    rewrite(&mut file, &entries).map_err(|source| io("writing", source))?;
    Ok(true)
}

/// The registry of this user's test processes (one per user: `/tmp` may be shared).
fn registry_path() -> PathBuf {
    std::env::temp_dir().join(format!(".distlock-test-ports-{}", nix::unistd::Uid::effective()))
}

/// The `port pid` lines of `text` whose process is alive.
fn live_entries(text: &str) -> Vec<(u16, u32)> {
    text.lines()
        .filter_map(|line| {
            let (port, pid) = line.split_once(' ')?;
            Some((port.parse().ok()?, pid.parse().ok()?))
        })
        .filter(|&(_, pid)| pid == std::process::id() || is_alive(pid))
        .collect()
}

/// Whether process `pid` runs: from `/proc` where there is one (a zombie counts as gone), else
/// by `kill(pid, 0)` (macOS), where only "no such process" means gone.
fn is_alive(pid: u32) -> bool {
    if std::path::Path::new("/proc/self").exists() {
        return tree::is_alive(pid);
    }
    let Ok(pid) = i32::try_from(pid) else { return false };
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

fn rewrite(file: &mut File, entries: &[(u16, u32)]) -> std::io::Result<()> {
    let text: String = entries.iter().map(|(port, pid)| format!("{port} {pid}\n")).collect();
    file.rewind()?;
    file.set_len(0)?;
    file.write_all(text.as_bytes())
}

/// `N` distinct free ports (see [`free_port`]).
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], HarnessError> {
    let mut ports = [0; N];
    for port in &mut ports {
        *port = free_port()?;
    }
    Ok(ports)
}

/// Runs `start` until it succeeds, fails for another reason than a taken port, or has been
/// tried [`START_ATTEMPTS`] times. `start` must pick new ports on every call.
pub(crate) fn retry_on_port_in_use<T>(
    mut start: impl FnMut() -> Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(error) if error.is_port_in_use() && attempt < START_ATTEMPTS => {
                tracing::warn!(%error, attempt, "port taken while starting a server; retrying");
                attempt += 1;
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::ServerKind;
    use std::collections::HashSet;
    use std::fs;
    use std::process::Command;

    #[test]
    fn free_ports_are_distinct_unbound_and_not_standard() {
        let ports = free_ports::<16>().unwrap();
        let unique: HashSet<_> = ports.iter().collect();
        assert_eq!(unique.len(), ports.len());
        for port in ports {
            assert!(!STANDARD_PORTS.contains(&port));
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("port should be free");
        }
    }

    #[test]
    fn a_port_is_one_live_process_s_until_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("ports");
        let mut holder = Command::new("sleep").arg("60").spawn().unwrap();
        let mut exited = Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        fs::write(&registry, format!("20001 {}\n20002 {}\n", holder.id(), exited.id())).unwrap();

        assert!(!claim(&registry, 20001).unwrap(), "a live process's port was handed out");
        assert!(claim(&registry, 20002).unwrap(), "an exited process's port stayed taken");
        assert!(!claim(&registry, 20002).unwrap(), "one port was handed out twice");
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert!(claim(&registry, 20001).unwrap());
        let text = fs::read_to_string(&registry).unwrap();
        assert_eq!(live_entries(&text), [(20002, std::process::id()), (20001, std::process::id())]);
    }

    #[test]
    fn ports_stay_below_the_ephemeral_range() {
        let range = candidate_range();
        assert!(range.start >= LOWEST_PORT && range.end > range.start);
        for port in free_ports::<8>().unwrap() {
            assert!(range.contains(&port), "{port} outside {range:?}");
        }
    }

    #[test]
    fn retries_only_port_clashes_and_only_a_few_times() {
        let clash = || HarnessError::PortInUse {
            kind: ServerKind::Redis,
            port: 1,
            log: PathBuf::new(),
            tail: String::new(),
        };
        let mut calls = 0;
        let result: Result<(), _> = retry_on_port_in_use(|| {
            calls += 1;
            Err(clash())
        });
        assert!(result.unwrap_err().is_port_in_use());
        assert_eq!(calls, START_ATTEMPTS);

        let mut calls = 0;
        let result = retry_on_port_in_use(|| {
            calls += 1;
            if calls == 1 {
                Err(clash())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(result.unwrap(), 2);
    }
}
