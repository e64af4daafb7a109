//! Group key files, one reading for every front end: the command line (`--key-file`,
//! `ETHBCAST_KEY_FILE`), the C ABI (`ethbcast_open`) and the MPI interposer built on it.
//!
//! A key file is text, in one of three forms:
//!
//! | first line | key |
//! | ---------- | --- |
//! | `ethbcast-key-v1 <64 hex digits>` | the 256-bit key itself (what `ethbcast keygen` writes, [`write_new_key`]) |
//! | `ethbcast-passphrase-v1 <32 hex digits>` | the passphrase on the second line, stretched with Argon2id under that random salt (`ethbcast keygen --passphrase`, [`write_new_passphrase`]) |
//! | anything else | the line is a passphrase, stretched with Argon2id under a salt derived from the group id ([`crate::group::key_from_passphrase`]) |
//!
//! Surrounding white space is ignored. A passphrase is always stretched, whatever its length,
//! so that a captured frame lets an attacker test one guess per Argon2id, never one per hash.
//! The random salt of `ethbcast-passphrase-v1` files makes the same passphrase a different key
//! in every deployment (a bare passphrase line shares its salt with every deployment that uses
//! the same group id). Every host of a group reads a copy of the same file, so all derive the
//! same key. A first word that starts with `ethbcast-key` or `ethbcast-passphrase` and is
//! none of the tags above (another version, a typo) is refused, never taken as a passphrase.
//!
//! A key file must be readable by its owner only (mode 0600 or 0400, as ssh demands of a
//! private key): one that its group or others may read or write is refused with the `chmod`
//! that fixes it. The file's bytes, the passphrase and the intermediate values are wiped from
//! memory once read ([`zeroize`]).

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::Key;
use zeroize::Zeroizing;

/// The environment variable naming a group key file.
pub const KEY_FILE_ENV: &str = "ETHBCAST_KEY_FILE";

/// The tag of a raw key line: `ethbcast-key-v1 <64 hex digits>`.
pub const RAW_KEY_TAG: &str = "ethbcast-key-v1";

/// The tag of a salted passphrase file: `ethbcast-passphrase-v1 <32 hex digits>`, the
/// passphrase on the next line.
pub const PASSPHRASE_TAG: &str = "ethbcast-passphrase-v1";

/// Bytes of the random salt of a passphrase file.
pub const SALT_LEN: usize = 16;

/// Why a key file gave no key.
#[derive(Debug, Error)]
pub enum KeyFileError {
    /// The file could not be read (or written).
    #[error("cannot read key file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A new key file could not be written (its directory missing, say).
    #[error("cannot write key file {}: {why}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause, with the fix where there is one.
        why: String,
    },
    /// Its group or others may read or write the file.
    #[error("key file {} is accessible by group or others (mode {mode:04o}): run `chmod 600 {}`", path.display(), path.display())]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not text.
    #[error("key file {}: not text (a key file holds `{RAW_KEY_TAG} <64 hex digits>`, as `ethbcast keygen` writes, or a passphrase line)", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A tagged line that is not well formed.
    #[error("key file {}: {what}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The passphrase is empty.
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
    /// `keygen` does not overwrite.
    #[error("key file {} exists: not overwritten (remove it first to make a new key)", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

/// Reads a group key file (a key, a salted passphrase or a passphrase line): the key it holds, or the key its
/// passphrase stretches into for group `group_id`.
pub fn read_key_file(path: &Path, group_id: u32) -> Result<Key, KeyFileError> {
    let io = |source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    // The mode of the file opened, not of whatever the path names a moment later.
    let mode = file.metadata().map_err(io)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut bytes = Zeroizing::new(Vec::new());
    file.read_to_end(&mut bytes).map_err(io)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| KeyFileError::NotText {
        path: path.to_path_buf(),
    })?;
    parse_key_text(text, group_id).map_err(|e| match e {
        Parsed::Malformed(what) => KeyFileError::Malformed {
            path: path.to_path_buf(),
            what,
        },
        Parsed::Empty => KeyFileError::EmptyPassphrase {
            path: path.to_path_buf(),
        },
        Parsed::Derive(source) => KeyFileError::Derive {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Why a key file's text gave no key (the path is added by the caller).
enum Parsed {
    Malformed(String),
    Empty,
    Derive(crate::group::PassphraseError),
}

fn parse_key_text(text: &str, group_id: u32) -> Result<Key, Parsed> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("").trim();
    let mut words = first.split_whitespace();
    let tag = words.next().unwrap_or("");
    if tag == RAW_KEY_TAG {
        let hex = words.next().unwrap_or("");
        if words.next().is_some() || lines.any(|l| !l.trim().is_empty()) {
            return Err(Parsed::Malformed(format!(
                "`{RAW_KEY_TAG}` takes one line: `{RAW_KEY_TAG} <64 hex digits>`"
            )));
        }
        let mut key = Key::from_bytes([0; 32]);
        return match decode_hex(hex, key.as_mut_bytes()) {
            true => Ok(key),
            false => {
                // Dropping `key` wipes what was decoded.
                Err(Parsed::Malformed(format!(
                    "`{RAW_KEY_TAG}` must be followed by 64 hex digits (32 bytes)"
                )))
            }
        };
    }
    if tag == PASSPHRASE_TAG {
        let mut salt = [0u8; SALT_LEN];
        if words.next().is_none_or(|h| !decode_hex(h, &mut salt)) || words.next().is_some() {
            return Err(Parsed::Malformed(format!(
                "`{PASSPHRASE_TAG}` must be followed by {} hex digits of salt",
                2 * SALT_LEN
            )));
        }
        let phrase = lines.next().unwrap_or("").trim();
        if phrase.is_empty() {
            return Err(Parsed::Empty);
        }
        return crate::group::key_from_passphrase_salt(phrase, &salt).map_err(Parsed::Derive);
    }
    if tag.starts_with("ethbcast-key") || tag.starts_with("ethbcast-passphrase") {
        return Err(Parsed::Malformed(format!(
            "unknown format {tag:?} (this version reads `{RAW_KEY_TAG}` and `{PASSPHRASE_TAG}`)"
        )));
    }
    if first.is_empty() {
        return Err(Parsed::Empty);
    }
    tracing::warn!(
        "the key file holds a bare passphrase, salted by the group id that every deployment \
         with the same id shares: write it with `ethbcast keygen --passphrase FILE` for a \
         random salt of its own"
    );
    crate::group::key_from_passphrase(first, group_id).map_err(Parsed::Derive)
}

/// Decodes exactly `out.len()` bytes of hex digits into `out`; false if `hex` is not that.
fn decode_hex(hex: &str, out: &mut [u8]) -> bool {
    let digits = hex.as_bytes();
    if digits.len() != 2 * out.len() {
        return false;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    for (o, pair) in out.iter_mut().zip(digits.chunks(2)) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => *o = h << 4 | l,
            _ => return false,
        }
    }
    true
}

fn encode_hex(bytes: &[u8]) -> Zeroizing<String> {
    let mut s = Zeroizing::new(String::with_capacity(2 * bytes.len()));
    for b in bytes {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Creates `path` (mode 0600, never over an existing file or through a symlink) holding
/// `text`, synced to disk.
fn create_private(path: &Path, text: &str) -> Result<(), KeyFileError> {
    let io = |source: std::io::Error| {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let why = if source.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() {
            format!(
                "directory {} does not exist (create it first: mkdir -p {})",
                dir.display(),
                dir.display()
            )
        } else {
            source.to_string()
        };
        KeyFileError::Write {
            path: path.to_path_buf(),
            why,
        }
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => KeyFileError::Exists {
                path: path.to_path_buf(),
            },
            _ => io(e),
        })?;
    // The umask may have cleared bits, never added any; said again in case the file system
    // ignores the mode of `open`.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Writes a fresh random key to `path` as `ethbcast-key-v1 <64 hex digits>` (mode 0600);
/// refuses to overwrite an existing file ([`KeyFileError::Exists`]).
pub fn write_new_key(path: &Path) -> Result<(), KeyFileError> {
    use rand::RngCore;
    let mut key = Zeroizing::new([0u8; 32]);
    rand::rngs::OsRng.fill_bytes(&mut key[..]);
    let line = Zeroizing::new(format!("{RAW_KEY_TAG} {}\n", encode_hex(&key[..]).as_str()));
    create_private(path, &line)
}

/// Writes `passphrase` to `path` with a fresh random salt (`ethbcast-passphrase-v1 <salt>`,
/// the passphrase on the second line; mode 0600); refuses an empty passphrase, one of several
/// lines, and an existing file.
pub fn write_new_passphrase(path: &Path, passphrase: &str) -> Result<(), KeyFileError> {
    use rand::RngCore;
    let phrase = passphrase.trim();
    if phrase.is_empty() {
        return Err(KeyFileError::EmptyPassphrase {
            path: path.to_path_buf(),
        });
    }
    if phrase.lines().nth(1).is_some() {
        return Err(KeyFileError::Malformed {
            path: path.to_path_buf(),
            what: "a passphrase is one line".into(),
        });
    }
    let mut salt = [0u8; SALT_LEN];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let text = Zeroizing::new(format!(
        "{PASSPHRASE_TAG} {}\n{phrase}\n",
        encode_hex(&salt).as_str()
    ));
    create_private(path, &text)
}

/// The key of the file named by [`KEY_FILE_ENV`] in the environment `get` looks into
/// (`|v| std::env::var_os(v)` for the process's): `None` when it is unset or empty.
pub fn key_from_env(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
    group_id: u32,
) -> Result<Option<Key>, KeyFileError> {
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

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ethbcast-lib-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file of `bytes`, readable by its owner only.
    fn private(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    #[test]
    fn a_tagged_line_is_the_key_and_anything_else_a_stretched_passphrase() {
        let dir = dir("keyfile");
        let line = format!("{RAW_KEY_TAG} {}\n", "a5".repeat(32));
        assert_eq!(
            read_key_file(&private(&dir, "raw", line.as_bytes()), GID).unwrap(),
            [0xA5; 32].into()
        );
        let phrase = private(&dir, "phrase", b"  correct horse\nignored\n");
        assert_eq!(
            read_key_file(&phrase, GID).unwrap(),
            crate::group::key_from_passphrase("correct horse", GID).unwrap()
        );
        // 32 bytes of text are a passphrase like any other, never the key itself: a short
        // passphrase always costs an Argon2id per guess.
        let thirty_two = b"0123456789abcdef0123456789abcde\n";
        assert_eq!(thirty_two.len(), 32);
        let k = read_key_file(&private(&dir, "32", thirty_two), GID).unwrap();
        assert_ne!(&k[..], &thirty_two[..]);
        assert_eq!(
            k,
            crate::group::key_from_passphrase("0123456789abcdef0123456789abcde", GID).unwrap()
        );
        // Raw bytes that are not text: refused.
        let binary = read_key_file(&private(&dir, "binary", &[0xFF; 32]), GID).unwrap_err();
        assert!(matches!(binary, KeyFileError::NotText { .. }), "{binary}");
        // A tag that is not well formed is refused, not taken as a passphrase.
        for bad in [
            format!("{RAW_KEY_TAG} {}", "a5".repeat(31)),
            format!("{RAW_KEY_TAG} {}zz", "a5".repeat(31)),
            format!("{RAW_KEY_TAG} {} extra", "a5".repeat(32)),
            format!("{RAW_KEY_TAG}\n{}", "a5".repeat(32)),
            format!("{PASSPHRASE_TAG} 1234\nphrase"),
            "ethbcast-key-v2 00".to_string(),
            "ethbcast-passphrase 00".to_string(),
        ] {
            let e = read_key_file(&private(&dir, "bad", bad.as_bytes()), GID).unwrap_err();
            assert!(matches!(e, KeyFileError::Malformed { .. }), "{bad:?}: {e}");
        }
        // Other words that begin with "ethbcast-" are a passphrase like any other.
        assert_eq!(
            read_key_file(&private(&dir, "word", b"ethbcast-bench key\n"), GID).unwrap(),
            crate::group::key_from_passphrase("ethbcast-bench key", GID).unwrap()
        );
        let empty = read_key_file(&private(&dir, "empty", b"\n  \n"), GID).unwrap_err();
        assert!(
            matches!(empty, KeyFileError::EmptyPassphrase { .. }),
            "{empty}"
        );
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

    #[test]
    fn a_key_file_others_may_read_is_refused_with_the_chmod() {
        let dir = dir("keyfile-mode");
        let p = private(
            &dir,
            "k",
            format!("{RAW_KEY_TAG} {}", "00".repeat(32)).as_bytes(),
        );
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_key_file(&p, GID).unwrap_err();
            assert!(
                matches!(e, KeyFileError::Permissions { .. }),
                "{mode:o}: {e}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("chmod 600 {}", p.display())),
                "{e}"
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(read_key_file(&p, GID).unwrap(), [0; 32].into(), "{mode:o}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keygen_writes_a_fresh_private_key_and_never_overwrites() {
        let dir = dir("keygen");
        let (a, b) = (dir.join("a.key"), dir.join("b.key"));
        write_new_key(&a).unwrap();
        write_new_key(&b).unwrap();
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&a).unwrap();
        assert!(text.starts_with(&format!("{RAW_KEY_TAG} ")), "{text}");
        let ka = read_key_file(&a, GID).unwrap();
        assert_ne!(ka, read_key_file(&b, GID).unwrap(), "two keys alike");
        let again = write_new_key(&a).unwrap_err();
        assert!(matches!(again, KeyFileError::Exists { .. }), "{again}");
        assert_eq!(read_key_file(&a, GID).unwrap(), ka, "overwritten");
        // Passphrase files: a random salt each, so one passphrase is two keys, and every
        // copy of one file is the same key.
        let (p, q) = (dir.join("p.key"), dir.join("q.key"));
        write_new_passphrase(&p, "correct horse\n").unwrap();
        write_new_passphrase(&q, "correct horse").unwrap();
        let kp = read_key_file(&p, GID).unwrap();
        assert_ne!(
            kp,
            read_key_file(&q, GID).unwrap(),
            "the salt is not random"
        );
        assert_ne!(
            kp,
            crate::group::key_from_passphrase("correct horse", GID).unwrap()
        );
        let copy = dir.join("copy.key");
        std::fs::copy(&p, &copy).unwrap();
        assert_eq!(read_key_file(&copy, GID + 1).unwrap(), kp);
        assert!(write_new_passphrase(&dir.join("e"), " \n").is_err());
        assert!(write_new_passphrase(&dir.join("m"), "a\nb").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
