//! Group key files, one reading for every front end: the command line (`--key-file`,
//! `ETHBCAST_KEY_FILE`), the C ABI (`ethbcast_open`) and the MPI interposer built on it.
//!
//! A key file holds exactly 32 bytes, the key itself, or a passphrase on its first line
//! (surrounding white space ignored), from which the key of a group is derived with Argon2id,
//! salted by the group id ([`crate::group::key_from_passphrase`]). An empty passphrase is
//! refused.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The environment variable naming a group key file.
pub const KEY_FILE_ENV: &str = "ETHBCAST_KEY_FILE";

/// Why a key file gave no key.
#[derive(Debug, Error)]
pub enum KeyFileError {
    /// The file could not be read.
    #[error("cannot read key file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is neither 32 bytes nor text.
    #[error("key file {}: neither 32 raw bytes nor a passphrase line of text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The first line is empty.
    #[error("key file {}: the passphrase is empty", path.display())]
    EmptyPassphrase {
        /// The file.
        path: PathBuf,
    },
    /// The passphrase could not be stretched into a key.
    #[error("key file {}: {source}", path.display())]
    Derive {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: crate::group::PassphraseError,
    },
}

/// Reads a group key file: 32 raw bytes, or a passphrase on the first line, stretched into the
/// key of group `group_id`.
pub fn read_key_file(path: &Path, group_id: u32) -> Result<[u8; 32], KeyFileError> {
    let bytes = std::fs::read(path).map_err(|source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(key);
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| KeyFileError::NotText {
        path: path.to_path_buf(),
    })?;
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(KeyFileError::EmptyPassphrase {
            path: path.to_path_buf(),
        });
    }
    crate::group::key_from_passphrase(line, group_id).map_err(|source| KeyFileError::Derive {
        path: path.to_path_buf(),
        source,
    })
}

/// The key of the file named by [`KEY_FILE_ENV`] in the environment `get` looks into
/// (`|v| std::env::var_os(v)` for the process's): `None` when it is unset or empty.
pub fn key_from_env(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
    group_id: u32,
) -> Result<Option<[u8; 32]>, KeyFileError> {
    match get(KEY_FILE_ENV) {
        Some(p) if !p.is_empty() => read_key_file(Path::new(&p), group_id).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group the passphrase keys are derived for.
    const GID: u32 = 7;

    #[test]
    fn key_files_hold_raw_keys_or_a_passphrase_line() {
        let dir = std::env::temp_dir().join(format!("ethbcast-lib-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let raw = [0xA5u8; 32];
        assert_eq!(read_key_file(&write("raw", &raw), GID).unwrap(), raw);
        let phrase = write("phrase", b"  correct horse\nignored\n");
        assert_eq!(
            read_key_file(&phrase, GID).unwrap(),
            crate::group::key_from_passphrase("correct horse", GID).unwrap()
        );
        let empty = read_key_file(&write("empty", b"\n  \n"), GID).unwrap_err();
        assert!(
            matches!(empty, KeyFileError::EmptyPassphrase { .. }),
            "{empty}"
        );
        let binary = read_key_file(&write("binary", &[0xFF; 31]), GID).unwrap_err();
        assert!(binary.to_string().contains("32 raw bytes"), "{binary}");
        let missing = read_key_file(&dir.join("missing"), GID).unwrap_err();
        assert!(matches!(missing, KeyFileError::Io { .. }), "{missing}");
        // From an environment: unset or empty is no key, a file is read.
        assert_eq!(key_from_env(|_| None, GID).unwrap(), None);
        assert_eq!(key_from_env(|_| Some("".into()), GID).unwrap(), None);
        let env_phrase = phrase.clone().into_os_string();
        assert_eq!(
            key_from_env(|v| (v == KEY_FILE_ENV).then(|| env_phrase.clone()), GID).unwrap(),
            Some(crate::group::key_from_passphrase("correct horse", GID).unwrap())
        );
        let gone = dir.join("missing").into_os_string();
        assert!(key_from_env(|_| Some(gone.clone()), GID).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
