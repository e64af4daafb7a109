//! [`Rank`]: a group member's place in the roster.

use core::fmt;
use core::num::ParseIntError;
use core::str::FromStr;

/// Rank of a group member: its place in the group's roster, `0..size`.
///
/// A newtype over the wire's `u16`, so that a rank cannot be mixed up with a group size, a
/// count or a sequence number; it prints as its number. [`Rank::new`] and [`Rank::get`] (or
/// `From` both ways) convert at the boundaries (the wire, the C ABI, command lines), and
/// [`Rank::index`] indexes the per-rank tables.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct Rank(u16);

impl Rank {
    /// The destination rank of a frame to every member (a broadcast frame): never a member's
    /// own rank (a group has at most 65534 members).
    pub const BROADCAST: Rank = Rank(u16::MAX);

    /// The rank numbered `n`.
    pub const fn new(n: u16) -> Rank {
        Rank(n)
    }

    /// Its number.
    pub const fn get(self) -> u16 {
        self.0
    }

    /// Its place in a per-rank table (`Vec` indexed by rank).
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The rank `k` places after this one around the ring of a group of `size` members:
    /// `(self + k) mod size`.
    pub fn ring_add(self, k: u16, size: u16) -> Rank {
        Rank(((u32::from(self.0) + u32::from(k)) % u32::from(size)) as u16)
    }

    /// The ranks of a group of `size` members: `0..size`.
    pub fn all(size: u16) -> impl DoubleEndedIterator<Item = Rank> + ExactSizeIterator {
        (0..size).map(Rank)
    }
}

impl From<u16> for Rank {
    fn from(n: u16) -> Rank {
        Rank(n)
    }
}

impl From<Rank> for u16 {
    fn from(r: Rank) -> u16 {
        r.0
    }
}

impl fmt::Debug for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Rank {
    type Err = ParseIntError;

    fn from_str(s: &str) -> Result<Rank, ParseIntError> {
        s.parse().map(Rank)
    }
}
