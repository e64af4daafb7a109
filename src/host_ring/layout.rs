//! The geometry of a host's segment: a header, a cursor block per local rank (one cache line
//! each, so that cursors of different ranks never share a line), then the slots of the ring.
//! Every offset the ring reads or writes is computed here.

use super::HostRingError;

/// Geometry of a host's segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Ranks on the host (the owner included): one cursor block each.
    pub locals: usize,
    /// Slots of the ring.
    pub slots: usize,
    /// Payload bytes per slot (a multiple of 64).
    pub slot_payload: usize,
}

/// Bytes of the segment's header.
pub(crate) const HEADER_BYTES: usize = 128;
/// Bytes of a local rank's cursor block (one cache line: cursors of different ranks never
/// share a line).
pub(crate) const CURSOR_BYTES: usize = 64;
/// Bytes of a slot's header.
pub(crate) const SLOT_HEADER_BYTES: usize = 64;
/// Most ranks one host's segment serves.
pub(crate) const MAX_LOCALS: usize = 4096;
/// Largest message the ring accepts from a writer (as the engine's `max_message`).
pub(crate) const MAX_MESSAGE: u64 = 1 << 30;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"EBSMP\0\0\x01");

// Header words.
pub(super) const H_MAGIC: usize = 0;
pub(super) const H_STATE: usize = 8;
pub(super) const H_LOCALS: usize = 16;
pub(super) const H_SLOTS: usize = 24;
pub(super) const H_PAYLOAD: usize = 32;
pub(super) const H_OWNER_PID: usize = 40;
pub(super) const H_WORLD: usize = 48;
pub(super) const H_DATA_EVENT: usize = 56;
pub(super) const H_DATA_WAITERS: usize = 60;
pub(super) const H_ROOM_EVENT: usize = 64;
pub(super) const H_ROOM_WAITERS: usize = 68;
pub(super) const H_OWNER_RANK: usize = 72;

// States of the segment.
pub(super) const STATE_OPEN: u64 = 1;
pub(super) const STATE_JOINED: u64 = 2;
pub(super) const STATE_FAILED: u64 = 3;

// Cursor block words.
pub(super) const L_CURSOR: usize = 0;
pub(super) const L_BARRIERS: usize = 8;
pub(super) const L_RANK: usize = 16;
pub(super) const L_PID: usize = 24;
pub(super) const L_STATE: usize = 32;

pub(super) const LOCAL_ATTACHED: u64 = 1;
pub(super) const LOCAL_DETACHED: u64 = 2;

// Slot header words.
pub(super) const S_STAMP: usize = 0;
pub(super) const S_KIND: usize = 8;
pub(super) const S_CALL: usize = 16;
pub(super) const S_ROOT: usize = 24;
pub(super) const S_TOTAL: usize = 32;
pub(super) const S_OFFSET: usize = 40;
pub(super) const S_LEN: usize = 48;

pub(super) const KIND_DATA: u64 = 1;
pub(super) const KIND_RELEASE: u64 = 2;

impl Layout {
    /// Slots of the default ring.
    pub(crate) const DEFAULT_SLOTS: usize = 64;
    /// Payload bytes of a default slot: a 64 KiB message takes 8 slots, and the ring holds
    /// 512 KiB.
    pub(crate) const DEFAULT_SLOT_PAYLOAD: usize = 8192;

    /// The default geometry for `locals` ranks.
    pub(crate) fn new(locals: usize) -> Layout {
        Layout {
            locals,
            slots: Self::DEFAULT_SLOTS,
            slot_payload: Self::DEFAULT_SLOT_PAYLOAD,
        }
    }

    /// Bytes of one slot (header and payload).
    pub(crate) fn slot_bytes(&self) -> usize {
        SLOT_HEADER_BYTES + self.slot_payload
    }

    /// Bytes of the ring (every slot).
    pub(crate) fn ring_bytes(&self) -> usize {
        self.slots * self.slot_bytes()
    }

    /// Bytes of the cursor blocks.
    pub(crate) fn cursor_bytes(&self) -> usize {
        self.locals * CURSOR_BYTES
    }

    /// Bytes of the whole segment.
    pub(crate) fn segment_bytes(&self) -> usize {
        HEADER_BYTES + self.cursor_bytes() + self.ring_bytes()
    }

    pub(super) fn check(&self) -> Result<(), HostRingError> {
        let ok = (1..=MAX_LOCALS).contains(&self.locals)
            && (1..=1 << 16).contains(&self.slots)
            && (64..=1 << 20).contains(&self.slot_payload)
            && self.slot_payload.is_multiple_of(64);
        if ok {
            Ok(())
        } else {
            Err(HostRingError::Topology(format!(
                "unusable ring geometry {self:?} (1-{MAX_LOCALS} ranks, 1-65536 slots, 64 B-1 MiB per slot in multiples of 64)"
            )))
        }
    }

    pub(super) fn cursor(&self, local: usize) -> usize {
        HEADER_BYTES + local * CURSOR_BYTES
    }

    pub(super) fn slot(&self, seq: u64) -> usize {
        HEADER_BYTES + self.cursor_bytes() + (seq % self.slots as u64) as usize * self.slot_bytes()
    }
}
