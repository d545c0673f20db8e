//! Where locks live in the tree: the root, one path component per lock name, and Curator's
//! `InterProcessMutex` node names (`_c_<uuid>-lock-<sequence>`) and their order.

use std::cmp::Ordering;
use std::fmt::Write as _;

use lock_core::{Error, LockName, Result};

/// What Curator's `InterProcessMutex` calls its nodes, after the protection prefix.
const LOCK_NAME: &str = "lock-";

/// Curator's protection prefix: `_c_` + a UUID + `-`, found again after a lost create reply.
const PROTECTED_PREFIX: &str = "_c_";

/// A validated root path: absolute, not `/` itself or anything under `/zookeeper`, no empty,
/// `.` or `..` components, no character ZooKeeper refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Root(String);

impl Root {
    /// # Errors
    /// [`Error::InvalidConfig`] naming the rule `root` breaks.
    pub(crate) fn new(root: &str) -> Result<Self> {
        let invalid = |why: &str| Err(Error::invalid_config(format!("ZooKeeper root {root:?}: {why}")));
        let Some(rest) = root.strip_prefix('/') else {
            return invalid("must start with `/`");
        };
        if rest.is_empty() {
            // Lock parents directly under `/` could collide with `/zookeeper`.
            return invalid("must name a node below `/`, e.g. `/locks`");
        }
        if rest == "zookeeper" || rest.starts_with("zookeeper/") {
            return invalid("`/zookeeper` is ZooKeeper's own");
        }
        for component in rest.split('/') {
            if component.is_empty() || component == "." || component == ".." {
                return invalid("has an empty, `.` or `..` component");
            }
            if component.chars().any(refused_by_zookeeper) {
                return invalid("has a character ZooKeeper refuses in paths");
            }
        }
        Ok(Self(root.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The parent node of `name`'s lock nodes: `<root>/<escaped name>`.
    pub(crate) fn lock_path(&self, name: &LockName) -> String {
        format!("{}/{}", self.0, component(name.as_str()))
    }
}

/// `name` as one path component that ZooKeeper accepts and that no other name maps to: `%`,
/// `/` and characters ZooKeeper refuses are percent-encoded (UTF-8 bytes), and so are the dots
/// of `.` and `..`. Every other name is kept as it is, so a Curator client locking
/// `<root>/orders` and a distlock client locking `orders` meet on the same node.
pub(crate) fn component(name: &str) -> String {
    if name == "." || name == ".." {
        return "%2E".repeat(name.len());
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c == '/' || refused_by_zookeeper(c) {
            let mut bytes = [0; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                // Writing to a String cannot fail.
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The characters ZooKeeper rejects in a path (its `PathUtils.validatePath`, which checks UTF-16
/// code units: a character beyond U+FFFF is a surrogate pair there, and refused).
fn refused_by_zookeeper(c: char) -> bool {
    matches!(u32::from(c), 0x0000..=0x001f | 0x007f..=0x009f | 0xd800..=0xf8ff | 0xfff0..)
}

/// The prefix of one acquisition's node: `<lock path>/_c_<uuid>-lock-`; the server appends the
/// sequence number.
pub(crate) fn node_prefix(lock_path: &str, protection: &str) -> String {
    format!("{lock_path}/{PROTECTED_PREFIX}{protection}-{LOCK_NAME}")
}

/// Whether the child `name` is the node created with `protection` (Curator's protected mode).
pub(crate) fn is_protected_by(name: &str, protection: &str) -> bool {
    name.strip_prefix(PROTECTED_PREFIX)
        .and_then(|rest| rest.strip_prefix(protection))
        .is_some_and(|rest| rest.starts_with('-'))
}

/// Curator's order of lock nodes (`StandardLockInternalsDriver.fixForSorting`): by what follows
/// the last `lock-`, i.e. the zero-padded sequence number, whatever the protection prefix.
pub(crate) fn lock_order(a: &str, b: &str) -> Ordering {
    sort_key(a).cmp(sort_key(b)).then_with(|| a.cmp(b))
}

fn sort_key(child: &str) -> &str {
    child.rfind(LOCK_NAME).map_or(child, |at| &child[at + LOCK_NAME.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_validated() {
        for bad in
            ["", "locks", "/", "/zookeeper", "/zookeeper/x", "/a//b", "/a/./b", "/a/..", "/a/", "/a\u{1}"]
        {
            assert!(matches!(Root::new(bad), Err(Error::InvalidConfig { .. })), "{bad:?}");
        }
        for good in ["/distlock", "/apps/locks", "/zookeeperish", "/a.b/c..d"] {
            assert_eq!(Root::new(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn names_map_to_one_safe_component_each() {
        let root = Root::new("/locks").unwrap();
        let cases = [
            ("orders", "orders"),
            ("a/b", "a%2Fb"),
            ("..", "%2E%2E"),
            (".", "%2E"),
            ("...", "..."),
            ("%2F", "%252F"),
            ("zookeeper", "zookeeper"),
            ("naïve 'quote\"; DROP", "naïve 'quote\"; DROP"),
            ("\u{e000}", "%EE%80%80"),
            ("🔒", "%F0%9F%94%92"),
        ];
        for (name, expected) in cases {
            assert_eq!(component(name), expected, "{name:?}");
            let path = root.lock_path(&LockName::new(name).unwrap());
            assert_eq!(path.matches('/').count(), 2, "{path}");
        }
        // Distinct names never share a component.
        let names = ["a/b", "a%2Fb", "a%252Fb", ".", "%2E", "..", "%2E%2E", "%2E."];
        let mut components: Vec<String> = names.iter().map(|name| component(name)).collect();
        components.sort();
        components.dedup();
        assert_eq!(components.len(), names.len());
    }

    #[test]
    fn nodes_sort_by_sequence_whatever_their_prefix() {
        let mut children = ["_c_ffff-lock-0000000003", "_c_0000-lock-0000000010", "_c_aaaa-lock-0000000001"];
        children.sort_by(|a, b| lock_order(a, b));
        assert_eq!(children[0], "_c_aaaa-lock-0000000001");
        assert_eq!(children[2], "_c_0000-lock-0000000010");
        assert!(is_protected_by("_c_ffff-lock-0000000003", "ffff"));
        assert!(!is_protected_by("_c_ffff-lock-0000000003", "fff"));
        assert_eq!(node_prefix("/l/x", "u"), "/l/x/_c_u-lock-");
    }
}
