//! The session a group shares once joined, and the keys of the join: all derived from the
//! group key, the coordinator's nonce and the roster.

use crate::secret::Key;
use crate::wire::ethernet::MacAddr;

/// The session a group shares once joined. Its `Debug` never shows the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The coordinator's nonce.
    pub nonce: u64,
    /// The wire group id of the session's frames (derived from the group id and the nonce).
    pub group: u32,
    /// The session key (derived from the group key, the nonce and the roster), if the group
    /// has a key.
    pub key: Option<Key>,
}

/// Derives the session of group `group_id` (with `key`) from the coordinator's `nonce` and the
/// roster (every member's MAC and nonce, in rank order).
pub fn session(group_id: u32, key: Option<&Key>, nonce: u64, roster: &[(MacAddr, u64)]) -> Session {
    let mut h = blake3::Hasher::new();
    h.update(&group_id.to_be_bytes());
    h.update(&nonce.to_be_bytes());
    for (mac, m) in roster {
        h.update(mac.as_slice());
        h.update(&m.to_be_bytes());
    }
    let digest = h.finalize();
    let d = digest.as_bytes();
    let key = key.map(|k| {
        let mut material = zeroize::Zeroizing::new([0u8; 64]);
        material[..32].copy_from_slice(k.as_bytes());
        material[32..].copy_from_slice(d);
        Key::from_bytes(blake3::derive_key(
            "ethbcast 2026-11 session key",
            &material[..],
        ))
    });
    Session {
        nonce,
        group: u32::from_be_bytes([d[0], d[1], d[2], d[3]]),
        key,
    }
}

/// The key that seals challenges (no session yet).
pub(super) fn challenge_key(key: &[u8; 32]) -> Key {
    Key::from_bytes(blake3::derive_key("ethbcast 2026-11 join challenge", key))
}

/// The key that seals hellos, rosters and confirmations of the join with nonce `nonce`.
pub(super) fn join_key(key: &[u8; 32], nonce: u64) -> Key {
    let mut material = zeroize::Zeroizing::new([0u8; 40]);
    material[..32].copy_from_slice(key);
    material[32..].copy_from_slice(&nonce.to_be_bytes());
    Key::from_bytes(blake3::derive_key("ethbcast 2026-11 join", &material[..]))
}
