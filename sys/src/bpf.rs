//! eBPF through the raw `bpf(2)` system call: the XSKMAP, the XDP redirect program and the
//! link that attaches it to an interface.
//!
//! Why raw system calls and not libbpf or aya: the program is a dozen instructions, written
//! here as instructions, so there is no object file to build (no clang at build time, no
//! toolchain download) and nothing to parse; four commands of `bpf(2)` (map create, program
//! load, map update, link create) are all it takes, and they fit in this file.
//!
//! The program ([`redirect_program`]) looks at the Ethernet header only:
//!
//! ```text
//!   frame shorter than 14 bytes          -> XDP_PASS (the kernel's business)
//!   EtherType != 0x88B5                  -> XDP_PASS
//!   destination not one of ours          -> XDP_PASS (the kernel drops it as another host's)
//!   otherwise                            -> bpf_redirect_map(XSKMAP, rx queue, XDP_PASS)
//! ```
//!
//! so IP, ARP and everything else reach the kernel's stack untouched, and an ethbcast frame
//! arriving on a queue without a socket also falls back to the kernel (the flags argument of
//! `bpf_redirect_map` is the action taken when the map slot is empty).
//!
//! The attachment is a BPF link (`BPF_LINK_CREATE`): it lives as long as its file descriptor,
//! so the program is detached when the process exits, however it exits, and it never replaces
//! a program someone else attached (the kernel refuses with `EBUSY`).

use crate::{Error, Result};
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// bpf(2) commands (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_LINK_DETACH: libc::c_int = 34;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` of `enum bpf_attach_type`.
const BPF_XDP: u32 = 37;
/// `BPF_PSEUDO_MAP_FD`: the immediate of a 64-bit load is a map file descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// Helper `bpf_redirect_map` (`BPF_FUNC_redirect_map`).
const FUNC_REDIRECT_MAP: i32 = 51;
/// The verdict that hands a frame to the kernel's stack.
const XDP_PASS: i32 = 2;

// XDP attach flags (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

// Field offsets of `struct xdp_md`.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// Most destination addresses the program accepts (each costs a few instructions).
pub const MAX_ACCEPTED_MACS: usize = 16;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// dst_reg in the low nibble, src_reg in the high nibble.
    regs: u8,
    off: i16,
    imm: i32,
}

// Instruction classes, sizes, sources and operations (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ALU64: u8 = 0x07;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const MEM: u8 = 0x60;
const W: u8 = 0x00;
const H: u8 = 0x08;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const MOV: u8 = 0xb0;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// `dst = *(size *)(src + off)`.
const fn load(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    insn(LDX | MEM | size, dst, src, off, 0)
}

/// `dst = src`.
const fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(ALU64 | MOV | X, dst, src, 0, 0)
}

/// `dst = imm`.
const fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(ALU64 | MOV | K, dst, 0, 0, imm)
}

/// `dst += imm`.
const fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(ALU64 | ADD | K, dst, 0, 0, imm)
}

/// A jump by `off` instructions if `op(dst, imm)` holds (32-bit compare with `JMP32`).
const fn jump_imm(class: u8, op: u8, dst: u8, imm: i32, off: i16) -> Insn {
    insn(class | op | K, dst, 0, off, imm)
}

/// A jump by `off` instructions if `op(dst, src)` holds.
const fn jump_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
    insn(JMP | op | X, dst, src, off, 0)
}

/// `dst = map` (two instruction slots).
fn load_map_fd(dst: u8, map_fd: i32) -> [Insn; 2] {
    [
        insn(LD | DW | IMM, dst, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// The XDP redirect program (see the module docs): frames of `ethertype` addressed to one of
/// `accept` go to the AF_XDP socket in slot `rx_queue_index` of the XSKMAP `map_fd`,
/// everything else to the kernel. Errors if `accept` is empty or longer than
/// [`MAX_ACCEPTED_MACS`].
pub fn redirect_program(map_fd: i32, ethertype: u16, accept: &[[u8; 6]]) -> Result<Vec<Insn>> {
    if accept.is_empty() || accept.len() > MAX_ACCEPTED_MACS {
        return Err(Error::Bpf(format!(
            "the XDP program accepts 1 to {MAX_ACCEPTED_MACS} destination addresses, not {}",
            accept.len()
        )));
    }
    // r1 = ctx; r6 = ctx (kept across the checks); r2 = data; r3 = data_end.
    let mut p = vec![
        mov_reg(6, 1),
        load(W, 2, 1, XDP_MD_DATA),
        load(W, 3, 1, XDP_MD_DATA_END),
        mov_reg(4, 2),
        add_imm(4, 14),
    ];
    // Jumps to "pass" are patched once its position is known.
    let mut to_pass = Vec::new();
    to_pass.push(p.len());
    p.push(jump_reg(JGT, 4, 3, 0));
    // The EtherType is big-endian on the wire; a native (little-endian) load swaps it.
    let et = i32::from(u16::from_ne_bytes(ethertype.to_be_bytes()));
    p.push(load(H, 5, 2, 12));
    to_pass.push(p.len());
    p.push(jump_imm(JMP, JNE, 5, et, 0));
    // r5 = destination bytes 0..4, r7 = bytes 4..6 (native order, compared as loaded).
    p.push(load(W, 5, 2, 0));
    p.push(load(H, 7, 2, 4));
    let mut to_redirect = Vec::new();
    for (i, mac) in accept.iter().enumerate() {
        let lo = i32::from_ne_bytes([mac[0], mac[1], mac[2], mac[3]]);
        let hi = i32::from(u16::from_ne_bytes([mac[4], mac[5]]));
        let last = i + 1 == accept.len();
        // Not this address: try the next one (skip the check of bytes 4..6), or pass.
        let miss = if last { None } else { Some(1i16) };
        match miss {
            Some(skip) => p.push(jump_imm(JMP32, JNE, 5, lo, skip)),
            None => {
                to_pass.push(p.len());
                p.push(jump_imm(JMP32, JNE, 5, lo, 0));
            }
        }
        if last {
            to_pass.push(p.len());
            p.push(jump_imm(JMP32, JNE, 7, hi, 0));
        } else {
            to_redirect.push(p.len());
            p.push(jump_imm(JMP32, JEQ, 7, hi, 0));
        }
    }
    // redirect: return bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS).
    let redirect = p.len();
    p.push(load(W, 2, 6, XDP_MD_RX_QUEUE_INDEX));
    p.extend(load_map_fd(1, map_fd));
    p.push(mov_imm(3, XDP_PASS));
    p.push(insn(JMP | CALL, 0, 0, 0, FUNC_REDIRECT_MAP));
    p.push(insn(JMP | EXIT, 0, 0, 0, 0));
    // pass: return XDP_PASS.
    let pass = p.len();
    p.push(mov_imm(0, XDP_PASS));
    p.push(insn(JMP | EXIT, 0, 0, 0, 0));
    for (targets, to) in [(to_pass, pass), (to_redirect, redirect)] {
        for at in targets {
            // Jump offsets count from the instruction after the jump.
            p[at].off = (to - at - 1) as i16;
        }
    }
    Ok(p)
}

/// The raw `bpf(2)` system call with one command's attribute struct.
fn sys_bpf<T>(cmd: libc::c_int, attr: &mut T, op: &'static str) -> Result<libc::c_long> {
    // SAFETY: `attr` is a valid, initialised `repr(C)` attribute struct of the layout the
    // command expects (zero-padded where we set nothing); the size passed is its size, and
    // the kernel reads (and for some commands writes) only that many bytes. Pointers inside
    // it point to memory that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(bpf_error(op, std::io::Error::last_os_error()));
    }
    Ok(rc)
}

/// Turns a new file descriptor returned by `bpf(2)` into an owned one.
fn owned_fd(rc: libc::c_long) -> OwnedFd {
    // SAFETY: `rc` is a file descriptor the kernel just created for us (bpf(2) returned it);
    // nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) }
}

fn bpf_error(op: &'static str, source: std::io::Error) -> Error {
    match source.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::BpfPermission { op },
        _ => Error::Io { op, source },
    }
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    map_ifindex: u32,
    btf_fd: u32,
    btf_key_type_id: u32,
    btf_value_type_id: u32,
    btf_vmlinux_value_type_id: u32,
    map_extra: u64,
}

#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    /// The union of per-type fields that follows; zero for XDP.
    _rest: [u64; 4],
}

#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

/// An XSKMAP: slot `queue` holds the AF_XDP socket that receives what arrives on RX queue
/// `queue`.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// Creates a map with `entries` slots (one per RX queue of the interface).
    pub fn create(entries: u32) -> Result<Self> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries.max(1),
            map_name: name16("ethbcast_xsks"),
            ..Default::default()
        };
        let fd = owned_fd(sys_bpf(BPF_MAP_CREATE, &mut attr, "bpf(BPF_MAP_CREATE)")?);
        Ok(XskMap {
            fd,
            entries: entries.max(1),
        })
    }

    /// Number of slots.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Puts the AF_XDP socket `xsk` into slot `queue`.
    pub fn set(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<()> {
        let key = queue;
        let value = xsk.as_raw_fd() as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: 0,
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr, "bpf(BPF_MAP_UPDATE_ELEM)")?;
        Ok(())
    }

    /// Empties slot `queue` (frames of that queue then go to the kernel).
    pub fn clear(&self, queue: u32) -> Result<()> {
        let key = queue;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: 0,
            flags: 0,
        };
        sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr, "bpf(BPF_MAP_DELETE_ELEM)")?;
        Ok(())
    }
}

impl AsFd for XskMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Times `load_xdp` asks the kernel to load a program whose verification a signal cut short.
const LOAD_ATTEMPTS: usize = 8;

/// Runs `call` until it does not fail with `EAGAIN`, at most `attempts` times. Why: the
/// kernel's verifier stops with `EAGAIN` when a signal is pending for the loading thread (a
/// child process that exits sends `SIGCHLD`), and the load is simply to be made again, as
/// libbpf does. Seen as a failed open, about once in a few hundred, in a program that started
/// processes on another thread.
fn again_if_interrupted<T>(attempts: usize, mut call: impl FnMut() -> Result<T>) -> Result<T> {
    let mut left = attempts;
    loop {
        match call() {
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(libc::EAGAIN) && left > 1 =>
            {
                left -= 1;
            }
            r => return r,
        }
    }
}

/// Loads an XDP program; on rejection the verifier's log is in the error.
pub fn load_xdp(insns: &[Insn], name: &str) -> Result<OwnedFd> {
    const LICENSE: &[u8] = b"Dual MIT/GPL\0";
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name16(name),
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    match again_if_interrupted(LOAD_ATTEMPTS, || {
        sys_bpf(BPF_PROG_LOAD, &mut attr, "bpf(BPF_PROG_LOAD)")
    }) {
        Ok(fd) => Ok(owned_fd(fd)),
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            // Load again with the verifier's log to say why.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let _ = sys_bpf(BPF_PROG_LOAD, &mut attr, "bpf(BPF_PROG_LOAD)");
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(Error::Bpf(format!(
                "the kernel's verifier refused the XDP program: {}",
                String::from_utf8_lossy(&log[..end]).trim()
            )))
        }
        Err(e) => Err(e),
    }
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before any socket buffer exists (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// After the kernel built a socket buffer, for any interface (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// Attaches XDP program `prog` to interface `ifindex` in `mode` through a BPF link; the
/// program stays attached while the returned descriptor is open. `EBUSY`/`EEXIST` (another
/// program is attached) becomes [`Error::XdpBusy`].
pub fn attach_xdp(prog: BorrowedFd<'_>, ifindex: u32, mode: XdpMode) -> Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: mode.flags(),
        ..Default::default()
    };
    match sys_bpf(BPF_LINK_CREATE, &mut attr, "bpf(BPF_LINK_CREATE)") {
        Ok(fd) => Ok(owned_fd(fd)),
        Err(Error::Io { source, .. })
            if matches!(source.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) =>
        {
            Err(Error::XdpBusy { ifindex })
        }
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => {
            Err(Error::NoSuchInterface(format!("interface index {ifindex}")))
        }
        Err(e) => Err(e),
    }
}

/// The redirect program attached to one interface, with its XSKMAP.
#[derive(Debug)]
pub struct XdpRedirect {
    // `Drop` detaches the program through the link; then the link, the program and the map
    // close in this order.
    link: OwnedFd,
    _prog: OwnedFd,
    map: XskMap,
    mode: XdpMode,
}

impl XdpRedirect {
    /// Builds, loads and attaches the redirect program for frames of `ethertype` addressed to
    /// one of `accept`, with an XSKMAP of `queues` slots, on interface `ifindex`. `mode: None`
    /// tries native first and falls back to generic.
    pub fn attach(
        ifindex: u32,
        ethertype: u16,
        accept: &[[u8; 6]],
        queues: u32,
        mode: Option<XdpMode>,
    ) -> Result<Self> {
        let map = XskMap::create(queues)?;
        let insns = redirect_program(map.as_fd().as_raw_fd(), ethertype, accept)?;
        let prog = load_xdp(&insns, "ethbcast_redir")?;
        let modes: &[XdpMode] = match mode {
            Some(XdpMode::Native) => &[XdpMode::Native],
            Some(XdpMode::Generic) => &[XdpMode::Generic],
            None => &[XdpMode::Native, XdpMode::Generic],
        };
        let mut last = None;
        for &m in modes {
            match attach_xdp(prog.as_fd(), ifindex, m) {
                Ok(link) => {
                    return Ok(XdpRedirect {
                        link,
                        _prog: prog,
                        map,
                        mode: m,
                    })
                }
                // A driver without native XDP says EOPNOTSUPP (or EINVAL): try generic.
                Err(Error::Io { op, source })
                    if mode.is_none()
                        && matches!(
                            source.raw_os_error(),
                            Some(libc::EOPNOTSUPP | libc::EINVAL)
                        ) =>
                {
                    last = Some(Error::Io { op, source });
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Bpf("no XDP mode to attach in".into())))
    }

    /// The mode the program runs in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The XSKMAP.
    pub fn map(&self) -> &XskMap {
        &self.map
    }

    /// The BPF link's descriptor (to pin it, or to look at it with `bpftool link`).
    pub fn link(&self) -> BorrowedFd<'_> {
        self.link.as_fd()
    }
}

impl Drop for XdpRedirect {
    /// Detaches the program before the link's descriptor is closed. Closing alone detaches
    /// only when the last copy of the descriptor goes, and a child that another thread forked
    /// holds a copy until its exec: the interface would stay busy for a moment after we let
    /// it go. An error (a kernel before 5.9) leaves the close to detach it, as before.
    fn drop(&mut self) {
        let mut attr = LinkDetachAttr {
            link_fd: self.link.as_raw_fd() as u32,
        };
        let _ = sys_bpf(BPF_LINK_DETACH, &mut attr, "bpf(BPF_LINK_DETACH)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(errno: i32) -> Error {
        bpf_error(
            "bpf(BPF_PROG_LOAD)",
            std::io::Error::from_raw_os_error(errno),
        )
    }

    #[test]
    fn a_load_a_signal_cut_short_is_made_again_until_it_goes_through() {
        let mut calls = 0;
        let r = again_if_interrupted(LOAD_ATTEMPTS, || {
            calls += 1;
            if calls < 3 {
                Err(failing(libc::EAGAIN))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.unwrap(), 3);
    }

    #[test]
    fn a_load_is_made_again_a_bounded_number_of_times_and_other_errors_not_at_all() {
        let mut calls = 0;
        let r: Result<()> = again_if_interrupted(4, || {
            calls += 1;
            Err(failing(libc::EAGAIN))
        });
        assert!(
            matches!(r, Err(Error::Io { ref source, .. }) if source.raw_os_error() == Some(libc::EAGAIN))
        );
        assert_eq!(calls, 4);
        let mut calls = 0;
        let r: Result<()> = again_if_interrupted(4, || {
            calls += 1;
            Err(failing(libc::EINVAL))
        });
        assert!(r.is_err());
        assert_eq!(calls, 1, "a refusal is not a signal");
    }

    #[test]
    fn the_program_has_the_expected_shape_and_jumps_stay_inside() {
        let macs = [[0xff; 6], [2, 0xeb, 0, 1, 2, 3]];
        let p = redirect_program(7, 0x88B5, &macs).unwrap();
        assert_eq!(p.last().unwrap().code, JMP | EXIT);
        for (i, ins) in p.iter().enumerate() {
            let class = ins.code & 0x07;
            let op = ins.code & 0xf0;
            if (class == JMP || class == JMP32) && op != CALL && op != EXIT && ins.code != 0 {
                let to = i as i64 + 1 + i64::from(ins.off);
                assert!(
                    to > i as i64 && (to as usize) < p.len(),
                    "insn {i} jumps to {to}"
                );
            }
        }
        // The EtherType constant is the byte-swapped 0x88B5 on little-endian machines.
        assert!(p
            .iter()
            .any(|i| i.imm == i32::from(u16::from_ne_bytes([0x88, 0xB5]))));
        // The map fd is in the 64-bit load, marked as a map.
        assert!(p
            .iter()
            .any(|i| i.imm == 7 && i.regs >> 4 == BPF_PSEUDO_MAP_FD));
    }

    #[test]
    fn no_or_too_many_addresses_are_refused() {
        assert!(matches!(
            redirect_program(3, 0x88B5, &[]),
            Err(Error::Bpf(_))
        ));
        let many = vec![[2u8; 6]; MAX_ACCEPTED_MACS + 1];
        assert!(matches!(
            redirect_program(3, 0x88B5, &many),
            Err(Error::Bpf(_))
        ));
    }
}
