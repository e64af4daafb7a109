//! What the two memory-mapped backends share: `ring` (`TPACKET_V2` rings, or a userspace send
//! batch) and `xdp` (AF_XDP rings).
//!
//! Both write a frame in place into the next free TX slot and kick the kernel once per batch
//! rather than once per frame. When every slot is still in flight, they kick and wait for one
//! to come back, for at most [`SEND_STALL`], and then fail with an error that says so. Before
//! they wait for a received frame they kick what is queued, so that no frame waits with them.

use super::socket::{stalled, SEND_STALL};
use super::{check_pdu, Link, LinkError, MacAddr};
use ethbcast_proto::EthernetFrame;
use ethbcast_sys::wait::{self, Interest, Strategy};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// A link over memory-mapped rings.
pub(crate) trait Mapped: Link {
    /// The descriptor to wait on.
    fn fd(&self) -> BorrowedFd<'_>;
    /// How the link waits.
    fn strategy(&self) -> Strategy;
    /// Whether the RX ring holds a frame.
    fn rx_ready(&self) -> bool;
    /// Fills the next free slot, `len` bytes long, with `fill`; false when none is free.
    fn push_with(&mut self, len: usize, fill: &dyn Fn(&mut [u8])) -> Result<bool, LinkError>;
    /// Kicks the kernel and waits up to `timeout` for a slot to come back; false if none did.
    fn wait_slot(&mut self, timeout: Duration) -> Result<bool, LinkError>;
    /// The count of frames queued since the last kick ([`Link::flush`]).
    fn pending(&mut self) -> &mut Pending;
}

/// Frames queued since the last kick, and how many make the queue kick by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) queued: usize,
    pub(crate) kick_at: usize,
}

impl Pending {
    pub(crate) fn new(kick_at: usize) -> Pending {
        Pending {
            queued: 0,
            kick_at: kick_at.max(1),
        }
    }
}

/// `Link::send`: queues the frame of `pdu` to `dst` in a TX slot (`what` names the slots in the
/// error of a send that found none free), kicking once a batch is queued.
pub(crate) fn send(
    slots: &mut impl Mapped,
    dst: MacAddr,
    pdu: &[u8],
    what: &str,
) -> Result<(), LinkError> {
    check_pdu(pdu, slots.max_pdu())?;
    let src = slots.local_mac();
    let len = EthernetFrame::len_for(pdu.len());
    // A slot handed to `fill` is exactly `len` bytes long, so emit cannot fail.
    let fill = |d: &mut [u8]| {
        let _ = EthernetFrame::emit(d, dst, src, pdu);
    };
    let queued = slots.push_with(len, &fill)?
        || (slots.wait_slot(SEND_STALL)? && slots.push_with(len, &fill)?);
    if !queued {
        return Err(stalled(what));
    }
    let pending = slots.pending();
    pending.queued += 1;
    if pending.queued >= pending.kick_at {
        slots.flush()?;
    }
    Ok(())
}

/// `Link::wait_ready`: kicks what is queued, then waits up to `wait` for a received frame.
pub(crate) fn wait_ready(link: &mut impl Mapped, wait: Duration) -> Result<bool, LinkError> {
    link.flush()?;
    let link = &*link;
    Ok(wait::wait_until(
        link.fd(),
        Interest::Read,
        link.strategy(),
        wait,
        || link.rx_ready(),
    )?)
}
