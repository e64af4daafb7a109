//! Acknowledgements and NACKs: when the stream acknowledges (every `ack_every` frames, when
//! the root asks, after a quiet period), how gaps are asked for (gathered, retried with
//! back-off, of the peer first), and what happens when the receiver's timers fire.

use super::peer::{PEER_OFF_FIRST, PEER_OFF_MAX_DOUBLINGS, PEER_SILENCE_LIMIT};
use super::*;

impl Receiver {
    pub(super) fn schedule(&mut self, now: Instant) {
        self.release_held(now);
        if let Some(sent) = self.tree.as_ref().map(|t| t.sent).filter(|_| !self.ack_now) {
            self.schedule_report(now, sent);
        } else if self.ack_now || self.unacked >= self.ack_every {
            self.send_ack(now);
        }
        // Off the critical path: one acknowledgement per `ack_every` frames (half the window)
        // while the root keeps sending, and the rest when the root asks (its poll or a probe,
        // when its retransmission timer fires on an idle stream). No timer of the receiver's
        // own: a sleep bounded by a sub-millisecond quiet timer re-armed per message cost a
        // virtual machine's receivers a third of their CPU per broadcast (clock-event
        // reprogramming); the root's timer runs once per idle period instead.
        let gap = self.expected < self.highest
            && !self.slots[self.idx(self.expected)]
                .state
                .contains(SlotState::HAVE);
        match self.nack_from {
            // Gathering (`Config::nack_gather`): asked once enough frames followed the first
            // gap, or at the timer; `nack_from` stays until then.
            Some(from) if gap && self.highest < from + self.nack_gather => {
                let t = now + self.nack_gather_wait;
                let at = self.timers.get(Timer::Nack).map_or(t, |a| a.min(t));
                self.timers.set(Timer::Nack, at);
                return;
            }
            Some(from) if gap => {
                self.send_nacks(now, from);
                self.timers.set(Timer::Nack, now + self.nack_interval());
            }
            _ if gap && !self.timers.is_armed(Timer::Nack) => {
                self.timers.set(Timer::Nack, now + self.nack_interval());
            }
            _ if !gap => self.timers.stop(Timer::Nack),
            _ => {}
        }
        self.nack_from = None;
    }

    /// (Re)starts the quiet timer at `now`: due `ack_delay` from now, lazily (see
    /// `quiet_from`). An earlier deadline that is not the quiet timer (a new tree's first
    /// report) stands.
    pub(super) fn quiet(&mut self, now: Instant) {
        match self.timers.get(Timer::Ack) {
            None => {
                self.timers.set(Timer::Ack, now + self.ack_delay);
                self.quiet_from = Some(now);
            }
            Some(_) if self.quiet_from.is_some() => self.quiet_from = Some(now),
            Some(_) => {}
        }
    }

    pub(super) fn send_ack(&mut self, now: Instant) {
        self.ack_now = false;
        self.timers.stop(Timer::Ack);
        self.quiet_from = None;
        self.acked = self.expected;
        self.unacked = 0;
        // Answering a probe: say how far we have seen, so that the root can go back over
        // everything after it (go-back-16) instead of probing frame by frame.
        let seen =
            std::mem::take(&mut self.probe_answer).then(|| self.highest.max(self.expected).low32());
        // A probe's answer goes straight to the root, which is not hearing of this member's
        // progress through the tree (an ancestor may have died).
        let direct = self.tree.is_none() || seen.is_some();
        if direct {
            let ack = Control::Ack {
                next: self.expected.low32(),
                seen,
            };
            self.controls.push_back(Outgoing::to(self.root, ack));
        }
        // The root's children report on their own schedule even when their subtree did not
        // move: the root learns which member it waits for, and stops probing the others.
        // A probe's answer also reports again to the parent, even unchanged: a report on the
        // way up may have been lost.
        let again = std::mem::take(&mut self.rereport);
        self.report(now, seen.is_some() || again);
    }

    /// Asks for the missing frames from `from` on that were never asked for, or not within the
    /// retry interval: a repair already on its way is not asked for again. Returns whether a
    /// NACK went out.
    pub(super) fn send_nacks(&mut self, now: Instant, from: Seq) -> bool {
        if let Some((peer, 0)) = self.peer_off {
            // Its pause is over: ask it again.
            self.peer = Some(peer);
            self.peer_off = None;
            self.peer_silence = 0;
        }
        let retry = self.nack_interval();
        let end = self.highest.min(self.expected + self.window());
        let due = |slot: &WSlot| {
            !slot.state.contains(SlotState::HAVE)
                && slot
                    .nacked
                    .is_none_or(|t| now.saturating_duration_since(t) >= retry)
        };
        let mut b = self.expected.max(from);
        let mut sent = false;
        let mut sent_root = false;
        while b < end {
            let Some(base) = b.up_to(end).find(|&s| due(&self.slots[self.idx(s)])) else {
                break;
            };
            // A frame is asked of the peer once, then of the root. One NACK to each names
            // every frame due within its reach from `base`.
            let stop = end.min(base + u64::from(NACK_REACH));
            let (mut to_peer, mut to_root) = (NackBitmap::default(), NackBitmap::default());
            for s in base.up_to(stop) {
                let k = (s - base) as u32;
                let i = self.idx(s);
                if due(&self.slots[i]) {
                    let slot = &mut self.slots[i];
                    let retry = slot.nacked.is_some();
                    if self.peer.is_some() && !slot.state.contains(SlotState::PEER_ASKED) {
                        slot.state.insert(SlotState::PEER_ASKED);
                        to_peer.set(k);
                    } else if self.peer.is_some()
                        && retry
                        && !slot.state.contains(SlotState::PEER_ASKED_AGAIN)
                    {
                        // The peer has it (it did not say otherwise) and its repair did not
                        // come in time: most likely lost. Asked once more before the root.
                        self.peer_silence = self.peer_silence.saturating_add(1);
                        slot.state.insert(SlotState::PEER_ASKED_AGAIN);
                        to_peer.set(k);
                    } else if self.peer.is_some()
                        && retry
                        && self.tree.is_some()
                        && !slot.state.contains(SlotState::PEER_ASKED_THIRD)
                    {
                        // With a tree (a large group), a third time: under burst loss the
                        // peer's repair often falls into the same burst at this member as the
                        // frame, and the repeat 1 ms later into another. Each ask of the root
                        // instead adds to NACKs into it that grow with the group: at 1024
                        // members with burst loss, 1.39 to 0.86 root NACKs per data frame.
                        self.peer_silence = self.peer_silence.saturating_add(1);
                        slot.state.insert(SlotState::PEER_ASKED_THIRD);
                        to_peer.set(k);
                    } else {
                        if slot.state.contains(SlotState::PEER_ASKED) && slot.nacked.is_some() {
                            // Asked of the peer, and its retry interval passed unanswered.
                            self.peer_silence = self.peer_silence.saturating_add(1);
                        }
                        to_root.set(k);
                        if let Some((_, left)) = self.peer_off.as_mut() {
                            *left = left.saturating_sub(1);
                        }
                    }
                    slot.nacked = Some(now);
                }
            }
            if let (Some(peer), Some((missing, more))) = (self.peer, to_peer.take()) {
                let ask = Control::PeerNack {
                    root: self.root,
                    base: base.low32(),
                    missing,
                    unheld: false,
                    more,
                };
                self.controls.push_back(Outgoing::to(peer, ask));
            }
            if let Some((missing, more)) = to_root.take() {
                let nack = Control::Nack {
                    base: base.low32(),
                    missing,
                    next: self.expected.low32(),
                    more,
                };
                self.controls.push_back(Outgoing::to(self.root, nack));
                sent_root = true;
            }
            b = stop;
            sent = true;
        }
        if let Some(peer) = self
            .peer
            .filter(|_| self.peer_silence >= PEER_SILENCE_LIMIT)
        {
            let frames = PEER_OFF_FIRST << self.peer_off_doublings;
            tracing::warn!(
                root = self.root.get(),
                peer = peer.get(),
                frames,
                "the peer does not answer repair requests: asking the root for the next lost frames"
            );
            self.peer = None;
            self.peer_off = Some((peer, frames));
            self.peer_off_doublings = (self.peer_off_doublings + 1).min(PEER_OFF_MAX_DOUBLINGS);
            self.peer_silence = 0;
        }
        if sent_root && self.tree.is_none() {
            // A NACK carries the cumulative acknowledgement too (but for this member only:
            // with a tree its subtree's report is still due).
            self.acked = self.expected;
            self.unacked = 0;
            self.timers.stop(Timer::Ack);
            self.quiet_from = None;
        }
        sent
    }

    /// A repair arrived `rtt` after it was asked for.
    pub(super) fn repair_sample(&mut self, rtt: Duration) {
        self.repair_rtt = Some(match self.repair_rtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
    }

    /// How long a NACKed frame is given to arrive before it is asked for again: the configured
    /// retry, or one and a half repair round trips when those are longer (a busy root, or
    /// repairs queued behind data in the switch), doubled per retry without progress.
    pub(super) fn nack_interval(&self) -> Duration {
        let rtt = self.repair_rtt.map_or(Duration::ZERO, |r| r + r / 2);
        self.nack_retry.max(rtt) * (1 << self.nack_backoff)
    }

    pub(crate) fn on_timeout(&mut self, now: Instant) {
        self.release_held(now);
        if self.timers.is_expired(Timer::Ack, now) {
            match self.quiet_from.map(|q| q + self.ack_delay) {
                // The stream moved since the timer was armed: not quiet yet.
                Some(due) if due > now => self.timers.set(Timer::Ack, due),
                _ => self.send_ack(now),
            }
        }
        if self.tree.is_some() && self.timers.is_expired(Timer::Report, now) {
            self.timers.stop(Timer::Report);
            self.report(now, true);
            // Once, unless the subtree lags behind what this member has seen (a member
            // below waits for a repair): then again every `keepalive`, so that the root
            // hears the subtree is alive and waits for one laggard, and times out that
            // one only, not every member of the subtree at once.
            let stuck = self.subtree_next().0 < self.highest;
            if let Some(t) = self.tree.as_ref() {
                let again = stuck.then(|| now + t.keepalive);
                self.timers.set_or_stop(Timer::Report, again);
            }
        }
        if self.timers.is_expired(Timer::Nack, now) {
            let gap = self.expected < self.highest;
            if gap {
                // Gaps gathered until now are asked for the first time: no back-off for them.
                let first = self.nack_from.take().is_some();
                if self.send_nacks(now, self.expected) && !first {
                    self.nack_backoff = (self.nack_backoff + 1).min(6);
                }
                self.timers.set(Timer::Nack, now + self.nack_interval());
            } else {
                self.timers.stop(Timer::Nack);
                self.nack_from = None;
            }
        }
    }

    /// Acknowledges what it holds now, if the root has not heard of all of it (a member that
    /// flushes before it leaves does not leave the root to ask an empty link).
    pub(crate) fn ack_held(&mut self, now: Instant) {
        if self.owes_ack() {
            self.ack_now = true;
            self.schedule(now);
        }
    }

    /// Whether this member holds frames of the stream it has not acknowledged: the root will
    /// ask for them (its poll), so a member serving the group between calls stays to answer.
    pub(crate) fn owes_ack(&self) -> bool {
        self.expected > self.acked
    }

    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }
}
