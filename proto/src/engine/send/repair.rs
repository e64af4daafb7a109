//! Repair scheduling at the root: which frame goes out as a repair next, to whom, and whether
//! it is re-broadcast.
//!
//! A NACK's bitmap queues repairs for that destination only (selective go-back-16); a probe
//! (a retransmission timer that fired) goes back to the destination's cursor. When frames go
//! out, repairs come before fresh data, round robin over the destinations that asked; a frame
//! that several destinations asked for is re-broadcast once instead of being unicast to each,
//! and for a moment after that, NACKs for it are not answered (they crossed the re-broadcast).
//! With a tree, the stream's last frame is re-broadcast once per timeout at the end of a
//! stream, so that every member that lost it sees its gap.
//!
//! **Invariants.** The repair queues themselves are the destinations' ([`crate::eqa::Lms`]);
//! this type keeps where the round robin stands, which destinations are being probed (a probe
//! is unicast, never re-broadcast) and how far the frames went when each was last asked how far
//! it has seen (its answer goes back over the frames sent before the question only), and when
//! each frame was last re-broadcast.

use std::time::Instant;

use crate::eqa::Eqa;
use crate::wire::control::nack_offsets;
use crate::wire::{self, Flags, Kind, NACK_BITS};
use crate::{Rank, Seq};

use super::room_for_every_rank;
use crate::engine::{Dest, EngineConfig, EngineStats};
use crate::machine::Transmit;

/// How long after a frame's re-broadcast the root takes no NACK for it, as a fraction of the
/// receivers' retry interval (`EngineConfig::nack_retry`): see [`Repairs::recently_rebroadcast`].
const REBROADCAST_HOLD_DIV: u32 = 2;

/// What a destination's retransmission timer asked of it.
#[derive(Debug, Clone, Copy, Default)]
struct Asked {
    /// The next repair to it is a probe (asks for an immediate acknowledgement).
    probe: bool,
    /// The frames sent (`sent_upto`) when the timer last asked it how far it has seen (a
    /// poll or a probe). Its answer speaks for those frames only: the question reached it
    /// behind them, and the frames sent after it may still be on their way.
    upto: Option<Seq>,
}

/// The repair scheduler of one root. See the module documentation.
#[derive(Debug)]
pub(super) struct Repairs {
    /// Where the round robin over the destinations stands.
    rr: usize,
    /// Per rank, what its retransmission timer asked of it (see [`Asked`]). Made at the
    /// first ask: most members never broadcast.
    asked: Vec<Asked>,
    /// When frames were last re-broadcast as repairs, by sequence number modulo its length
    /// (the buffer's slots; made at the first re-broadcast).
    rebroadcast_at: Vec<Option<(Seq, Instant)>>,
    /// With a tree: the stream's last frame is to be re-broadcast, and when it last was.
    tail_due: bool,
    tail_at: Option<Instant>,
    /// The destinations a repair serves, kept so that the list does not allocate.
    served: Vec<Rank>,
    /// Members in the group.
    size: usize,
}

impl Repairs {
    /// Nothing to repair, for a group of `cfg.size`.
    pub(super) fn new(cfg: &EngineConfig) -> Repairs {
        Repairs {
            rr: 0,
            asked: Vec::new(),
            rebroadcast_at: Vec::new(),
            tail_due: false,
            tail_at: None,
            served: Vec::new(),
            size: usize::from(cfg.size),
        }
    }

    /// The next repair to `rank` is a probe, asking how far it has seen with the frames
    /// before `sent_upto` sent (see [`Repairs::asked`]).
    pub(super) fn probe(&mut self, rank: Rank, sent_upto: Seq) {
        self.asked(rank, sent_upto);
        if let Some(a) = self.asked_mut(rank) {
            a.probe = true;
        }
    }

    /// NACK combining: whether frame `seq` was re-broadcast less than half a retry interval
    /// (`EngineConfig::nack_retry`) ago. A request for it then crossed the re-broadcast on its way
    /// (asked before the re-broadcast reached its sender, which takes it), and is not
    /// answered: a receiver that lost the re-broadcast too asks again after its retry
    /// interval, past this hold. Without it, every batch of NACKs for a frame lost at many
    /// receivers re-broadcast it again: at 4096 members with burst loss, 10 re-broadcasts per
    /// data frame, each a frame to every member.
    pub(super) fn recently_rebroadcast(&self, cfg: &EngineConfig, seq: Seq, now: Instant) -> bool {
        let Some(&Some((s, at))) = self.rebroadcast_slot(seq).map(|i| &self.rebroadcast_at[i])
        else {
            return false;
        };
        s == seq && now.saturating_duration_since(at) < cfg.nack_retry / REBROADCAST_HOLD_DIV
    }

    /// Counts a re-broadcast of frame `seq` and notes when it was made (for
    /// [`Repairs::recently_rebroadcast`]).
    fn rebroadcast_made(
        &mut self,
        cfg: &EngineConfig,
        seq: Seq,
        now: Instant,
        stats: &mut EngineStats,
    ) {
        stats.rebroadcasts += 1;
        if self.rebroadcast_at.is_empty() {
            self.rebroadcast_at = vec![None; cfg.window.max(1)];
        }
        if let Some(i) = self.rebroadcast_slot(seq) {
            self.rebroadcast_at[i] = Some((seq, now));
        }
    }

    fn rebroadcast_slot(&self, seq: Seq) -> Option<usize> {
        let n = self.rebroadcast_at.len() as u64;
        (n > 0).then(|| (seq.get() % n) as usize)
    }

    /// A NACK of `src` for the frames of `missing` and `more` from `base`: those sent
    /// (before `sent_upto`) are queued for it, except those re-broadcast a moment ago.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_nack(
        &self,
        cfg: &EngineConfig,
        now: Instant,
        eqa: &mut Eqa,
        src: Rank,
        (base, missing, more): (Seq, u16, &[u16]),
        sent_upto: Seq,
    ) {
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < sent_upto && !self.recently_rebroadcast(cfg, s, now) {
                eqa.request_repair(src, s);
            }
        }
    }

    /// `rank`'s retransmission timer asks it how far it has seen (a poll, or a probe), with
    /// the frames before `sent_upto` sent.
    pub(super) fn asked(&mut self, rank: Rank, sent_upto: Seq) {
        if let Some(a) = self.asked_mut(rank) {
            a.upto = Some(sent_upto);
        }
    }

    /// What was asked of `rank` (the table made at the first ask).
    fn asked_mut(&mut self, rank: Rank) -> Option<&mut Asked> {
        if self.asked.is_empty() {
            self.asked = vec![Asked::default(); self.size];
        }
        self.asked.get_mut(rank.index())
    }

    /// The answer to a poll or probe from `src`: everything after what it has seen (`seen`)
    /// that was sent before it was asked, up to 16 frames, was lost (the question reached it
    /// behind those frames): go back over it. Frames sent after the question may still be
    /// on their way (a receiver working through a batch answers later than the timer), and
    /// are left to its NACKs and the next timeout.
    pub(super) fn on_probe_answer(&self, eqa: &mut Eqa, src: Rank, seen: Seq, sent_upto: Seq) {
        let cursor = eqa.lms(src).map_or(seen, |l| l.cursor());
        let asked = self
            .asked
            .get(src.index())
            .and_then(|a| a.upto)
            .unwrap_or(sent_upto);
        let end = asked.min(cursor + u64::from(NACK_BITS));
        for s in seen.max(cursor).up_to(end) {
            eqa.request_repair(src, s);
        }
    }

    /// With a tree, at the end of the stream (everything queued sent, `idle`): members that
    /// lost its last frames cannot tell, and a subtree's report names one laggard only, so the
    /// root found them one after another, a timeout each (at 2048 members with burst loss,
    /// about 100 of them over 360 ms). The last frame, re-broadcast, shows every one of them
    /// its gap at once; they ask for it as for any other. At most once per `rto`, when a
    /// timer of `fired` belongs to a destination that lacks it.
    pub(super) fn note_tail(
        &mut self,
        cfg: &EngineConfig,
        now: Instant,
        idle: bool,
        eqa: &Eqa,
        sent_upto: Seq,
        fired: &[Rank],
    ) {
        let tail = cfg.ack_tree > 0
            && idle
            && sent_upto > Seq::new(0)
            && sent_upto == eqa.head()
            && self
                .tail_at
                .is_none_or(|t| now.saturating_duration_since(t) >= cfg.rto)
            && fired.iter().any(|&r| {
                eqa.lms(r)
                    .is_some_and(|l| l.is_live() && l.cursor() < sent_upto)
            });
        if tail {
            self.tail_due = true;
            self.tail_at = Some(now);
        }
    }

    /// Writes the next repair into `buf`, if one is due: the tail's re-broadcast, else the
    /// next destination's (round robin), re-broadcast when enough destinations asked for it
    /// and none of them is served point to point.
    pub(super) fn poll(
        &mut self,
        cfg: &EngineConfig,
        now: Instant,
        buf: &mut [u8],
        eqa: &mut Eqa,
        sent_upto: Seq,
        stats: &mut EngineStats,
    ) -> Option<Transmit<Dest>> {
        if std::mem::take(&mut self.tail_due) {
            let seq = sent_upto - 1;
            if let Some(slot) = eqa.slot(seq) {
                let mut repr = *slot.repr();
                repr.kind = Some(Kind::Repair);
                repr.dst = wire::ALL;
                repr.flags |= Flags::BROADCAST;
                let len = repr.emit(slot.payload(), buf).ok()?;
                self.rebroadcast_made(cfg, seq, now, stats);
                stats.repair_frames += 1;
                return Some(Transmit {
                    dst: Dest::All,
                    len,
                });
            }
        }
        let n = eqa.dests().len();
        // Round robin over the destinations with queued repairs only.
        while let Some(i) = eqa.next_with_repairs(self.rr) {
            let rank = eqa.dests()[i].rank();
            let Some(seq) = eqa.pop_repair(rank) else {
                continue;
            };
            self.rr = (i + 1) % n;
            let probe = self
                .asked
                .get_mut(rank.index())
                .is_some_and(|a| std::mem::take(&mut a.probe));
            let others = eqa.slot(seq).map_or(0, |s| usize::from(s.want()));
            let unicast = eqa.lms(rank).is_some_and(|l| l.route.repairs_alone());
            // A probe asks its destination alone for an acknowledgement: re-broadcast, it asked
            // every member, and each answered the root directly (at 4096 members with burst
            // loss, a million answers: 63 control frames into the roots per data frame).
            let rebroadcast = !unicast && !probe && others + 1 >= cfg.rebroadcast_min;
            let slot = eqa.slot(seq)?;
            let mut repr = *slot.repr();
            repr.kind = Some(Kind::Repair);
            if probe {
                repr.flags |= Flags::ACK_REQ;
            }
            let dst = if rebroadcast {
                repr.dst = wire::ALL;
                repr.flags |= Flags::BROADCAST;
                Dest::All
            } else {
                repr.dst = rank;
                repr.flags.remove(Flags::BROADCAST);
                Dest::Rank(rank)
            };
            let len = repr.emit(slot.payload(), buf).ok()?;
            let bytes = slot.payload().len() as u64;
            let mut served = std::mem::take(&mut self.served);
            served.clear();
            room_for_every_rank(&mut served, cfg);
            served.push(rank);
            if rebroadcast {
                eqa.withdraw_repair(seq, &mut served);
                let mut k = 1;
                while let Some(&r) = served.get(k) {
                    if eqa.lms(r).is_some_and(|l| l.route.repairs_alone()) {
                        // The re-broadcast may not reach it: it keeps its own request.
                        eqa.request_repair(r, seq);
                        served.swap_remove(k);
                    } else {
                        k += 1;
                    }
                }
                self.rebroadcast_made(cfg, seq, now, stats);
            }
            for &r in &served {
                if let Some(l) = eqa.lms_mut(r) {
                    l.route.repaired();
                    l.stats.repairs += 1;
                    l.stats.repaired_bytes += bytes;
                    if rebroadcast {
                        l.stats.rebroadcasts += 1;
                    }
                }
            }
            self.served = served;
            stats.repair_frames += 1;
            return Some(Transmit { dst, len });
        }
        None
    }
}

#[cfg(test)]
mod tests {

    use std::time::Instant;

    use crate::engine::{Dest, EngineConfig, EngineStats};
    use crate::eqa::Eqa;
    use crate::wire::{Flags, Kind, Repr, NACK_BITS};
    use crate::{Rank, Seq};

    use super::Repairs;

    /// A root of `n` members with `frames` frames published and sent.
    fn root(n: u16, frames: u64) -> (EngineConfig, Eqa) {
        let mut c = EngineConfig::new(1, Rank::new(0), n);
        c.window = 16;
        c.rebroadcast_min = 2;
        let mut eqa = Eqa::new(c.window, c.slot_payload(), std::iter::empty(), 8, c.rto);
        for r in 1..n {
            eqa.add_dest(Rank::new(r), 8, c.rto);
        }
        for _ in 0..frames {
            let repr = Repr {
                kind: Some(Kind::Data),
                flags: Flags::BROADCAST,
                msg_len: 3,
                ..Repr::default()
            };
            eqa.publish(repr, b"abc").unwrap();
        }
        (c, eqa)
    }

    #[test]
    fn a_frame_one_asked_for_is_unicast_and_one_many_asked_for_is_rebroadcast_once() {
        let (c, mut eqa) = root(4, 4);
        let mut r = Repairs::new(&c);
        let (mut stats, mut buf, t0) = (EngineStats::default(), vec![0u8; 1500], Instant::now());
        let sent = Seq::new(4);
        r.on_nack(
            &c,
            t0,
            &mut eqa,
            Rank::new(1),
            (Seq::new(1), 0b1, &[]),
            sent,
        );
        let t = r
            .poll(&c, t0, &mut buf, &mut eqa, sent, &mut stats)
            .unwrap();
        assert_eq!(t.dst, Dest::Rank(Rank::new(1)));
        for m in [2, 3] {
            r.on_nack(
                &c,
                t0,
                &mut eqa,
                Rank::new(m),
                (Seq::new(2), 0b1, &[]),
                sent,
            );
        }
        let t = r
            .poll(&c, t0, &mut buf, &mut eqa, sent, &mut stats)
            .unwrap();
        assert_eq!(t.dst, Dest::All);
        assert!(
            r.poll(&c, t0, &mut buf, &mut eqa, sent, &mut stats)
                .is_none(),
            "once"
        );
        assert_eq!((stats.repair_frames, stats.rebroadcasts), (2, 1));
        // A NACK that crossed the re-broadcast is not answered; a later one is.
        assert!(r.recently_rebroadcast(&c, Seq::new(2), t0));
        r.on_nack(
            &c,
            t0,
            &mut eqa,
            Rank::new(1),
            (Seq::new(2), 0b1, &[]),
            sent,
        );
        assert!(!eqa.has_repairs());
        let later = t0 + c.nack_retry;
        r.on_nack(
            &c,
            later,
            &mut eqa,
            Rank::new(1),
            (Seq::new(2), 0b1, &[]),
            sent,
        );
        assert!(eqa.has_repairs());
        // Frames not sent yet are not repaired.
        let (c, mut eqa) = root(2, 4);
        Repairs::new(&c).on_nack(
            &c,
            t0,
            &mut eqa,
            Rank::new(1),
            (Seq::new(3), 0b11, &[]),
            sent,
        );
        assert_eq!(eqa.lms(Rank::new(1)).unwrap().repair_queue().len(), 1);
    }

    #[test]
    fn a_probe_is_unicast_and_asks_for_an_acknowledgement() {
        let (c, mut eqa) = root(4, 2);
        let mut r = Repairs::new(&c);
        let (mut stats, mut buf) = (EngineStats::default(), vec![0u8; 1500]);
        let t0 = Instant::now();
        for m in 1..4 {
            eqa.request_repair(Rank::new(m), Seq::new(0));
        }
        r.probe(Rank::new(1), Seq::new(16));
        let t = r
            .poll(&c, t0, &mut buf, &mut eqa, Seq::new(2), &mut stats)
            .unwrap();
        assert_eq!(t.dst, Dest::Rank(Rank::new(1)));
        let f = crate::wire::Frame::new_checked(&buf[..t.len]).unwrap();
        assert!(f.flags().contains(Flags::ACK_REQ));
        // The answer to a probe goes back over what the destination has not seen.
        let (_, mut eqa) = root(2, 16);
        r.on_probe_answer(&mut eqa, Rank::new(1), Seq::new(2), Seq::new(16));
        let q = eqa.lms(Rank::new(1)).unwrap().repair_queue().len();
        assert_eq!(
            q as u32,
            8.min(NACK_BITS),
            "from the cursor, within the repair queue"
        );
    }

    #[test]
    fn with_a_tree_the_streams_last_frame_is_rebroadcast_at_most_once_per_rto() {
        let (mut c, eqa) = root(4, 3);
        c.ack_tree = 2;
        let mut r = Repairs::new(&c);
        let (mut stats, mut buf, t0) = (EngineStats::default(), vec![0u8; 1500], Instant::now());
        let mut eqa = eqa;
        let fired = [Rank::new(2)];
        r.note_tail(&c, t0, true, &eqa, Seq::new(3), &fired);
        let t = r
            .poll(&c, t0, &mut buf, &mut eqa, Seq::new(3), &mut stats)
            .unwrap();
        assert_eq!(t.dst, Dest::All);
        r.note_tail(&c, t0 + c.rto / 2, true, &eqa, Seq::new(3), &fired);
        assert!(r
            .poll(&c, t0, &mut buf, &mut eqa, Seq::new(3), &mut stats)
            .is_none());
        r.note_tail(&c, t0 + c.rto, false, &eqa, Seq::new(3), &fired);
        assert!(
            r.poll(&c, t0, &mut buf, &mut eqa, Seq::new(3), &mut stats)
                .is_none(),
            "busy"
        );
    }
}
