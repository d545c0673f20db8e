//! [`ShownName`]: a lock name as spans and log events show it, redacted on request.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::name::LockName;

/// Displays a lock name, or with [`redact_names`](crate::LockOptionsBuilder::redact_names) a
/// stable hash of it (`#9f86d081884c7d65`). Formatting is lazy: a span or event that is not
/// recorded never computes the hash.
#[derive(Clone, Copy)]
pub(crate) struct ShownName<'a> {
    pub(crate) name: &'a LockName,
    pub(crate) redact: bool,
}

impl fmt::Display for ShownName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.redact {
            return fmt::Display::fmt(self.name, f);
        }
        // SipHash with fixed keys: the same name gives the same hash in every process of a build.
        let mut hasher = DefaultHasher::new();
        self.name.as_str().hash(&mut hasher);
        write!(f, "#{:016x}", hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_names_are_stable_and_hide_the_name() {
        let name = LockName::new("customer:alice@example.com").unwrap();
        let shown = ShownName { name: &name, redact: true }.to_string();
        assert!(shown.starts_with('#') && shown.len() == 17, "{shown}");
        assert!(!shown.contains("alice"));
        assert_eq!(shown, ShownName { name: &name.clone(), redact: true }.to_string());
        assert_eq!(ShownName { name: &name, redact: false }.to_string(), "customer:alice@example.com");
    }
}
