//! [`OwnerToken`]: who holds an acquisition.

use std::fmt;

use rand::RngExt;

/// 128 random bits that identify one acquisition of a lock.
///
/// Backends store it with the lock and act only when the caller presents the same token, so a
/// holder whose lease expired can never release or extend the next holder's lock. A fresh token is
/// drawn for every acquisition: reusing one (as the docs' "every holder writes `1`" recipe does)
/// would let an old holder act on a new holder's lock.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken([u8; 16]);

impl OwnerToken {
    /// A new token from the thread-local CSPRNG.
    pub fn random() -> Self {
        Self(rand::rng().random())
    }

    /// A token with these exact bytes (for tests and for backends that read tokens back).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The token as 32 lowercase hex digits, the form backends store.
    pub fn to_hex(&self) -> String {
        // ASCII digits only: always UTF-8.
        String::from_utf8_lossy(&self.hex_digits()).into_owned()
    }

    /// The 32 lowercase hex digits, by table (every acquisition writes a token: no `fmt`
    /// machinery per byte).
    fn hex_digits(&self) -> [u8; 32] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0; 32];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0x0f)];
        }
        hex
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.hex_digits()))
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_hex_encoded() {
        let (a, b) = (OwnerToken::random(), OwnerToken::random());
        assert_ne!(a, b);
        assert_eq!(a.to_hex().len(), 32);
        assert_eq!(OwnerToken::from_bytes([0xab; 16]).to_hex(), "ab".repeat(16));
    }
}
