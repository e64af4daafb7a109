//! Errors of the raw Ethernet layer, each saying what the user can do about it.
//!
//! The kernel reports everything as an `errno`; callers need to tell apart the few cases a user
//! can fix (missing capability, wrong interface name, ring too large) from plain I/O failures.
//! [`Error::from_errno`] is that classification, in one place, so that it can be unit-tested
//! without privileges.

use std::io;
use thiserror::Error;

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong when opening or using a packet socket.
#[derive(Debug, Error)]
pub enum Error {
    /// The interface does not exist in this network namespace.
    #[error("no such network interface {0:?}: check `ip link` (and the network namespace)")]
    NoSuchInterface(String),
    /// The interface name cannot name an interface at all.
    #[error("invalid interface name {name:?}: {why}")]
    InvalidInterfaceName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        why: &'static str,
    },
    /// The interface exists but is not Ethernet (loopback, tunnel, ...).
    #[error("interface {name:?} is not an Ethernet interface (hardware type {hw_type}): pick an Ethernet or veth interface")]
    NotEthernet {
        /// Interface name.
        name: String,
        /// ARPHRD_* hardware type the kernel reported.
        hw_type: u16,
    },
    /// The operation needs `CAP_NET_RAW` (packet sockets) which this process lacks. The message
    /// says why it is missing and gives the `setcap` command for this program
    /// ([`crate::caps::Advice`]).
    #[error(
        "permission denied ({op}): {}",
        crate::caps::Advice::for_missing(crate::caps::Capability::NetRaw)
    )]
    PermissionDenied {
        /// The operation that was refused.
        op: &'static str,
    },
    /// The ring configuration is inconsistent; nothing was asked from the kernel.
    #[error("invalid packet ring configuration: {0}")]
    RingConfig(String),
    /// The kernel refused to set up or map a packet ring.
    #[error("packet ring setup failed ({op}): {source}; try a smaller ring (frame count, block size) or the plain socket backend")]
    RingSetup {
        /// The refused step.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// A classic BPF program the kernel cannot take.
    #[error("invalid BPF filter: {0}")]
    Filter(String),
    /// A frame larger than the socket or ring can carry.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLong {
        /// Frame length.
        len: usize,
        /// The largest frame accepted.
        max: usize,
    },
    /// A frame shorter than an Ethernet header.
    #[error("frame of {len} bytes is shorter than the {min}-byte Ethernet header")]
    FrameTooShort {
        /// Frame length.
        len: usize,
        /// The shortest frame accepted.
        min: usize,
    },
    /// The kernel rejected a frame of the TX ring as malformed.
    #[error("the kernel rejected a TX ring frame as malformed (TP_STATUS_WRONG_FORMAT)")]
    TxWrongFormat,
    /// Loading or attaching eBPF (the XDP program, its map) needs privileges we lack.
    #[error("permission denied ({op}): the xdp backend needs CAP_BPF and CAP_NET_ADMIN (and CAP_NET_RAW, CAP_IPC_LOCK for its memory); run as root or `sudo setcap cap_bpf,cap_net_admin,cap_net_raw,cap_ipc_lock+ep <binary>`, or use the ring backend")]
    BpfPermission {
        /// The refused operation.
        op: &'static str,
    },
    /// The kernel refused an eBPF program or map for a reason other than privileges.
    #[error("eBPF: {0}")]
    Bpf(String),
    /// Another XDP program is attached to the interface.
    #[error("another XDP program is attached to interface index {ifindex} (another ethbcast process, or a tool): see `ip link show`, detach it with `ip link set dev <iface> xdp off`, or use the ring backend")]
    XdpBusy {
        /// The interface.
        ifindex: u32,
    },
    /// The kernel has no AF_XDP sockets.
    #[error("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): use the ring backend")]
    XskUnsupported,
    /// The AF_XDP socket geometry is inconsistent; nothing was asked from the kernel.
    #[error("invalid AF_XDP configuration: {0}")]
    XskConfig(String),
    /// The driver cannot do zero-copy AF_XDP (veth, most virtual NICs).
    #[error("interface index {ifindex} has no zero-copy AF_XDP support (its driver refused with EOPNOTSUPP): allow copy mode")]
    ZeroCopyUnsupported {
        /// The interface.
        ifindex: u32,
    },
    /// Binding the AF_XDP socket to the queue failed.
    #[error("binding an AF_XDP socket to queue {queue} of interface index {ifindex} failed: {source}; does the interface have that queue (`ethtool -l`), and is it up?")]
    XskBind {
        /// The interface.
        ifindex: u32,
        /// The queue.
        queue: u32,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Another AF_XDP socket is bound to the queue.
    #[error("queue {queue} of interface index {ifindex} already has an AF_XDP socket (another ethbcast process?): one socket per queue")]
    XskQueueBusy {
        /// The interface.
        ifindex: u32,
        /// The queue.
        queue: u32,
    },
    /// Setting up an AF_XDP socket failed.
    #[error("AF_XDP setup failed ({op}): {source}{hint}", hint = xsk_hint(.source))]
    Xsk {
        /// The refused step.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Any other operating-system error.
    #[error("{op} failed: {source}")]
    Io {
        /// The failed operation.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

/// What the user can do about an AF_XDP setup error.
fn xsk_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
            "; the UMEM is locked memory: raise the limit (`ulimit -l`, LimitMEMLOCK) or grant CAP_IPC_LOCK"
        }
        _ => "",
    }
}

impl Error {
    /// Classifies a failed AF_XDP step: permission problems become [`Error::BpfPermission`],
    /// everything else [`Error::Xsk`].
    pub(crate) fn xsk(op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::BpfPermission { op },
            _ => Error::Xsk { op, source },
        }
    }

    /// Classifies the `errno` of a failed operation `op`: `EPERM`/`EACCES` become
    /// [`Error::PermissionDenied`], everything else [`Error::Io`].
    pub fn from_errno(op: &'static str, errno: i32) -> Self {
        Self::from_io(op, io::Error::from_raw_os_error(errno))
    }

    /// Like [`Error::from_errno`] for an [`io::Error`].
    pub fn from_io(op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::PermissionDenied { op },
            _ => Error::Io { op, source },
        }
    }

    /// Classifies a failed ring step: permission problems stay [`Error::PermissionDenied`],
    /// everything else is [`Error::RingSetup`].
    pub(crate) fn ring(op: &'static str, source: io::Error) -> Self {
        match Self::from_io(op, source) {
            Error::Io { op, source } => Error::RingSetup { op, source },
            other => other,
        }
    }

    /// Whether this I/O error means the interface went down or away (`ENETDOWN`, `ENXIO`,
    /// `ENODEV` after the socket was bound): the link is closed, not merely failing.
    pub fn is_link_gone(&self) -> bool {
        matches!(
            self,
            Error::Io { source, .. }
                if matches!(source.raw_os_error(), Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV))
        )
    }

    /// The `errno` behind this error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. }
            | Error::RingSetup { source, .. }
            | Error::Xsk { source, .. }
            | Error::XskBind { source, .. } => source.raw_os_error(),
            Error::PermissionDenied { .. } | Error::BpfPermission { .. } => Some(libc::EPERM),
            Error::NoSuchInterface(_) => Some(libc::ENODEV),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_errnos_are_explained() {
        for errno in [libc::EPERM, libc::EACCES] {
            let e = Error::from_errno("socket(AF_PACKET)", errno);
            assert!(matches!(e, Error::PermissionDenied { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains("CAP_NET_RAW"), "{msg}");
            // Unless the process holds the capability (then something else refused), the
            // message gives the setcap command for this very program.
            let held = crate::caps::ProcessCaps::current()
                .is_some_and(|p| p.has(crate::caps::Capability::NetRaw));
            let exe = std::env::current_exe().unwrap();
            assert!(held || msg.contains(&format!("{}", exe.display())), "{msg}");
        }
    }

    #[test]
    fn other_errnos_stay_io_errors_and_ring_errors_are_ring_setup() {
        let e = Error::from_errno("send", libc::ENOBUFS);
        assert!(matches!(e, Error::Io { op: "send", .. }));
        assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS));
        let e = Error::ring("PACKET_RX_RING", io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(matches!(e, Error::RingSetup { .. }));
        assert!(e.to_string().contains("smaller ring"));
        let e = Error::ring("PACKET_RX_RING", io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(e, Error::PermissionDenied { .. }));
    }
}
