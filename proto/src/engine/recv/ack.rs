//! Acknowledgements: when the stream tells the root (or, with a tree, its parent) how far it
//! got.
//!
//! ACKs are cumulative and coalesced, off the critical path: one per `ack_every` frames while
//! the root keeps sending, and one when the root asks (its poll or a probe, when its
//! retransmission timer fires on an idle stream). A receiver keeps no timer of its own for
//! them: a sleep bounded by a sub-millisecond quiet timer re-armed per message cost a virtual
//! machine's receivers a third of their CPU per broadcast (clock-event reprogramming); the
//! root's timer runs once per idle period instead. With a tree, the report up the tree has a
//! quiet timer ([`StreamTimer::Ack`]), lazy: each frame moves `quiet_from`, not the timer.
//!
//! **Invariants.** `acked <= expected` of the stream, and `unacked` counts the frames consumed
//! since the last acknowledgement. While the ACK timer is the lazy quiet timer, `quiet_from`
//! is set and the timer is at or before `quiet_from + delay`.

use std::time::{Duration, Instant};

use crate::Seq;

use super::super::timer::{StreamTimer, StreamTimers};
use super::super::Config;

/// The acknowledgement state of one stream. See the module documentation.
#[derive(Debug)]
pub(super) struct Acks {
    /// The position last acknowledged to the root.
    acked: Seq,
    /// Frames consumed since.
    unacked: usize,
    /// While the ACK timer is the quiet timer of a tree's report: when the subtree last moved.
    quiet_from: Option<Instant>,
    /// Acknowledge at the next chance (the root asked, or the stream moved for a waiting
    /// root).
    now: bool,
    /// The next acknowledgement answers a probe: it says how far the stream has seen.
    probe_answer: bool,
    /// The root repaired a frame this member has: its report is sent again, even unchanged.
    rereport: bool,
    /// Frames per acknowledgement (`Config::ack_every`, at most the window; 32 bits: the
    /// receiver's size is the paper's `s_RDP`).
    every: u32,
    /// The quiet period (`Config::ack_delay`).
    delay: Duration,
}

impl Acks {
    /// Nothing acknowledged, nothing owed.
    pub(super) fn new(cfg: &Config) -> Acks {
        Acks {
            acked: Seq::new(0),
            unacked: 0,
            quiet_from: None,
            now: false,
            probe_answer: false,
            rereport: false,
            every: u32::try_from(cfg.ack_every).unwrap_or(u32::MAX),
            delay: cfg.ack_delay,
        }
    }

    /// Frames per acknowledgement.
    pub(super) fn every(&self) -> u64 {
        u64::from(self.every)
    }

    /// A frame was consumed.
    pub(super) fn consumed(&mut self) {
        self.unacked += 1;
    }

    /// Acknowledge at the next chance.
    pub(super) fn ask(&mut self) {
        self.now = true;
    }

    /// Whether the next chance must acknowledge (asked to).
    pub(super) fn asked(&self) -> bool {
        self.now
    }

    /// Whether an acknowledgement is due: asked for, or `every` frames consumed since the
    /// last.
    pub(super) fn due(&self) -> bool {
        self.now || self.unacked >= self.every as usize
    }

    /// The root asked (a probe, or its poll): the answer says how far the stream has seen.
    pub(super) fn probed(&mut self) {
        self.probe_answer = true;
    }

    /// Whether the acknowledgement being sent answers a probe (once).
    pub(super) fn take_probe(&mut self) -> bool {
        std::mem::take(&mut self.probe_answer)
    }

    /// The root repaired a frame this member has: report again, even unchanged.
    pub(super) fn rereport(&mut self) {
        self.rereport = true;
    }

    /// Whether the report being sent goes out even unchanged (once).
    pub(super) fn take_rereport(&mut self) -> bool {
        std::mem::take(&mut self.rereport)
    }

    /// Whether this member holds frames (up to `expected`) it has not acknowledged.
    pub(super) fn owes(&self, expected: Seq) -> bool {
        expected > self.acked
    }

    /// (Re)starts the quiet timer at `now`: due `delay` from now, lazily. An earlier deadline
    /// that is not the quiet timer (a new tree's first report) stands.
    pub(super) fn quiet(&mut self, now: Instant, timers: &mut StreamTimers<'_>) {
        match timers.get(StreamTimer::Ack) {
            None => {
                timers.set(StreamTimer::Ack, now + self.delay);
                self.quiet_from = Some(now);
            }
            Some(_) if self.quiet_from.is_some() => self.quiet_from = Some(now),
            Some(_) => {}
        }
    }

    /// An acknowledgement of everything before `expected` is being sent.
    pub(super) fn sent(&mut self, expected: Seq, timers: &mut StreamTimers<'_>) {
        self.now = false;
        self.covered(expected, timers);
    }

    /// Something that carries the cumulative acknowledgement of everything before `expected`
    /// went to the root (an acknowledgement, or a NACK without a tree).
    pub(super) fn covered(&mut self, expected: Seq, timers: &mut StreamTimers<'_>) {
        timers.stop(StreamTimer::Ack);
        self.quiet_from = None;
        self.pulled(expected);
    }

    /// A pull request, which carries the cumulative acknowledgement too, went to the root.
    pub(super) fn pulled(&mut self, expected: Seq) {
        self.acked = expected;
        self.unacked = 0;
    }

    /// The ACK timer fired: whether the acknowledgement is due now. The quiet timer of a
    /// stream that moved since it was armed is pushed back instead.
    pub(super) fn on_timer(&mut self, now: Instant, timers: &mut StreamTimers<'_>) -> bool {
        match self.quiet_from.map(|q| q + self.delay) {
            // The stream moved since the timer was armed: not quiet yet.
            Some(due) if due > now => {
                timers.set(StreamTimer::Ack, due);
                false
            }
            _ => true,
        }
    }

    /// A new place in the tree: its first report goes at `now` (not the quiet timer).
    pub(super) fn report_at(&mut self, now: Instant, timers: &mut StreamTimers<'_>) {
        timers.set(StreamTimer::Ack, now);
        self.quiet_from = None;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::timer::TimerTable;
    use super::*;
    use crate::Rank;

    fn acks() -> Acks {
        let mut c = Config::new(1, Rank::new(1), 2);
        c.ack_every = 4;
        c.ack_delay = Duration::from_millis(2);
        Acks::new(&c)
    }

    #[test]
    fn an_acknowledgement_is_due_every_few_frames_or_when_asked() {
        let mut a = acks();
        let mut table = TimerTable::new(2);
        let place = table.add_stream(Rank::new(0));
        for _ in 0..3 {
            a.consumed();
        }
        assert!(!a.due());
        a.consumed();
        assert!(a.due());
        assert!(a.owes(Seq::new(4)));
        a.sent(Seq::new(4), &mut table.stream(place));
        assert!(!a.due() && !a.owes(Seq::new(4)));
        a.ask();
        assert!(a.due() && a.asked());
        a.pulled(Seq::new(5));
        assert!(a.asked(), "a pull is no answer to the ask");
        a.probed();
        assert!(a.take_probe());
        assert!(!a.take_probe(), "once");
    }

    #[test]
    fn the_quiet_timer_is_lazy() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = acks();
        let mut table = TimerTable::new(2);
        let place = table.add_stream(Rank::new(0));
        let mut t = table.stream(place);
        a.quiet(t0, &mut t);
        assert_eq!(t.get(StreamTimer::Ack), Some(t0 + ms(2)));
        // The stream moves: the timer stays where it was ...
        a.quiet(t0 + ms(1), &mut t);
        assert_eq!(t.get(StreamTimer::Ack), Some(t0 + ms(2)));
        // ... and is pushed back when it fires.
        assert!(!a.on_timer(t0 + ms(2), &mut t));
        assert_eq!(t.get(StreamTimer::Ack), Some(t0 + ms(3)));
        assert!(a.on_timer(t0 + ms(3), &mut t));
        // A first report's deadline is not the quiet timer: it stands.
        a.sent(Seq::new(0), &mut t);
        assert_eq!(t.get(StreamTimer::Ack), None);
        a.report_at(t0 + ms(5), &mut t);
        a.quiet(t0 + ms(6), &mut t);
        assert_eq!(t.get(StreamTimer::Ack), Some(t0 + ms(5)));
        assert!(a.on_timer(t0 + ms(5), &mut t));
    }
}
