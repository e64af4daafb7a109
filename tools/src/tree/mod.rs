//! Trees: a directory sent as one stream (`send -i DIR`) and unpacked on every receiver
//! (`recv --extract DIR`).
//!
//! # The stream
//!
//! A tree travels as a tar archive (the `tar` crate writes and reads it), so the transfer
//! itself is the one of a stream of unknown length, as from standard input, and a receiver can
//! as well keep the archive (`-o FILE`) or hand it to a command (`-O 'tar -x -C DIR'`).
//! [`pack`] walks the directory without following symbolic links, in the order of the names'
//! bytes, a directory before what it holds, and writes for each entry a GNU tar header: regular
//! files with their bytes, directories, symbolic links as links (their target byte for byte);
//! permission bits and modification times, to the nanosecond in a PAX `mtime` record where the
//! time has a fraction. Names are bytes (spaces, newlines, any non-UTF-8 byte); longer than a
//! header holds, they go in a GNU long-name record. Owners are not sent: on a receiver
//! everything belongs to the user that receives. Hard links arrive as separate files, and a
//! socket, a named pipe or a device is not sent (the sender warns of each).
//!
//! # Unpacking without leaving the directory
//!
//! A receiver unpacks into a fresh directory next to the target, `.NAME.ethbcast-PID-RANDOM.part`
//! (see [`Staging`]), renamed to the target once the stream's digest matched, as a file is: a
//! directory with the target's name is always complete. [`unpack`] takes the archive as it comes
//! and writes each entry relative to that directory only:
//!
//! - Every name is checked before anything is written: an absolute name or one with a `..`
//!   component is refused (`.` components and repeated slashes are dropped).
//! - Every directory on the way is opened relative to its parent (`openat`) with `O_NOFOLLOW`,
//!   so no path is ever resolved through a symbolic link, whatever is on disk.
//! - Symbolic links are made last. Until then the unpacker only records them, and an entry
//!   whose path goes through one (a link, then a file "through" it) is refused. At the end each
//!   link's target is resolved in the tree as it will stand, following the other links the way
//!   the kernel would (a link whose target climbs through another link is followed through
//!   it), and a target that is absolute or leads outside the directory at any step is refused.
//!   Only when every link passed are they created.
//! - A hard link must name a regular file the archive put in the directory before it, by a
//!   path that passes the same checks; it is made with `linkat` without following links.
//! - Devices, named pipes and entry types the unpacker does not know are refused.
//! - Files are created exclusively (`O_EXCL | O_NOFOLLOW`); an entry that comes again replaces
//!   the file or link of the same name (the archive's later entry wins, as with tar), never a
//!   directory.
//! - Permission bits are set as sent, less set-user-ID and set-group-ID (the files belong to
//!   the receiving user, who may be root); modification times as sent. Directories get theirs
//!   at the end, deepest first, once nothing more is written into them.
//!
//! A refused entry ends the unpacking with an error that names it ([`UnpackError::Refused`]),
//! and the receiver removes the directory it was unpacking into: nothing lands outside it, and
//! nothing of a refused tree stays.

mod pack;
mod unpack;

pub use pack::{pack, PackError, Packed, TreeReader};
pub use unpack::{unpack, Refusal, Staging, UnpackError, Unpacked};

/// An entry's name (or a link's target) as a user reads it in a message: printable UTF-8 as
/// it is, a control character escaped (`\n`, `\t`, `\u{1b}`), a byte that is not UTF-8 as
/// `\xNN`.
pub fn show(name: &[u8]) -> String {
    let mut s = String::new();
    for chunk in name.utf8_chunks() {
        s.extend(chunk.valid().chars().flat_map(|c| {
            let e: Vec<char> = if c.is_control() || c == '\\' {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            e
        }));
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// Modification time as a PAX `mtime` record's value: seconds since the epoch, with the
/// fraction (no trailing zeros) when there is one; negative before 1970.
fn pax_time(secs: i64, nanos: u32) -> String {
    if nanos == 0 {
        return secs.to_string();
    }
    // -1.25 s is secs -2, nanos 750_000_000.
    let (sign, whole, frac) = if secs < 0 {
        ("-", -(secs + 1), 1_000_000_000 - nanos)
    } else {
        ("", secs, nanos)
    };
    let frac = format!("{frac:09}");
    format!("{sign}{whole}.{}", frac.trim_end_matches('0'))
}

/// Parses a PAX `mtime` value (see [`pax_time`]) into seconds and nanoseconds (digits past
/// the ninth are dropped).
fn parse_pax_time(v: &[u8]) -> Option<(i64, u32)> {
    let v = std::str::from_utf8(v).ok()?;
    let (neg, v) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let mut digits = frac.as_bytes().iter().take(9).copied().collect::<Vec<u8>>();
    digits.resize(9, b'0');
    let nanos: u32 = std::str::from_utf8(&digits).ok()?.parse().ok()?;
    Some(match (neg, nanos) {
        (false, n) => (whole, n),
        (true, 0) => (-whole, 0),
        (true, n) => (-whole - 1, 1_000_000_000 - n),
    })
}

#[cfg(test)]
mod tests;
