//! `distlock elect`: campaign in an election and run a command while leader, like
//! `etcdctl elect` with a command; `distlock leader`: who leads an election.
//!
//! On etcd it *is* `etcdctl elect`'s election (etcd's `concurrency.Election` keys): the
//! election `N` is the prefix `%election/N` (with a URL's namespace `ns`, `ns/%election/N`), so
//! `etcdctl elect %election/N VALUE` campaigns against `distlock elect --url etcd://… --name N`
//! and `etcdctl elect -l %election/N` observes it.
//!
//! The command runs with `DISTLOCK_ELECTION`, `DISTLOCK_LEADER_VALUE` and (where the backend
//! issues them) `DISTLOCK_FENCING_TOKEN` in its environment while the leadership is renewed in
//! the background. Exit status as `distlock exec`'s: the command's own; [`BUSY`] when another
//! candidate leads for `--no-wait` or the whole `--wait`; [`LOST`] when the leadership was lost
//! (or, with `--on-doubt stop`, in doubt) while the command ran — it is then sent SIGTERM, and
//! SIGKILL after `--grace`; [`FAILED`] when the campaign could not run.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use distlock::{Election, HoldState, Leader, LockClient, LockOptions};

use crate::exec::{BUSY, FAILED};
use crate::server::ServerArgs;
use crate::supervise::{supervise, HoldArgs, Supervised, LOST};

/// Options of `distlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The election's name.
    #[arg(long)]
    name: String,
    /// What followers see while this candidate leads (`distlock leader`): an address, a host
    /// name. Default: empty.
    #[arg(long, default_value = "")]
    value: String,
    #[command(flatten)]
    hold: HoldArgs,
}

/// Runs `distlock elect`.
pub fn run(args: &ElectArgs) -> ExitCode {
    match lead(args) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("distlock elect: {message}");
            ExitCode::from(FAILED)
        }
    }
}

/// Campaigns, runs the command while leader, resigns.
fn lead(args: &ElectArgs) -> Result<u8, String> {
    let backend = args.server.connect()?;
    let options = LockOptions::builder().lease(args.hold.lease).build().map_err(|e| e.to_string())?;
    let client = LockClient::with_options(backend, options);
    let election = client.election(&args.name).map_err(|e| e.to_string())?.with_value(args.value.as_bytes());
    let won = if args.hold.no_wait {
        election.try_campaign()
    } else if let Some(wait) = args.hold.wait {
        election.campaign_for(wait)
    } else {
        election.campaign().map(Some)
    };
    let Some(leadership) = won.map_err(|e| format!("campaigning in {}: {e}", args.name))? else {
        eprintln!("distlock elect: another candidate leads {}", args.name);
        return Ok(BUSY);
    };
    let mut env =
        vec![("DISTLOCK_ELECTION", args.name.clone()), ("DISTLOCK_LEADER_VALUE", args.value.clone())];
    if let Some(token) = leadership.fencing_token() {
        env.push(("DISTLOCK_FENCING_TOKEN", token.to_string()));
    }
    let run = Supervised {
        command: &args.hold.command,
        env,
        what: format!("the leadership of {}", args.name),
        grace: args.hold.grace,
        on_doubt: args.hold.on_doubt,
    };
    let code = supervise(&run, || leadership.state())?;
    let lost = leadership.state() == HoldState::Lost;
    match leadership.resign() {
        Err(distlock::Error::NotHeld { .. }) if code != LOST => {
            eprintln!(
                "distlock elect: the leadership of {} was lost before {:?} ended",
                args.name, args.hold.command[0]
            );
            Ok(LOST)
        }
        Err(error) => {
            if code != LOST {
                eprintln!("distlock elect: resigning {}: {error}", args.name);
            }
            Ok(code)
        }
        Ok(()) if lost && code != LOST => Ok(LOST),
        Ok(()) => Ok(code),
    }
}

/// Options of `distlock leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The election's name.
    #[arg(long)]
    name: String,
    /// Keep printing the leader each time it changes (server notices where the backend has
    /// them), until interrupted.
    #[arg(long)]
    follow: bool,
}

/// Runs `distlock leader`: prints the current leader's value and token (`none` when nobody
/// leads); exit 0, or 71 when the server cannot be read.
pub fn run_leader(args: &LeaderArgs) -> ExitCode {
    match show_leader(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("distlock leader: {message}");
            ExitCode::from(FAILED)
        }
    }
}

fn show_leader(args: &LeaderArgs) -> Result<(), String> {
    let client = LockClient::new(args.server.connect_read_only()?);
    let election: Election<_> = client.election(&args.name).map_err(|e| e.to_string())?;
    if !args.follow {
        print(election.leader().map_err(|e| e.to_string())?.as_ref());
        return Ok(());
    }
    let mut observer = election.observe().map_err(|e| e.to_string())?;
    print(observer.current());
    loop {
        if let Some(leader) = observer.changed(Duration::from_secs(3600)).map_err(|e| e.to_string())? {
            print(leader.as_ref());
        }
    }
}

fn print(leader: Option<&Leader>) {
    match leader {
        Some(leader) => {
            let token =
                leader.token.map_or_else(|| "(not issued by this backend)".to_owned(), |t| t.to_string());
            println!("leader: {}\ntoken:  {token}", leader.value_lossy());
        }
        None => println!("leader: none"),
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
