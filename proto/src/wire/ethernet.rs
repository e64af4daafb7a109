//! Ethernet II framing of ethbcast PDUs: the one place that knows the 14-byte header.
//!
//! Every backend (memory-mapped rings, the plain socket, pnet, AF_XDP) and the simulated switch
//! wrap a PDU with [`emit`] and unwrap a received frame with [`Frame::new_checked`], so that
//! padding, the EtherType check and the address fields are written once:
//!
//! ```text
//!  0                 6                 12      14
//!  +-----------------+-----------------+-------+---------------------------+
//!  | destination MAC |   source MAC    | 88 B5 | ethbcast PDU (+ padding)  |
//!  +-----------------+-----------------+-------+---------------------------+
//! ```
//!
//! Frames shorter than [`MIN_FRAME`] are zero-padded, as a NIC pads them on the wire, so a
//! receiver may see padding after the PDU; the PDU's own header says where it ends
//! ([`super::Frame::new_checked`] ignores trailing bytes). The FCS is the device's business.
//!
//! # Group addresses
//!
//! A group's broadcasts go to one Ethernet multicast address, [`group_mac`] of its group id
//! (`03:eb:` and the id's four bytes: the multicast bit and the locally-administered bit set,
//! so it can clash with no vendor's address), rather than to [`BROADCAST_MAC`]. Why: a switch
//! floods both alike, but a host's NIC passes a multicast frame up only if the host joined
//! that address, so hosts outside the group, and their CPUs, never see its frames, and several
//! groups share one segment. [`GroupAddress`] is the configuration: the derived address, the
//! broadcast address (for switches or NICs that mishandle multicast), or a fixed one.

use thiserror::Error;

use super::WireError;

/// A 48-bit Ethernet MAC address; printed as `aa:bb:cc:dd:ee:ff`.
///
/// A newtype over the six bytes, so that an address is never confused with other byte arrays
/// and prints itself in error messages; it dereferences to the bytes for the wire code.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The six bytes.
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> MacAddr {
        MacAddr(b)
    }
}

impl std::ops::Deref for MacAddr {
    type Target = [u8; 6];
    fn deref(&self) -> &[u8; 6] {
        &self.0
    }
}

impl AsRef<[u8]> for MacAddr {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq<MacAddr> for [u8; 6] {
    fn eq(&self, other: &MacAddr) -> bool {
        *self == other.0
    }
}

impl PartialEq<[u8; 6]> for MacAddr {
    fn eq(&self, other: &[u8; 6]) -> bool {
        self.0 == *other
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl std::fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(mac))
}

/// The Ethernet broadcast address: a frame sent here reaches every port of the segment.
pub const BROADCAST_MAC: MacAddr = MacAddr([0xff; 6]);

/// EtherType of every ethbcast frame (IEEE 802 local experimental EtherType 2).
pub const ETHERTYPE: u16 = 0x88B5;

/// Length of an Ethernet II header (destination, source, EtherType).
pub const ETH_HEADER_LEN: usize = 14;

/// The header's length, as this module reads and writes it.
const HEADER_LEN: usize = ETH_HEADER_LEN;

/// Smallest Ethernet frame without the FCS: shorter frames are zero-padded to it.
pub const MIN_ETH_FRAME: usize = 60;

/// True for group (multicast or broadcast) addresses: the I/G bit of the first byte.
pub fn is_group_mac(mac: &MacAddr) -> bool {
    mac[0] & 1 == 1
}

/// The first two bytes of every derived group address: multicast (bit 0) and locally
/// administered (bit 1), then `0xEB` for ethbcast.
pub const GROUP_MAC_PREFIX: [u8; 2] = [0x03, 0xEB];

/// The multicast address of group `group`: [`GROUP_MAC_PREFIX`] followed by the id, big-endian.
/// Distinct ids give distinct addresses.
pub const fn group_mac(group: u32) -> MacAddr {
    let g = group.to_be_bytes();
    MacAddr([
        GROUP_MAC_PREFIX[0],
        GROUP_MAC_PREFIX[1],
        g[0],
        g[1],
        g[2],
        g[3],
    ])
}

/// Where a group's broadcasts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GroupAddress {
    /// The group's own multicast address, [`group_mac`] of its id (the default).
    #[default]
    Derived,
    /// The Ethernet broadcast address: every host of the segment receives the group's frames.
    Broadcast,
    /// A fixed multicast address (its first byte has the multicast bit set).
    Fixed(MacAddr),
}

impl GroupAddress {
    /// The destination address of group `group`'s broadcasts.
    pub fn mac(&self, group: u32) -> MacAddr {
        match *self {
            GroupAddress::Derived => group_mac(group),
            GroupAddress::Broadcast => BROADCAST_MAC,
            GroupAddress::Fixed(mac) => mac,
        }
    }
}

/// A group address that is not one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GroupAddressError {
    /// Neither a keyword nor `aa:bb:cc:dd:ee:ff`.
    #[error(
        "{0:?} is not a group address: use derived, broadcast or a MAC such as 03:eb:00:00:00:01"
    )]
    Syntax(String),
    /// A station (unicast) address: one host would receive the group's frames.
    #[error("{0} is a station address: a group address has the multicast bit (the lowest bit of the first byte) set, e.g. 03:eb:00:00:00:01")]
    NotMulticast(String),
}

impl std::str::FromStr for GroupAddress {
    type Err = GroupAddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "derived" => return Ok(GroupAddress::Derived),
            "broadcast" => return Ok(GroupAddress::Broadcast),
            _ => {}
        }
        let mut mac = [0u8; 6];
        let mut parts = s.trim().split(':');
        for b in mac.iter_mut() {
            *b = parts
                .next()
                .filter(|p| p.len() == 2)
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| GroupAddressError::Syntax(s.to_owned()))?;
        }
        if parts.next().is_some() {
            return Err(GroupAddressError::Syntax(s.to_owned()));
        }
        if !is_group_mac(&MacAddr(mac)) {
            return Err(GroupAddressError::NotMulticast(s.trim().to_owned()));
        }
        Ok(if mac == BROADCAST_MAC {
            GroupAddress::Broadcast
        } else {
            GroupAddress::Fixed(MacAddr(mac))
        })
    }
}

impl std::fmt::Display for GroupAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupAddress::Derived => f.write_str("derived"),
            GroupAddress::Broadcast => f.write_str("broadcast"),
            GroupAddress::Fixed(m) => write!(
                f,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
        }
    }
}

/// A checked view over one received Ethernet frame that carries an ethbcast PDU, and the
/// functions that write one.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that `buffer` is at least a header long and carries [`ETHERTYPE`]; after this no
    /// accessor can panic.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Runt(b.len()));
        }
        let ethertype = u16::from_be_bytes([b[12], b[13]]);
        if ethertype != ETHERTYPE {
            return Err(WireError::OtherEtherType(ethertype));
        }
        Ok(EthernetFrame { buffer })
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 0)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 6)
    }

    /// The PDU after the header, padding included.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl EthernetFrame<&[u8]> {
    /// Length of the Ethernet frame that carries a PDU of `pdu_len` bytes (padded to the
    /// minimum, [`MIN_ETH_FRAME`]).
    pub fn len_for(pdu_len: usize) -> usize {
        (HEADER_LEN + pdu_len).max(MIN_ETH_FRAME)
    }

    /// Writes the header for `dst`/`src` and `pdu` into `out`, zero-padding to
    /// [`MIN_ETH_FRAME`]; returns the frame length ([`EthernetFrame::len_for`]).
    pub fn emit(
        out: &mut [u8],
        dst: MacAddr,
        src: MacAddr,
        pdu: &[u8],
    ) -> Result<usize, WireError> {
        let need = EthernetFrame::len_for(pdu.len());
        if out.len() < need {
            return Err(WireError::BufferTooSmall {
                have: out.len(),
                need,
            });
        }
        EthernetFrame::emit_header(out, dst, src);
        out[HEADER_LEN..HEADER_LEN + pdu.len()].copy_from_slice(pdu);
        out[HEADER_LEN + pdu.len()..need].fill(0);
        Ok(need)
    }

    /// Writes only the header (for backends that place the PDU themselves). `out` must be at
    /// least [`ETH_HEADER_LEN`] long.
    pub fn emit_header(out: &mut [u8], dst: MacAddr, src: MacAddr) {
        out[0..6].copy_from_slice(dst.as_slice());
        out[6..12].copy_from_slice(src.as_slice());
        out[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    }

    /// Builds the frame for `pdu` in a vector.
    pub fn to_vec(dst: MacAddr, src: MacAddr, pdu: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; EthernetFrame::len_for(pdu.len())];
        // The vector is exactly `len_for` long, so `emit` cannot fail.
        let _ = EthernetFrame::emit(&mut v, dst, src, pdu);
        v
    }
}

fn mac_at(b: &[u8], at: usize) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    MacAddr(m)
}

#[cfg(test)]
mod tests {

    use crate::wire::WireError;

    use super::{
        group_mac, is_group_mac, EthernetFrame, GroupAddress, GroupAddressError, MacAddr,
        BROADCAST_MAC, ETH_HEADER_LEN as HEADER_LEN, MIN_ETH_FRAME as MIN_FRAME,
    };

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

    #[test]
    fn short_pdus_are_padded_and_split_back() {
        let v = EthernetFrame::to_vec(BROADCAST_MAC, A, b"hi");
        assert_eq!(v.len(), MIN_FRAME);
        let f = EthernetFrame::new_checked(&v[..]).unwrap();
        assert_eq!(f.dst(), BROADCAST_MAC);
        assert_eq!(f.src(), A);
        assert_eq!(&f.payload()[..2], b"hi");
        assert!(f.payload()[2..].iter().all(|&b| b == 0));
        assert_eq!(f.payload().len(), MIN_FRAME - HEADER_LEN);
    }

    #[test]
    fn runts_other_protocols_and_small_buffers_are_errors() {
        let mut v = EthernetFrame::to_vec(A, A, &[7; 100]);
        assert_eq!(v.len(), HEADER_LEN + 100);
        assert_eq!(
            EthernetFrame::new_checked(&v[..10]).unwrap_err(),
            WireError::Runt(10)
        );
        v[12] = 0x08;
        v[13] = 0x00;
        assert_eq!(
            EthernetFrame::new_checked(&v[..]).unwrap_err(),
            WireError::OtherEtherType(0x0800)
        );
        let mut small = [0u8; 20];
        assert_eq!(
            EthernetFrame::emit(&mut small, A, A, &[0; 10]),
            Err(WireError::BufferTooSmall { have: 20, need: 60 })
        );
    }

    #[test]
    fn group_macs_are_locally_administered_multicast_and_distinct_per_group() {
        let a = group_mac(0xEB);
        assert_eq!(a, [0x03, 0xEB, 0, 0, 0, 0xEB]);
        assert!(
            is_group_mac(&a) && a[0] & 2 == 2,
            "multicast, locally administered"
        );
        assert_ne!(group_mac(1), group_mac(2));
        assert_ne!(group_mac(u32::MAX), BROADCAST_MAC);
        assert_eq!(GroupAddress::default().mac(7), group_mac(7));
        assert_eq!(GroupAddress::Broadcast.mac(7), BROADCAST_MAC);
    }

    #[test]
    fn group_addresses_parse_and_print_and_station_addresses_are_refused() {
        for (text, want) in [
            ("derived", GroupAddress::Derived),
            ("broadcast", GroupAddress::Broadcast),
            ("ff:ff:ff:ff:ff:ff", GroupAddress::Broadcast),
            ("03:eb:00:00:00:2a", GroupAddress::Fixed(group_mac(42))),
            (
                "01:00:5e:00:00:01",
                GroupAddress::Fixed(MacAddr([1, 0, 0x5e, 0, 0, 1])),
            ),
        ] {
            let got: GroupAddress = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string().parse::<GroupAddress>().unwrap(), want);
        }
        let err = "02:00:00:00:00:01".parse::<GroupAddress>().unwrap_err();
        assert!(matches!(err, GroupAddressError::NotMulticast(_)));
        assert!(err.to_string().contains("multicast bit"), "{err}");
        for bad in [
            "",
            "multicast",
            "03:eb:00:00:00",
            "03:eb:00:00:00:01:02",
            "3:eb:0:0:0:1",
            "03:eb:zz:00:00:01",
        ] {
            assert!(
                matches!(
                    bad.parse::<GroupAddress>(),
                    Err(GroupAddressError::Syntax(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn group_addresses_are_told_apart_from_station_addresses() {
        assert!(is_group_mac(&BROADCAST_MAC));
        assert!(is_group_mac(&MacAddr([0x03, 0, 0, 0, 0, 1])));
        assert!(!is_group_mac(&A));
    }
}
