//! One running server process: readiness, fault controls, and cleanup on drop.

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use parking_lot::Mutex;
use tempfile::TempDir;

use super::command::CommandSpec;
use super::{dirs, logs, tree, HarnessError, ServerKind};

/// The file in a server's dir that receives its stdout and stderr.
const LOG_FILE: &str = "server.log";

/// How long dropped or killed servers' descendants may take to exit after SIGKILL.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest pause between two readiness probes.
const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// How many log lines are searched for a failed bind; a JVM stack trace can be long.
const BIND_SEARCH_LINES: usize = 400;

/// Asks a server a real protocol question: `Ok` once it answers properly, else why not.
pub(crate) type Probe = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// How to tell that a server is up, and how long to wait for it.
pub(crate) struct Readiness {
    pub probe: Probe,
    pub timeout: Duration,
}

/// A server process the harness started, with controls for fault-injection tests.
///
/// Owns the child process, its temp dir (data, config, sockets) and its log file
/// (`server.log` in that dir). Controls take `&self`, so servers shared between tests and the
/// nodes of an ensemble can be controlled through shared references.
///
/// Dropping it SIGKILLs the process and every process it started, reaps it and removes the
/// dir. If the dropping thread is panicking (a failed test) or [`DISTLOCK_KEEP_LOGS`] is set,
/// the dir is kept (renamed to `distlock-kept-…`) and its path is printed, with the log's last
/// lines for a failed test. After a failed start or restart the dir stays where the error
/// said, until the next test run removes it.
///
/// [`DISTLOCK_KEEP_LOGS`]: super::KEEP_LOGS_VARIABLE
pub struct ServerProcess {
    kind: ServerKind,
    port: u16,
    command: CommandSpec,
    readiness: Readiness,
    log: PathBuf,
    /// `None` once the process is known to be gone: killed, or seen to exit.
    child: Mutex<Option<Child>>,
    /// While paused: a watchdog process that kills the frozen processes if this process dies
    /// first ([`pause`](Self::pause)).
    pause_watchdog: Mutex<Option<Child>>,
    /// Between [`pause`](Self::pause) and [`resume`](Self::resume) (or a kill or restart).
    paused: AtomicBool,
    /// `None` only while dropping.
    dir: Option<TempDir>,
    /// Set when a start failed: the error names the log, so the dir must outlive the drop.
    keep_dir: AtomicBool,
}

impl ServerProcess {
    /// Spawns `command` (logging to `server.log` in `dir`) and waits until `readiness` passes.
    pub(crate) fn start(
        kind: ServerKind,
        dir: TempDir,
        port: u16,
        command: CommandSpec,
        readiness: Readiness,
    ) -> Result<Self, HarnessError> {
        let process = Self::spawn(kind, dir, port, command, readiness)?;
        process.wait_ready()?;
        Ok(process)
    }

    /// Spawns `command` without waiting; see [`wait_ready`](Self::wait_ready). Lets an
    /// ensemble start all its nodes before waiting for any.
    pub(crate) fn spawn(
        kind: ServerKind,
        dir: TempDir,
        port: u16,
        command: CommandSpec,
        readiness: Readiness,
    ) -> Result<Self, HarnessError> {
        let log = dir.path().join(LOG_FILE);
        let child = command
            .spawn(&log)
            .map_err(|source| HarnessError::io(format!("spawning the {kind} server: {command}"), source))?;
        Ok(ServerProcess {
            kind,
            port,
            command,
            readiness,
            log,
            child: Mutex::new(Some(child)),
            pause_watchdog: Mutex::new(None),
            paused: AtomicBool::new(false),
            dir: Some(dir),
            keep_dir: AtomicBool::new(false),
        })
    }

    /// Probes until the server answers, it exits, or the readiness timeout passes.
    pub(crate) fn wait_ready(&self) -> Result<(), HarnessError> {
        let started = Instant::now();
        let mut interval = Duration::from_millis(10);
        let mut last_probe = String::from("never probed");
        loop {
            if let Some(status) = self.exited() {
                return Err(self.start_failure(Some(status), started.elapsed(), last_probe));
            }
            match (self.readiness.probe)() {
                Ok(()) => return Ok(()),
                Err(why) => last_probe = why,
            }
            if started.elapsed() >= self.readiness.timeout {
                return Err(self.start_failure(None, started.elapsed(), last_probe));
            }
            thread::sleep(interval);
            interval = (interval * 2).min(MAX_PROBE_INTERVAL);
        }
    }

    fn start_failure(
        &self,
        status: Option<ExitStatus>,
        waited: Duration,
        last_probe: String,
    ) -> HarnessError {
        self.keep_dir_after_drop();
        let (kind, port, log) = (self.kind, self.port, self.log.clone());
        let tail = self.log_tail();
        if self.log_shows_port_in_use() {
            return HarnessError::PortInUse { kind, port, log, tail };
        }
        match status {
            Some(status) => HarnessError::Exited { kind, port, status, log, tail },
            None => HarnessError::NotReady { kind, port, waited, last_probe, log, tail },
        }
    }

    /// Leaves the dir in place when dropped, for an error that names its log. The next test
    /// run removes it.
    pub(crate) fn keep_dir_after_drop(&self) {
        self.keep_dir.store(true, Ordering::Relaxed);
    }

    /// Whether the server's log says it could not bind a port: libc's "Address already in use"
    /// (Redis, PostgreSQL, MariaDB, ZooKeeper) or Go's "address already in use" (etcd).
    pub(crate) fn log_shows_port_in_use(&self) -> bool {
        logs::tail(&self.log, BIND_SEARCH_LINES).to_ascii_lowercase().contains("address already in use")
    }

    /// The exit status if the process has exited; forgets the child then.
    fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock();
        let status = child.as_mut()?.try_wait().ok()??;
        *child = None;
        Some(status)
    }

    /// Which server this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The TCP port on 127.0.0.1 the server listens on; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's private dir: data, config, sockets and log.
    pub fn dir(&self) -> &Path {
        // Only `Drop` takes the dir, and nothing can call this during `drop`.
        self.dir.as_ref().map_or(Path::new(""), TempDir::path)
    }

    /// The file that receives the server's stdout and stderr, across restarts.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last lines of the log, for messages about failures.
    pub fn log_tail(&self) -> String {
        logs::tail(&self.log, logs::TAIL_LINES)
    }

    /// The command line that starts (and restarts) the server.
    pub fn command_line(&self) -> String {
        self.command.to_string()
    }

    /// The pid of the server's main process, or `None` after [`kill9`](Self::kill9) or once it
    /// was seen to exit.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }

    /// The server's main process and every process below it (PostgreSQL's backends, say).
    pub fn pids(&self) -> Vec<u32> {
        self.pid().map(|pid| std::iter::once(pid).chain(tree::descendants(pid)).collect()).unwrap_or_default()
    }

    /// Whether the main process exists; a paused server is still running.
    pub fn is_running(&self) -> bool {
        self.pid().is_some() && self.exited().is_none()
    }

    /// Whether the server is frozen by [`pause`](Self::pause) and not yet resumed, killed or
    /// restarted.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed) && self.is_running()
    }

    /// Kills the server with SIGKILL, as a crash would: its main process and every descendant.
    /// Returns once all of them are gone. Does nothing if the server is not running.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if a signal cannot be sent or a process outlives SIGKILL.
    pub fn kill9(&self) -> Result<(), HarnessError> {
        self.stop_pause_watchdog();
        let mut child = self.child.lock();
        if let Some(running) = child.as_mut() {
            kill_and_reap(self.kind, running)?;
            *child = None;
        }
        self.paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Freezes the server and its descendants with SIGSTOP: connections stay open but nothing
    /// answers, like a long GC pause or a partition. Undo with [`resume`](Self::resume).
    ///
    /// A frozen process cannot notice that its parent died: PostgreSQL's helpers would outlive a
    /// test process killed while they are frozen (the kernel kills only the main process, by
    /// `PR_SET_PDEATHSIG`). So while paused, a watchdog process kills them all once this
    /// process is gone; resuming, killing or dropping the server stops the watchdog first.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotRunning`] if the server is not running; [`HarnessError::Io`] if a
    /// signal cannot be sent or the watchdog cannot be started.
    pub fn pause(&self) -> Result<(), HarnessError> {
        let pid = self.running_pid()?;
        let frozen = tree::stop(pid).map_err(|errno| self.signal_error("SIGSTOP", errno))?;
        self.paused.store(true, Ordering::Relaxed);
        let mut watchdog = self.pause_watchdog.lock();
        if watchdog.is_none() && !frozen.is_empty() {
            *watchdog = Some(self.start_pause_watchdog(&frozen)?);
        }
        Ok(())
    }

    /// The watchdog of a paused tree's `descendants` (frozen: none of them can exit or fork):
    /// polls this process, and once it is gone SIGKILLs them. The main process is not among
    /// them: the kernel kills it with this process, and its pid may be reused by then.
    fn start_pause_watchdog(&self, descendants: &[u32]) -> Result<Child, HarnessError> {
        let pids: Vec<String> = descendants.iter().map(u32::to_string).collect();
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 0.2; done; kill -KILL {} 2>/dev/null",
            std::process::id(),
            pids.join(" ")
        );
        std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|source| {
                HarnessError::io(format!("starting the {} server's pause watchdog", self.kind), source)
            })
    }

    /// Stops the pause watchdog, if any (before the paused pids could be reused).
    fn stop_pause_watchdog(&self) {
        if let Some(mut watchdog) = self.pause_watchdog.lock().take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    /// Resumes a server frozen by [`pause`](Self::pause) (SIGCONT).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotRunning`] if the server is not running; [`HarnessError::Io`] if a
    /// signal cannot be sent.
    pub fn resume(&self) -> Result<(), HarnessError> {
        let pid = self.running_pid()?;
        tree::resume(pid).map_err(|errno| self.signal_error("SIGCONT", errno))?;
        self.paused.store(false, Ordering::Relaxed);
        self.stop_pause_watchdog();
        Ok(())
    }

    /// Starts the server again with the same command, port, config and data dir, killing it
    /// first if it still runs, and waits until it answers. Only what the server persisted
    /// survives; the harness starts Redis without persistence.
    ///
    /// # Errors
    ///
    /// As for starting: [`HarnessError::Exited`], [`HarnessError::NotReady`],
    /// [`HarnessError::PortInUse`] (someone took the port meanwhile), [`HarnessError::Io`].
    pub fn restart(&self) -> Result<(), HarnessError> {
        self.stop_pause_watchdog();
        {
            let mut child = self.child.lock();
            if let Some(running) = child.as_mut() {
                kill_and_reap(self.kind, running)?;
                *child = None;
            }
            self.paused.store(false, Ordering::Relaxed);
            self.mark_log("restarting");
            let spawned = self.command.spawn(&self.log).map_err(|source| {
                HarnessError::io(format!("restarting the {} server: {}", self.kind, self.command), source)
            })?;
            *child = Some(spawned);
        }
        self.wait_ready()
    }

    fn running_pid(&self) -> Result<u32, HarnessError> {
        match (self.exited(), self.pid()) {
            (None, Some(pid)) => Ok(pid),
            _ => Err(HarnessError::NotRunning { kind: self.kind, port: self.port }),
        }
    }

    fn signal_error(&self, signal: &str, errno: Errno) -> HarnessError {
        HarnessError::io(format!("sending {signal} to the {} server", self.kind), errno.into())
    }

    /// Writes a harness note into the log, so restarts are visible in it. Best effort.
    fn mark_log(&self, note: &str) {
        if let Ok(mut log) = OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(log, "\n---- distlock harness: {note} ----");
        }
    }
}

/// SIGKILLs `child` and its descendants, reaps `child` and waits for the descendants to go.
fn kill_and_reap(kind: ServerKind, child: &mut Child) -> Result<(), HarnessError> {
    let pid = child.id();
    let orphans = tree::kill_all(pid).map_err(|errno| {
        HarnessError::io(format!("sending SIGKILL to the {kind} server (pid {pid})"), errno.into())
    })?;
    child
        .wait()
        .map_err(|source| HarnessError::io(format!("reaping the {kind} server (pid {pid})"), source))?;
    let survivors = tree::wait_dead(&orphans, EXIT_TIMEOUT);
    if survivors.is_empty() {
        Ok(())
    } else {
        Err(HarnessError::io(
            format!("{kind} server processes {survivors:?} still run {EXIT_TIMEOUT:?} after SIGKILL"),
            std::io::Error::from(std::io::ErrorKind::TimedOut),
        ))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop_pause_watchdog();
        if let Some(child) = self.child.get_mut().as_mut() {
            if let Err(error) = kill_and_reap(self.kind, child) {
                eprintln!("distlock harness: could not stop a server: {error:?}");
            }
        }
        let Some(dir) = self.dir.take() else {
            return;
        };
        let (kind, port) = (self.kind, self.port);
        if thread::panicking() {
            let tail = self.log_tail();
            let log = dirs::keep(dir).join(LOG_FILE);
            eprintln!(
                "distlock harness: a failing test stopped the {kind} server on port {port}; \
                 its log is kept at {log:?} and ends with:\n{tail}"
            );
        } else if logs::keep_requested() {
            let log = dirs::keep(dir).join(LOG_FILE);
            eprintln!(
                "distlock harness: stopped the {kind} server on port {port}; its log is kept at {log:?}"
            );
        } else if *self.keep_dir.get_mut() {
            // Keeps the name, so the path in the error stays right until the next run.
            let _ = dir.keep();
        }
    }
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("kind", &self.kind)
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir())
            .finish_non_exhaustive()
    }
}
