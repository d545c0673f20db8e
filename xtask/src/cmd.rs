//! Running external programs and reporting on them.
//!
//! Every program the xtask runs goes through here, so the log always shows the exact command line
//! (in a form that can be pasted into a shell) before it runs, and a failure always names it.

use std::env;
use std::error::Error;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Why an xtask command failed, as a message for the person reading the log.
#[derive(Debug)]
pub struct Failure(String);

impl Failure {
    /// A failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The same failure with `context` put in front, e.g. `step 2/4 (clippy) failed: …`.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self(format!("{context}: {}", self.0))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Failure {}

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one directory below the workspace root")
}

/// [`cargo`] whose compiles of workspace crates also run clippy, warnings denied: the test
/// build doubles as the lint pass of `cargo clippy --workspace --all-targets --all-features`,
/// which would type-check every crate a second time (about 90 s here). Every later build of the
/// pipeline must use it too: cargo rebuilds the workspace crates when the wrapper changes.
pub fn cargo_linting() -> Command {
    let mut command = cargo();
    // What `cargo clippy -- -D warnings` sets; clippy-driver accepts being a rustc wrapper.
    command
        .env("RUSTC_WORKSPACE_WRAPPER", "clippy-driver")
        .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__");
    command
}

/// A `cargo` command run from the workspace root.
///
/// Uses the cargo that runs the xtask (`$CARGO`, falling back to `cargo` on `PATH`) so that the
/// toolchain stays the same. `cargo run` gives the xtask process the variables describing the
/// xtask package (`CARGO_PKG_NAME=xtask`, `CARGO_MANIFEST_DIR`, …); they are removed so they
/// cannot leak into the builds and tests of other packages.
pub fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.current_dir(workspace_root());
    for (name, _) in env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_package_variable(name) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the package it runs or builds.
fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
        )
}

/// `command`, to be run at the lowest CPU priority the system offers: Linux's `SCHED_IDLE`
/// (`chrt --idle 0`; the scheduler runs it only on a core no other process wants, and preempts
/// it the moment one wakes), else `nice -n 19`, else as it is. Its children inherit it.
pub fn at_idle_priority(command: Command) -> Command {
    // A sandbox may refuse a policy: each is tried on `true` first.
    let works = |program: &Path, args: &[&str]| {
        let mut probe = Command::new(program);
        probe.args(args).arg("true").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        probe.status().is_ok_and(|status| status.success())
    };
    let wrappers = [("chrt", &["--idle", "0"][..]), ("nice", &["-n", "19"][..])];
    let Some((program, wrapper_args)) = wrappers
        .into_iter()
        .filter(|(name, _)| *name != "chrt" || cfg!(target_os = "linux"))
        .find_map(|(name, args)| Some((find_on_path(name).filter(|program| works(program, args))?, args)))
    else {
        return command;
    };
    let mut wrapped = Command::new(program);
    wrapped.args(wrapper_args).arg(command.get_program()).args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    if let Some(directory) = command.get_current_dir() {
        wrapped.current_dir(directory);
    }
    wrapped
}

/// Prints `command`, runs it with the terminal's output and no input, and waits for it.
///
/// # Errors
///
/// If the program cannot be started, or exits unsuccessfully (the message names the command and
/// its exit status).
pub fn run(command: &mut Command) -> Result<(), Failure> {
    let line = display(command);
    println!("$ {line}");
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|error| Failure::new(format!("could not start `{line}`: {error}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(format!("`{line}` exited with {status}")))
    }
}

/// What a captured program printed: its standard output, then its standard error.
pub fn output_text(output: &std::process::Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

/// The first non-empty line a program prints (on stdout or stderr) when run with `args`, e.g. its
/// version; `None` if it cannot be run. Used for information only, so the exit status is ignored.
pub fn first_line_of_output(program: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).stdin(Stdio::null()).output().ok()?;
    let text = [output.stdout, output.stderr].concat();
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().map(str::trim).find(|line| !line.is_empty())?;
    Some(line.to_owned())
}

/// Finds an executable called `name` in the directories on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path).map(|directory| directory.join(name)).find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file that may be executed.
pub fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata().is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// `command` as a shell command line: environment overrides, program, then arguments, each quoted
/// if the shell would otherwise split or interpret it.
pub fn display(command: &Command) -> String {
    let environment = command.get_envs().filter_map(|(name, value)| {
        // Removed variables are an implementation detail (see `cargo`), not worth showing.
        value.map(|value| format!("{}={}", name.to_string_lossy(), quote(value)))
    });
    let program = quote(command.get_program());
    let arguments = command.get_args().map(quote);
    environment.chain([program]).chain(arguments).collect::<Vec<_>>().join(" ")
}

/// `word`, single-quoted if it contains anything but characters the shell leaves alone.
fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A duration as seconds with one decimal, or minutes and seconds past a minute: `4.2s`, `3m07s`.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_what_needs_it() {
        let mut command = Command::new("cargo");
        command.args(["test", "--", "it's a test", ""]).env("RUST_LOG", "1");
        assert_eq!(display(&command), r"RUST_LOG=1 cargo test -- 'it'\''s a test' ''");
    }

    #[test]
    fn cargo_hides_the_xtask_package_variables() {
        assert!(is_package_variable("CARGO_PKG_NAME"));
        assert!(is_package_variable("CARGO_MANIFEST_DIR"));
        assert!(!is_package_variable("CARGO"));
        assert!(!is_package_variable("CARGO_HOME"));
        assert!(!is_package_variable("CARGO_TARGET_DIR"));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(4_240)), "4.2s");
        assert_eq!(format_duration(Duration::from_secs(187)), "3m07s");
    }

    #[test]
    fn idle_priority_keeps_the_command_whole() {
        let mut command = Command::new("cargo");
        command.args(["clippy", "--", "-D", "warnings"]).env("A", "1").env_remove("B").current_dir("/tmp");
        let wrapped = at_idle_priority(command);
        let line = display(&wrapped);
        assert!(line.starts_with("A=1 "), "{line}");
        assert!(line.ends_with(" cargo clippy -- -D warnings"), "{line}");
        if cfg!(target_os = "linux") && find_on_path("chrt").is_some() {
            // Where the sandbox allows it (as here and on the CI machines).
            assert!(line.contains("chrt --idle 0 cargo") || line.contains("nice -n 19 cargo"), "{line}");
        }
        assert!(wrapped.get_envs().any(|(name, value)| name == "B" && value.is_none()));
        assert_eq!(wrapped.get_current_dir(), Some(Path::new("/tmp")));
    }
}
