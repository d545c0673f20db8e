//! Running a command while a hold lasts — `distlock exec`'s lock, `distlock elect`'s
//! leadership — and stopping it (SIGTERM, then SIGKILL after a grace period) when the hold is
//! lost or, by choice, in doubt.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use distlock::HoldState;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// The hold was lost (or, with `--on-doubt stop`, in doubt) while the command ran, and the
/// command was stopped.
pub const LOST: u8 = 70;

/// What to do with the command while its session hold is in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDoubt {
    /// Stop it (SIGTERM, SIGKILL after `--grace`) and exit 70: it never runs on a hold that may
    /// already be someone else's.
    Stop,
    /// Let it run until the hold is known lost (or confirmed again).
    Continue,
}

/// The options `exec` and `elect` share: how long to wait for the hold, its lease, and the
/// command with how to stop it.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    /// Wait at most this long for the lock or leadership (`30s`, `500ms`, `2m`); default: as
    /// long as it takes.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Do not wait: exit 75 at once if another owner holds the lock (or another candidate leads).
    #[arg(long)]
    pub no_wait: bool,
    /// The lease, renewed while the command runs (`30s`): how long a crashed `distlock` keeps
    /// the lock or leadership on lease backends.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub lease: Duration,
    /// How long the command has between SIGTERM and SIGKILL once the hold is lost.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub grace: Duration,
    /// What to do while a session hold (row or advisory lock, ZooKeeper, etcd) is in doubt — a
    /// liveness check went unanswered: `stop` the command as on a loss, or `continue` until the
    /// hold is known lost.
    #[arg(long, value_enum, default_value = "stop")]
    pub on_doubt: OnDoubt,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

/// The command to run under a hold, and how to stop it.
pub struct Supervised<'a> {
    /// The command and its arguments.
    pub command: &'a [OsString],
    /// Variables set for the command.
    pub env: Vec<(&'static str, String)>,
    /// What the hold is, for messages (`"the lock orders"`, `"the leadership of jobs"`).
    pub what: String,
    /// How long the command has between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// What an in-doubt hold does to the command.
    pub on_doubt: OnDoubt,
}

/// Runs the command while `state` says the hold is held; stops it (and returns [`LOST`]) when it
/// is lost, or in doubt with [`OnDoubt::Stop`]; else returns the command's exit status.
pub fn supervise(run: &Supervised<'_>, state: impl Fn() -> HoldState) -> Result<u8, String> {
    // Signals to distlock are noted by flags here and passed on to the command's process group.
    let signals = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    let mut handlers = Vec::new();
    for signal in signals {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal as i32, flag.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
        handlers.push((signal, flag));
    }
    let mut command = Command::new(&run.command[0]);
    command.args(&run.command[1..]).envs(run.env.iter().map(|(name, value)| (name, value)));
    // Without a terminal, the command gets a process group of its own, so that stopping it stops
    // whatever it started. On a terminal it stays in distlock's foreground group, where it may
    // read the terminal and gets Ctrl-C from it directly (as under flock(1)).
    let own_group = !std::io::stdin().is_terminal();
    if own_group {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let mut child = command.spawn().map_err(|e| format!("starting {:?}: {e}", run.command[0]))?;
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
        let state = state();
        if state == HoldState::Lost || (state == HoldState::InDoubt && run.on_doubt == OnDoubt::Stop) {
            let how = if state == HoldState::Lost { "lost" } else { "is in doubt about (--on-doubt stop)" };
            eprintln!(
                "distlock: {how} {} while {:?} ran; stopping it (SIGTERM, SIGKILL after {:?})",
                run.what, run.command[0], run.grace
            );
            stop(&mut child, target, run.grace);
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
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
