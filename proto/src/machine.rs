//! What every sans-IO state machine of the core offers its driver, and the one [`Transmit`].
//!
//! This module is the leaf of the crate: it depends on nothing but the MAC address type, so
//! that the engine, the member and the join can all be driven by one loop without knowing of
//! each other. The loop itself (sockets, the wall clock) lives in the `ethbcast` crate; the
//! simulated switch drives the same machines in virtual time.
//!
//! Call order, for every machine: feed each received frame to [`Machine::handle_frame`], call
//! [`Machine::handle_timeout`] once [`Machine::poll_timeout`]'s instant has passed, then drain
//! [`Machine::poll_transmit`] until it gives `None`. No call blocks or reads a clock: `now` is
//! always the caller's.

use std::time::Instant;

use crate::wire::ethernet::MacAddr;

/// A frame a machine wrote into the caller's buffer: `len` bytes of PDU for `dst`.
///
/// The member addresses frames by MAC (`Transmit<MacAddr>`, the default); the engine below it
/// by destination rank or broadcast (`Transmit<engine::Dest>`), which the member maps to MACs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<D = MacAddr> {
    /// Destination.
    pub dst: D,
    /// Length of the PDU written.
    pub len: usize,
}

/// A sans-IO state machine a driver can run: frames and time in, frames and a wake-up time
/// out. The group member (`member::Member`) is one; the join of a group
/// (`membership::Join`) is the other.
pub trait Machine {
    /// Handles one received PDU from the Ethernet source `src`.
    fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]);
    /// The frames handed in since the last call are given back to the link: `frames` are
    /// their bytes if the link held them until now (a mapped ring), none if it did not. A
    /// machine that kept where something lies in them uses it now or never.
    fn frames_done(&mut self, frames: &[&[u8]]) {
        let _ = frames;
    }
    /// Whether the machine uses [`Machine::frames_done`]: a driver that asks a link to hold
    /// its frames until a batch ends does so only then (the machines of collectives never do,
    /// and their frames go back at once).
    fn wants_frames_done(&self) -> bool {
        false
    }
    /// Lets time pass.
    fn handle_timeout(&mut self, now: Instant);
    /// The earliest instant at which `handle_timeout` has work.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Writes the next frame to send into `buf`.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit>;
    /// True when the machine has nothing unacknowledged in flight.
    fn is_idle(&self) -> bool {
        true
    }
    /// True when what the machine has to send includes data (not only acknowledgements and
    /// requests). Only a machine that says no may have its sends deferred (see the driver's
    /// `Sends::Deferred`); the default says yes.
    fn has_data_to_send(&self) -> bool {
        true
    }
}

/// Where a driver reads the time: the wall clock for real links, the simulated switch's
/// virtual clock in simulations.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}
