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

use crate::engine::Prefetch;
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

/// Frames a link holds, found by where their bytes lie: a machine notes the address of bytes
/// it was handed (`slice.as_ptr() as usize`) and finds them again while the link still holds
/// them (see [`Machine::frames_done`]).
pub trait Held {
    /// The `len` bytes at address `at`, if they lie inside one frame held.
    fn find(&self, at: usize, len: usize) -> Option<&[u8]>;
}

/// Frames held as a list of slices (a link's batch in a test, or nothing).
#[derive(Debug, Clone, Copy)]
pub struct Frames<'a>(pub &'a [&'a [u8]]);

impl Held for Frames<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.0.iter().find_map(|f| within(f, at, len))
    }
}

/// Frames held in either of two places (a link's frames, and those a machine decrypted).
#[derive(Clone, Copy)]
pub(crate) struct Both<'a>(pub(crate) &'a dyn Held, pub(crate) &'a dyn Held);

impl Held for Both<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.0.find(at, len).or_else(|| self.1.find(at, len))
    }
}

/// The `len` bytes at address `at` if they lie inside `block`.
pub(crate) fn within(block: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    let off = at.checked_sub(block.as_ptr() as usize)?;
    block.get(off..off.checked_add(len)?)
}

/// The end of a batch of received frames (see [`Machine::frames_done`]). A link that holds its
/// frames until a batch ends (a mapped ring) may also retain some afterwards, for the machine
/// to read later instead of copying them: those stay held until they are `leaving`.
#[derive(Clone, Copy)]
pub struct BatchEnd<'a> {
    /// Every frame the link holds now.
    pub held: &'a dyn Held,
    /// Of those, the ones given back to the link once the call returns.
    pub leaving: &'a dyn Held,
}

impl BatchEnd<'static> {
    /// Nothing held, nothing leaving.
    pub const NOTHING: BatchEnd<'static> = BatchEnd {
        held: &Frames(&[]),
        leaving: &Frames(&[]),
    };
}

impl std::fmt::Debug for BatchEnd<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchEnd")
    }
}

/// A sans-IO state machine a driver can run: frames and time in, frames and a wake-up time
/// out. The group member (`member::Member`) is one; the join of a group
/// (`join::Join`) is the other.
pub trait Machine {
    /// Handles one received PDU from the Ethernet source `src`.
    fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]);
    /// A batch of frames handed in ends: `end.held` finds the frames the link still holds (a
    /// mapped ring: this batch's and, if it [retains](BatchEnd) frames, older ones), and
    /// `end.leaving` those of them that go back to the link when this call returns. A machine
    /// that noted where something lies in them uses what leaves now or never. A link that
    /// holds nothing passes [`BatchEnd::NOTHING`].
    fn frames_done(&mut self, now: Instant, end: BatchEnd<'_>) {
        let _ = (now, end);
    }
    /// Whether the machine uses [`Machine::frames_done`]: a driver that asks a link to hold
    /// its frames until a batch ends does so only then (the machines of collectives never do,
    /// and their frames go back at once).
    fn wants_frames_done(&self) -> bool {
        false
    }
    /// Appends to `out` an address inside each frame the link retains that this machine will
    /// still read (a payload it left there), forgetting on the way what it noted of frames it
    /// no longer needs: a link that retains frames in memory of its own (a simulated port)
    /// may let every other one go at once. A driver asks right after
    /// [`Machine::frames_done`], when its link would prune. None by default.
    fn link_refs(&mut self, out: &mut Vec<usize>) {
        let _ = out;
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
    /// Asks `hint` to bring into the CPU's cache the memory of its own (apart from the
    /// machine's struct) that the machine's next turn reads first. A driver that runs many
    /// machines one after the other (the simulator's thousands of members) asks it of the next
    /// one while the present one runs: each was last touched thousands of turns ago. None by
    /// default.
    fn prefetch(&self, hint: Prefetch) {
        let _ = hint;
    }
}

/// Where a driver reads the time: the wall clock for real links, the simulated switch's
/// virtual clock in simulations.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}
