//! Group keys from passphrases: Argon2id, at a cost that makes every offline guess expensive.

use thiserror::Error;

use crate::Key;

/// Argon2id cost of [`key_from_passphrase`]: 19 MiB, 2 passes, 1 lane (the OWASP minimum for
/// Argon2id), about 50 ms on one core of a current machine.
pub const PASSPHRASE_COST: (u32, u32, u32) = (19 * 1024, 2, 1);

/// A passphrase could not be stretched into a key.
#[derive(Debug, Error)]
#[error("cannot derive a key from the passphrase: {0}")]
pub struct PassphraseError(String);

/// Derives the 256-bit key of group `group_id` from a passphrase: Argon2id
/// ([`PASSPHRASE_COST`]) with a salt derived from the group id. A frame sealed with the key
/// (a captured challenge, say) lets an attacker test guesses offline, so every guess must
/// cost as much memory and time as the stretching does; the salt makes the same passphrase a
/// different key in another group, so no table of guesses serves two groups. A random salt
/// ([`key_from_passphrase_salt`], what a key file of `ethbcast keygen --passphrase` holds)
/// makes it a different key in every deployment. Random keys need no stretching.
pub fn key_from_passphrase(passphrase: &str, group_id: u32) -> Result<Key, PassphraseError> {
    let salt = blake3::derive_key("ethbcast 2026-11 passphrase salt", &group_id.to_be_bytes());
    key_from_passphrase_salt(passphrase, &salt[..16])
}

/// Derives a 256-bit key from a passphrase with Argon2id ([`PASSPHRASE_COST`]) under `salt`
/// (at least 8 bytes; 16 random bytes in a key file, see [`read_key_file`](crate::read_key_file)).
pub fn key_from_passphrase_salt(passphrase: &str, salt: &[u8]) -> Result<Key, PassphraseError> {
    let (m, t, p) = PASSPHRASE_COST;
    let params =
        argon2::Params::new(m, t, p, Some(32)).map_err(|e| PassphraseError(e.to_string()))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Key::from_bytes([0; 32]);
    argon
        .hash_password_into(passphrase.as_bytes(), salt, key.as_mut_bytes())
        .map_err(|e| PassphraseError(e.to_string()))?;
    Ok(key)
}
