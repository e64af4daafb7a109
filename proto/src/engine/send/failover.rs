//! Fail-over (LA-MPI 4.4): a destination that broadcast does not reach is served point to
//! point.
//!
//! Each fresh frame counts against every live destination; once enough of them settled (were
//! acknowledged or repaired), a destination that had nearly every broadcast frame repaired, two
//! windows of [`FAILOVER_WINDOW`] frames in a row, is switched to point-to-point delivery: every
//! later fresh frame also goes to it alone, as a copy. Two windows, so that a burst of loss at
//! a busy receiver is not mistaken for a broken broadcast path.
//!
//! A broken path may heal (a port or a switch's filter put right). After [`FIRST_TRIAL`]
//! copies a destination served point to point is tried on broadcast again: no copies, and the
//! next window judged alone. A window that needed nearly everything repaired sends it back to
//! point-to-point delivery, and the next trial waits twice as many copies (at most
//! [`LAST_TRIAL`]); any other window keeps it on broadcast. A failed trial costs the
//! destination one window of frames repaired after its retransmission timeout, a cost the
//! doubling spreads ever thinner.
//!
//! Once broadcast reaches at most half the live destinations, the root's messages go down a
//! tree instead ([`Failover::too_few_reached`], asked once per message), and no fresh frame
//! would ever bring a trial. So after [`FIRST_TREE_TRIAL`] messages in a row down the tree
//! (twice as many after each time it found broadcast still broken, at most
//! [`LAST_TREE_TRIAL`]) every destination served point to point is tried on broadcast at once,
//! and the message is broadcast.
//!
//! **Invariants.** What is judged of each destination ([`Route`]) lives in its `Lms` and is
//! changed here only (a repair counts towards it through [`Route::repaired`]); [`Failover`]
//! keeps the copies owed to destinations served point to point, in the order their frames were
//! sent, and drops those a destination no longer needs when their turn comes.

use std::collections::VecDeque;

use crate::eqa::{Eqa, Lms};
use crate::wire::Flags;
use crate::{Rank, Seq};

use crate::engine::{Dest, EngineStats};
use crate::machine::Transmit;

/// Fresh frames over which the fail-over check judges a destination.
const FAILOVER_WINDOW: u32 = 32;

/// Copies a destination served point to point gets before its first trial of broadcast.
const FIRST_TRIAL: u32 = 1024;

/// The most copies between two trials of broadcast.
const LAST_TRIAL: u32 = 1 << 20;

/// Messages down the tree before the root tries broadcast again.
const FIRST_TREE_TRIAL: u32 = 64;

/// The most messages down the tree between two trials of broadcast.
const LAST_TREE_TRIAL: u32 = 1 << 16;

/// Whether `lms` is a live destination served point to point (failed over, not on trial).
fn served_p2p(lms: &Lms) -> bool {
    lms.is_live() && lms.route.p2p
}

/// How fresh frames and repairs reach one destination: what the fail-over judges of it (see
/// the module documentation), and whether its repairs go to it alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Route {
    /// Broadcast does not reach it: every fresh frame is also sent to it alone.
    p2p: bool,
    /// It fell silent past its retransmission timeout since its last NACK (a NACK shows that
    /// broadcast frames reach it): its repairs go point to point, because a re-broadcast may
    /// not reach it either.
    silent: bool,
    /// Fresh frames broadcast since the check last judged it.
    recent_sent: u32,
    /// Frames repaired to it since the check last judged it.
    recent_repaired: u32,
    /// Windows in a row in which nearly everything had to be repaired.
    strikes: u8,
    /// Served point to point: fresh frames copied to it since it was switched or last tried
    /// on broadcast.
    p2p_sent: u32,
    /// Copies after which it is tried on broadcast again (0 before its first fail-over;
    /// doubles after each trial that fails).
    trial_after: u32,
    /// It is being tried on broadcast again, and goes back to point-to-point delivery at the
    /// first window that needed nearly everything repaired.
    on_trial: bool,
}

impl Route {
    /// Whether broadcast does not reach it, so that every fresh frame is sent to it alone.
    pub(crate) fn point_to_point(&self) -> bool {
        self.p2p
    }
    /// Whether its repairs go to it alone, never in a re-broadcast: it is served point to
    /// point, or it fell silent since its last NACK.
    pub(crate) fn repairs_alone(&self) -> bool {
        self.silent || self.p2p
    }
    /// It fell silent past its retransmission timeout (`true`), or it sent a NACK, which shows
    /// that broadcast reaches it (`false`).
    pub(crate) fn set_silent(&mut self, silent: bool) {
        self.silent = silent;
    }
    /// A frame was repaired to it.
    pub(crate) fn repaired(&mut self) {
        self.recent_repaired = self.recent_repaired.saturating_add(1);
    }

    /// The route of a destination that failed over, for tests of what depends on it.
    #[cfg(test)]
    pub(crate) fn failed_over() -> Route {
        Route {
            p2p: true,
            trial_after: FIRST_TRIAL,
            ..Route::default()
        }
    }
}

/// The copies owed to destinations served point to point. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Failover {
    /// Frames to send to a destination alone: (destination, frame).
    copies: VecDeque<(Rank, Seq)>,
    /// Messages in a row that went down the tree because broadcast reaches too few.
    tree_run: u32,
    /// Messages down the tree after which broadcast is tried again (0: the first time).
    tree_trial_after: u32,
}

impl Failover {
    /// Fresh frame `seq` was broadcast (the next to send is now `sent_upto`): a destination
    /// served point to point is owed a copy; the others are judged.
    pub(super) fn on_fresh(
        &mut self,
        lms: &mut Lms,
        seq: Seq,
        sent_upto: Seq,
        stats: &mut EngineStats,
    ) {
        if lms.route.p2p {
            if lms.route.p2p_sent < lms.route.trial_after {
                lms.route.p2p_sent += 1;
                self.copies.push_back((lms.rank(), seq));
                return;
            }
            // Its turn to be tried on broadcast: this frame is the trial's first.
            Self::start_trial(lms);
        }
        lms.route.recent_sent = lms.route.recent_sent.saturating_add(1);
        // Frames of the window it has not acknowledged yet may still be repaired: judge only
        // those settled, and only once there are enough of them.
        let outstanding = (sent_upto - lms.cursor()).min(u64::from(lms.route.recent_sent));
        let settled = lms.route.recent_sent - outstanding as u32;
        if lms.route.recent_sent >= FAILOVER_WINDOW && settled >= FAILOVER_WINDOW / 2 {
            // Nearly every broadcast frame had to be repaired: broadcast does not reach it.
            if u64::from(lms.route.recent_repaired) * 10 >= u64::from(settled) * 9 {
                lms.route.strikes = lms.route.strikes.saturating_add(1);
            } else {
                lms.route.strikes = 0;
            }
            if lms.route.strikes >= 2 {
                Self::switch_to_p2p(lms, stats);
            } else if lms.route.strikes == 0 && lms.route.on_trial {
                // Its next fail-over, if one comes, starts the trials over (`switch_to_p2p`).
                lms.route.on_trial = false;
                lms.stats.failbacks += 1;
                stats.failbacks += 1;
                tracing::info!(
                    rank = lms.rank().get(),
                    "broadcast reaches this member again: serving it by broadcast"
                );
            }
            lms.route.recent_sent = 0;
            lms.route.recent_repaired = 0;
        }
    }

    /// `lms`, served point to point, is tried on broadcast from the next fresh frame on: one
    /// window that needs nearly everything repaired ends the trial.
    fn start_trial(lms: &mut Lms) {
        lms.route.p2p = false;
        lms.route.on_trial = true;
        lms.route.p2p_sent = 0;
        lms.route.strikes = 1;
        lms.route.recent_sent = 0;
        lms.route.recent_repaired = 0;
    }

    /// Whether broadcast reaches too few of the live destinations (at most half: the others
    /// are served point to point) for the next message to be broadcast: it goes down a tree
    /// instead. Asked once per message; see the module documentation for the trials.
    pub(super) fn too_few_reached(&mut self, eqa: &mut Eqa) -> bool {
        let failed = eqa.dests().iter().filter(|l| served_p2p(l)).count();
        if failed == 0 || failed * 2 < eqa.hms().live() {
            if failed == 0 {
                self.tree_trial_after = 0;
            }
            self.tree_run = 0;
            return false;
        }
        self.tree_run += 1;
        let after = self.tree_trial_after.max(FIRST_TREE_TRIAL);
        if self.tree_run < after {
            return true;
        }
        // Broadcast again, to everybody: the trials tell whether it reaches them now.
        self.tree_run = 0;
        self.tree_trial_after = after.saturating_mul(2).min(LAST_TREE_TRIAL);
        for lms in eqa.dests_mut().iter_mut().filter(|l| served_p2p(l)) {
            Self::start_trial(lms);
        }
        tracing::debug!(
            failed,
            "trying broadcast again after messages down the tree"
        );
        false
    }

    /// `lms` is served point to point from the next fresh frame on, until its next trial of
    /// broadcast.
    fn switch_to_p2p(lms: &mut Lms, stats: &mut EngineStats) {
        lms.route.p2p = true;
        lms.route.p2p_sent = 0;
        lms.route.strikes = 0;
        lms.stats.failovers += 1;
        stats.failovers += 1;
        if std::mem::take(&mut lms.route.on_trial) {
            lms.route.trial_after = lms.route.trial_after.saturating_mul(2).min(LAST_TRIAL);
            tracing::debug!(
                rank = lms.rank().get(),
                next_trial_after = lms.route.trial_after,
                "broadcast still does not reach this member: serving it point-to-point"
            );
        } else {
            lms.route.trial_after = FIRST_TRIAL;
            tracing::warn!(
                rank = lms.rank().get(),
                "broadcast does not reach this member: serving it point-to-point"
            );
        }
    }

    /// Whether copies are owed.
    pub(super) fn has_copies(&self) -> bool {
        !self.copies.is_empty()
    }

    /// Writes the next copy owed into `buf`, skipping those whose destination no longer needs
    /// them (evicted, or its cursor passed the frame).
    pub(super) fn poll(&mut self, eqa: &Eqa, buf: &mut [u8]) -> Option<Transmit<Dest>> {
        while let Some((rank, seq)) = self.copies.pop_front() {
            let Some(lms) = eqa.lms(rank) else {
                continue;
            };
            if !lms.is_live() || seq < lms.cursor() {
                continue;
            }
            let Some(slot) = eqa.slot(seq) else {
                continue;
            };
            let mut repr = *slot.repr();
            repr.dst = rank;
            repr.flags.remove(Flags::BROADCAST);
            repr.flags |= Flags::P2P;
            let len = repr.emit(slot.payload(), buf).ok()?;
            return Some(Transmit {
                dst: Dest::Rank(rank),
                len,
            });
        }
        None
    }

    /// The destinations served point to point because broadcast does not reach them.
    pub(super) fn failed_over(eqa: &Eqa) -> Vec<Rank> {
        eqa.dests()
            .iter()
            .filter(|l| served_p2p(l))
            .map(|l| l.rank())
            .collect()
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use crate::engine::{Dest, EngineStats};
    use crate::eqa::Eqa;
    use crate::wire::{Flags, Frame, Kind, Repr};
    use crate::{Rank, Seq};

    use super::{Failover, FAILOVER_WINDOW};

    #[test]
    fn a_destination_that_needs_every_frame_repaired_twice_in_a_row_is_served_point_to_point() {
        let mut eqa = Eqa::new(128, 100, std::iter::empty(), 8, Duration::from_millis(5));
        eqa.add_dest(Rank::new(1), 8, Duration::from_millis(5));
        let mut f = Failover::default();
        let mut stats = EngineStats::default();
        let repr = Repr {
            kind: Some(Kind::Data),
            flags: Flags::BROADCAST,
            msg_len: 1,
            ..Repr::default()
        };
        let mut sent = Seq::new(0);
        for window in 0..2 {
            for _ in 0..FAILOVER_WINDOW {
                let seq = eqa.publish(repr, b"x").unwrap();
                sent += 1;
                let lms = eqa.lms_mut(Rank::new(1)).unwrap();
                // Every frame repaired, and acknowledged after.
                lms.route.repaired();
                f.on_fresh(lms, seq, sent, &mut stats);
                eqa.ack(Rank::new(1), sent);
            }
            let lms = eqa.lms(Rank::new(1)).unwrap();
            assert_eq!(
                lms.point_to_point(),
                window == 1,
                "after two windows, not one"
            );
        }
        assert_eq!(stats.failovers, 1);
        assert_eq!(Failover::failed_over(&eqa), [Rank::new(1)]);
        // From now on each fresh frame owes it a copy, sent to it alone.
        let seq = eqa.publish(repr, b"y").unwrap();
        sent += 1;
        f.on_fresh(eqa.lms_mut(Rank::new(1)).unwrap(), seq, sent, &mut stats);
        assert!(f.has_copies());
        let mut buf = vec![0u8; 200];
        let t = f.poll(&eqa, &mut buf).unwrap();
        assert_eq!(t.dst, Dest::Rank(Rank::new(1)));
        let frame = Frame::new_checked(&buf[..t.len]).unwrap();
        assert!(frame.flags().contains(Flags::P2P) && !frame.flags().contains(Flags::BROADCAST));
        // A copy the destination no longer needs is not sent.
        f.on_fresh(eqa.lms_mut(Rank::new(1)).unwrap(), seq, sent, &mut stats);
        eqa.ack(Rank::new(1), sent);
        assert!(f.poll(&eqa, &mut buf).is_none());
    }
}
