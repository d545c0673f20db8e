//! `distlock exec`: hold a distributed lock while a command runs, like `flock(1)` and
//! `etcdctl lock`.
//!
//! The command runs with `DISTLOCK_NAME` and
//! `DISTLOCK_FENCING_TOKEN` in its environment, while the lease is renewed in the background.
//! Exit status: the command's own (128 + the signal that ended it); [`BUSY`] when the lock stays
//! held by someone else for `--no-wait` or the whole `--wait`; [`LOST`] when the lock was lost
//! while the command ran (the command is then sent SIGTERM, and SIGKILL after `--grace`);
//! [`FAILED`] when the lock could not be taken for another reason. SIGINT, SIGTERM and SIGHUP sent
//! to `distlock` are passed on to the command; the lock is released when it has exited.
//!
//! A hold bound to a session (row and advisory locks, ZooKeeper) can be *in doubt*: a liveness
//! check went unanswered, and the server may be about to end the session. With `--on-doubt stop`
//! (the default, Curator's advice for SUSPENDED) the command is stopped then, as on a loss —
//! before anyone else can take the lock; with `--on-doubt continue` it runs on until the hold is
//! known lost.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use distlock::{DistributedLock, HoldState, LockClient, LockGuard, LockOptions};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// `EX_TEMPFAIL`: the lock is held by someone else.
pub const BUSY: u8 = 75;
/// The lock was lost (or, with `--on-doubt stop`, in doubt) while the command ran, and the command
/// was stopped.
pub const LOST: u8 = 70;
/// The lock could not be taken or the command not started (bad URL, unreachable server, …).
pub const FAILED: u8 = 71;

/// What to do with the command while its session hold is in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDoubt {
    /// Stop it (SIGTERM, SIGKILL after `--grace`) and exit 70: it never runs on a hold that may
    /// already be someone else's.
    Stop,
    /// Let it run until the hold is known lost (or confirmed again).
    Continue,
}

/// Options of `distlock exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The lock server: a `redis://`, `rediss://`, `postgres://`, `postgresql://`, `mysql://` or
    /// `zk://` URL, a libpq `key=value` string, or comma-separated `redis://` URLs (Redlock).
    #[arg(long)]
    url: String,
    /// The lock's name.
    #[arg(long)]
    name: String,
    /// The kind of lock where a scheme has several: `redis`, `redis-hash` or `redlock`;
    /// `pg-table`, `pg-row` or `pg-advisory`; `mysql-table`, `mysql-row` or `mysql-advisory`.
    /// Defaults to the first of each (`redlock` for a list of URLs).
    #[arg(long)]
    kind: Option<String>,
    /// Wait at most this long for the lock (`30s`, `500ms`, `2m`); default: as long as it takes.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Do not wait: exit 75 at once if the lock is held.
    #[arg(long)]
    no_wait: bool,
    /// The lease, renewed while the command runs (`30s`): how long a crashed `distlock` keeps
    /// the lock on lease backends.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    lease: Duration,
    /// How long the command has between SIGTERM and SIGKILL once the lock is lost.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    grace: Duration,
    /// What to do while a session hold (row or advisory lock, ZooKeeper) is in doubt — a
    /// liveness check went unanswered: `stop` the command as on a loss, or `continue` until the
    /// hold is known lost.
    #[arg(long, value_enum, default_value = "stop")]
    on_doubt: OnDoubt,
    /// How long to wait for a connection, and for each reply of the server.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    timeout: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

/// Runs `distlock exec`.
pub fn run(args: &ExecArgs) -> ExitCode {
    match dispatch(args) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("distlock exec: {message}");
            ExitCode::from(FAILED)
        }
    }
}

/// Builds the backend the URL names (through the facade's [`distlock::parse_url_opts`], as every
/// command does) and holds the lock with it.
fn dispatch(args: &ExecArgs) -> Result<u8, String> {
    let mut options = distlock::ConnectOptions::new().connect_timeout(args.timeout).io_timeout(args.timeout);
    if let Some(kind) = &args.kind {
        options = options.kind(kind.parse().map_err(|e: distlock::Error| e.to_string())?);
    }
    let backend = distlock::parse_url_opts(&args.url, &options)
        .and_then(|backend| backend.ensure_schema().map(|()| backend));
    hold(backend, args)
}

/// Takes the lock, runs the command, releases the lock.
fn hold<B: DistributedLock>(backend: distlock::Result<B>, args: &ExecArgs) -> Result<u8, String> {
    let backend = backend.map_err(|e| format!("connecting to {}: {}", distlock::redact_url(&args.url), e))?;
    let options = LockOptions::builder().lease(args.lease).build().map_err(|e| e.to_string())?;
    let client = LockClient::with_options(backend, options);
    let lock = client.lock_named(&args.name).map_err(|e| e.to_string())?;
    let acquired = if args.no_wait {
        lock.try_lock()
    } else if let Some(wait) = args.wait {
        lock.try_lock_for(wait)
    } else {
        lock.lock().map(Some)
    };
    let guard = match acquired.map_err(|e| format!("taking {}: {}", args.name, e))? {
        Some(guard) => guard,
        None => {
            eprintln!("distlock exec: {} is held by another owner", args.name);
            return Ok(BUSY);
        }
    };
    let code = supervise(&guard, args)?;
    // A lock lost just before the command ended is still a lost lock: the command may have run
    // its last part without it.
    let lost = guard.state() == HoldState::Lost;
    match guard.unlock() {
        Err(distlock::Error::NotHeld { .. }) if code != LOST => {
            eprintln!("distlock exec: the lock {} was lost before {:?} ended", args.name, args.command[0]);
            Ok(LOST)
        }
        Err(error) => {
            if code != LOST {
                eprintln!("distlock exec: releasing {}: {}", args.name, error);
            }
            Ok(code)
        }
        Ok(()) if lost && code != LOST => Ok(LOST),
        Ok(()) => Ok(code),
    }
}

/// Runs the command while the lock is held; stops it if the lock is lost.
fn supervise<B: DistributedLock>(guard: &LockGuard<B>, args: &ExecArgs) -> Result<u8, String> {
    // Signals to distlock are noted by flags here and passed on to the command's process group.
    let signals = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    let mut handlers = Vec::new();
    for signal in signals {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal as i32, flag.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
        handlers.push((signal, flag));
    }
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]).env("DISTLOCK_NAME", &args.name);
    if let Some(token) = guard.fencing_token() {
        command.env("DISTLOCK_FENCING_TOKEN", token.to_string());
    }
    // Without a terminal, the command gets a process group of its own, so that stopping it stops
    // whatever it started. On a terminal it stays in distlock's foreground group, where it may
    // read the terminal and gets Ctrl-C from it directly (as under flock(1)).
    let own_group = !std::io::stdin().is_terminal();
    if own_group {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let mut child = command.spawn().map_err(|e| format!("starting {:?}: {e}", args.command[0]))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(|e| e.to_string())?);
    let target = Target { pid, own_group };
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(exit_code(status));
        }
        for (signal, flag) in &handlers {
            if flag.swap(false, Ordering::SeqCst) {
                target.signal(*signal);
            }
        }
        let state = guard.state();
        if state == HoldState::Lost || (state == HoldState::InDoubt && args.on_doubt == OnDoubt::Stop) {
            let what = if state == HoldState::Lost { "lost" } else { "is in doubt about (--on-doubt stop)" };
            eprintln!(
                "distlock exec: {what} the lock {} while {:?} ran; stopping it (SIGTERM, SIGKILL after {:?})",
                args.name, args.command[0], args.grace
            );
            stop(&mut child, target, args.grace);
            return Ok(LOST);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whom distlock's signals reach: the command's process group, or (on a terminal) the command.
#[derive(Clone, Copy)]
struct Target {
    pid: Pid,
    own_group: bool,
}

impl Target {
    fn signal(self, signal: Signal) {
        let _ = if self.own_group { killpg(self.pid, signal) } else { kill(self.pid, signal) };
    }
}

/// SIGTERM, then SIGKILL after `grace` — to the whole group even when its leader exited first:
/// whatever the command left running must not go on without the lock.
fn stop(child: &mut Child, target: Target, grace: Duration) {
    target.signal(Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        let exited = matches!(child.try_wait(), Ok(Some(_)));
        // The group is gone once its last member is: the leader reaped, no signal deliverable.
        if exited && (!target.own_group || killpg(target.pid, None).is_err()) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    target.signal(Signal::SIGKILL);
    let _ = child.wait();
}

/// The command's exit status as distlock's: its code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
