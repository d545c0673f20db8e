//! `distlock exec`: hold a distributed lock while a command runs, like `flock(1)` and
//! `etcdctl lock`. On etcd it *is* `etcdctl lock`'s lock: `distlock exec --url etcd://HOST:2379
//! --name N -- CMD` and `etcdctl lock N -- CMD` exclude each other (same keys; a URL's
//! namespace `ns` is `etcdctl lock ns/N`).
//!
//! The command runs with `DISTLOCK_NAME` and
//! `DISTLOCK_FENCING_TOKEN` in its environment, while the lease is renewed in the background.
//! Exit status: the command's own (128 + the signal that ended it); [`BUSY`] when the lock stays
//! held by someone else for `--no-wait` or the whole `--wait`; [`LOST`] when the lock was lost
//! while the command ran (the command is then sent SIGTERM, and SIGKILL after `--grace`);
//! [`FAILED`] when the lock could not be taken for another reason. SIGINT, SIGTERM and SIGHUP sent
//! to `distlock` are passed on to the command; the lock is released when it has exited.
//!
//! A hold bound to a session (row and advisory locks, ZooKeeper, etcd) can be *in doubt*: a liveness
//! check went unanswered, and the server may be about to end the session. With `--on-doubt stop`
//! (the default, Curator's advice for SUSPENDED) the command is stopped then, as on a loss —
//! before anyone else can take the lock; with `--on-doubt continue` it runs on until the hold is
//! known lost.

use std::process::ExitCode;

use clap::Args;
use distlock::{HoldState, LockClient, LockOptions};

use crate::server::ServerArgs;
pub use crate::supervise::LOST;
use crate::supervise::{supervise, HoldArgs, Supervised};

/// `EX_TEMPFAIL`: the lock is held by someone else.
pub const BUSY: u8 = 75;
/// The lock could not be taken or the command not started (bad URL, unreachable server, …).
pub const FAILED: u8 = 71;

/// Options of `distlock exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The lock's name.
    #[arg(long)]
    name: String,
    #[command(flatten)]
    hold: HoldArgs,
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

/// Takes the lock on the server the options name, runs the command, releases the lock.
fn dispatch(args: &ExecArgs) -> Result<u8, String> {
    let backend = args.server.connect()?;
    let options = LockOptions::builder().lease(args.hold.lease).build().map_err(|e| e.to_string())?;
    let client = LockClient::with_options(backend, options);
    let lock = client.lock_named(&args.name).map_err(|e| e.to_string())?;
    let acquired = if args.hold.no_wait {
        lock.try_lock()
    } else if let Some(wait) = args.hold.wait {
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
    let mut env = vec![("DISTLOCK_NAME", args.name.clone())];
    if let Some(token) = guard.fencing_token() {
        env.push(("DISTLOCK_FENCING_TOKEN", token.to_string()));
    }
    let run = Supervised {
        command: &args.hold.command,
        env,
        what: format!("the lock {}", args.name),
        grace: args.hold.grace,
        on_doubt: args.hold.on_doubt,
    };
    let code = supervise(&run, || guard.state())?;
    // A lock lost just before the command ended is still a lost lock: the command may have run
    // its last part without it.
    let lost = guard.state() == HoldState::Lost;
    match guard.unlock() {
        Err(distlock::Error::NotHeld { .. }) if code != LOST => {
            eprintln!(
                "distlock exec: the lock {} was lost before {:?} ended",
                args.name, args.hold.command[0]
            );
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
