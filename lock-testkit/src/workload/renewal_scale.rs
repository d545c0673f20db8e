//! W4 — renewal at scale: 10,000 locks held at once with a 1 s lease for 30 s. Reports leases
//! lost (must be 0), how many renewal threads the process has (at most `lock_core::MAX_RENEWAL_THREADS`), and its RSS.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use lock_core::{LockClient, LockOptions, RENEWAL_THREAD_PREFIX};

use crate::suite::{unique_name, SuiteTarget};

const LOCKS: usize = 10_000;
const LEASE: Duration = Duration::from_secs(1);
const HOLD: Duration = Duration::from_secs(30);

/// What W4 measured.
#[derive(Debug, Clone)]
pub struct W4Report {
    /// Locks held at once.
    pub locks: usize,
    /// Leases reported lost while held.
    pub lost: usize,
    /// Threads whose name starts with [`RENEWAL_THREAD_PREFIX`] in this process while the locks were held.
    pub renewal_threads: usize,
    /// Threads in this process while the locks were held.
    pub process_threads: usize,
    /// Resident set size while the locks were held, in KiB (the whole process: earlier workloads'
    /// records count too).
    pub rss_kib: u64,
    /// Resident set size just before acquiring, in KiB; `rss_kib` minus this is what holding the
    /// locks costs.
    pub rss_before_kib: u64,
    /// Nanoseconds to acquire all locks.
    pub acquire_ns: u64,
}

impl W4Report {
    /// The raw record.
    pub fn to_json(&self) -> Value {
        json!({"workload": "w4", "locks": self.locks, "lease_ms": LEASE.as_millis() as u64,
               "hold_s": HOLD.as_secs(), "lost": self.lost, "renewal_threads": self.renewal_threads,
               "process_threads": self.process_threads, "rss_kib": self.rss_kib,
               "rss_before_kib": self.rss_before_kib,
               "acquire_ns": self.acquire_ns})
    }
}

/// Why W4 does not apply to `target`, if it does not
/// ([`SuiteTarget::many_holds_not_applicable`]).
///
/// # Errors
/// A client that cannot be built.
pub fn not_applicable<T: SuiteTarget>(target: &T) -> lock_core::Result<Option<&'static str>> {
    target.many_holds_not_applicable()
}

/// Runs W4 (takes a little over 30 s).
///
/// # Errors
/// A client that cannot be built, or a lock that cannot be acquired.
pub fn run<T: SuiteTarget>(target: &T) -> lock_core::Result<W4Report> {
    let client = LockClient::with_options(target.backend()?, LockOptions::builder().lease(LEASE).build()?);
    let prefix = unique_name("w4");
    let rss_before_kib = rss_kib();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(LOCKS);
    for index in 0..LOCKS {
        let name = client.lock_named(&format!("{prefix}-{index}"))?;
        let guard = name.try_lock()?.ok_or_else(|| {
            lock_core::Error::backend("bench", format!("lock {index} of W4 was already held"))
        })?;
        guards.push(guard);
    }
    let acquire_ns = started.elapsed().as_nanos() as u64;
    std::thread::sleep(HOLD.saturating_sub(started.elapsed()));
    let (renewal_threads, process_threads) = thread_counts();
    let rss_kib = rss_kib();
    let lost = guards.iter().filter(|guard| !guard.is_held() || guard.lost_signal().is_lost()).count();
    for guard in guards {
        let _ = guard.unlock();
    }
    Ok(W4Report { locks: LOCKS, lost, renewal_threads, process_threads, rss_kib, rss_before_kib, acquire_ns })
}

/// (threads named like the renewal threads, all threads) of this process, from /proc.
fn thread_counts() -> (usize, usize) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return (0, 0) };
    let names: Vec<String> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|comm| comm.trim().to_owned())
        .collect();
    // The kernel truncates thread names to 15 bytes.
    let renewal = names.iter().filter(|name| name.starts_with(RENEWAL_THREAD_PREFIX)).count();
    (renewal, names.len())
}

/// VmRSS of this process in KiB, from /proc (0 where /proc is absent).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next().and_then(|kib| kib.parse().ok()))
        })
        .unwrap_or(0)
}
