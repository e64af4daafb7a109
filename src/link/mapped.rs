//! What the two memory-mapped backends share: `ring` (`TPACKET_V2` rings, or a userspace send
//! batch) and `xdp` (AF_XDP rings).
//!
//! Both write a frame in place into the next free TX slot (the machine's PDU too, with
//! [`Link::send_with`], so that it is not copied from a buffer of its own; the slot is not
//! cleared, only a short frame's padding is) and kick the kernel once per batch
//! rather than once per frame. When every slot is still in flight, they kick and wait for one
//! to come back, for at most [`SEND_STALL`], and then fail with an error that says so. Before
//! they wait for a received frame they kick what is queued, so that no frame waits with them.

use super::socket::{stalled, SEND_STALL};
use super::{check_pdu, Link, LinkError, MacAddr, Transmit};
use ethbcast_proto::{EthernetFrame, ETH_HEADER_LEN};
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
    /// Lends the next free slot to `fill`, which writes a frame at its start and returns its
    /// length (0: none); queues that frame, padded with zeros to the Ethernet minimum.
    /// `Ok(None)` when no slot is free (`fill` was not called), else the length queued.
    fn push_in_place(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<Option<usize>, LinkError>;
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
    // A slot holds a frame of `max_pdu` (checked when the link opened), so emit cannot fail.
    push(slots, what, &mut |d| {
        EthernetFrame::emit(d, dst, src, pdu).unwrap_or(0)
    })?;
    Ok(())
}

/// `Link::send_with`: lends `fill` the PDU's place in the next TX slot (past the Ethernet
/// header, `max_pdu` bytes) and queues the frame it writes there, if any; the slot is not
/// cleared first (see `push_in_place`). Returns whether a frame was queued.
pub(crate) fn send_with(
    slots: &mut impl Mapped,
    what: &str,
    fill: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
) -> Result<bool, LinkError> {
    let src = slots.local_mac();
    let max_pdu = slots.max_pdu();
    let mut too_long = None;
    let len = push(slots, what, &mut |d| {
        // A slot holds a frame of `max_pdu` (checked when the link opened).
        let Some(place) = d.get_mut(ETH_HEADER_LEN..ETH_HEADER_LEN + max_pdu) else {
            too_long = Some(max_pdu);
            return 0;
        };
        let Some(t) = fill(place) else {
            return 0;
        };
        if t.len > max_pdu {
            too_long = Some(t.len);
            return 0;
        }
        EthernetFrame::emit_header(d, t.dst, src);
        ETH_HEADER_LEN + t.len
    })?;
    if let Some(len) = too_long {
        return Err(LinkError::FrameTooLong { len, max: max_pdu });
    }
    Ok(len > 0)
}

/// Queues the frame `fill` writes into the next TX slot, waiting for one if none is free,
/// and kicks once a batch is queued; returns the length queued (0: `fill` wrote none).
fn push(
    slots: &mut impl Mapped,
    what: &str,
    fill: &mut dyn FnMut(&mut [u8]) -> usize,
) -> Result<usize, LinkError> {
    let queued = match slots.push_in_place(fill)? {
        Some(len) => Some(len),
        None if slots.wait_slot(SEND_STALL)? => slots.push_in_place(fill)?,
        None => None,
    };
    let len = queued.ok_or_else(|| stalled(what))?;
    if len > 0 {
        let pending = slots.pending();
        pending.queued += 1;
        if pending.queued >= pending.kick_at {
            slots.flush()?;
        }
    }
    Ok(len)
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
