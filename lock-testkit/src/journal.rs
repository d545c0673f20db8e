//! [`sections`]: reading the journal that processes holding one lock write their critical
//! sections to (`B <who>` on entry, `E <who>` on exit), as the cross-process and interop tests
//! do.

use std::collections::BTreeMap;
use std::path::Path;

/// A shell command that marks a critical section of `who` in `journal`: `B <who>`, a pause of
/// `seconds` (as `sleep` takes it), `E <who>`.
pub fn section_script(journal: &Path, who: &str, seconds: &str) -> String {
    format!("echo 'B {who}' >> {0}; sleep {seconds}; echo 'E {who}' >> {0}", journal.display())
}

/// The sections in `journal`, counted by writer; an error naming the first line where two
/// overlap (a `B` inside another's section, or an `E` that is not the holder's).
///
/// # Errors
/// The journal cannot be read, or two sections overlap.
pub fn sections(journal: &Path) -> Result<BTreeMap<String, usize>, String> {
    let text = std::fs::read_to_string(journal).map_err(|e| format!("reading {}: {e}", journal.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut counts = BTreeMap::new();
    let mut holder: Option<&str> = None;
    for line in &lines {
        let (step, who) = line.split_once(' ').ok_or_else(|| format!("malformed line {line:?}"))?;
        match (step, holder) {
            ("B", None) => {
                holder = Some(who);
                *counts.entry(who.to_owned()).or_insert(0) += 1;
            }
            ("E", Some(current)) if current == who => holder = None,
            _ => return Err(format!("overlap at {line:?} in {lines:#?}")),
        }
    }
    match holder {
        Some(who) => Err(format!("{who}'s last section never ended: {lines:#?}")),
        None => Ok(counts),
    }
}
