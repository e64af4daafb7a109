//! Control messages: every frame kind but data, parsed into what it means.
//!
//! The header ([`super::Repr`]) has one set of fields for every kind; data frames use them as
//! their names say (sequence, message id, length, offset). Control frames reuse some of them
//! with meanings of their own, and this module is the only place that knows which: the table
//! below is the whole mapping, [`Control::parse`] reads it and [`Control::emit`] writes it.
//! Everything above `wire` speaks [`Control`] values, never header fields.
//!
//! Every control frame also carries its sender's control counter in `msg_len`
//! ([`control_counter`]): one per sender and group, counting from 1, covered by the keyed MAC with
//! the rest of the header, so that a receiver refuses a control frame it has seen before (a
//! replay).
//!
//! | message | kind | flags | `seq` | `msg_id` | `offset` | `bitmap` | `aux` | payload |
//! |---|---|---|---|---|---|---|---|---|
//! | [`Control::Ack`] | Ack | `ACK_REQ` if `seen` | `next` | | | | `seen` | |
//! | [`Control::TreeAck`] | Ack | `TREE` | `next` | `root` | `laggard` | | `view` | |
//! | [`Control::AckPoll`] | Ack | `POLL` | | | | | | |
//! | [`Control::Nack`] | Nack | | `base` | | | `missing` | `next` | `more` (`u16` words) |
//! | [`Control::PeerNack`] | Nack | `PEER` (+`UNHELD`) | `base` | `root` | | `missing` | | `more` |
//! | [`Control::PeerPending`] | Nack | `PEER` `PENDING` | `base` | `root` | | `missing` | | `more` |
//! | [`Control::Pull`] | Pull | | `next` | `msg_id` | | | | |
//! | [`Control::PullPoll`] | Pull | `ACK_REQ` | | `msg_id` | | | `designated` | |
//! | [`Control::Heartbeat`] | Heartbeat | | | | | | entries | `u16` table |
//! | [`Control::Ping`], [`Control::Pong`] | Ping, Pong | | | | | | `rank` | |
//! | [`Control::Barrier`] | Barrier | | `epoch` | op | `round` | algorithm | `view` | arrival set |
//! | [`Control::Join`] | Join | | | | | | | membership message |
//! | [`Control::Evict`] | Evict | | | | | | `rank` | |
//! | [`Control::Notice`] | Notice | | | | | | | application bytes |
//!
//! Sequence numbers travel as their low 32 bits; [`locate`] and [`behind`] turn them back into
//! stream positions relative to a reference the receiver trusts, with checked arithmetic, so
//! no value a peer sends can overflow anything.

use super::{Flags, Frame, Kind, Repr, WireError};

use crate::Rank;
use crate::Seq;

/// Bits of a NACK bitmap: bit `i` set means frame `base + i` is missing.
pub const NACK_BITS: u32 = 16;

/// Words a NACK's bitmap may run on for, past its first ([`Control::Nack`]'s `more`): a NACK
/// names frames up to 1024 from its base. Why more than the paper's 16: a receiver that gathers
/// the gaps of many frames into one request (bulk transfers under steady loss, see
/// `EngineConfig::nack_gather`) sends one frame where it sent one per gap.
pub const NACK_MORE_WORDS: usize = 63;

/// Frames one NACK can name from its base: its first word and [`NACK_MORE_WORDS`] more.
pub(crate) const NACK_REACH: u32 = NACK_BITS * (1 + NACK_MORE_WORDS as u32);

/// A NACK bitmap being built, frame by frame, as offsets from its base (below
/// [`NACK_REACH`]); [`NackBitmap::take`] gives it as a NACK carries it, which
/// [`nack_offsets`] reads back. Its first word is kept in place: a bitmap that names frames
/// within 16 of its base (the common NACK) allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct NackBitmap {
    first: u16,
    more: Vec<u16>,
}

impl NackBitmap {
    /// Names the frame `off` frames from the base.
    pub(crate) fn set(&mut self, off: u32) {
        debug_assert!(off < NACK_REACH, "{off} is beyond a NACK's reach");
        let w = (off / NACK_BITS) as usize;
        let bit = 1 << (off % NACK_BITS);
        if w == 0 {
            self.first |= bit;
            return;
        }
        if self.more.len() < w {
            self.more.resize(w, 0);
        }
        self.more[w - 1] |= bit;
    }

    /// The bitmap as a NACK carries it (its first word, and `more` without trailing empty
    /// words), if it names any frame; the builder is empty again afterwards.
    pub(crate) fn take(&mut self) -> Option<(u16, Vec<u16>)> {
        let first = std::mem::take(&mut self.first);
        let mut more = std::mem::take(&mut self.more);
        while more.last() == Some(&0) {
            more.pop();
        }
        (first != 0 || !more.is_empty()).then_some((first, more))
    }
}

/// The words of a NACK bitmap that name frames: `(offset from base, word)`, the first word
/// (`missing`) at 0, then `more`'s, 16 frames apart; empty words are skipped.
fn nack_words(missing: u16, more: &[u16]) -> impl Iterator<Item = (u32, u16)> + '_ {
    std::iter::once(missing)
        .chain(more.iter().copied())
        .zip((0u32..).step_by(NACK_BITS as usize))
        .filter(|&(w, _)| w != 0)
        .map(|(w, off)| (off, w))
}

/// The frames a NACK bitmap names, as offsets from its base, in order.
pub(crate) fn nack_offsets(missing: u16, more: &[u16]) -> impl Iterator<Item = u32> + '_ {
    nack_words(missing, more).flat_map(|(off, word)| {
        (0..NACK_BITS)
            .filter(move |k| word & (1 << k) != 0)
            .map(move |k| off + k)
    })
}

/// How a barrier travels, and which barrier machine a barrier frame belongs to.
///
/// Barrier frames carry its code in their bitmap field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BarrierAlgo {
    /// Arrivals up a combining tree, release by one hardware broadcast.
    #[default]
    Broadcast,
    /// The dissemination barrier over point-to-point messages (the software baseline).
    Dissemination,
}

crate::spelled!(BarrierAlgo, "barrier", {
    Broadcast => "broadcast" | "bcast",
    Dissemination => "dissemination",
});

crate::coded!(BarrierAlgo: u16 { Broadcast = 0xBA01, Dissemination = 0xBA02 });

/// Barrier operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarrierOp {
    /// Broadcast barrier: these ranks have entered the epoch (bitmap payload).
    Arrive,
    /// The epoch is complete: everybody entered.
    Release,
    /// Dissemination: my round-`round` message.
    Round,
    /// Dissemination: I am waiting for your round-`round` message.
    Query,
}

crate::coded!(BarrierOp: u32 { Arrive = 1, Release = 2, Round = 3, Query = 4 });

/// A barrier frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierMsg {
    /// Which barrier machine.
    pub algo: BarrierAlgo,
    /// What it says.
    pub op: BarrierOp,
    /// The barrier's epoch (0, 1, 2, ...).
    pub epoch: u32,
    /// Dissemination round.
    pub round: u32,
    /// A hash of the sender's view (its evicted set).
    pub view: u32,
    /// Arrival set (one bit per rank) of an `Arrive`.
    pub set: Vec<u8>,
}

/// Every frame that is not data, by meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Cumulative acknowledgement to a root: every frame before `next` is in. With `seen`, the
    /// answer to the root's probe: the receiver has seen frames up to `seen`, so everything
    /// after it that the root sent was lost.
    Ack {
        /// Next sequence the receiver needs.
        next: u32,
        /// Highest sequence seen (answer to a probe).
        seen: Option<u32>,
    },
    /// Acknowledgement up the acknowledgement tree of `root`'s stream: the sender and every
    /// member of its subtree (as the tree of view `view` lays it out) hold every frame before
    /// `next`. Sent to the sender's parent in the tree, which is the root for its children.
    TreeAck {
        /// Whose stream.
        root: Rank,
        /// Next sequence the whole subtree needs.
        next: u32,
        /// The member of the subtree that is at `next` (the one the others wait for).
        laggard: Rank,
        /// The view (a hash of the evicted set) the tree was laid out in.
        view: u32,
    },
    /// From a root to a receiver of its stream: acknowledge now, as the answer to a probe
    /// (an [`Control::Ack`] with `seen`). The root sends it when its retransmission timer first
    /// fires for the receiver: receivers acknowledge every `ack_every` frames and when asked,
    /// never on a timer of their own, so an idle stream's last frames are acknowledged when
    /// the root asks, without a retransmission.
    AckPoll,
    /// Negative acknowledgement to a root: the frames of `missing` (bit `i`: `base + i`) and
    /// of `more` are missing; it acknowledges everything before `next` too.
    Nack {
        /// First sequence the bitmap describes.
        base: u32,
        /// Missing frames from `base`.
        missing: u16,
        /// Cumulative acknowledgement.
        next: u32,
        /// The bitmap's next words, if it runs on (bit `i` of word `w`: `base + 16·(w+1) + i`;
        /// at most [`NACK_MORE_WORDS`]).
        more: Vec<u16>,
    },
    /// Peer repair: a receiver asks a fellow receiver for frames of `root`'s stream, or (with
    /// `unheld`) a fellow receiver answers that it does not hold them.
    PeerNack {
        /// Whose stream.
        root: Rank,
        /// First sequence the bitmap describes.
        base: u32,
        /// Frames asked for (or not held).
        missing: u16,
        /// This is the answer "not held".
        unheld: bool,
        /// The bitmap's next words, as [`Control::Nack`]'s.
        more: Vec<u16>,
    },
    /// Repairs inside the acknowledgement tree: the answer of a parent asked by a child for
    /// frames of `root`'s stream that it lacks too and is getting itself: it relays each to
    /// the child when it comes, and the child asks it again, not the root.
    PeerPending {
        /// Whose stream.
        root: Rank,
        /// First sequence the bitmap describes.
        base: u32,
        /// Frames the parent will relay when they come.
        missing: u16,
        /// The bitmap's next words, as [`Control::Nack`]'s.
        more: Vec<u16>,
    },
    /// Push-pull: the designated receiver has the push part of `msg_id` and its receive is
    /// posted: please send the rest. Acknowledges everything before `next`.
    Pull {
        /// Message id (low 32 bits).
        msg_id: u32,
        /// Cumulative acknowledgement.
        next: u32,
    },
    /// Push-pull: the root asks `designated` to repeat a pull request that may have been lost.
    PullPoll {
        /// Message id (low 32 bits).
        msg_id: u32,
        /// The receiver that is to pull.
        designated: Rank,
    },
    /// Gossip heartbeat table of the failure detector, one counter per rank.
    Heartbeat {
        /// The table.
        table: Vec<u16>,
    },
    /// Confirmation probe of a suspect.
    Ping {
        /// The rank probed.
        rank: Rank,
    },
    /// Answer to a ping.
    Pong {
        /// The answering rank.
        rank: Rank,
    },
    /// A barrier frame.
    Barrier(BarrierMsg),
    /// A join message (encoded by the join, [`Join`](crate::Join)).
    Join {
        /// Its bytes.
        body: Vec<u8>,
    },
    /// `rank` has been evicted from the group.
    Evict {
        /// The evicted rank.
        rank: Rank,
    },
    /// An unreliable application datagram (the tools' notices).
    Notice {
        /// Its bytes.
        body: Vec<u8>,
    },
}

fn rank_field(kind: Kind, v: u32) -> Result<Rank, WireError> {
    u16::try_from(v)
        .map(Rank::new)
        .map_err(|_| WireError::BadField {
            kind,
            field: "rank",
        })
}

impl Control {
    /// Parses a checked frame of a control kind.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Control, WireError> {
        let kind = frame.kind();
        let flags = frame.flags();
        let payload = frame.payload();
        let no_payload = || {
            if payload.is_empty() {
                Ok(())
            } else {
                Err(WireError::BadPayload {
                    kind,
                    len: payload.len(),
                })
            }
        };
        Ok(match kind {
            Kind::Data | Kind::Repair => return Err(WireError::NotControl),
            Kind::Ack if flags.contains(Flags::TREE) => {
                no_payload()?;
                Control::TreeAck {
                    root: rank_field(kind, frame.msg_id())?,
                    next: frame.seq(),
                    laggard: rank_field(kind, frame.offset())?,
                    view: frame.aux(),
                }
            }
            Kind::Ack if flags.contains(Flags::POLL) => {
                no_payload()?;
                Control::AckPoll
            }
            Kind::Ack => {
                no_payload()?;
                Control::Ack {
                    next: frame.seq(),
                    seen: flags.contains(Flags::ACK_REQ).then(|| frame.aux()),
                }
            }
            Kind::Nack if flags.contains(Flags::PEER | Flags::PENDING) => {
                if flags.contains(Flags::UNHELD) {
                    return Err(WireError::BadField {
                        kind,
                        field: "peer answer (both not held and pending)",
                    });
                }
                Control::PeerPending {
                    root: rank_field(kind, frame.msg_id())?,
                    base: frame.seq(),
                    missing: frame.bitmap(),
                    more: more_words(kind, payload)?,
                }
            }
            Kind::Nack if flags.contains(Flags::PEER) => Control::PeerNack {
                root: rank_field(kind, frame.msg_id())?,
                base: frame.seq(),
                missing: frame.bitmap(),
                unheld: flags.contains(Flags::UNHELD),
                more: more_words(kind, payload)?,
            },
            Kind::Nack => Control::Nack {
                base: frame.seq(),
                missing: frame.bitmap(),
                next: frame.aux(),
                more: more_words(kind, payload)?,
            },
            Kind::Pull if flags.contains(Flags::ACK_REQ) => {
                no_payload()?;
                Control::PullPoll {
                    msg_id: frame.msg_id(),
                    designated: rank_field(kind, frame.aux())?,
                }
            }
            Kind::Pull => {
                no_payload()?;
                Control::Pull {
                    msg_id: frame.msg_id(),
                    next: frame.seq(),
                }
            }
            Kind::Heartbeat => {
                if !payload.len().is_multiple_of(2) || payload.len() / 2 != frame.aux() as usize {
                    return Err(WireError::BadPayload {
                        kind,
                        len: payload.len(),
                    });
                }
                Control::Heartbeat {
                    table: be_words(payload),
                }
            }
            Kind::Ping => {
                no_payload()?;
                Control::Ping {
                    rank: rank_field(kind, frame.aux())?,
                }
            }
            Kind::Pong => {
                no_payload()?;
                Control::Pong {
                    rank: rank_field(kind, frame.aux())?,
                }
            }
            Kind::Barrier => Control::Barrier(BarrierMsg {
                algo: BarrierAlgo::from_code(frame.bitmap()).ok_or(WireError::BadField {
                    kind,
                    field: "barrier algorithm",
                })?,
                op: BarrierOp::from_code(frame.msg_id()).ok_or(WireError::BadField {
                    kind,
                    field: "barrier operation",
                })?,
                epoch: frame.seq(),
                round: frame.offset(),
                view: frame.aux(),
                set: payload.to_vec(),
            }),
            Kind::Join => Control::Join {
                body: payload.to_vec(),
            },
            Kind::Evict => {
                no_payload()?;
                Control::Evict {
                    rank: rank_field(kind, frame.aux())?,
                }
            }
            Kind::Notice => Control::Notice {
                body: payload.to_vec(),
            },
        })
    }

    /// The frame kind this message travels in.
    pub fn kind(&self) -> Kind {
        match self {
            Control::Ack { .. } | Control::TreeAck { .. } | Control::AckPoll => Kind::Ack,
            Control::Nack { .. } | Control::PeerNack { .. } | Control::PeerPending { .. } => {
                Kind::Nack
            }
            Control::Pull { .. } | Control::PullPoll { .. } => Kind::Pull,
            Control::Heartbeat { .. } => Kind::Heartbeat,
            Control::Ping { .. } => Kind::Ping,
            Control::Pong { .. } => Kind::Pong,
            Control::Barrier(_) => Kind::Barrier,
            Control::Join { .. } => Kind::Join,
            Control::Evict { .. } => Kind::Evict,
            Control::Notice { .. } => Kind::Notice,
        }
    }

    /// Bytes of payload the message carries.
    pub fn payload_len(&self) -> usize {
        match self {
            Control::Heartbeat { table } => 2 * table.len(),
            Control::Nack { more, .. }
            | Control::PeerNack { more, .. }
            | Control::PeerPending { more, .. } => 2 * more.len(),
            Control::Barrier(b) => b.set.len(),
            Control::Join { body } | Control::Notice { body } => body.len(),
            _ => 0,
        }
    }

    /// The header fields of this message (group, source and destination left zero).
    pub fn header(&self) -> Repr {
        let mut r = Repr::new(self.kind());
        match *self {
            Control::Ack { next, seen } => {
                r.seq = next;
                if let Some(s) = seen {
                    r.flags |= Flags::ACK_REQ;
                    r.aux = s;
                }
            }
            Control::TreeAck {
                root,
                next: seq,
                laggard,
                view: aux,
            } => {
                r.flags |= Flags::TREE;
                r.seq = seq;
                r.msg_id = u32::from(root.get());
                r.offset = u32::from(laggard.get());
                r.aux = aux;
            }
            Control::AckPoll => r.flags |= Flags::POLL,
            Control::Nack {
                base,
                missing,
                next,
                ..
            } => {
                r.seq = base;
                r.bitmap = missing;
                r.aux = next;
            }
            Control::PeerNack {
                root,
                base: seq,
                missing: bitmap,
                unheld,
                ..
            } => {
                r.flags |= Flags::PEER;
                if unheld {
                    r.flags |= Flags::UNHELD;
                }
                r.seq = seq;
                r.msg_id = u32::from(root.get());
                r.bitmap = bitmap;
            }
            Control::PeerPending {
                root,
                base: seq,
                missing: bitmap,
                ..
            } => {
                r.flags |= Flags::PEER | Flags::PENDING;
                r.seq = seq;
                r.msg_id = u32::from(root.get());
                r.bitmap = bitmap;
            }
            Control::Pull { msg_id, next } => {
                r.seq = next;
                r.msg_id = msg_id;
            }
            Control::PullPoll { msg_id, designated } => {
                r.flags |= Flags::ACK_REQ;
                r.msg_id = msg_id;
                r.aux = u32::from(designated.get());
            }
            Control::Heartbeat { ref table } => r.aux = table.len() as u32,
            Control::Ping { rank } | Control::Pong { rank } | Control::Evict { rank } => {
                r.aux = u32::from(rank.get())
            }
            Control::Barrier(ref b) => {
                r.seq = b.epoch;
                r.msg_id = b.op.code();
                r.offset = b.round;
                r.bitmap = b.algo.code();
                r.aux = b.view;
            }
            Control::Join { .. } | Control::Notice { .. } => {}
        }
        r
    }

    /// Writes the frame for this message from `src` to `dst` of `group`, with the sender's
    /// control counter `ctr`, into `buf`; returns its length.
    pub fn emit(
        &self,
        group: u32,
        src: Rank,
        dst: Rank,
        ctr: u32,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let mut r = self.header();
        r.group = group;
        r.src = src;
        r.dst = dst;
        r.msg_len = ctr;
        match self {
            Control::Heartbeat { table: words }
            | Control::Nack { more: words, .. }
            | Control::PeerNack { more: words, .. }
            | Control::PeerPending { more: words, .. } => {
                let bytes: Vec<u8> = words.iter().flat_map(|c| c.to_be_bytes()).collect();
                r.emit(&bytes, buf)
            }
            Control::Barrier(b) => r.emit(&b.set, buf),
            Control::Join { body } | Control::Notice { body } => r.emit(body, buf),
            _ => r.emit(&[], buf),
        }
    }

    /// Emits into a new vector.
    pub fn to_vec(&self, group: u32, src: Rank, dst: Rank, ctr: u32) -> Vec<u8> {
        let mut v = vec![0u8; super::OVERHEAD + self.payload_len()];
        // The vector is exactly as long as the frame; only a payload above 65535 bytes can
        // fail, and then the frame is empty.
        match self.emit(group, src, dst, ctr, &mut v) {
            Ok(n) => v.truncate(n),
            Err(_) => v.clear(),
        }
        v
    }
}

/// A NACK's payload: the words its bitmap runs on for (see [`NACK_MORE_WORDS`]).
fn more_words(kind: Kind, payload: &[u8]) -> Result<Vec<u16>, WireError> {
    if !payload.len().is_multiple_of(2) || payload.len() > 2 * NACK_MORE_WORDS {
        return Err(WireError::BadPayload {
            kind,
            len: payload.len(),
        });
    }
    Ok(be_words(payload))
}

/// A payload of big-endian 16-bit words (of even length: the callers check).
fn be_words(payload: &[u8]) -> Vec<u16> {
    payload
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect()
}

/// The sender's control counter of a control frame.
pub fn control_counter<T: AsRef<[u8]>>(frame: &Frame<T>) -> u32 {
    frame.msg_len()
}

/// The control counters of one sender seen lately: a frame whose counter is not newer than
/// the last [`ReplayWindow::SPAN`] and not seen among them is accepted once (the IPsec
/// anti-replay window). Counters compare as plain numbers: a sender's counter never wraps
/// (its session ends at `u32::MAX`, see `engine::SessionEnded`), so a counter recorded at
/// any time of a session is older than every later one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReplayWindow {
    /// Highest counter accepted (0: none yet).
    top: u32,
    /// Bit `i` set: counter `top - i` was accepted.
    seen: u64,
}

/// How a [`ReplayWindow`] took a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Newer than every counter seen: the sender sent it after everything heard from it so
    /// far, so it proves the sender spoke lately (a sign of life).
    Newest,
    /// Inside the window and not seen, but older than the newest: taken once (frames may be
    /// reordered or lost on their way), yet no sign of life, since a frame held back by a
    /// third party looks the same.
    Late,
    /// Seen already, zero, or too old: refused.
    Refused,
}

impl ReplayWindow {
    /// Counters older than this many behind the highest are refused.
    pub(crate) const SPAN: u32 = 64;

    /// Accepts `ctr` if it was not seen and is not too old; records it.
    #[cfg(test)]
    pub(crate) fn accept(&mut self, ctr: u32) -> bool {
        self.admit(ctr) != Admit::Refused
    }

    /// Like [`ReplayWindow::accept`], telling whether `ctr` advanced the window's top.
    pub(crate) fn admit(&mut self, ctr: u32) -> Admit {
        if ctr == 0 {
            return Admit::Refused;
        }
        if self.top == 0 {
            self.top = ctr;
            self.seen = 1;
            return Admit::Newest;
        }
        if ctr > self.top {
            let ahead = ctr - self.top;
            self.seen = if ahead >= 64 { 0 } else { self.seen << ahead };
            self.seen |= 1;
            self.top = ctr;
            return Admit::Newest;
        }
        let back = self.top - ctr;
        if back >= Self::SPAN {
            return Admit::Refused;
        }
        let bit = 1u64 << back;
        if self.seen & bit != 0 {
            return Admit::Refused;
        }
        self.seen |= bit;
        Admit::Late
    }
}

/// Where a received sequence number falls relative to the next one expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// Before `expected`: already delivered (a duplicate or a late repair).
    Behind,
    /// Inside the window: the 64-bit position.
    Window(Seq),
    /// At or beyond `expected + window`: a confused or forged sender.
    Beyond,
}

/// The last position of a stream: a root's session ends before its sequence numbers would
/// wrap (see `engine::SessionEnded`), so that every wire number names one position.
pub(crate) const LAST_SEQ: Seq = Seq::new(u32::MAX as u64);

/// Places the wire sequence `wire` relative to `expected` and a window of `window` frames
/// (at most 2^31). Numbers within 2^31 behind `expected` are [`Position::Behind`]; a position
/// past [`LAST_SEQ`] is [`Position::Beyond`] (a root never sends one: a recording from early
/// in the stream, seen across the wrap); the arithmetic is checked, so no value overflows.
pub(crate) fn locate(expected: Seq, wire: u32, window: u32) -> Position {
    let ahead = wire.wrapping_sub(expected.low32());
    if ahead < window {
        expected
            .checked_add(u64::from(ahead))
            .filter(|&s| s <= LAST_SEQ)
            .map_or(Position::Beyond, Position::Window)
    } else if ahead >= 1 << 31 {
        Position::Behind
    } else {
        Position::Beyond
    }
}

/// The stream position of a number a receiver reports about frames the root `head` has
/// already published (`wire` at or before `head`, at most 2^32 - 1 behind): `None` if it
/// would lie before the stream's start.
pub(crate) fn behind(head: Seq, wire: u32) -> Option<Seq> {
    let back = head.low32().wrapping_sub(wire);
    head.checked_sub(u64::from(back))
}

#[cfg(test)]
mod tests;
