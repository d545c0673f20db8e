//! Table names: validated as plain identifiers, then quoted, so that a configured name can never
//! smuggle SQL into a statement (`x; DROP TABLE y` is rejected, not escaped).

use lock_core::{Error, Result};

/// The longest table name accepted (PostgreSQL truncates identifiers at 63 bytes, MySQL at 64).
pub(crate) const MAX_LEN: usize = 63;

/// A validated table name: ASCII letters, digits and `_`, not starting with a digit,
/// 1 to [`MAX_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName(String);

impl TableName {
    /// # Errors
    /// [`Error::InvalidConfig`] for anything but a plain identifier.
    pub(crate) fn new(name: &str) -> Result<Self> {
        let plain = !name.is_empty()
            && name.len() <= MAX_LEN
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if plain {
            Ok(Self(name.to_owned()))
        } else {
            Err(Error::InvalidConfig {
                reason: format!(
                    "table name {name:?} is not a plain identifier (1 to {MAX_LEN} ASCII letters, digits \
                     or `_`, not starting with a digit)"
                ),
            })
        }
    }

    /// The name as written in SQL, quoted the way the database expects (`"…"` for PostgreSQL).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn double_quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The bare name (safe: validated).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers_are_accepted() {
        for good in ["distlock_locks", "Locks2", "_x"] {
            assert!(TableName::new(good).is_ok(), "{good}");
        }
        let too_long = "x".repeat(MAX_LEN + 1);
        for bad in ["", "x; DROP TABLE y", "a-b", "1abc", "a\"b", "a b", "é", too_long.as_str()] {
            assert!(matches!(TableName::new(bad), Err(Error::InvalidConfig { .. })), "{bad}");
        }
    }
}
