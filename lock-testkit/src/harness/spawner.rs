//! Spawns every child process from one long-lived thread, so children die with the test binary.
//!
//! Shared servers live in `static`s, which Rust never drops, and a test binary can be killed
//! outright; either way no `Drop` runs. Each child therefore asks the kernel for SIGKILL when its
//! parent goes away (`PR_SET_PDEATHSIG`). The kernel tracks the *thread* that forked, not the
//! process: a child spawned from a test's own thread would be killed as soon as that test
//! finished. So all spawns happen on one thread that lives until the process exits.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;
use std::thread;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{getppid, Pid};

/// A command to spawn and where to send the outcome.
type Request = (Command, Sender<io::Result<Child>>);

/// The spawner thread's inbox, created with the thread on first use.
static SPAWNER: OnceLock<io::Result<Sender<Request>>> = OnceLock::new();

/// Spawns `command` on the spawner thread; the child is SIGKILLed when this process exits.
pub(crate) fn spawn(command: Command) -> io::Result<Child> {
    let inbox = match SPAWNER.get_or_init(start_thread) {
        Ok(inbox) => inbox,
        Err(error) => return Err(io::Error::new(error.kind(), error.to_string())),
    };
    let (reply, outcome) = mpsc::channel();
    inbox.send((command, reply)).map_err(|_| io::Error::other("the harness's spawner thread is gone"))?;
    outcome.recv().map_err(|_| io::Error::other("the harness's spawner thread dropped a request"))?
}

fn start_thread() -> io::Result<Sender<Request>> {
    let (inbox, requests) = mpsc::channel::<Request>();
    thread::Builder::new().name("distlock-harness-spawner".into()).spawn(move || {
        // Ends only when every sender is gone, and the static one never is.
        for (mut command, reply) in requests {
            die_with_parent(&mut command);
            // The requester may have given up; nothing to do about it then.
            let _ = reply.send(command.spawn());
        }
    })?;
    Ok(inbox)
}

/// Makes the child get SIGKILL when the spawning thread (here: the process) dies.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;

    let parent = Pid::this();
    // SAFETY: the closure runs in the forked child before `exec`. It only makes the raw
    // `prctl` and `getppid` system calls and builds an `io::Error` from an errno, none of which
    // allocate or take locks, so it is async-signal-safe as `pre_exec` requires.
    unsafe {
        command.pre_exec(move || {
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent may have died between `fork` and `prctl`; then no signal will come.
            if getppid() != parent {
                return Err(Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn children_outlive_the_thread_that_asked_for_them() {
        // With PR_SET_PDEATHSIG this child would die with a requesting thread that forked it.
        let mut child = thread::spawn(|| {
            let mut command = Command::new("sleep");
            command.arg("30");
            spawn(command).unwrap()
        })
        .join()
        .unwrap();
        thread::sleep(Duration::from_millis(100));
        assert!(child.try_wait().unwrap().is_none(), "child died with its requester");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
