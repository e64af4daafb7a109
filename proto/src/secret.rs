//! Keys: wiped from memory when dropped, and shown in `Debug` output as `Key(<redacted>)`,
//! never their bytes, so that a configuration that derives `Debug` and is logged or printed
//! in a panic message gives no key away.

use zeroize::{Zeroize, ZeroizeOnDrop};

/// A 256-bit key (a group key, or one derived from it). Its bytes are overwritten with zeros
/// when it is dropped; its `Debug` is `Key(<redacted>)`. It dereferences to the bytes.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Key([u8; 32]);

impl Key {
    /// The key made of `bytes`.
    pub const fn from_bytes(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key's bytes, to write a key in place (no copy of it is left elsewhere).
    pub fn as_mut_bytes(&mut self) -> &mut [u8; 32] {
        &mut self.0
    }
}

impl From<[u8; 32]> for Key {
    fn from(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }
}

impl std::ops::Deref for Key {
    type Target = [u8; 32];
    fn deref(&self) -> &[u8; 32] {
        &self.0
    }
}

/// Compared in time independent of where the keys differ.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .fold(0u8, |d, (a, b)| d | (a ^ b))
            == 0
    }
}

impl Eq for Key {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

#[cfg(test)]
mod tests {

    use zeroize::Zeroize;

    use super::Key;

    #[test]
    fn no_debug_output_holds_a_key() {
        let key = Some(Key::from_bytes([0xAB; 32]));
        let mut cfg = crate::engine::EngineConfig::new(7, crate::Rank::new(0), 2);
        cfg.key = key.clone();
        let join = crate::join::JoinConfig {
            group: 7,
            mac: crate::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
            key: key.clone(),
            expect: crate::join::Expect::Invited,
            max_pdu: 1500,
        };
        let session = crate::join::Session {
            nonce: 1,
            group: 2,
            key: key.clone(),
        };
        for shown in [
            format!("{cfg:?}"),
            format!("{cfg:#?}"),
            format!("{join:?}"),
            format!("{session:?}"),
        ] {
            // 0xAB is 171: neither the decimal nor the hex bytes appear.
            assert!(
                !shown.contains("171") && !shown.to_lowercase().contains("ab, "),
                "{shown}"
            );
            assert!(shown.contains("<redacted>"), "{shown}");
        }
        // A configuration without a key says so.
        let keyless = crate::engine::EngineConfig::new(7, crate::Rank::new(0), 2);
        assert!(format!("{keyless:?}").contains("key: None"), "{keyless:?}");
        assert_eq!(
            format!("{:?}", Key::from_bytes([0xAB; 32])),
            "Key(<redacted>)"
        );
    }

    /// A key is wiped when dropped: `Key` runs `zeroize` in its `Drop` (the bound below fails
    /// to compile otherwise), and `zeroize` leaves zeros where the key was.
    #[test]
    fn a_key_is_wiped_on_drop() {
        fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>() {}
        wiped_on_drop::<Key>();
        let mut key = Key::from_bytes([0xAB; 32]);
        key.zeroize();
        assert_eq!(key.as_bytes(), &[0; 32]);
    }
}
