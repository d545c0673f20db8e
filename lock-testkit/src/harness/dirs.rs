//! Servers' temp dirs: named after the owning process, so leftovers can be found and removed.
//!
//! A dir is `distlock-<kind>-<pid>-<random>` under [`std::env::temp_dir`]. Dirs of shared
//! servers are never dropped, and a killed test binary drops nothing, so every process removes
//! the dirs of dead owners before it creates its first one. Dirs kept for inspection are
//! renamed to `distlock-kept-…`, which the cleanup leaves alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use tempfile::TempDir;

use super::{tree, HarnessError, ServerKind};

const PREFIX: &str = "distlock-";
const KEPT_PREFIX: &str = "distlock-kept-";

/// A fresh private dir for one server of `kind`.
pub(crate) fn create(kind: ServerKind) -> Result<TempDir, HarnessError> {
    create_named(kind.slug())
}

/// A fresh private dir named by `slug` (a [`ServerKind`]'s, or [`TLS_SLUG`] for a test CA).
pub(crate) fn create_named(slug: &str) -> Result<TempDir, HarnessError> {
    static CLEANUP: Once = Once::new();
    let parent = std::env::temp_dir();
    CLEANUP.call_once(|| remove_stale(&parent));
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{slug}-{}-", std::process::id()))
        .tempdir_in(&parent)
        .map_err(|source| HarnessError::io(format!("creating a {slug} temp dir in {parent:?}"), source))
}

/// The slug of a test CA's dir.
pub(crate) const TLS_SLUG: &str = "tls";

/// Keeps `dir` past its drop, renamed so later cleanups spare it. Returns where it now is.
pub(crate) fn keep(dir: TempDir) -> PathBuf {
    let path = dir.keep();
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return path;
    };
    let kept = path.with_file_name(name.replacen(PREFIX, KEPT_PREFIX, 1));
    match fs::rename(&path, &kept) {
        Ok(()) => kept,
        Err(_) => path,
    }
}

/// Removes the server dirs in `parent` whose owning process is gone. Best effort: a dir that
/// cannot be removed now is tried again by the next test binary.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(owner) = entry.file_name().to_str().and_then(owner_pid) else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if is_dir && owner != std::process::id() && !tree::is_alive(owner) {
            let path = entry.path();
            match fs::remove_dir_all(&path) {
                Ok(()) => tracing::debug!(?path, "removed a dead test run's server dir"),
                Err(error) => tracing::warn!(?path, %error, "could not remove a stale server dir"),
            }
        }
    }
}

/// The owner pid in a server dir's name, if `name` is one.
fn owner_pid(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix(PREFIX)?.splitn(3, '-');
    let slug = parts.next()?;
    if slug != TLS_SLUG {
        ServerKind::from_slug(slug)?;
    }
    let pid = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn parses_only_server_dir_names() {
        assert_eq!(owner_pid("distlock-redis-123-abcDEF"), Some(123));
        assert_eq!(owner_pid("distlock-zookeeper-9-x"), Some(9));
        assert_eq!(owner_pid("distlock-tls-77-x"), Some(77));
        assert_eq!(owner_pid("distlock-kept-redis-123-abc"), None);
        assert_eq!(owner_pid("distlock-unknown-123-abc"), None);
        assert_eq!(owner_pid("distlock-redis-notapid-abc"), None);
        assert_eq!(owner_pid("distlock-redis-123"), None);
        assert_eq!(owner_pid("other-redis-123-abc"), None);
    }

    #[test]
    fn removes_dirs_of_dead_owners_only() {
        let parent = tempfile::tempdir().unwrap();
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let alive = std::process::id();

        let stale = parent.path().join(format!("distlock-redis-{dead}-abc"));
        let live = parent.path().join(format!("distlock-postgres-{alive}-abc"));
        let kept = parent.path().join(format!("distlock-kept-redis-{dead}-abc"));
        let foreign = parent.path().join(format!("unrelated-redis-{dead}-abc"));
        for dir in [&stale, &live, &kept, &foreign] {
            fs::create_dir_all(dir.join("data")).unwrap();
        }

        remove_stale(parent.path());

        assert!(!stale.exists());
        assert!(live.exists() && kept.exists() && foreign.exists());
    }

    #[test]
    fn kept_dirs_are_renamed_out_of_the_cleanup() {
        let dir = create(ServerKind::Redis).unwrap();
        let kept = keep(dir);
        let name = kept.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.starts_with(KEPT_PREFIX), "{name}");
        assert_eq!(owner_pid(&name), None);
        fs::remove_dir_all(kept).unwrap();
    }
}
