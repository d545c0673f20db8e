//! Where locks live in etcd's flat key space: the namespace, one prefix per lock name, and the
//! key of each contender (etcd's `concurrency.Mutex` layout).
//!
//! | lock | prefix | contender's key |
//! | --- | --- | --- |
//! | `N`, no namespace | `N` | `N/<lease id in lower-case hex>` (what `etcdctl lock N` writes) |
//! | `N`, namespace `ns` | `ns/N` | `ns/N/<lease hex>` (`etcdctl lock ns/N`) |
//!
//! etcd's Mutex finds the holder by scanning every key under `<prefix>/`, so a lock `a` would
//! see the keys of a lock `a/b` (`a/b/<lease>` is under `a/`) and the two would exclude each
//! other — or worse, `a/b`'s waiter would wait on `a`'s holder. Names are therefore
//! percent-encoded before they become prefixes: `/` is `%2F` and `%` is `%25`, so no name's
//! prefix extends another's by a `/`, and distinct names never share a prefix. A name without
//! `/` or `%` is its own prefix, byte for byte: those are the names `etcdctl lock` and Go's
//! `concurrency.NewMutex` share with distlock. (etcd keys are arbitrary bytes and
//! [`LockName`] already refuses control characters, so nothing else needs escaping.)
//!
//! Read-write locks, semaphores and elections of a name are other locks than its mutex: each
//! lives under a directory of its own whose name starts with `%` and a letter — which no encoded
//! name can (an encoded `%` is always followed by two hex digits) — so the four never meet:
//!
//! | primitive `N` | prefix (Go's recipe on it) |
//! | --- | --- |
//! | mutex | `[ns/]N` (`concurrency.NewMutex`, `etcdctl lock`) |
//! | read-write lock | `[ns/]%read-write/N` (`recipe.NewRWMutex`) |
//! | semaphore | `[ns/]%semaphore/N` (no Go recipe) |
//! | election | `[ns/]%election/N` (`concurrency.NewElection`, `etcdctl elect`) |
//! | fenced value `K` | the key `[ns/]%fenced/K` |
//!
//! A namespace is taken as written: namespaces must not extend one another (`ns` and `ns/a`)
//! for the same reason, and the builder cannot see the other clients' namespaces to check.

use std::fmt::Write as _;

use lock_core::{Error, LockName, Result};

/// The directories of the other primitives and of fenced values: `%` and a letter, which no
/// encoded name starts with.
const READ_WRITE_DIR: &str = "%read-write";
const SEMAPHORE_DIR: &str = "%semaphore";
const ELECTION_DIR: &str = "%election";
const FENCED_DIR: &str = "%fenced";

/// A validated namespace: empty (none), or `/`-separated non-empty components without control
/// characters, with no leading or trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Namespace(String);

impl Namespace {
    /// `namespace` as a key prefix; one leading `/` is dropped (`/locks`, as a URL path gives it,
    /// is `locks`), and `""` or `/` is no namespace.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a trailing `/`, an empty component (`a//b`) or a control
    /// character.
    pub(crate) fn new(namespace: &str) -> Result<Self> {
        let trimmed = namespace.strip_prefix('/').unwrap_or(namespace);
        let invalid = |why: &str| Err(Error::invalid_config(format!("etcd namespace {namespace:?}: {why}")));
        if trimmed.is_empty() {
            return Ok(Self::default());
        }
        if trimmed.split('/').any(str::is_empty) {
            return invalid("has an empty component (a trailing `/` or `//`)");
        }
        if trimmed.chars().any(char::is_control) {
            return invalid("has a control character");
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// The namespace as a key prefix (`""` for none).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix of the mutex `name`: `<namespace>/<encoded name>`, or the encoded name alone.
    pub(crate) fn lock_prefix(&self, name: &LockName) -> String {
        self.under(&encode_name(name.as_str()))
    }

    /// The prefix of the read-write lock `name` (Go's `recipe.NewRWMutex` prefix).
    pub(crate) fn read_write_prefix(&self, name: &LockName) -> String {
        self.under(&format!("{READ_WRITE_DIR}/{}", encode_name(name.as_str())))
    }

    /// The prefix of the semaphore `name`.
    pub(crate) fn semaphore_prefix(&self, name: &LockName) -> String {
        self.under(&format!("{SEMAPHORE_DIR}/{}", encode_name(name.as_str())))
    }

    /// The prefix of the election `name` (Go's `concurrency.NewElection` prefix, `etcdctl elect`).
    pub(crate) fn election_prefix(&self, name: &LockName) -> String {
        self.under(&format!("{ELECTION_DIR}/{}", encode_name(name.as_str())))
    }

    /// The key of the fenced value `key` (a fenced store's or a guarded write's).
    pub(crate) fn fenced_key(&self, key: &str) -> String {
        self.under(&format!("{FENCED_DIR}/{}", encode_name(key)))
    }

    /// `path` under the namespace.
    fn under(&self, path: &str) -> String {
        match self.0.is_empty() {
            true => path.to_owned(),
            false => format!("{}/{path}", self.0),
        }
    }
}

/// `name` with `%` and `/` percent-encoded (upper-case hex), everything else as it is.
pub(crate) fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            // Writing to a String cannot fail.
            '%' | '/' => drop(write!(out, "%{:02X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// The range every contender's key of `prefix` lies in: `<prefix>/` (Go's `NewMutex` appends
/// the `/`).
pub(crate) fn contenders_range(prefix: &str) -> String {
    format!("{prefix}/")
}

/// The key of the contender holding `lease` on `prefix`: `<prefix>/<lease id in lower-case hex>`,
/// as Go's `fmt.Sprintf("%s%x", pfx, lease)` writes it (lease ids are positive, so no sign).
pub(crate) fn contender_key(prefix: &str, lease: i64) -> String {
    format!("{prefix}/{lease:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn plain_names_are_etcdctl_s_prefixes_and_others_are_encoded() {
        let none = Namespace::default();
        let cases = [
            ("orders", "orders"),
            ("a/b", "a%2Fb"),
            ("50%", "50%25"),
            ("%2F", "%252F"),
            ("naïve 'quote\"; DROP", "naïve 'quote\"; DROP"),
            ("🔒 lock", "🔒 lock"),
            ("..", ".."),
        ];
        for (text, expected) in cases {
            assert_eq!(none.lock_prefix(&name(text)), expected, "{text:?}");
        }
        let ns = Namespace::new("/apps/locks").unwrap();
        assert_eq!(ns.lock_prefix(&name("a/b")), "apps/locks/a%2Fb");
        assert_eq!(contender_key("orders", 0x694d_7a1b_2c3d_4e5f), "orders/694d7a1b2c3d4e5f");
        assert_eq!(contenders_range("orders"), "orders/");
    }

    #[test]
    fn no_name_s_range_holds_another_name_s_keys() {
        let none = Namespace::default();
        let names = ["a", "a/b", "a%2Fb", "a/", "a%", "ab", "a/b/c", "%", "/"];
        for one in names {
            for other in names.iter().filter(|other| **other != one) {
                let range = contenders_range(&none.lock_prefix(&name(one)));
                let key = contender_key(&none.lock_prefix(&name(other)), 0x1f);
                assert!(!key.starts_with(&range), "{one:?} would see {other:?}'s key {key}");
            }
        }
    }

    #[test]
    fn primitives_of_one_name_never_share_a_range() {
        let ns = Namespace::new("apps").unwrap();
        let names = ["a", "a/b", "%read-write", "%election", "%semaphore", "%fenced", "read"];
        let prefixes = |text: &str| {
            let name = name(text);
            [
                ns.lock_prefix(&name),
                ns.read_write_prefix(&name),
                ns.semaphore_prefix(&name),
                ns.election_prefix(&name),
                ns.fenced_key(text),
            ]
        };
        assert_eq!(ns.read_write_prefix(&name("a/b")), "apps/%read-write/a%2Fb");
        assert_eq!(Namespace::default().election_prefix(&name("e")), "%election/e");
        let all: Vec<String> = names.iter().flat_map(|text| prefixes(text)).collect();
        for (i, one) in all.iter().enumerate() {
            for (j, other) in all.iter().enumerate().filter(|(j, _)| *j != i) {
                let key = contender_key(other, 0x1f);
                assert!(!key.starts_with(&contenders_range(one)), "{one} (#{i}) would see {key} (#{j})");
            }
        }
    }

    #[test]
    fn namespaces_are_validated() {
        assert_eq!(Namespace::new("").unwrap().as_str(), "");
        assert_eq!(Namespace::new("/").unwrap().as_str(), "");
        assert_eq!(Namespace::new("locks").unwrap().as_str(), "locks");
        for bad in ["a/", "/a//b", "//", "a\u{1}"] {
            assert!(matches!(Namespace::new(bad), Err(Error::InvalidConfig { .. })), "{bad:?}");
        }
    }
}
