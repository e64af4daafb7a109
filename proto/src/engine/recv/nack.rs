//! NACKs: how the stream asks for the frames it is missing.
//!
//! Gaps are found by sequence number; a NACK carries the first missing sequence, a bitmap of
//! the 16 frames from there (more words for a longer reach), and the cumulative
//! acknowledgement. New gaps are gathered for a moment (`EngineConfig::nack_gather`) so that one
//! NACK names several; a frame asked for is asked again only after the retry interval, which
//! follows the repairs' round trip and doubles per retry without progress. With peer repair a
//! frame is asked of the fellow receiver first (twice), then of the root; with a tree, of the
//! parent until it says it will not have the frame or is given up for its silence.
//!
//! **Invariants.** `from`, when set, is at or after the oldest gap found since the last NACK;
//! `backoff` is at most 6 (the interval at most 64 times its base) and is 0 again whenever the
//! stream moves.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::wire::control::{NackBitmap, NACK_REACH};
use crate::wire::Control;
use crate::{Rank, Seq};

use super::peer::PeerRepair;
use super::window::{SlotState, WSlot, Window};
use crate::engine::timer::{StreamTimer, StreamTimers};
use crate::engine::{EngineConfig, Outgoing};

/// The NACK state of one stream. See the module documentation.
#[derive(Debug)]
pub(super) struct Nacks {
    /// Frames from here on were found missing since the last NACK: ask for them now (the
    /// older gaps wait for the retry timer, so a new gap costs a scan of itself only).
    from: Option<Seq>,
    /// Retries without progress (the interval doubles per retry).
    backoff: u32,
    /// Smoothed time from a NACK to the repair it asked for.
    repair_rtt: Option<Duration>,
    /// The shortest retry interval (`EngineConfig::nack_retry`).
    retry: Duration,
    /// Frames that follow a new gap before it is asked for (`EngineConfig::nack_gather`; 32 bits:
    /// the receiver's size is the paper's `s_RDP`).
    gather: u32,
    /// The longest a new gap waits for them (`EngineConfig::nack_gather_wait`).
    gather_wait: Duration,
}

/// What the NACK timer should do after the stream changed (see [`Nacks::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// New gaps are being gathered: wait.
    Gather,
    /// Ask now for the gaps from here on.
    Ask(Seq),
    /// Nothing to ask now.
    Nothing,
}

/// What asking sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Asked {
    /// A NACK (to the peer or the root) went out.
    pub(super) any: bool,
    /// A NACK went to the root (which carries the cumulative acknowledgement).
    pub(super) root: bool,
}

impl Nacks {
    /// Nothing missing, nothing asked.
    pub(super) fn new(cfg: &EngineConfig) -> Nacks {
        Nacks {
            from: None,
            backoff: 0,
            repair_rtt: None,
            retry: cfg.nack_retry,
            gather: u32::try_from(cfg.nack_gather).unwrap_or(u32::MAX),
            gather_wait: cfg.nack_gather_wait,
        }
    }

    /// Frames from `from` on were found missing: ask for them at the next chance.
    pub(super) fn found(&mut self, from: Seq) {
        self.from = Some(self.from.map_or(from, |f| f.min(from)));
    }

    /// The stream moved: retries start over at their shortest interval.
    pub(super) fn progress(&mut self) {
        self.backoff = 0;
    }

    /// A repair arrived `rtt` after it was asked for.
    pub(super) fn sample(&mut self, rtt: Duration) {
        self.repair_rtt = Some(match self.repair_rtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
    }

    /// How long a NACKed frame is given to arrive before it is asked for again: the configured
    /// retry, or one and a half repair round trips when those are longer (a busy root, or
    /// repairs queued behind data in the switch), doubled per retry without progress.
    pub(super) fn interval(&self) -> Duration {
        let rtt = self.repair_rtt.map_or(Duration::ZERO, |r| r + r / 2);
        self.retry.max(rtt) * (1 << self.backoff)
    }

    /// After the stream changed at `now` (`gap`: the next expected frame is missing while
    /// `highest` came): gathers new gaps, says when to ask, and keeps the NACK timer in step.
    /// With [`Plan::Ask`] the caller asks, then arms the timer for the retry.
    pub(super) fn plan(
        &mut self,
        now: Instant,
        gap: bool,
        highest: Seq,
        timers: &mut StreamTimers<'_>,
    ) -> Plan {
        let plan = match self.from {
            // Gathering (`EngineConfig::nack_gather`): asked once enough frames followed the first
            // gap, or at the timer; `from` stays until then.
            Some(from) if gap && highest < from + u64::from(self.gather) => {
                let t = now + self.gather_wait;
                let at = timers.get(StreamTimer::Nack).map_or(t, |a| a.min(t));
                timers.set(StreamTimer::Nack, at);
                return Plan::Gather;
            }
            Some(from) if gap => Plan::Ask(from),
            _ if gap && !timers.is_armed(StreamTimer::Nack) => {
                timers.set(StreamTimer::Nack, now + self.interval());
                Plan::Nothing
            }
            _ if !gap => {
                timers.stop(StreamTimer::Nack);
                Plan::Nothing
            }
            _ => Plan::Nothing,
        };
        self.from = None;
        plan
    }

    /// The NACK timer fired at `now` with frames missing (`gap`): whether to ask for every
    /// gap from the next expected frame, and whether it is a retry (not the first ask of the
    /// gaps gathered). Without a gap the timer stops.
    pub(super) fn on_timer(&mut self, gap: bool, timers: &mut StreamTimers<'_>) -> Option<bool> {
        if gap {
            // Gaps gathered until now are asked for the first time: no back-off for them.
            Some(self.from.take().is_none())
        } else {
            timers.stop(StreamTimer::Nack);
            self.from = None;
            None
        }
    }

    /// A retry went out without progress since the last: the next waits twice as long.
    pub(super) fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(6);
    }

    /// Arms the NACK timer for the next retry.
    pub(super) fn rearm(&self, now: Instant, timers: &mut StreamTimers<'_>) {
        timers.set(StreamTimer::Nack, now + self.interval());
    }

    /// Asks for the missing frames of `root`'s stream from `from` on that were never asked
    /// for, or not within the retry interval: a repair already on its way is not asked for
    /// again. Each is asked of the peer first (`peer`), then of the root; `tree`: the stream
    /// has a place in an acknowledgement tree (a large group). NACKs go to `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask(
        &self,
        now: Instant,
        from: Seq,
        window: &mut Window,
        peer: &mut PeerRepair,
        tree: bool,
        root: Rank,
        out: &mut VecDeque<Outgoing>,
    ) -> Asked {
        peer.resume();
        let retry = self.interval();
        let expected = window.expected();
        let end = window.highest().min(expected + window.len());
        let due = |slot: &WSlot| {
            !slot.state.contains(SlotState::HAVE)
                && slot
                    .nacked
                    .is_none_or(|t| now.saturating_duration_since(t) >= retry)
        };
        let mut b = expected.max(from);
        let mut asked = Asked::default();
        let fellow = peer.peer();
        // Whether this ask repeats a request to the peer that went unanswered: counted once,
        // however many frames it named. Counted per frame, one late answer to a request for
        // a burst's 17 frames (queued behind a window of data at the asker's switch port)
        // gave up the peer at once, and its next 128 losses went to the root: at 256 members
        // with burst loss, most of the root's NACKs.
        let mut unanswered = false;
        while b < end {
            let Some(base) = b.up_to(end).find(|&s| due(window.slot(window.idx(s)))) else {
                break;
            };
            // A frame is asked of the peer once, then of the root. One NACK to each names
            // every frame due within its reach from `base`.
            let stop = end.min(base + u64::from(NACK_REACH));
            let (mut to_peer, mut to_root) = (NackBitmap::default(), NackBitmap::default());
            for s in base.up_to(stop) {
                let k = (s - base) as u32;
                let i = window.idx(s);
                if !due(window.slot(i)) {
                    continue;
                }
                let slot = window.slot_mut(i);
                let again = slot.nacked.is_some();
                if fellow.is_some() && !slot.state.contains(SlotState::PEER_ASKED) {
                    slot.state.insert(SlotState::PEER_ASKED);
                    to_peer.set(k);
                } else if fellow.is_some() && tree && !slot.state.contains(SlotState::ROOT_NEXT) {
                    // With a tree the peer is the parent, which answers every request: with
                    // the frames, or saying it lacks them too and relays them when they come.
                    // Its answer not in yet is late (queued behind the data at this member's
                    // port, where the repair of the root would queue too) or lost: the parent
                    // is asked again, never the root on its account. Asked of the root after
                    // a third ask, the frames lost here went to the root in proportion to the
                    // group (at 1024 members with four roots, each member's port queues a
                    // few milliseconds of data: 0.78 root NACKs per data frame). A dead
                    // parent is given up for its silence (`PeerRepair::give_up_if_silent`),
                    // and the root's retransmission timer repairs this member meanwhile.
                    unanswered |= again;
                    to_peer.set(k);
                } else if fellow.is_some()
                    && again
                    && !slot.state.contains(SlotState::PEER_ASKED_AGAIN)
                {
                    // The peer has it (it did not say otherwise) and its repair did not come
                    // in time: most likely lost. Asked once more before the root.
                    unanswered = true;
                    slot.state.insert(SlotState::PEER_ASKED_AGAIN);
                    to_peer.set(k);
                } else {
                    if slot.state.contains(SlotState::PEER_ASKED) && again {
                        // Asked of the peer, and its retry interval passed unanswered.
                        unanswered = true;
                    }
                    to_root.set(k);
                    peer.asked_root();
                }
                slot.nacked = Some(now);
            }
            if let (Some(fellow), Some((missing, more))) = (fellow, to_peer.take()) {
                let ask = Control::PeerNack {
                    root,
                    base: base.low32(),
                    missing,
                    unheld: false,
                    more,
                };
                out.push_back(Outgoing::to(fellow, ask));
            }
            if let Some((missing, more)) = to_root.take() {
                let nack = Control::Nack {
                    base: base.low32(),
                    missing,
                    next: expected.low32(),
                    more,
                };
                out.push_back(Outgoing::to(root, nack));
                asked.root = true;
            }
            b = stop;
            asked.any = true;
        }
        if unanswered {
            peer.unanswered();
        }
        peer.give_up_if_silent(root);
        asked
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, Instant};

    use crate::engine::recv::{PeerRepair, SlotState, Window};
    use crate::engine::timer::StreamTimer;
    use std::collections::VecDeque;

    use crate::engine::{EngineConfig, Outgoing};
    use crate::wire::control::nack_offsets;
    use crate::wire::Control;
    use crate::{Rank, Seq};

    use super::{Asked, Nacks, Plan};
    use crate::engine::timer::TimerTable;

    fn config() -> EngineConfig {
        let mut c = EngineConfig::new(1, Rank::new(1), 3);
        c.window = 64;
        c.nack_retry = Duration::from_millis(1);
        c.nack_gather = 4;
        c.nack_gather_wait = Duration::from_micros(200);
        c
    }

    /// A window that has frames 0..from and `to`, not those between.
    fn with_gap(cfg: &EngineConfig, upto: u64, then: u64) -> Window {
        let mut w = Window::new(cfg);
        for s in 0..upto {
            w.accept(Seq::new(s));
            w.advance();
        }
        w.accept(Seq::new(then));
        let i = w.idx(Seq::new(then));
        w.slot_mut(i).state.insert(SlotState::HAVE);
        w
    }

    /// The (destination, base, missing frames) of each NACK in `out`.
    fn nacks(out: &VecDeque<Outgoing>) -> Vec<(Rank, bool, u32, Vec<u32>)> {
        out.iter()
            .filter_map(|o| match o {
                Outgoing::Own {
                    dst: crate::engine::Dest::Rank(r),
                    msg,
                } => match msg {
                    Control::Nack {
                        base,
                        missing,
                        more,
                        ..
                    } => Some((*r, false, *base, nack_offsets(*missing, more).collect())),
                    Control::PeerNack {
                        base,
                        missing,
                        more,
                        ..
                    } => Some((*r, true, *base, nack_offsets(*missing, more).collect())),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn gaps_are_gathered_then_asked_for_once_per_retry_interval() {
        let cfg = config();
        let t0 = Instant::now();
        let mut n = Nacks::new(&cfg);
        let mut table = TimerTable::new(3);
        let place = table.add_stream(Rank::new(0));
        let mut w = with_gap(&cfg, 2, 4);
        n.found(Seq::new(2));
        // Fewer than `nack_gather` frames followed the gap: wait, at most the gather wait.
        let plan = n.plan(t0, w.gap(), w.highest(), &mut table.stream(place));
        assert_eq!(plan, Plan::Gather);
        assert_eq!(
            table.stream(place).get(StreamTimer::Nack),
            Some(t0 + cfg.nack_gather_wait)
        );
        w.accept(Seq::new(6));
        let i = w.idx(Seq::new(6));
        w.slot_mut(i).state.insert(SlotState::HAVE);
        let plan = n.plan(t0, w.gap(), w.highest(), &mut table.stream(place));
        assert_eq!(plan, Plan::Ask(Seq::new(2)));
        let mut peer = PeerRepair::new(&cfg);
        let mut out = VecDeque::new();
        let asked = n.ask(
            t0,
            Seq::new(2),
            &mut w,
            &mut peer,
            false,
            Rank::new(0),
            &mut out,
        );
        assert_eq!(
            asked,
            Asked {
                any: true,
                root: true
            }
        );
        assert_eq!(nacks(&out), [(Rank::new(0), false, 2, vec![0, 1, 3])]);
        // Asked again only once the retry interval passed.
        out.clear();
        let asked = n.ask(
            t0,
            Seq::new(2),
            &mut w,
            &mut peer,
            false,
            Rank::new(0),
            &mut out,
        );
        assert!(!asked.any && out.is_empty());
        let later = t0 + n.interval();
        n.ask(
            later,
            Seq::new(2),
            &mut w,
            &mut peer,
            false,
            Rank::new(0),
            &mut out,
        );
        assert_eq!(nacks(&out).len(), 1);
        // Back-off doubles the interval; progress resets it.
        let base = n.interval();
        n.back_off();
        assert_eq!(n.interval(), base * 2);
        n.progress();
        assert_eq!(n.interval(), base);
        // No gap: the timer stops.
        assert_eq!(n.on_timer(false, &mut table.stream(place)), None);
        assert!(!table.stream(place).is_armed(StreamTimer::Nack));
    }

    #[test]
    fn a_request_for_many_frames_answered_late_counts_once_against_the_peer() {
        // A burst of 40 frames lost: asked of the peer, and asked again when no repair came
        // within the retry interval (queued behind data at this member's port, say). One
        // request went unanswered, not 40: the peer is still asked.
        let cfg = config();
        let t0 = Instant::now();
        let n = Nacks::new(&cfg);
        let mut w = with_gap(&cfg, 0, 40);
        let mut peer = PeerRepair::new(&cfg);
        let fellow = Rank::new(2);
        peer.set_peer(Some(fellow));
        let mut out = VecDeque::new();
        n.ask(
            t0,
            Seq::new(0),
            &mut w,
            &mut peer,
            false,
            Rank::new(0),
            &mut out,
        );
        n.ask(
            t0 + n.interval(),
            Seq::new(0),
            &mut w,
            &mut peer,
            false,
            Rank::new(0),
            &mut out,
        );
        let got = nacks(&out);
        assert_eq!(got.len(), 2);
        assert!(
            got.iter().all(|g| g.0 == fellow && g.3.len() == 40),
            "{got:?}"
        );
        assert_eq!(peer.peer(), Some(fellow), "the peer was given up");
    }

    #[test]
    fn a_frame_is_asked_of_the_peer_first_then_again_then_of_the_root() {
        let cfg = config();
        let t0 = Instant::now();
        let n = Nacks::new(&cfg);
        let mut w = with_gap(&cfg, 0, 1);
        let mut peer = PeerRepair::new(&cfg);
        peer.set_peer(Some(Rank::new(2)));
        let mut out = VecDeque::new();
        let (root, fellow) = (Rank::new(0), Rank::new(2));
        let mut at = t0;
        for want in [fellow, fellow, root] {
            out.clear();
            n.ask(at, Seq::new(0), &mut w, &mut peer, false, root, &mut out);
            let got = nacks(&out);
            assert_eq!(got.len(), 1);
            assert_eq!((got[0].0, &got[0].3), (want, &vec![0]));
            at += n.interval();
        }
    }
}
