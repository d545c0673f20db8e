//! [`ShownName`]: a lock name as spans and log events show it, redacted on request.

use std::fmt;
use std::hash::Hasher;

use siphasher::sip::SipHasher24;

use crate::name::LockName;
use crate::options::RedactionKey;

/// Displays a lock name, or with [`redact_names`](crate::LockOptionsBuilder::redact_names) a
/// stable hash of it (`#9f86d081884c7d65`): SipHash-2-4 of the name's UTF-8 bytes under the
/// [`redaction_key`](crate::LockOptionsBuilder::redaction_key) (all zeros without one).
/// Formatting is lazy: a span or event that is not recorded never computes the hash.
#[derive(Clone, Copy)]
pub(crate) struct ShownName<'a> {
    pub(crate) name: &'a LockName,
    pub(crate) redact: Option<RedactionKey>,
}

impl fmt::Display for ShownName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(RedactionKey(key)) = self.redact else { return fmt::Display::fmt(self.name, f) };
        // The bytes alone (no length suffix, as `Hash for str` would add): the documented value.
        let mut hasher = SipHasher24::new_with_key(&key);
        hasher.write(self.name.as_str().as_bytes());
        write!(f, "#{:016x}", hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(name: &LockName, key: Option<[u8; 16]>) -> String {
        ShownName { name, redact: key.map(RedactionKey) }.to_string()
    }

    #[test]
    fn redacted_names_are_stable_and_hide_the_name() {
        let name = LockName::new("customer:alice@example.com").unwrap();
        let unkeyed = shown(&name, Some([0; 16]));
        assert!(unkeyed.starts_with('#') && unkeyed.len() == 17, "{unkeyed}");
        assert!(!unkeyed.contains("alice"));
        assert_eq!(unkeyed, shown(&name.clone(), Some([0; 16])));
        assert_eq!(shown(&name, None), "customer:alice@example.com");
    }

    /// The documented hash, pinned: SipHash-2-4 (the reference algorithm; its test vectors are
    /// in the paper) of the UTF-8 bytes, so dashboards keep joining across releases.
    #[test]
    fn the_hash_is_siphash_2_4_of_the_bytes() {
        // The reference paper's vector: key 00..0f, message 00..0e (15 bytes) → a129ca6149be45e5.
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let mut hasher = SipHasher24::new_with_key(&key);
        hasher.write(&(0..15).collect::<Vec<u8>>());
        assert_eq!(hasher.finish(), 0xa129_ca61_49be_45e5);
        let name = LockName::new("orders").unwrap();
        let mut expected = SipHasher24::new_with_key(&[0; 16]);
        expected.write(b"orders");
        assert_eq!(shown(&name, Some([0; 16])), format!("#{:016x}", expected.finish()));
    }

    #[test]
    fn a_key_changes_every_hash() {
        let name = LockName::new("customer:alice@example.com").unwrap();
        let keyed = shown(&name, Some([7; 16]));
        assert_ne!(keyed, shown(&name, Some([0; 16])));
        assert_eq!(keyed, shown(&name, Some([7; 16])));
        assert_ne!(keyed, shown(&name, Some([8; 16])));
    }
}
