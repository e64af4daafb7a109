//! Classic BPF programs for packet sockets (`SO_ATTACH_FILTER`).
//!
//! A socket bound to one EtherType already receives only that EtherType, so the EtherType
//! filter here is not needed by the ring and socket backends. It exists for sockets that must
//! be bound to `ETH_P_ALL` (for instance one handed to another library), where it moves the
//! EtherType check from userspace into the kernel, before any copy. Attaching is
//! [`crate::socket::PacketSocket::attach_filter`].

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

// Opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_H: u16 = 0x08;
const BPF_ABS: u16 = 0x20;
const BPF_JEQ: u16 = 0x10;
const BPF_K: u16 = 0x00;

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
        stmt(BPF_RET | BPF_K, 0x0004_0000),
        stmt(BPF_RET | BPF_K, 0),
    ]
}

/// A tiny interpreter for the programs built here, so that they can be tested without a socket.
/// Supports exactly the opcodes above; returns the accepted length (0 = drop), `None` on an
/// unsupported opcode or an out-of-bounds load or jump.
pub fn run(prog: &[Insn], frame: &[u8]) -> Option<u32> {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    while let Some(i) = prog.get(pc) {
        pc += 1;
        match i.code {
            c if c == BPF_LD | BPF_H | BPF_ABS => {
                let k = i.k as usize;
                let b = frame.get(k..k.checked_add(2)?)?;
                acc = u32::from(u16::from_be_bytes([b[0], b[1]]));
            }
            c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                pc += usize::from(if acc == i.k { i.jt } else { i.jf });
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
        assert_eq!(run(&prog, &frame), Some(0x4_0000));
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(run(&prog, &frame), Some(0));
        assert_eq!(run(&prog, &frame[..10]), None);
    }
}
