//! Classic BPF programs for packet sockets (`SO_ATTACH_FILTER`).
//!
//! A socket bound to one EtherType already receives only that EtherType, so the EtherType
//! filter here is not needed by the ring and socket backends. It exists for sockets that must
//! be bound to `ETH_P_ALL` (for instance one handed to another library), where it moves the
//! EtherType check from userspace into the kernel, before any copy. Attaching is
//! [`crate::socket::PacketSocket::attach_filter`].
//!
//! The destination filter ([`destinations`]) is what keeps a host outside a multicast group
//! from seeing the group's frames. Joining a group (`PACKET_ADD_MEMBERSHIP`) programs the
//! NIC's multicast filter, but NICs filter by hash (false positives), and virtual devices
//! (veth, bridges) pass every multicast frame up; the socket filter drops the rest in the
//! kernel, before the frame is queued to the socket, so it is never counted or copied.

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

// Opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_W: u16 = 0x00;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_JEQ: u16 = 0x10;
const BPF_JSET: u16 = 0x40;
const BPF_K: u16 = 0x00;

/// The packet type of a frame to this host's own station address (linux/if_packet.h).
const PACKET_HOST: u32 = libc::PACKET_HOST as u32;

/// What an accepting program returns: the whole frame.
const ACCEPT: u32 = 0x0004_0000;

/// A statement: `code k`.
pub const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump: `code k, jt, jf`.
pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// Accept frames whose EtherType (bytes 12..14 of the Ethernet frame) is `ethertype`, whole;
/// drop all others.
pub fn ethertype(ethertype: u16) -> Vec<Insn> {
    vec![
        stmt(BPF_LD | BPF_H | BPF_ABS, 12),
        jump(BPF_JMP | BPF_JEQ | BPF_K, u32::from(ethertype), 0, 1),
        stmt(BPF_RET | BPF_K, ACCEPT),
        stmt(BPF_RET | BPF_K, 0),
    ]
}

/// The kernel's ancillary load of the frame's packet type (linux/filter.h):
/// `PACKET_HOST`, `PACKET_OTHERHOST`, ... as `sockaddr_ll` names them.
const PKTTYPE: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32;

/// Instructions of a [`destinations`] program besides its five per group address.
const FIXED_INSNS: usize = 7;

/// Most group addresses one [`destinations`] program can accept (five instructions each).
pub const MAX_GROUPS: usize = (MAX_INSNS - FIXED_INSNS) / 5;

/// Accept frames to this host's own station (unicast) address, whole, and frames to a group
/// (multicast) address only if it is one of `groups`; drop the rest. The broadcast address is
/// a group address like any other: list it to receive broadcasts. At most [`MAX_GROUPS`]
/// addresses (the rest are ignored). Every jump is local, so the program has no length limit
/// but the kernel's.
///
/// Why another host's station address is dropped here: a switch floods a unicast frame whose
/// destination it has not learned yet to every port, and a virtual link (veth) passes it up
/// like its own, marked `PACKET_OTHERHOST`. Readers skipped such frames, but only after the
/// kernel had queued and copied them: a host in no group counted another group's repairs
/// and acknowledgements at its socket (seen once in the test-bed test of two groups).
pub fn destinations(groups: &[[u8; 6]]) -> Vec<Insn> {
    let groups = &groups[..groups.len().min(MAX_GROUPS)];
    let mut p = Vec::with_capacity(FIXED_INSNS + 5 * groups.len());
    // The I/G bit of the first destination byte: clear for a station address.
    p.push(stmt(BPF_LD | BPF_B | BPF_ABS, 0));
    p.push(jump(BPF_JMP | BPF_JSET | BPF_K, 1, 4, 0));
    // A station address: this host's only (the kernel compared it with the device's).
    p.push(stmt(BPF_LD | BPF_B | BPF_ABS, PKTTYPE));
    p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, PACKET_HOST, 0, 1));
    p.push(stmt(BPF_RET | BPF_K, ACCEPT));
    p.push(stmt(BPF_RET | BPF_K, 0));
    for g in groups {
        let hi = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
        let lo = u32::from(u16::from_be_bytes([g[4], g[5]]));
        p.push(stmt(BPF_LD | BPF_W | BPF_ABS, 0));
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, hi, 0, 3));
        p.push(stmt(BPF_LD | BPF_H | BPF_ABS, 4));
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, lo, 0, 1));
        p.push(stmt(BPF_RET | BPF_K, ACCEPT));
    }
    p.push(stmt(BPF_RET | BPF_K, 0));
    p
}

/// A tiny interpreter for the programs built here, so that they can be tested without a socket.
/// Supports exactly the opcodes above and the packet type's ancillary load (`pkttype`, as the
/// kernel would give it); returns the accepted length (0 = drop), `None` on an unsupported
/// opcode or an out-of-bounds load or jump.
pub fn run(prog: &[Insn], frame: &[u8], pkttype: u8) -> Option<u32> {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    while let Some(i) = prog.get(pc) {
        pc += 1;
        match i.code {
            c if c == BPF_LD | BPF_W | BPF_ABS => {
                let k = i.k as usize;
                let b = frame.get(k..k.checked_add(4)?)?;
                acc = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            }
            c if c == BPF_LD | BPF_H | BPF_ABS => {
                let k = i.k as usize;
                let b = frame.get(k..k.checked_add(2)?)?;
                acc = u32::from(u16::from_be_bytes([b[0], b[1]]));
            }
            c if c == BPF_LD | BPF_B | BPF_ABS && i.k == PKTTYPE => acc = u32::from(pkttype),
            c if c == BPF_LD | BPF_B | BPF_ABS => {
                acc = u32::from(*frame.get(i.k as usize)?);
            }
            c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                pc += usize::from(if acc == i.k { i.jt } else { i.jf });
            }
            c if c == BPF_JMP | BPF_JSET | BPF_K => {
                pc += usize::from(if acc & i.k != 0 { i.jt } else { i.jf });
            }
            c if c == BPF_RET | BPF_K => return Some(i.k),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethertype_filter_accepts_ours_and_drops_others() {
        let prog = ethertype(0x88B5);
        let mut frame = [0u8; 60];
        frame[12..14].copy_from_slice(&0x88B5u16.to_be_bytes());
        assert_eq!(run(&prog, &frame, HOST), Some(0x4_0000));
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(run(&prog, &frame, HOST), Some(0));
        assert_eq!(run(&prog, &frame[..10], HOST), None);
    }

    const HOST: u8 = libc::PACKET_HOST;
    const OTHERHOST: u8 = libc::PACKET_OTHERHOST;
    const MULTICAST: u8 = libc::PACKET_MULTICAST;

    fn to(dst: [u8; 6]) -> [u8; 60] {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f
    }

    #[test]
    fn destination_filter_takes_this_hosts_station_frames_and_only_the_joined_groups() {
        let bcast = [0xff; 6];
        let a = [0x03, 0xeb, 0, 0, 0, 1];
        let b = [0x03, 0xeb, 0, 0, 0, 2];
        let prog = destinations(&[bcast, a]);
        let me = [2, 0, 0, 0, 0, 1];
        assert_eq!(run(&prog, &to(me), HOST), Some(ACCEPT), "this host");
        // Another host's frame, flooded by a switch that has not learned its address yet.
        assert_eq!(run(&prog, &to(me), OTHERHOST), Some(0), "another host");
        assert_eq!(run(&destinations(&[]), &to(me), OTHERHOST), Some(0));
        assert_eq!(run(&destinations(&[]), &to(me), HOST), Some(ACCEPT));
        assert_eq!(run(&prog, &to(bcast), MULTICAST), Some(ACCEPT));
        assert_eq!(run(&prog, &to(a), MULTICAST), Some(ACCEPT));
        assert_eq!(run(&prog, &to(b), MULTICAST), Some(0), "group not joined");
        // Same first four bytes, other last two; same last two, other first four.
        assert_eq!(
            run(&prog, &to([0x03, 0xeb, 0, 0, 0xff, 0xff]), MULTICAST),
            Some(0)
        );
        assert_eq!(
            run(&prog, &to([0x03, 0xec, 0, 0, 0, 1]), MULTICAST),
            Some(0)
        );
        // Without the broadcast address, broadcasts are dropped too.
        assert_eq!(run(&destinations(&[a]), &to(bcast), MULTICAST), Some(0));
        assert_eq!(run(&destinations(&[]), &to(a), MULTICAST), Some(0));
        // Many groups: each one still found, and the program stays within the kernel's limit.
        let many: Vec<[u8; 6]> = (0..MAX_GROUPS as u32 + 10)
            .map(|g| {
                let x = g.to_be_bytes();
                [0x03, 0xeb, x[0], x[1], x[2], x[3]]
            })
            .collect();
        assert_eq!(destinations(&[]).len(), FIXED_INSNS);
        assert_eq!(destinations(&[a]).len(), FIXED_INSNS + 5);
        let prog = destinations(&many);
        assert!(prog.len() <= MAX_INSNS);
        assert_eq!(
            run(&prog, &to(many[MAX_GROUPS - 1]), MULTICAST),
            Some(ACCEPT)
        );
        assert_eq!(
            run(&prog, &to(many[MAX_GROUPS]), MULTICAST),
            Some(0),
            "beyond the limit"
        );
    }
}
