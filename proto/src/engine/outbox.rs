//! The control outbox: frames of this member's own (acknowledgements, requests, the layers
//! above's control messages) and repairs it relays for fellows, waiting for the link, ahead of
//! the stream's data.
//!
//! **Invariants.** At most `EngineConfig::outbox` frames wait: one made while it is full is dropped
//! and counted (`EngineStats::outbox_full`), as a link would lose it; each is repeated by its own
//! timer, or was unreliable. Control counters start at 1 and only grow; the session ends at
//! `u32::MAX` rather than let one wrap.

use std::collections::VecDeque;

use crate::wire::{Control, Repr};
use crate::Rank;

use super::{Dest, EngineStats};

/// A frame waiting in the outbox: a control message of this member's own, or a frame of a
/// root's stream that this member relays (peer repair), whose source stays the root.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    /// A control message from this member.
    Own {
        /// Destination.
        dst: Dest,
        /// The message.
        msg: Control,
    },
    /// A data frame of another root's stream, relayed point to point.
    Relay {
        /// Destination.
        dst: Dest,
        /// Its header (source: the root).
        repr: Repr,
        /// Its payload.
        payload: Vec<u8>,
    },
}

impl Outgoing {
    /// A control message to `rank`.
    pub(crate) fn to(rank: Rank, msg: Control) -> Outgoing {
        Outgoing::Own {
            dst: Dest::Rank(rank),
            msg,
        }
    }

    /// Counts this frame, about to be queued, in `stats`.
    pub(super) fn count(&self, stats: &mut EngineStats) {
        match self {
            Outgoing::Relay { .. } => stats.peer_repairs += 1,
            Outgoing::Own { msg, .. } => match msg {
                Control::Ack { .. } => stats.ack_frames += 1,
                Control::TreeAck { .. } => stats.tree_ack_frames += 1,
                Control::Nack { .. } => stats.nack_frames += 1,
                Control::PeerNack { unheld, .. } => {
                    stats.nack_frames += 1;
                    if !unheld {
                        stats.peer_nacks += 1;
                    }
                }
                Control::PeerPending { .. } => stats.nack_frames += 1,
                Control::Pull { .. } => stats.pull_frames += 1,
                _ => {}
            },
        }
    }
}

/// The frames waiting to leave ahead of the stream's data. See the module documentation.
#[derive(Debug)]
pub(super) struct Outbox {
    queue: VecDeque<Outgoing>,
    cap: usize,
    /// The control counter of the last control frame sent (see `control_counter`).
    counter: u32,
}

impl Outbox {
    /// An empty outbox of `cap` frames. Its queue grows to what waits at once: made with
    /// room for `cap`, a ring that frames go round wrote every page of it (about 300 KiB per
    /// member at the default 4096, 1.2 GiB of a simulated group of 4096 members).
    pub(super) fn new(cap: usize) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            cap,
            counter: 0,
        }
    }

    /// Frames the outbox has room for.
    pub(super) fn room(&self) -> usize {
        self.cap.saturating_sub(self.queue.len())
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Frames waiting.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues `frame` (the caller checked the room).
    pub(super) fn push(&mut self, frame: Outgoing) {
        self.queue.push_back(frame);
    }

    /// The next frame to send.
    pub(super) fn pop(&mut self) -> Option<Outgoing> {
        self.queue.pop_front()
    }

    /// The counter of the next control frame of this member's own; `None` once the last one
    /// was used (the session ended).
    pub(super) fn next_counter(&mut self) -> Option<u32> {
        let ctr = self.counter.checked_add(1)?;
        self.counter = ctr;
        Some(ctr)
    }

    /// Test support: continues the control counter from `ctr`.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn skip_counter_to(&mut self, ctr: u32) {
        self.counter = self.counter.max(ctr);
    }

    /// Makes room for every frame the outbox may hold (the queue grows to it).
    pub(super) fn make_room(&mut self) {
        self.queue.reserve_exact(self.cap);
    }

    /// Heap bytes of the queue when full.
    pub(super) fn heap_bytes(&self) -> usize {
        self.cap * std::mem::size_of::<Outgoing>()
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::{Dest, EngineStats};
    use crate::wire::Control;
    use crate::Rank;

    use super::{Outbox, Outgoing};

    #[test]
    fn counters_grow_from_one_and_end_instead_of_wrapping() {
        let mut o = Outbox::new(2);
        assert_eq!(o.next_counter(), Some(1));
        assert_eq!(o.next_counter(), Some(2));
        o.skip_counter_to(u32::MAX - 1);
        o.skip_counter_to(5);
        assert_eq!(o.next_counter(), Some(u32::MAX));
        assert_eq!(o.next_counter(), None);
    }

    #[test]
    fn the_outbox_counts_its_room_and_counts_what_it_sends() {
        let mut o = Outbox::new(2);
        assert_eq!(o.room(), 2);
        let ack = Outgoing::to(
            Rank::new(1),
            Control::Ack {
                next: 3,
                seen: None,
            },
        );
        let mut stats = EngineStats::default();
        ack.count(&mut stats);
        o.push(ack);
        assert_eq!((o.room(), o.len()), (1, 1));
        assert_eq!(stats.ack_frames, 1);
        assert!(matches!(
            o.pop(),
            Some(Outgoing::Own {
                dst: Dest::Rank(_),
                ..
            })
        ));
        assert!(o.is_empty());
    }
}
