//! Network interfaces: index, MAC address and MTU, asked from the kernel.
//!
//! Why `ioctl` and not `/sys/class/net`: `/sys` shows the interfaces of the network namespace
//! that `/sys` was *mounted* in, not of the namespace the calling thread is in. The `SIOCGIF*`
//! ioctls on a socket created by the calling thread answer for the thread's own namespace,
//! which is what the test-bed (threads entering namespaces with `setns`) needs. They need no
//! privileges, so a wrong name is reported as such before `CAP_NET_RAW` is ever needed.

use crate::{Error, Result};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use std::os::fd::{AsRawFd, OwnedFd};

/// `ARPHRD_ETHER`: the hardware type of Ethernet (and veth) interfaces.
pub const ARPHRD_ETHER: u16 = 1;

/// What ethbcast needs to know about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    /// Kernel interface index (what `AF_PACKET` sockets bind to).
    pub index: u32,
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// MTU: the largest Ethernet payload, i.e. the largest ethbcast PDU.
    pub mtu: usize,
}

impl Interface {
    /// Looks `name` up in the calling thread's network namespace. Fails with
    /// [`Error::NoSuchInterface`] if there is none, [`Error::NotEthernet`] if it is not Ethernet.
    pub fn lookup(name: &str) -> Result<Self> {
        let req = IfReq::new(name)?;
        let sock = ioctl_socket()?;
        let index = req.get(&sock, libc::SIOCGIFINDEX, "SIOCGIFINDEX")?;
        // SAFETY: SIOCGIFINDEX succeeded, so the kernel wrote `ifru_ifindex` of the union.
        let index = unsafe { index.ifr_ifru.ifru_ifindex };
        let hw = req.get(&sock, libc::SIOCGIFHWADDR, "SIOCGIFHWADDR")?;
        // SAFETY: SIOCGIFHWADDR succeeded, so the kernel wrote `ifru_hwaddr` of the union.
        let hwaddr = unsafe { hw.ifr_ifru.ifru_hwaddr };
        let mtu = req.get(&sock, libc::SIOCGIFMTU, "SIOCGIFMTU")?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote `ifru_mtu` of the union.
        let mtu = unsafe { mtu.ifr_ifru.ifru_mtu };
        if hwaddr.sa_family != ARPHRD_ETHER {
            return Err(Error::NotEthernet {
                name: name.to_owned(),
                hw_type: hwaddr.sa_family,
            });
        }
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(hwaddr.sa_data.iter()) {
            *m = *b as u8;
        }
        Ok(Interface {
            name: name.to_owned(),
            index: u32::try_from(index).map_err(|_| Error::NoSuchInterface(name.to_owned()))?,
            mac,
            mtu: usize::try_from(mtu).unwrap_or(0),
        })
    }
}

/// `struct ethtool_channels` (linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// How many receive queues interface `name` has (`ETHTOOL_GCHANNELS`: receive-only plus
/// combined channels), or `None` if its driver does not say. A NIC spreads incoming frames
/// over its queues, so a socket bound to one queue sees only that queue's share.
pub fn rx_queues(name: &str) -> Result<Option<u32>> {
    let req = IfReq::new(name)?;
    let sock = ioctl_socket()?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    let mut r = req.req;
    r.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
    // SAFETY: `sock` is an open socket; `r` is a valid ifreq with a NUL-terminated name whose
    // data pointer points to a writable ethtool_channels that outlives the call; for
    // ETHTOOL_GCHANNELS the kernel reads `cmd` and writes the struct.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut r) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => Err(Error::NoSuchInterface(name.into())),
            // No ethtool channel support (or not allowed to ask): unknown.
            _ => Ok(None),
        };
    }
    Ok(Some(ch.rx_count + ch.combined_count).filter(|&n| n > 0))
}

/// `struct ethtool_value` (linux/ethtool.h).
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

/// Issues a one-value ethtool request on interface `name`.
fn ethtool_value(name: &str, cmd: u32, data: u32, op: &'static str) -> Result<u32> {
    let req = IfReq::new(name)?;
    let sock = ioctl_socket()?;
    let mut v = EthtoolValue { cmd, data };
    let mut r = req.req;
    r.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    // SAFETY: `sock` is an open socket; `r` is a valid ifreq with a NUL-terminated name whose
    // data pointer points to a writable ethtool_value that outlives the call; the kernel reads
    // `cmd` (and `data` for a set) and writes `data` for a get.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut r) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => Error::NoSuchInterface(name.into()),
            _ => Error::from_io(op, err),
        });
    }
    Ok(v.data)
}

/// Turns generic receive offload of interface `name` on or off (`ETHTOOL_SGRO`; needs
/// CAP_NET_ADMIN). On a veth, GRO also makes the device receive through NAPI, the path native
/// XDP takes, instead of the per-CPU backlog.
pub fn set_gro(name: &str, on: bool) -> Result<()> {
    ethtool_value(name, ETHTOOL_SGRO, u32::from(on), "ETHTOOL_SGRO").map(|_| ())
}

/// Whether generic receive offload is on for interface `name` (`ETHTOOL_GGRO`).
pub fn gro(name: &str) -> Result<bool> {
    ethtool_value(name, ETHTOOL_GGRO, 0, "ETHTOOL_GGRO").map(|v| v != 0)
}

/// Checks that `name` can be an interface name: 1 to 15 bytes, no NUL, `/` or whitespace
/// (the kernel's `dev_valid_name`).
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why| {
        Err(Error::InvalidInterfaceName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() >= libc::IFNAMSIZ {
        return bad("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("reserved name");
    }
    if name
        .bytes()
        .any(|b| b == 0 || b == b'/' || b == b':' || b.is_ascii_whitespace())
    {
        return bad("contains NUL, '/', ':' or whitespace");
    }
    Ok(())
}

/// A socket to issue interface ioctls on (no privileges needed).
fn ioctl_socket() -> Result<OwnedFd> {
    socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .or_else(|_| {
        socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
    })
    .map_err(|e| Error::from_errno("socket for interface ioctls", e as i32))
}

/// An `ifreq` with the interface name filled in.
struct IfReq {
    name: String,
    req: libc::ifreq,
}

impl IfReq {
    fn new(name: &str) -> Result<Self> {
        validate_name(name)?;
        // SAFETY: `ifreq` is plain old data (a name array and a union of integers and
        // sockaddrs); all-zero bytes are a valid value of it.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(IfReq {
            name: name.to_owned(),
            req,
        })
    }

    /// Issues the "get" ioctl `request` and returns the filled-in copy.
    fn get(&self, sock: &OwnedFd, request: libc::c_ulong, op: &'static str) -> Result<libc::ifreq> {
        let mut req = self.req;
        // SAFETY: `sock` is an open socket; `req` is a valid, writable `ifreq` whose name is
        // NUL-terminated (validate_name keeps it below IFNAMSIZ bytes, the rest is zero); the
        // SIOCGIF* "get" requests only read the name and write the union.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, &mut req) };
        if rc == 0 {
            return Ok(req);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => {
                Err(Error::NoSuchInterface(self.name.clone()))
            }
            _ => Err(Error::from_io(op, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_before_asking_the_kernel() {
        for bad in ["", "a/b", "sixteen-chars-xx", "with space", "a\0b", ".."] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidInterfaceName { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_name("eth0").is_ok());
        assert!(validate_name("fifteen-chars-x").is_ok());
    }

    #[test]
    fn a_missing_interface_is_reported_by_name() {
        match Interface::lookup("ebsys-nope0") {
            Err(Error::NoSuchInterface(n)) => assert_eq!(n, "ebsys-nope0"),
            other => panic!("expected NoSuchInterface, got {other:?}"),
        }
    }

    #[test]
    fn loopback_is_not_ethernet() {
        assert!(matches!(
            Interface::lookup("lo"),
            Err(Error::NotEthernet { hw_type: 772, .. })
        ));
    }
}
