//! The `pnet` backend: pnet's portable datalink channel.
//!
//! Why: it is what a Rust program would reach for first, and it runs on more systems than
//! Linux; measuring it next to the ring and socket backends shows what they buy. pnet opens an
//! `ETH_P_ALL` socket, so it receives every frame of the interface (IP, ARP, IPv6 neighbour
//! discovery, and on Linux our own outgoing frames): this backend filters in userspace by
//! EtherType 0x88B5, by destination (us, broadcast or a joined group) and drops frames whose
//! source is us. Joining a group programs the NIC through our descriptor of pnet's socket
//! (Linux only; elsewhere the NIC must already pass the group's frames up).
//!
//! Waiting: pnet's receiver can only wait with a timeout fixed when the channel is created and
//! in whole milliseconds. On Linux we therefore create the socket ourselves (via
//! `ethbcast_sys`, protocol 0 so it receives nothing before pnet binds it), hand pnet one
//! descriptor through `Config::socket_fd` and keep a duplicate to wait on with the configured
//! [`WaitMode`]; pnet is opened with a zero read timeout so `next` never blocks. Elsewhere the
//! backend waits by polling pnet with short sleeps.

use super::{check_mtu, check_pdu, Groups, Link, LinkError, MacAddr, WaitMode};
use ethbcast_proto::{EthernetFrame, ETH_HEADER_LEN};
use pnet_datalink::{Channel, DataLinkReceiver, DataLinkSender};
use std::io;
use std::time::Duration;

/// Most frames one `recv` call hands over (counting foreign frames pnet shows us).
const RECV_BATCH: usize = 1024;

/// Configuration of the `pnet` backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PnetConfig {
    /// How `recv` waits.
    pub wait: WaitMode,
    /// pnet's receive buffer (largest frame it can read).
    pub read_buffer: usize,
    /// pnet's send buffer.
    pub write_buffer: usize,
    /// Kernel receive buffer of the socket in bytes (Linux; see
    /// [`super::socket::SocketConfig::recv_buffer`]).
    pub recv_buffer: usize,
}

impl Default for PnetConfig {
    fn default() -> Self {
        PnetConfig {
            wait: WaitMode::default(),
            read_buffer: 65536,
            write_buffer: 65536,
            recv_buffer: 4 << 20,
        }
    }
}

/// The configuration of a link whose kernel queues at least `rx_frames` full-size received
/// frames (0: the default; the socket backend's receive buffer), see [`super::open_sized`].
pub(crate) fn sized(wait: WaitMode, rx_frames: usize) -> PnetConfig {
    #[cfg(target_os = "linux")]
    let recv_buffer = super::socket::sized(wait, rx_frames).recv_buffer;
    #[cfg(not(target_os = "linux"))]
    let recv_buffer = PnetConfig::default().recv_buffer.max(rx_frames * 2048);
    PnetConfig {
        wait,
        recv_buffer,
        ..Default::default()
    }
}

/// A [`Link`] over a pnet datalink channel.
pub struct PnetLink {
    tx: Box<dyn DataLinkSender>,
    rx: Box<dyn DataLinkReceiver>,
    mac: MacAddr,
    max_pdu: usize,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    wait: WaitMode,
    #[cfg(target_os = "linux")]
    poll_fd: std::os::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    ifindex: u32,
    frame: Vec<u8>,
    groups: Groups,
}

impl std::fmt::Debug for PnetLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PnetLink")
            .field("mac", &self.mac)
            .field("max_pdu", &self.max_pdu)
            .finish()
    }
}

impl PnetLink {
    /// Opens interface `iface` (in the calling thread's network namespace).
    pub fn open(iface: &str, cfg: &PnetConfig) -> Result<Self, LinkError> {
        let ni = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == iface)
            .ok_or_else(|| LinkError::NoSuchInterface(iface.to_owned()))?;
        let mac = ni
            .mac
            .map(|m| m.octets())
            .filter(|m| *m != [0; 6])
            .ok_or_else(|| {
                LinkError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("interface {iface:?} has no Ethernet MAC address: pick an Ethernet or veth interface"),
                ))
            })?;
        let (max_pdu, _ifindex) = mtu_and_index(iface)?;
        let max_pdu = check_mtu(max_pdu)?;
        if cfg.read_buffer < ETH_HEADER_LEN + max_pdu {
            return Err(LinkError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pnet read buffer of {} bytes cannot hold frames of MTU {max_pdu}: use at least {}",
                    cfg.read_buffer,
                    ETH_HEADER_LEN + max_pdu
                ),
            )));
        }
        #[cfg(target_os = "linux")]
        let (socket_fd, poll_fd) = {
            use ethbcast_sys::socket::{PacketSocket, SocketOptions};
            use std::os::fd::IntoRawFd;
            // pnet sees everything, our own frames included, as it would with its own socket.
            let sock = PacketSocket::new(&SocketOptions {
                ignore_outgoing: false,
                qdisc_bypass: false,
            })?;
            super::socket::size_recv_buffer(&sock, cfg.recv_buffer)?;
            let fd = sock.into_fd();
            let dup = fd.try_clone()?;
            (Some(fd.into_raw_fd()), dup)
        };
        #[cfg(not(target_os = "linux"))]
        let socket_fd = None;
        let pcfg = pnet_datalink::Config {
            write_buffer_size: cfg.write_buffer,
            read_buffer_size: cfg.read_buffer,
            read_timeout: Some(Duration::ZERO),
            promiscuous: false,
            socket_fd,
            ..Default::default()
        };
        let (tx, rx) = match pnet_datalink::channel(&ni, pcfg) {
            Ok(Channel::Ethernet(tx, rx)) => (tx, rx),
            Ok(_) => {
                return Err(LinkError::Io(io::Error::other(
                    "pnet returned a non-Ethernet channel",
                )))
            }
            Err(e) => return Err(map_io(e, iface)),
        };
        Ok(PnetLink {
            tx,
            rx,
            mac: MacAddr(mac),
            max_pdu,
            wait: cfg.wait,
            #[cfg(target_os = "linux")]
            poll_fd,
            #[cfg(target_os = "linux")]
            ifindex: _ifindex,
            frame: Vec::with_capacity(ETH_HEADER_LEN + max_pdu),
            groups: Groups::default(),
        })
    }
}

fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

fn map_io(e: io::Error, iface: &str) -> LinkError {
    match e.kind() {
        io::ErrorKind::PermissionDenied => LinkError::PermissionDenied,
        _ if e.raw_os_error() == Some(19) => LinkError::NoSuchInterface(iface.to_owned()),
        _ => LinkError::Io(e),
    }
}

#[cfg(target_os = "linux")]
fn mtu_and_index(iface: &str) -> Result<(usize, u32), LinkError> {
    let i = ethbcast_sys::iface::Interface::lookup(iface)?;
    Ok((i.mtu, i.index))
}

#[cfg(not(target_os = "linux"))]
fn mtu_and_index(_iface: &str) -> Result<(usize, u32), LinkError> {
    // pnet does not report the MTU; assume standard Ethernet.
    Ok((1500, 0))
}

impl PnetLink {
    /// Joins or leaves `group` at the NIC (Linux).
    fn set_membership(&self, group: &MacAddr, join: bool) -> Result<(), LinkError> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsFd;
            ethbcast_sys::socket::set_membership(self.poll_fd.as_fd(), self.ifindex, group, join)?;
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (group, join);
        Ok(())
    }
}

impl Link for PnetLink {
    fn local_mac(&self) -> MacAddr {
        self.mac
    }

    fn max_pdu(&self) -> usize {
        self.max_pdu
    }

    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        check_pdu(pdu, self.max_pdu)?;
        self.frame.resize(EthernetFrame::len_for(pdu.len()), 0);
        EthernetFrame::emit(&mut self.frame, dst, self.mac, pdu)
            .map_err(|e| LinkError::Io(io::Error::other(e)))?;
        match self.tx.send_to(&self.frame, None) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(LinkError::Io(e)),
            None => Err(LinkError::Io(io::Error::other(
                "pnet could not send the frame (buffer too small)",
            ))),
        }
    }

    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if self.groups.join(group)? {
            if let Err(e) = self.set_membership(&group, true) {
                self.groups.leave(group)?;
                return Err(e);
            }
        }
        Ok(())
    }

    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if self.groups.leave(group)? {
            self.set_membership(&group, false)?;
        }
        Ok(())
    }

    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        let mut n = 0;
        for _ in 0..RECV_BATCH {
            let frame = match self.rx.next() {
                Ok(fr) => fr,
                Err(e) if is_would_block(&e) => break,
                Err(e) => return Err(LinkError::Io(e)),
            };
            let Ok(eth) = EthernetFrame::new_checked(frame) else {
                continue;
            };
            let (src, dst) = (eth.src(), eth.dst());
            if src == self.mac || !self.groups.accepts(&self.mac, &dst) {
                continue;
            }
            f(src, eth.payload());
            n += 1;
        }
        Ok(n)
    }

    /// Waits up to `wait` for the socket to become readable.
    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsFd;
            let s = super::socket::strategy(self.wait);
            Ok(ethbcast_sys::wait::wait_fd(
                self.poll_fd.as_fd(),
                ethbcast_sys::wait::Interest::Read,
                s,
                wait,
            )?)
        }
        #[cfg(not(target_os = "linux"))]
        {
            std::thread::sleep(wait.min(Duration::from_micros(100)));
            Ok(true)
        }
    }
}
