//! Peer repair: a receiver asks a fellow receiver (its peer) for lost frames first, and serves
//! its fellows' requests from what it still holds (window copies near the end of a message,
//! message buffers, messages held back for them).
//!
//! This type keeps who the peer is and how it answers (a peer that stops answering is given up
//! for a pause that doubles each time), and whether fellows ask this member (then frames near
//! the end of their message keep a copy in their slot, so that a request can still be served
//! after the message was handed on).
//!
//! **Invariants.** `peer` and `off` are never both set: a peer given up is asked again, and
//! `silence` starts over, once its pause of `off` requests to the root is over. `off_doublings`
//! is at most [`PEER_OFF_MAX_DOUBLINGS`].

use crate::wire::{Control, Repr};
use crate::{Rank, Seq};

use crate::engine::{EngineConfig, Outgoing};

/// Unanswered peer requests in a row after which a receiver stops asking its peer, for a
/// while (see `PeerRepair::off`).
const PEER_SILENCE_LIMIT: u16 = 16;

/// Lost frames a receiver asks of the root alone after giving up its peer, before it asks the
/// peer again: the first pause; it doubles, up to 16 times this, each time the peer is given
/// up again without having answered since. Counted in requests, not frames or time, so that a
/// dead peer costs at most `PEER_SILENCE_LIMIT` requests per pause, however lossy the segment.
const PEER_OFF_FIRST: u16 = 128;

/// The longest pause: `PEER_OFF_FIRST` doubled this many times.
const PEER_OFF_MAX_DOUBLINGS: u8 = 4;

/// Windows' worth of frames a member keeps copies of after a fellow receiver asked it for
/// frames (peer repair). Loss that makes one fellow ask keeps copies on for every later frame
/// while it lasts; a segment without loss costs no second copy.
const COPY_SPAN: u64 = 4;

/// Frames from the end of its message within which a frame keeps its copy (while copies are
/// on, see [`COPY_SPAN`]). A frame further from its message's end is still in the message's
/// buffer when a fellow's request for it arrives: the fellow asks once the frame after it has
/// come, within a few of its turns (a turn is a millisecond's doze, about 85 full frames at
/// 1 Gbit/s), and the message is delivered only when its last frame has come, at least this
/// many frames later (3 ms at 1 Gbit/s). A later request finds nothing and goes to the root.
/// Why: a copy of every frame was a second copy of the whole stream on every receiver once
/// the segment lost frames (a megabyte message is about 720 frames: now its last 256 only).
/// A window no wider than this keeps every frame it can be asked for, as before.
/// With `EngineConfig::peer_hold` nothing is copied: the message itself is held back a window's
/// worth of frames after its end (see `Hold`), which serves every frame of it, not its
/// tail only.
pub(in crate::engine) const COPY_TAIL: usize = 256;

/// The answer to a peer NACK from `asker` for frames of `root`'s stream this member does not
/// hold (`missing` and `more`, from `base`).
pub(crate) fn unheld_reply(
    asker: Rank,
    root: Rank,
    base: u32,
    missing: u16,
    more: Vec<u16>,
) -> Outgoing {
    Outgoing::to(
        asker,
        Control::PeerNack {
            root,
            base,
            missing,
            unheld: true,
            more,
        },
    )
}

/// Relays a parent owes its children at most (see `PeerRepair::owe`): a window of frames for
/// each of 4 children; a request beyond them is answered "not held".
const OWED_MAX: usize = 512;

/// The answer to a child's request for frames of `root`'s stream this member lacks too and
/// will relay when they come (`missing` and `more`, from `base`).
pub(super) fn pending_reply(
    asker: Rank,
    root: Rank,
    base: u32,
    missing: u16,
    more: Vec<u16>,
) -> Outgoing {
    Outgoing::to(
        asker,
        Control::PeerPending {
            root,
            base,
            missing,
            more,
        },
    )
}

/// The peer repair state of one stream. See the module documentation.
#[derive(Debug)]
pub(super) struct PeerRepair {
    /// The fellow receiver asked first for lost frames, if any.
    peer: Option<Rank>,
    /// With peer repair: a fellow receiver asked this member for frames lately, so frames
    /// before this sequence near the end of their message ([`COPY_TAIL`]) keep a copy in their
    /// slot until the slot is reused, and a request can still be served after the frame's
    /// message was delivered. A member nobody asks (no loss on the segment) copies nothing:
    /// each frame is copied once, into its message.
    /// The low 32 bits of that sequence (the receiver's size is the paper's `s_RDP`), compared
    /// as the wire compares sequences; meaningful once `asked`.
    copies_until: u32,
    /// A fellow receiver asked this member for frames (peer repair) at least once.
    asked: bool,
    /// Peer repair is on (`EngineConfig::peer_repair`).
    enabled: bool,
    /// Frames the peer was asked for and never answered (neither repair nor "not held"), in
    /// a row: a dead or stalled peer is given up after `PEER_SILENCE_LIMIT`.
    silence: u16,
    /// The peer given up for its silence, and how many more lost frames are asked of the root
    /// alone before it is asked again. A peer stalled for a moment (a busy host) answers
    /// again; given up for good, it left the root every later loss of the stream (7 466 of
    /// 14 725 lost frames, once, in the 8-receiver file test at 1% loss on a busy machine).
    /// A dead peer costs a few requests per pause, and eviction replaces it.
    off: Option<(Rank, u16)>,
    /// How many times the next pause doubles `PEER_OFF_FIRST` (up to
    /// `PEER_OFF_MAX_DOUBLINGS`; none again once the peer answers).
    off_doublings: u8,
    /// With an acknowledgement tree: frames children asked for that this member lacks too,
    /// and who asked, relayed when they come (at most [`OWED_MAX`]).
    owed: Vec<(Seq, Rank)>,
    /// With peer repair and a tree: this member has children, which ask it first for every
    /// frame they lose, so it keeps copies from the stream's first frame on (see `copying`).
    parent: bool,
}

impl PeerRepair {
    /// No peer yet; nobody asked.
    pub(super) fn new(cfg: &EngineConfig) -> PeerRepair {
        PeerRepair {
            peer: None,
            copies_until: 0,
            asked: false,
            enabled: cfg.peer_repair,
            silence: 0,
            off: None,
            off_doublings: 0,
            owed: Vec::new(),
            parent: false,
        }
    }

    /// The fellow receiver this stream asks for lost frames (and the only one whose relayed
    /// repairs it takes).
    pub(super) fn peer(&self) -> Option<Rank> {
        self.peer
    }

    /// Sets the fellow receiver asked first for lost frames (`None`: ask the root only).
    pub(super) fn set_peer(&mut self, peer: Option<Rank>) {
        self.peer = peer;
        self.silence = 0;
        self.off = None;
        self.off_doublings = 0;
    }

    /// The peer answered: its silence is over, and so is any back-off.
    pub(super) fn answered(&mut self) {
        self.silence = 0;
        self.off_doublings = 0;
    }

    /// Before asking: a peer whose pause is over is asked again.
    pub(super) fn resume(&mut self) {
        if let Some((peer, 0)) = self.off {
            self.peer = Some(peer);
            self.off = None;
            self.silence = 0;
        }
    }

    /// A request to the peer went unanswered.
    pub(super) fn unanswered(&mut self) {
        self.silence = self.silence.saturating_add(1);
    }

    /// A frame was asked of the root: one request less of the pause.
    pub(super) fn asked_root(&mut self) {
        if let Some((_, left)) = self.off.as_mut() {
            *left = left.saturating_sub(1);
        }
    }

    /// After asking: a peer that left too many requests unanswered is given up for a pause.
    pub(super) fn give_up_if_silent(&mut self, root: Rank) {
        let Some(peer) = self.peer.filter(|_| self.silence >= PEER_SILENCE_LIMIT) else {
            return;
        };
        let frames = PEER_OFF_FIRST << self.off_doublings;
        tracing::warn!(
            root = root.get(),
            peer = peer.get(),
            frames,
            "the peer does not answer repair requests: asking the root for the next lost frames"
        );
        self.peer = None;
        self.off = Some((peer, frames));
        self.off_doublings = (self.off_doublings + 1).min(PEER_OFF_MAX_DOUBLINGS);
        self.silence = 0;
    }

    /// A child asked for frame `s`, which this member lacks too: it is relayed to `asker`
    /// when it comes. Returns false when too many relays are owed already (the child is told
    /// the frame is not held).
    pub(super) fn owe(&mut self, s: Seq, asker: Rank) -> bool {
        if self.owed.contains(&(s, asker)) {
            return true;
        }
        if self.owed.len() >= OWED_MAX {
            return false;
        }
        self.owed.push((s, asker));
        true
    }

    /// Frame `s` came: `relay` is called with each child it is owed to, and it is owed no
    /// more. A frame re-broadcast by the root (`rebroadcast`) is owed to nobody: the children
    /// that asked saw the same re-broadcast, and one that lost it asks again.
    pub(super) fn settle(&mut self, s: Seq, rebroadcast: bool, mut relay: impl FnMut(Rank)) {
        if self.owed.is_empty() {
            return;
        }
        self.owed.retain(|&(o, asker)| {
            if o != s {
                return true;
            }
            if !rebroadcast {
                relay(asker);
            }
            false
        });
    }

    /// Forgets relays owed for frames before `expected` (a frame that came while the stream
    /// was elsewhere: a duplicate, or one consumed from a message another way).
    pub(super) fn forget_before(&mut self, expected: Seq) {
        if !self.owed.is_empty() {
            self.owed.retain(|&(s, _)| s >= expected);
        }
    }

    /// A fellow asked this member for frames, the stream being at `edge` (the highest it has
    /// seen) with a window of `window` frames: with peer repair, copies are kept for the next
    /// windows' worth of frames.
    pub(super) fn on_request(&mut self, edge: Seq, window: u64) {
        if self.enabled {
            self.copies_until = (edge + COPY_SPAN * window).low32();
            self.asked = true;
        }
    }

    /// Whether this member has children in the stream's acknowledgement tree (see
    /// `parent`).
    pub(super) fn set_parent(&mut self, parent: bool) {
        self.parent = parent && self.enabled;
    }

    /// Whether frame `s` comes while fellows ask this member for frames (see
    /// `copies_until`), or this member is a parent in the tree. Why a parent copies before it
    /// is asked: its children lose frames at once, and a frame it consumed before the first
    /// request was not held, so the child turned to the root: at 1024 members with four
    /// roots, 100 messages, 3000 requests of the children went to the root that way.
    pub(super) fn copying(&self, s: Seq) -> bool {
        self.parent || (self.asked && (self.copies_until.wrapping_sub(s.low32()) as i32) > 0)
    }

    /// Whether frame `s` (`repr`, with a payload of `len` bytes) keeps a copy in its slot after
    /// it was placed: copies are on (see `copies_until`) and it is among the last
    /// [`COPY_TAIL`] frames of its message (of `slot_payload` bytes each), and messages are not
    /// held whole (`hold`). A frame of a message longer than the keep limit (`keep`) has no
    /// message buffer to be served from: it keeps a copy once any fellow ever asked. (Kept
    /// only while copies are on, the fellows of receivers keeping no messages turned to the
    /// root for up to 9400 of 14700 lost frames on the 1 Gbit/s test-bed at 1% loss, against
    /// at most 900 when served from messages. Kept once asked: at most 94, in 5 runs.)
    pub(super) fn keeps_copy(
        &self,
        s: Seq,
        repr: &Repr,
        len: usize,
        keep: usize,
        hold: bool,
        slot_payload: usize,
    ) -> bool {
        if repr.msg_len as usize > keep {
            return self.asked;
        }
        // Bytes of its message after this frame.
        let after = || (repr.msg_len as usize).saturating_sub(repr.offset as usize + len);
        !hold && self.copying(s) && after() < COPY_TAIL * slot_payload
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::EngineConfig;
    use crate::wire::Repr;
    use crate::{Rank, Seq};

    use super::{
        PeerRepair, COPY_TAIL, PEER_OFF_FIRST, PEER_OFF_MAX_DOUBLINGS, PEER_SILENCE_LIMIT,
    };

    fn peer_repair() -> PeerRepair {
        let mut c = EngineConfig::new(1, Rank::new(1), 3);
        c.peer_repair = true;
        PeerRepair::new(&c)
    }

    #[test]
    fn a_silent_peer_is_given_up_for_a_pause_that_doubles() {
        let mut p = peer_repair();
        p.set_peer(Some(Rank::new(2)));
        for round in 0..=PEER_OFF_MAX_DOUBLINGS + 1 {
            for _ in 0..PEER_SILENCE_LIMIT - 1 {
                p.unanswered();
            }
            p.give_up_if_silent(Rank::new(0));
            assert_eq!(p.peer(), Some(Rank::new(2)), "not yet");
            p.unanswered();
            p.give_up_if_silent(Rank::new(0));
            assert_eq!(p.peer(), None, "given up");
            let pause = PEER_OFF_FIRST << round.min(PEER_OFF_MAX_DOUBLINGS);
            for _ in 0..pause - 1 {
                p.asked_root();
                p.resume();
            }
            assert_eq!(p.peer(), None, "still paused");
            p.asked_root();
            p.resume();
            assert_eq!(p.peer(), Some(Rank::new(2)), "asked again after {pause}");
        }
        // An answer ends the doubling.
        p.answered();
        for _ in 0..PEER_SILENCE_LIMIT {
            p.unanswered();
        }
        p.give_up_if_silent(Rank::new(0));
        for _ in 0..PEER_OFF_FIRST {
            p.asked_root();
        }
        p.resume();
        assert_eq!(p.peer(), Some(Rank::new(2)));
    }

    #[test]
    fn copies_are_kept_near_a_messages_end_while_fellows_ask() {
        let mut p = peer_repair();
        let frame = |off: u32, len: u32| Repr {
            msg_len: len,
            offset: off,
            ..Repr::default()
        };
        let big = (COPY_TAIL as u32 + 10) * 100;
        assert!(!p.keeps_copy(
            Seq::new(5),
            &frame(big - 100, big),
            100,
            usize::MAX,
            false,
            100
        ));
        p.on_request(Seq::new(10), 8);
        assert!(p.copying(Seq::new(41)) && !p.copying(Seq::new(42)));
        // The tail of a message, not its head; nothing with messages held whole.
        assert!(p.keeps_copy(
            Seq::new(5),
            &frame(big - 100, big),
            100,
            usize::MAX,
            false,
            100
        ));
        assert!(!p.keeps_copy(Seq::new(5), &frame(0, big), 100, usize::MAX, false, 100));
        assert!(!p.keeps_copy(
            Seq::new(5),
            &frame(big - 100, big),
            100,
            usize::MAX,
            true,
            100
        ));
        // A message not kept: every frame, once anyone asked.
        assert!(p.keeps_copy(Seq::new(90), &frame(0, big), 100, 10, false, 100));
    }
}
