//! Linux raw Ethernet I/O for ethbcast: the one crate of the project that contains `unsafe`.
//!
//! Why a separate crate: the protocol crate (`ethbcast`) denies `unsafe` outright, so every
//! system call, every `setsockopt` with a C struct and every access to the memory shared with
//! the kernel lives here, behind small safe types, one file per concern:
//!
//! - [`iface`]: interface index, MAC address and MTU, asked from the kernel by `ioctl`;
//! - [`linkrate`]: the rate a link sends at (the driver's speed, or a root `tbf`'s rate, read
//!   over route netlink);
//! - [`socket`]: the `AF_PACKET`/`SOCK_RAW` socket bound to one interface and one EtherType,
//!   with `PACKET_IGNORE_OUTGOING`, `PACKET_QDISC_BYPASS`, classic BPF filters, plain and
//!   batched (`sendmmsg`) send and receive;
//! - [`filter`]: building classic BPF programs (the EtherType filter);
//! - [`ring`]: `TPACKET_V2` memory-mapped RX and TX rings (no system call per received frame,
//!   one per burst of sent frames);
//! - [`bpf`]: the raw `bpf(2)` system call: the XDP redirect program, its XSKMAP and the link
//!   that attaches it;
//! - [`xsk`]: AF_XDP sockets: UMEM, fill/RX/TX/completion rings, zero-copy detection;
//! - [`wait`]: waiting for a socket: spin, block in `ppoll(2)`, or spin then block;
//! - [`caps`]: which capabilities the process and its program file hold, and why one is
//!   missing (`nosuid`, `no_new_privs`, ...), for error messages with the exact `setcap` command;
//!   dropping them all once the link is open;
//! - [`shm`]: shared-memory segments of one host (files in `/dev/shm`), seen only through
//!   bounds-checked atomics, copies and futexes, for ranks that share a host;
//! - [`alloc`]: a counting global allocator for memory tests;
//! - [`perf`]: per-thread perf counters (CPU time, context switches, system calls, sends) for
//!   the benchmarks' cost per operation;
//! - [`prefetch`]: a cache hint for the next frame's bytes, in the ring and in the message
//!   buffer it is copied to;
//! - [`error`]: typed errors that say what the user can do (`CAP_NET_RAW`, `ip link`, ...);
//! - `sockcall` (inside the crate): `setsockopt`, `getsockopt` and `bind` with a C value, once
//!   for every option and address type.
//!
//! Every `unsafe` block carries a `// SAFETY:` comment (enforced by
//! `clippy::undocumented_unsafe_blocks`). The crate is empty on other systems than Linux.
#![cfg(target_os = "linux")]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod alloc;
pub mod bpf;
pub mod caps;
pub mod error;
pub mod filter;
pub mod iface;
pub mod linkrate;
pub mod perf;
pub mod prefetch;
pub mod ring;
pub mod shm;
mod sockcall;
pub mod socket;
pub mod wait;
pub mod xsk;

pub use error::{Error, Result};

/// Length of an Ethernet II header (destination, source, EtherType).
pub const ETH_HEADER_LEN: usize = 14;

/// Smallest Ethernet frame without the FCS: shorter frames are padded with zeros to this length.
pub const ETH_MIN_FRAME: usize = 60;

/// The fill that copies `frame` into a TX slot or chunk of `max` bytes, for the rings'
/// `tx_push` (a copy queued through their `tx_push_in_place`). Checked first: a frame past the
/// slot cannot be copied into it, and one shorter than an Ethernet header (0 included, which
/// would queue nothing) is refused.
pub(crate) fn copy_fill(frame: &[u8], max: usize) -> Result<impl FnOnce(&mut [u8]) -> usize + '_> {
    if frame.len() > max {
        return Err(Error::FrameTooLong {
            len: frame.len(),
            max,
        });
    }
    if frame.len() < ETH_HEADER_LEN {
        return Err(Error::FrameTooShort {
            len: frame.len(),
            min: ETH_HEADER_LEN,
        });
    }
    Ok(move |d: &mut [u8]| {
        d[..frame.len()].copy_from_slice(frame);
        frame.len()
    })
}
