//! The frames of `ethbcast doctor`'s checks across hosts: probes and their answers, keyed with
//! the group key when the hosts have one.
//!
//! Both go in ethbcast frames (EtherType 0x88B5) and start with a magic (`EBDQ`, `EBDA`), a
//! kind (what the probe tests) and the prober's random nonce:
//!
//! | frame  | bytes |
//! | ------ | ----- |
//! | probe  | `EBDQ` kind nonce(8) KEYED(1) challenge(16) tag(32), zero padding to its size |
//! | answer | `EBDA` kind nonce(8) mtu(4) KEYED(1) tag(32), zero padding to 46 bytes |
//!
//! An unkeyed frame has KEYED = 0 and nothing after it but padding (a frame of the format
//! without keys reads as unkeyed: its padding is zero there). With a key, both tags are keyed
//! BLAKE3 under `kp = derive_key("ethbcast doctor probe v1", group key)`, a key of its own so
//! that no doctor frame can pass for a transfer's:
//! - probe: `tag = H(kp, "probe" kind nonce challenge prober_mac)`; a listener with the key
//!   answers only a probe whose tag verifies from the MAC the frame came from;
//! - answer: `tag = H(kp, "answer" kind nonce challenge listener_mac prober_mac mtu)`; the
//!   prober takes an answer (a host reached, its MTU) only if the tag verifies under its own
//!   key. The challenge is fresh per run and the tag binds both MACs, so a recorded answer
//!   proves nothing for another run or another host, and a host without the key cannot make
//!   one: it reads the nonce and the challenge in the clear, but not the key.

use ethbcast::{Key, MacAddr};

/// A probe's first bytes.
pub const PROBE: &[u8; 4] = b"EBDQ";
/// An answer's first bytes.
pub const ANSWER: &[u8; 4] = b"EBDA";
/// Bytes of a small frame as sent: padded to the least an Ethernet payload carries.
pub const SMALL: usize = 46;
/// Bytes of a probe's challenge.
pub const CHALLENGE_LEN: usize = 16;
/// Bytes of a tag.
pub const TAG_LEN: usize = 32;
/// Bytes of a keyed probe without padding.
pub const KEYED_PROBE_LEN: usize = 14 + CHALLENGE_LEN + TAG_LEN;
/// The context of the key that doctor's tags are made with.
const CONTEXT: &str = "ethbcast doctor probe v1";

/// What a probe tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A small frame to the broadcast address.
    Broadcast = 1,
    /// A small frame to the group's multicast address.
    Group = 2,
    /// A frame as large as the prober's MTU, to the broadcast address.
    Full = 3,
}

impl Kind {
    fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Broadcast),
            2 => Some(Kind::Group),
            3 => Some(Kind::Full),
            _ => None,
        }
    }
}

/// The key doctor's tags are made with, derived from the group key.
pub struct ProbeKey(Key);

impl ProbeKey {
    /// The probe key of group key `key`.
    pub fn new(key: &Key) -> ProbeKey {
        ProbeKey(blake3::derive_key(CONTEXT, key.as_bytes()).into())
    }

    fn hasher(&self) -> blake3::Hasher {
        blake3::Hasher::new_keyed(&self.0)
    }

    /// The tag of a probe.
    pub fn probe_tag(
        &self,
        kind: Kind,
        nonce: u64,
        challenge: &[u8; CHALLENGE_LEN],
        prober: MacAddr,
    ) -> [u8; TAG_LEN] {
        *self
            .hasher()
            .update(b"probe")
            .update(&[kind as u8])
            .update(&nonce.to_be_bytes())
            .update(challenge)
            .update(&prober.0)
            .finalize()
            .as_bytes()
    }

    /// The tag of an answer.
    pub fn answer_tag(&self, a: &Answer, challenge: &[u8; CHALLENGE_LEN], ends: Ends) -> [u8; 32] {
        *self
            .hasher()
            .update(b"answer")
            .update(&[a.kind as u8])
            .update(&a.nonce.to_be_bytes())
            .update(challenge)
            .update(&ends.listener.0)
            .update(&ends.prober.0)
            .update(&a.mtu.to_be_bytes())
            .finalize()
            .as_bytes()
    }
}

/// Whether two tags are equal, in constant time (`blake3::Hash` compares so).
fn same_tag(a: &[u8; TAG_LEN], b: [u8; TAG_LEN]) -> bool {
    blake3::Hash::from(*a) == blake3::Hash::from(b)
}

/// The two ends of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    /// The host that answers.
    pub listener: MacAddr,
    /// The host that probed.
    pub prober: MacAddr,
}

/// A probe as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// What it tests.
    pub kind: Kind,
    /// The prober's nonce of this run.
    pub nonce: u64,
    /// With a key: the challenge and the tag.
    pub keyed: Option<([u8; CHALLENGE_LEN], [u8; TAG_LEN])>,
}

impl Probe {
    /// A probe of `kind` for `nonce`, keyed when `key` gives the key, the challenge and the
    /// prober's MAC; `len` bytes (at least [`SMALL`], and a keyed one at least
    /// [`KEYED_PROBE_LEN`]).
    pub fn encode(
        kind: Kind,
        nonce: u64,
        key: Option<(&ProbeKey, &[u8; CHALLENGE_LEN], MacAddr)>,
        len: usize,
    ) -> Vec<u8> {
        let mut v = PROBE.to_vec();
        v.push(kind as u8);
        v.extend_from_slice(&nonce.to_be_bytes());
        if let Some((k, challenge, prober)) = key {
            v.push(1);
            v.extend_from_slice(challenge);
            v.extend_from_slice(&k.probe_tag(kind, nonce, challenge, prober));
        }
        v.resize(len.max(SMALL).max(v.len()), 0);
        v
    }

    /// Parses a probe (anything else: `None`).
    pub fn parse(pdu: &[u8]) -> Option<Probe> {
        if pdu.len() < 13 || &pdu[..4] != PROBE {
            return None;
        }
        let kind = Kind::from_code(pdu[4])?;
        let nonce = u64::from_be_bytes(pdu[5..13].try_into().ok()?);
        let keyed = match pdu.get(13).copied().unwrap_or(0) {
            0 => None,
            1 => {
                let c = pdu.get(14..14 + CHALLENGE_LEN)?.try_into().ok()?;
                let t = pdu
                    .get(14 + CHALLENGE_LEN..KEYED_PROBE_LEN)?
                    .try_into()
                    .ok()?;
                Some((c, t))
            }
            _ => return None,
        };
        Some(Probe { kind, nonce, keyed })
    }

    /// Whether the probe is keyed and its tag verifies under `key` for a probe from `prober`.
    pub fn verifies(&self, key: &ProbeKey, prober: MacAddr) -> bool {
        self.keyed
            .as_ref()
            .is_some_and(|(c, t)| same_tag(t, key.probe_tag(self.kind, self.nonce, c, prober)))
    }
}

/// An answer as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The kind of the probe answered.
    pub kind: Kind,
    /// The probe's nonce.
    pub nonce: u64,
    /// The listener's interface MTU (0 in the answer of a probe whose tag did not verify).
    pub mtu: u32,
    /// With a key: the tag.
    pub tag: Option<[u8; TAG_LEN]>,
}

impl Answer {
    /// The answer's bytes, keyed when `key` gives the key, the probe's challenge and the ends.
    pub fn encode(&self, key: Option<(&ProbeKey, &[u8; CHALLENGE_LEN], Ends)>) -> Vec<u8> {
        let mut v = ANSWER.to_vec();
        v.push(self.kind as u8);
        v.extend_from_slice(&self.nonce.to_be_bytes());
        v.extend_from_slice(&self.mtu.to_be_bytes());
        if let Some((k, challenge, ends)) = key {
            v.push(1);
            v.extend_from_slice(&k.answer_tag(self, challenge, ends));
        }
        v.resize(SMALL.max(v.len()), 0);
        v
    }

    /// Parses an answer (anything else: `None`).
    pub fn parse(pdu: &[u8]) -> Option<Answer> {
        if pdu.len() < 17 || &pdu[..4] != ANSWER {
            return None;
        }
        let tag = match pdu.get(17).copied().unwrap_or(0) {
            0 => None,
            1 => Some(pdu.get(18..18 + TAG_LEN)?.try_into().ok()?),
            _ => return None,
        };
        Some(Answer {
            kind: Kind::from_code(pdu[4])?,
            nonce: u64::from_be_bytes(pdu[5..13].try_into().ok()?),
            mtu: u32::from_be_bytes(pdu[13..17].try_into().ok()?),
            tag,
        })
    }

    /// Whether the answer is keyed and its tag verifies under `key` for the probe's
    /// `challenge` between `ends`.
    pub fn verifies(&self, key: &ProbeKey, challenge: &[u8; CHALLENGE_LEN], ends: Ends) -> bool {
        self.tag
            .as_ref()
            .is_some_and(|t| same_tag(t, key.answer_tag(self, challenge, ends)))
    }
}

/// Whether `mac` is a group address (multicast or broadcast): never a prober's, so never
/// answered; an answer to it would reach every host of the segment.
pub fn is_group(mac: MacAddr) -> bool {
    mac.0[0] & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn key(b: u8) -> ProbeKey {
        ProbeKey::new(&[b; 32].into())
    }

    #[test]
    fn unkeyed_frames_round_trip_and_nothing_else_parses() {
        for kind in [Kind::Broadcast, Kind::Group, Kind::Full] {
            let p = Probe::encode(kind, 77, None, 1500);
            assert_eq!(p.len(), 1500);
            let parsed = Probe::parse(&p).unwrap();
            assert_eq!((parsed.kind, parsed.nonce, parsed.keyed), (kind, 77, None));
            assert_eq!(Answer::parse(&p), None);
            let a = Answer {
                kind,
                nonce: 77,
                mtu: 1200,
                tag: None,
            };
            let bytes = a.encode(None);
            assert_eq!(bytes.len(), SMALL);
            assert_eq!(Answer::parse(&bytes), Some(a));
            assert_eq!(Probe::parse(&bytes), None);
        }
        assert_eq!(
            Probe::parse(&Probe::encode(Kind::Group, 1, None, 0)[..12]),
            None
        );
        let mut odd = Probe::encode(Kind::Group, 1, None, 0);
        odd[4] = 9;
        assert_eq!(Probe::parse(&odd), None);
        odd[4] = 2;
        odd[13] = 7;
        assert_eq!(Probe::parse(&odd), None, "an unknown KEYED value");
        assert_eq!(Answer::parse(b"EBDA"), None);
    }

    /// A keyed probe verifies under the key, from the prober's MAC, and under nothing else;
    /// an answer verifies for its challenge, its two ends and its MTU only.
    #[test]
    fn keyed_tags_bind_the_key_the_macs_the_challenge_and_the_mtu() {
        let (k, other) = (key(1), key(2));
        let c = [9u8; CHALLENGE_LEN];
        let bytes = Probe::encode(Kind::Full, 5, Some((&k, &c, A)), 0);
        assert_eq!(bytes.len(), KEYED_PROBE_LEN);
        let p = Probe::parse(&bytes).unwrap();
        assert!(p.verifies(&k, A));
        assert!(!p.verifies(&other, A), "another key");
        assert!(!p.verifies(&k, B), "re-sent from another MAC");
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(!Probe::parse(&flipped).unwrap().verifies(&k, A));
        assert!(!Probe::parse(&Probe::encode(Kind::Full, 5, None, 0))
            .unwrap()
            .verifies(&k, A));

        let ends = Ends {
            listener: B,
            prober: A,
        };
        let a = Answer {
            kind: Kind::Full,
            nonce: 5,
            mtu: 1500,
            tag: None,
        };
        let keyed = Answer::parse(&a.encode(Some((&k, &c, ends)))).unwrap();
        assert!(keyed.verifies(&k, &c, ends));
        assert!(!keyed.verifies(&other, &c, ends), "another key");
        assert!(
            !keyed.verifies(&k, &[8; CHALLENGE_LEN], ends),
            "another run"
        );
        let swapped = Ends {
            listener: A,
            prober: B,
        };
        assert!(!keyed.verifies(&k, &c, swapped), "another host");
        let lied = Answer {
            mtu: 9000,
            ..keyed.clone()
        };
        assert!(!lied.verifies(&k, &c, ends), "the MTU changed");
        assert!(!a.verifies(&k, &c, ends), "unkeyed");
    }

    #[test]
    fn group_addresses_are_told_from_hosts() {
        assert!(is_group(ethbcast::BROADCAST_MAC));
        assert!(is_group(MacAddr([0x03, 0xeb, 0, 0, 0, 1])));
        assert!(is_group(MacAddr([0x01, 0, 0x5e, 0, 0, 1])));
        assert!(!is_group(A));
    }
}
