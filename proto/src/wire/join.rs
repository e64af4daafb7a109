//! The join's messages, inside [`Control::Join`](super::Control::Join) frames: challenge, hello, roster and
//! confirmation, each a type byte and big-endian fields.

use super::ethernet::MacAddr;
use crate::Rank;

/// The join messages, inside [`Control::Join`](super::Control::Join) frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JoinMsg {
    Challenge {
        nonce: u64,
        size: u16,
        /// The coordinator's MAC: sealed, so the challenge is worth nothing from another.
        coordinator: MacAddr,
        /// The coordinator's clock when it started the join (a later join of a host has a
        /// larger one): a member prefers the newest challenge of each coordinator.
        time: u64,
    },
    Hello {
        nonce: u64,
        member: u64,
        claim: Rank,
        /// The member's MAC: sealed, so the hello is worth nothing from another.
        mac: MacAddr,
        /// The member's largest frame (its link's MTU, at most 65535).
        pdu: u16,
    },
    Roster {
        nonce: u64,
        part: u16,
        parts: u16,
        /// The group's largest frame: the smallest `pdu` of the members' hellos and the
        /// coordinator's own (every part carries it).
        pdu: u16,
        entries: Vec<(MacAddr, u64)>,
    },
    Confirm {
        nonce: u64,
        member: u64,
        /// The member's MAC, as in its hello.
        mac: MacAddr,
    },
}

/// A fixed-size, big-endian field of a join message.
pub(crate) trait Field: Sized {
    fn put(&self, v: &mut Vec<u8>);
    /// Takes the field off the front of `b`; `None` if `b` is too short.
    fn take(b: &mut &[u8]) -> Option<Self>;
}

/// Takes `N` bytes off the front of `b`.
fn chunk<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
    let (head, tail) = b.split_first_chunk()?;
    *b = tail;
    Some(*head)
}

macro_rules! be_field {
    ($($t:ty),+) => {$(
        impl Field for $t {
            fn put(&self, v: &mut Vec<u8>) {
                v.extend_from_slice(&self.to_be_bytes());
            }
            fn take(b: &mut &[u8]) -> Option<Self> {
                chunk(b).map(<$t>::from_be_bytes)
            }
        }
    )+};
}

be_field!(u16, u64);

impl Field for Rank {
    fn put(&self, v: &mut Vec<u8>) {
        self.get().put(v);
    }
    fn take(b: &mut &[u8]) -> Option<Self> {
        u16::take(b).map(Rank::new)
    }
}

impl Field for MacAddr {
    fn put(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(self.as_slice());
    }
    fn take(b: &mut &[u8]) -> Option<Self> {
        chunk(b).map(MacAddr)
    }
}

/// The messages of one fixed layout: each one's type byte and fields, in wire order, stated
/// once for both directions. A body must be exactly as long as its fields.
macro_rules! fixed_layouts {
    ($($tag:literal => $var:ident { $($f:ident),+ }),+ $(,)?) => {
        /// Encodes a message of fixed layout; `false` for the others.
        fn encode_fixed(&self, v: &mut Vec<u8>) -> bool {
            match self {
                $(JoinMsg::$var { $($f),+ } => { v.push($tag); $($f.put(v);)+ })+
                _ => return false,
            }
            true
        }

        /// Decodes the body `b` of a message of fixed layout with type byte `tag`; `None`
        /// for another type byte or a malformed body.
        fn decode_fixed(tag: u8, mut b: &[u8]) -> Option<JoinMsg> {
            let msg = match tag {
                $($tag => JoinMsg::$var { $($f: Field::take(&mut b)?),+ },)+
                _ => return None,
            };
            b.is_empty().then_some(msg)
        }
    };
}

impl JoinMsg {
    fixed_layouts! {
        1 => Challenge { nonce, size, coordinator, time },
        2 => Hello { nonce, member, claim, mac, pdu },
        4 => Confirm { nonce, member, mac },
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        if self.encode_fixed(&mut v) {
            return v;
        }
        if let JoinMsg::Roster {
            nonce,
            part,
            parts,
            pdu,
            entries,
        } = self
        {
            v.push(3);
            nonce.put(&mut v);
            part.put(&mut v);
            parts.put(&mut v);
            pdu.put(&mut v);
            (entries.len() as u16).put(&mut v);
            for (mac, member) in entries {
                mac.put(&mut v);
                member.put(&mut v);
            }
        }
        v
    }

    /// Parses a join message; anything malformed is `None`, never a panic.
    pub(crate) fn decode(b: &[u8]) -> Option<JoinMsg> {
        let (&tag, mut rest) = b.split_first()?;
        if tag != 3 {
            return JoinMsg::decode_fixed(tag, rest);
        }
        let nonce = u64::take(&mut rest)?;
        let part = u16::take(&mut rest)?;
        let parts = u16::take(&mut rest)?;
        let pdu = u16::take(&mut rest)?;
        let count = usize::from(u16::take(&mut rest)?);
        let mut entries = Vec::with_capacity(count.min(rest.len() / 14));
        for _ in 0..count {
            entries.push((MacAddr::take(&mut rest)?, u64::take(&mut rest)?));
        }
        rest.is_empty().then_some(JoinMsg::Roster {
            nonce,
            part,
            parts,
            pdu,
            entries,
        })
    }
}
