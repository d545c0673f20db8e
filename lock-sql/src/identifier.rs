//! Table names: validated as plain identifiers, then quoted, so that a configured name can never
//! smuggle SQL into a statement (`x; DROP TABLE y` is rejected, not escaped).
//!
//! Each backend derives more names from the given one (`<table>_rows`, `<table>_fence`): those
//! are validated against the database's identifier limit too ([`TableName::derived`]), since
//! PostgreSQL silently truncates a longer identifier to 63 bytes — two table names differing only
//! past that point would share their row table or fencing sequence.

use lock_core::{Error, Result};

/// The longest table name accepted as given (PostgreSQL truncates identifiers at 63 bytes, MySQL
/// rejects more than 64); each database checks its derived names against its own limit.
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

    /// `<name><suffix>`, which must fit the database's identifier limit of `max_len` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the longest table name that fits.
    pub(crate) fn derived(&self, suffix: &str, max_len: usize) -> Result<Self> {
        let name = format!("{}{suffix}", self.0);
        if name.len() <= max_len {
            return Ok(Self(name));
        }
        Err(Error::InvalidConfig {
            reason: format!(
                "table name {:?} is too long: the derived name {name:?} is over the database's \
                 {max_len}-byte identifier limit (use at most {} bytes)",
                self.0,
                max_len - suffix.len()
            ),
        })
    }

    /// The name as written in SQL, quoted the way the database expects (`"…"` for PostgreSQL).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn double_quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The bare name (safe: validated).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
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

    #[test]
    fn derived_names_must_fit_the_limit() {
        let fits = TableName::new(&"t".repeat(57)).unwrap();
        assert_eq!(fits.derived("_fence", 63).unwrap().as_str().len(), 63);
        let over = TableName::new(&"t".repeat(58)).unwrap();
        assert!(matches!(over.derived("_fence", 63), Err(Error::InvalidConfig { .. })));
        assert!(over.derived("_fence", 64).is_ok());
    }
}
