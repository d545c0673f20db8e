//! Where locks live in the tree: the root, one path component per lock name, and the node names
//! of Curator's recipes (`_c_<uuid>-lock-<sequence>`, `…-__READ__…`, `…-__WRIT__…`,
//! `…-lease-…`, `…-latch-…`) and their order.
//!
//! | primitive | parent of its nodes (Curator's recipe path) |
//! | --- | --- |
//! | mutex `N` | `<root>/N` (`InterProcessMutex`) |
//! | read-write lock `N` | `<root>/%read-write/N` (`InterProcessReadWriteLock`) |
//! | semaphore `N` | `<root>/%semaphore/N`, with `locks` and `leases` below (`InterProcessSemaphoreV2`) |
//! | election `N` | `<root>/%election/N` (`LeaderLatch`) |
//!
//! `%` followed by anything but two hex digits is never part of an encoded name, so the
//! `%read-write`, `%semaphore` and `%election` parents can never be the mutex path of any name:
//! the four primitives of one name never meet.

use std::cmp::Ordering;
use std::fmt::Write as _;

use lock_core::{Error, LockName, Result};

/// What Curator's `InterProcessMutex` calls its nodes, after the protection prefix.
const LOCK_NAME: &str = "lock-";

/// What Curator's `InterProcessReadWriteLock` calls its readers' and writers' nodes.
const READ_NAME: &str = "__READ__";
const WRITE_NAME: &str = "__WRIT__";

/// What Curator's `InterProcessSemaphoreV2` calls its lease nodes.
const LEASE_NAME: &str = "lease-";

/// What Curator's `LeaderLatch` calls its candidates' nodes (its `LOCK_NAME`).
const LATCH_NAME: &str = "latch-";

/// The parents of read-write locks and of semaphores under the root: no name encodes to either.
const READ_WRITE_DIR: &str = "%read-write";
const SEMAPHORE_DIR: &str = "%semaphore";
const FENCED_DIR: &str = "%fenced";
const ELECTION_DIR: &str = "%election";

/// The kinds of node of Curator's recipes, each with its name (after the protection prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// `InterProcessMutex` (and the semaphore's `locks` mutex).
    Lock,
    /// `InterProcessReadWriteLock`'s reader.
    Read,
    /// `InterProcessReadWriteLock`'s writer.
    Write,
    /// `InterProcessSemaphoreV2`'s lease.
    Lease,
    /// `LeaderLatch`'s candidate.
    Latch,
}

impl NodeKind {
    fn base(self) -> &'static str {
        match self {
            NodeKind::Lock => LOCK_NAME,
            NodeKind::Read => READ_NAME,
            NodeKind::Write => WRITE_NAME,
            NodeKind::Lease => LEASE_NAME,
            NodeKind::Latch => LATCH_NAME,
        }
    }
}

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

    /// The path of the read-write lock `name` (Curator's `InterProcessReadWriteLock` path):
    /// `<root>/%read-write/<escaped name>`.
    pub(crate) fn read_write_path(&self, name: &LockName) -> String {
        format!("{}/{READ_WRITE_DIR}/{}", self.0, component(name.as_str()))
    }

    /// The node of the fenced store's key `key`: `<root>/%fenced/<escaped key>`.
    pub(crate) fn fenced_path(&self, key: &str) -> String {
        format!("{}/{FENCED_DIR}/{}", self.0, component(key))
    }

    /// The path of the semaphore `name` (Curator's `InterProcessSemaphoreV2` path):
    /// `<root>/%semaphore/<escaped name>`.
    pub(crate) fn semaphore_path(&self, name: &LockName) -> String {
        format!("{}/{SEMAPHORE_DIR}/{}", self.0, component(name.as_str()))
    }

    /// The path of the election `name` (Curator's `LeaderLatch` latch path):
    /// `<root>/%election/<escaped name>`.
    pub(crate) fn election_path(&self, name: &LockName) -> String {
        format!("{}/{ELECTION_DIR}/{}", self.0, component(name.as_str()))
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

/// The prefix of one acquisition's node: `<parent>/_c_<uuid>-<kind's name>`; the server appends
/// the sequence number.
pub(crate) fn node_prefix(parent: &str, protection: &str, kind: NodeKind) -> String {
    format!("{parent}/{PROTECTED_PREFIX}{protection}-{}", kind.base())
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
    sequence_order(a, b, LOCK_NAME)
}

/// Curator's order of `LeaderLatch` nodes (its sorter is `fixForSorting` with `latch-`): by what
/// follows the last `latch-`; the first is the leader.
pub(crate) fn latch_order(a: &str, b: &str) -> Ordering {
    sequence_order(a, b, LATCH_NAME)
}

/// By what follows the last `base`, then by the whole name (two names never compare equal).
fn sequence_order(a: &str, b: &str, base: &str) -> Ordering {
    after_last(a, base).cmp(after_last(b, base)).then_with(|| a.cmp(b))
}

/// Curator's order of read-write lock nodes (`InterProcessReadWriteLock`'s
/// `SortingLockInternalsDriver`): by what follows the last `__READ__`, then the last `__WRIT__`,
/// so readers and writers sort together by sequence number.
pub(crate) fn read_write_order(a: &str, b: &str) -> Ordering {
    let key = |child| after_last(after_last(child, READ_NAME), WRITE_NAME);
    key(a).cmp(key(b)).then_with(|| a.cmp(b))
}

/// Whether the lock node at `path` is an exclusive hold: a mutex's or a write lock's node, not a
/// reader's or a semaphore lease's.
pub(crate) fn is_exclusive_node(path: &str) -> bool {
    let child = path.rsplit('/').next().unwrap_or(path);
    !path.contains(&format!("/{SEMAPHORE_DIR}/")) && !child.contains(READ_NAME)
}

/// Whether `child` is a writer's node (Curator's own test: the name contains `__WRIT__`).
pub(crate) fn is_writer(child: &str) -> bool {
    child.contains(WRITE_NAME)
}

/// The downgrade node of the write node `writer` (a child name): a reader's node whose sort key
/// is the writer's sequence number and a suffix, so that it sorts right after the writer and
/// before every node created after it — Curator's clients included, which sort by the same key.
pub(crate) fn downgrade_child(writer: &str, protection: &str) -> String {
    let sequence = after_last(writer, WRITE_NAME);
    format!("{PROTECTED_PREFIX}{protection}-{READ_NAME}{sequence}-downgrade")
}

/// Curator's `StandardLockInternalsDriver.fixForSorting`: what follows the last `base`, or the
/// whole name.
fn after_last<'a>(child: &'a str, base: &str) -> &'a str {
    child.rfind(base).map_or(child, |at| &child[at + base.len()..])
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
        assert_eq!(node_prefix("/l/x", "u", NodeKind::Lock), "/l/x/_c_u-lock-");
    }

    #[test]
    fn latch_nodes_sort_by_sequence_like_curators_leader_latch() {
        let mut children =
            ["_c_ffff-latch-0000000003", "_c_0000-latch-0000000010", "_c_aaaa-latch-0000000001"];
        children.sort_by(|a, b| latch_order(a, b));
        assert_eq!(
            children,
            ["_c_aaaa-latch-0000000001", "_c_ffff-latch-0000000003", "_c_0000-latch-0000000010"]
        );
        assert_eq!(node_prefix("/l/%election/x", "u", NodeKind::Latch), "/l/%election/x/_c_u-latch-");
    }

    #[test]
    fn read_write_nodes_sort_by_sequence_and_downgrades_right_after_their_writer() {
        let mut children = [
            "_c_b-__READ__0000000007",
            "_c_a-__WRIT__0000000005",
            "_c_c-__WRIT__0000000006",
            "_c_d-__READ__0000000004",
        ]
        .map(String::from)
        .to_vec();
        children.push(downgrade_child("_c_a-__WRIT__0000000005", "e"));
        children.sort_by(|a, b| read_write_order(a, b));
        assert_eq!(
            children,
            [
                "_c_d-__READ__0000000004",
                "_c_a-__WRIT__0000000005",
                "_c_e-__READ__0000000005-downgrade",
                "_c_c-__WRIT__0000000006",
                "_c_b-__READ__0000000007",
            ]
        );
        assert!(is_writer(&children[1]) && !is_writer(&children[2]));
        assert!(is_protected_by(&children[2], "e"));
    }

    #[test]
    fn primitives_of_one_name_never_share_a_path() {
        let root = Root::new("/locks").unwrap();
        let name = LockName::new("orders").unwrap();
        assert_eq!(root.read_write_path(&name), "/locks/%read-write/orders");
        assert_eq!(root.semaphore_path(&name), "/locks/%semaphore/orders");
        assert_eq!(root.election_path(&name), "/locks/%election/orders");
        for tricky in ["%read-write", "%semaphore", "%election"] {
            let path = root.lock_path(&LockName::new(tricky).unwrap());
            for dir in ["/locks/%read-write", "/locks/%semaphore", "/locks/%election"] {
                assert!(!path.starts_with(dir), "{path}");
            }
        }
    }
}
