//! [`LockName`]: the validated name of a lock.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The name of a lock: what every contender for one resource agrees to call it.
///
/// # Rules
/// - 1 to [`LockName::MAX_LEN`] bytes of UTF-8;
/// - no control characters (U+0000–U+001F, U+007F–U+009F), so a name can never smuggle a NUL or a
///   line break into a key, a log line or a protocol frame.
///
/// Everything else is allowed, including `/`, `..`, quotes and SQL metacharacters: backends must
/// map names to keys, rows and paths by escaping or hashing, never by pasting them into a query or
/// a path. The length limit keeps every backend's mapping within its own limits (a `VARCHAR(255)`
/// primary key, a ZooKeeper node name). Clones share the text: the client keeps copies of a name
/// per hold, so cloning one costs no allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// The longest name accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when `name` is empty, longer than [`LockName::MAX_LEN`] bytes, or
    /// contains a control character.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::InvalidName { reason: "a lock name must not be empty".into() });
        }
        if name.len() > Self::MAX_LEN {
            return Err(Error::InvalidName {
                reason: format!(
                    "a lock name is at most {} bytes; this one has {}",
                    Self::MAX_LEN,
                    name.len()
                ),
            });
        }
        if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(Error::InvalidName {
                reason: format!("a lock name must not contain control characters; found {c:?} at byte {at}"),
            });
        }
        Ok(Self(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for LockName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_and_hostile_but_printable_names() {
        for name in ["a", "orders:42", "../../etc/passwd", "a/b", "x'; DROP TABLE t; --", "锁", "\"q\""] {
            assert_eq!(LockName::new(name).unwrap().as_str(), name);
        }
        assert!(LockName::new("x".repeat(LockName::MAX_LEN)).is_ok());
    }

    #[test]
    fn rejects_empty_long_and_control_characters() {
        for bad in
            [String::new(), "x".repeat(LockName::MAX_LEN + 1), "a\0b".into(), "a\nb".into(), "\u{85}".into()]
        {
            assert!(matches!(LockName::new(bad), Err(Error::InvalidName { .. })));
        }
        // A multi-byte name is measured in bytes, not characters.
        assert!(LockName::new("锁".repeat(100)).is_err());
    }
}
