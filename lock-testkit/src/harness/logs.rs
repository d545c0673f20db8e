//! Server logs: reading their tails for error messages, and the keep-logs switch.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

/// The environment variable that keeps every server's dir and log after the server is dropped.
pub const KEEP_LOGS_VARIABLE: &str = "DISTLOCK_KEEP_LOGS";

/// How many lines of a log go into an error message.
pub(crate) const TAIL_LINES: usize = 30;

/// Reading more than this from the end of a log is never needed for [`TAIL_LINES`] lines.
const TAIL_BYTES: u64 = 16 * 1024;

/// Whether [`KEEP_LOGS_VARIABLE`] asks to keep logs: set to anything but empty or `0`.
pub(crate) fn keep_requested() -> bool {
    std::env::var_os(KEEP_LOGS_VARIABLE).is_some_and(|value| !value.is_empty() && value != "0")
}

/// The last `lines` lines of the file at `path`, or a note saying why there are none.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match read_end(path) {
        Ok(text) if text.trim().is_empty() => "(log is empty)".to_owned(),
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(log unreadable: {error})"),
    }
}

/// One node's part of a deployment's error report: `label: state`, then the last `lines` lines
/// of its log, indented.
pub(crate) fn node_report(label: &str, state: &str, log: &Path, lines: usize) -> String {
    format!("\n{label}: {state}\n  {log:?} ends with:\n    {}", tail(log, lines).replace('\n', "\n    "))
}

fn read_end(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let length = file.metadata()?.len();
    let start = length.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    // Starting mid-file, the first line is likely cut; drop it.
    Ok(match (start > 0, text.find('\n')) {
        (true, Some(newline)) => text[newline + 1..].to_owned(),
        _ => text.into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let text: String = (0..100).map(|line| format!("line {line}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(tail(&path, 2), "line 98\nline 99");
        assert!(tail(&dir.path().join("missing"), 2).starts_with("(log unreadable"));
    }
}
