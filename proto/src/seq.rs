//! [`Seq`]: a frame's position in a root's stream.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// Sequence number in a root's stream, extended to 64 bits (a root's session ends before the
/// wire's 32 bits would wrap, see [`SessionEnded::Sequence`](crate::SessionEnded::Sequence)).
///
/// A newtype over `u64`, so that a sequence number cannot be mixed up with a rank, a count or a
/// message id; it prints as its number. [`Seq::new`] and [`Seq::get`] convert at the
/// boundaries, [`Seq::low32`] gives the wire's 32 bits. Arithmetic is the stream's: `seq + n`
/// and `seq - n` move by `n` frames, `later - earlier` is the distance in frames (`u64`), all
/// with the overflow behaviour of `u64`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(u64);

impl Seq {
    /// The sequence number `n`.
    pub const fn new(n: u64) -> Seq {
        Seq(n)
    }

    /// Its number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Its low 32 bits, as the wire carries it.
    pub const fn low32(self) -> u32 {
        self.0 as u32
    }

    /// `n` frames later, or `None` if that overflows.
    pub const fn checked_add(self, n: u64) -> Option<Seq> {
        match self.0.checked_add(n) {
            Some(s) => Some(Seq(s)),
            None => None,
        }
    }

    /// `n` frames earlier, or `None` before the stream's start.
    pub const fn checked_sub(self, n: u64) -> Option<Seq> {
        match self.0.checked_sub(n) {
            Some(s) => Some(Seq(s)),
            None => None,
        }
    }

    /// `n` frames earlier, or the stream's start.
    pub const fn saturating_sub(self, n: u64) -> Seq {
        Seq(self.0.saturating_sub(n))
    }

    /// `n` frames later or (negative) earlier, or `None` outside `0..=u64::MAX`.
    pub const fn checked_add_signed(self, n: i64) -> Option<Seq> {
        match self.0.checked_add_signed(n) {
            Some(s) => Some(Seq(s)),
            None => None,
        }
    }

    /// Its slot in a ring of `len` slots (a window or a retransmission buffer).
    pub const fn ring_index(self, len: usize) -> usize {
        (self.0 % len as u64) as usize
    }

    /// The sequence numbers from this one up to `end` (excluded).
    pub fn up_to(self, end: Seq) -> impl DoubleEndedIterator<Item = Seq> {
        (self.0..end.0).map(Seq)
    }
}

impl Add<u64> for Seq {
    type Output = Seq;
    fn add(self, n: u64) -> Seq {
        Seq(self.0 + n)
    }
}

impl AddAssign<u64> for Seq {
    fn add_assign(&mut self, n: u64) {
        self.0 += n;
    }
}

impl Sub<u64> for Seq {
    type Output = Seq;
    fn sub(self, n: u64) -> Seq {
        Seq(self.0 - n)
    }
}

/// The distance in frames from `earlier` to `self`.
impl Sub for Seq {
    type Output = u64;
    fn sub(self, earlier: Seq) -> u64 {
        self.0 - earlier.0
    }
}

impl From<u64> for Seq {
    fn from(n: u64) -> Seq {
        Seq(n)
    }
}

impl From<Seq> for u64 {
    fn from(s: Seq) -> u64 {
        s.0
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
