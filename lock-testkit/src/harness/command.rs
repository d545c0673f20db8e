//! A re-runnable description of a command line, and running setup commands to completion.

use std::ffi::OsString;
use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::unistd::{Gid, Uid};

use super::{logs, spawner, tree, HarnessError, ServerKind};

/// An unprivileged account to run a program as (PostgreSQL refuses to run as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub uid: Uid,
    pub gid: Gid,
}

/// Everything needed to start a program again the same way: `std::process::Command` is
/// neither `Clone` nor reusable, and a restart must repeat the exact command.
#[derive(Debug, Clone)]
pub(crate) struct CommandSpec {
    program: PathBuf,
    args: Vec<OsString>,
    current_dir: Option<PathBuf>,
    run_as: Option<RunAs>,
}

impl CommandSpec {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        CommandSpec { program: program.into(), args: Vec::new(), current_dir: None, run_as: None }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    pub fn run_as(mut self, account: Option<RunAs>) -> Self {
        self.run_as = account;
        self
    }

    /// Spawns the program (on the spawner thread) with stdout and stderr appended to `log`.
    pub fn spawn(&self, log: &Path) -> io::Result<Child> {
        let log = OpenOptions::new().create(true).append(true).open(log)?;
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        if let Some(account) = self.run_as {
            command.uid(account.uid.as_raw()).gid(account.gid.as_raw());
        }
        spawner::spawn(command)
    }

    /// Runs the program to completion, output in `log`, for a setup `step` of a `kind` server.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Setup`] if it cannot be spawned, exits unsuccessfully or outlives
    /// `timeout` (then it is killed).
    pub fn run(
        &self,
        kind: ServerKind,
        step: &str,
        log: &Path,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let failure = |detail: String| HarnessError::Setup {
            kind,
            step: step.to_owned(),
            detail: format!(
                "{detail}\ncommand: {self}\n{log:?} ends with:\n{}",
                logs::tail(log, logs::TAIL_LINES)
            ),
        };
        let mut child = self.spawn(log).map_err(|error| failure(format!("could not spawn: {error}")))?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(failure(format!("exited with {status}"))),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    // Best effort: the error below is what matters.
                    let _ = tree::kill_all(child.id());
                    let _ = child.wait();
                    return Err(failure(format!("still running after {timeout:?}; killed")));
                }
                Err(error) => return Err(failure(format!("could not wait for it: {error}"))),
            }
        }
    }
}

impl fmt::Display for CommandSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.args {
            let arg = arg.to_string_lossy();
            if arg.is_empty() || arg.contains(char::is_whitespace) {
                write!(f, " '{arg}'")?;
            } else {
                write!(f, " {arg}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_to_completion_and_reports_failures_with_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("setup.log");
        CommandSpec::new("sh")
            .args(["-c", "echo fine"])
            .run(ServerKind::Redis, "ok step", &log, Duration::from_secs(5))
            .unwrap();

        let error = CommandSpec::new("sh")
            .args(["-c", "echo broken >&2; exit 3"])
            .run(ServerKind::Redis, "bad step", &log, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(error.contains("Redis: bad step failed: exited with exit status: 3"), "{error}");
        assert!(error.contains("fine\nbroken"), "{error}");
    }

    #[test]
    fn kills_a_step_that_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let error = CommandSpec::new("sleep")
            .arg("30")
            .run(ServerKind::Redis, "slow step", &dir.path().join("log"), Duration::from_millis(100))
            .unwrap_err()
            .to_string();
        assert!(error.contains("still running after 100ms; killed"), "{error}");
    }

    #[test]
    fn displays_as_a_shell_line() {
        let spec = CommandSpec::new("/usr/bin/redis-server").args(["--save", "", "--port", "1"]);
        assert_eq!(spec.to_string(), "/usr/bin/redis-server --save '' --port 1");
    }
}
