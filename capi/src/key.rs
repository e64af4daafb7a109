//! The group key of `ethbcast_open`: from the options, a key file or the environment, whether
//! its frames are encrypted, and the warning of a group opened without one.

use std::ffi::OsString;

use ethbcast::{Rank, KEY_FILE_ENV};

use crate::endpoint::Endpoint;
use crate::failure::Failure;
use crate::{ETHBCAST_ERR_KEY, NO_ENCRYPT_ENV, REQUIRE_KEY_ENV};

/// The group key of `ethbcast_open`: `key` (the options' 32 bytes), else the file `key_file`
/// names, else the file `ETHBCAST_KEY_FILE` names in the environment `env`; `None` without
/// any, refused when `ETHBCAST_REQUIRE_KEY=1`. Files are read by the library's one reading
/// ([`ethbcast::read_key_file`]), as the `ethbcast` command reads them.
pub(crate) fn resolve_key(
    key: Option<&[u8]>,
    key_file: Option<&str>,
    group_id: u32,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<ethbcast::Key>, Failure> {
    let key_error = |message: String| Failure {
        code: ETHBCAST_ERR_KEY,
        message,
    };
    let found = match (key, key_file) {
        (Some(_), Some(_)) => {
            return Err(Failure::invalid(
                "both key and key_file are set: give one of them",
            ))
        }
        (Some(k), None) => Some(ethbcast::Key::from(<[u8; 32]>::try_from(k).map_err(
            |_| {
                Failure::invalid(format!(
                    "key_len is {}: a group key has 32 bytes (for a passphrase, use key_file)",
                    k.len()
                ))
            },
        )?)),
        (None, Some(path)) => Some(
            ethbcast::read_key_file(std::path::Path::new(path), group_id)
                .map_err(|e| key_error(format!("{e} (key_file of the options)")))?,
        ),
        (None, None) => ethbcast::key_from_env(&env, group_id)
            .map_err(|e| key_error(format!("{e} ({KEY_FILE_ENV})")))?,
    };
    if found.is_none() && env(REQUIRE_KEY_ENV).is_some_and(|v| v == "1") {
        return Err(key_error(format!(
            "no group key, and {REQUIRE_KEY_ENV}=1 refuses a group without one: set {KEY_FILE_ENV} to a key file (`ethbcast keygen FILE`, mode 0600), the same on every member"
        )));
    }
    Ok(found)
}

/// Whether a keyed group of `ethbcast_open` encrypts its frames: unless [`NO_ENCRYPT_ENV`] is
/// `1` in the environment `env`.
pub(crate) fn encrypt_from_env(env: impl Fn(&str) -> Option<OsString>) -> bool {
    env(NO_ENCRYPT_ENV).is_none_or(|v| v != "1")
}

/// The warning of a group opened without a key, printed on stderr by its rank 0 (one line
/// per group, however many processes a launcher starts): C programs set up no log, so it
/// does not go through `tracing`.
pub(crate) fn warn_if_keyless(endpoint: &Endpoint) {
    if endpoint.keyed() || endpoint.rank() != Rank::new(0) {
        return;
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "ethbcast: rank 0 of {}: warning: no group key (neither key nor key_file in the options, nor {KEY_FILE_ENV}): every byte crosses the Ethernet segment in the clear, and any host on it can join this group, write into its broadcast buffers, release its barriers and evict its members. Give every member the same key file (`ethbcast keygen FILE`, mode 0600) in {KEY_FILE_ENV}; {REQUIRE_KEY_ENV}=1 refuses to open a group without one",
        endpoint.size()
    );
}
