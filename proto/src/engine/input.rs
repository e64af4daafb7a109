//! Frames in: the checks every received frame passes (group, key, membership, destination,
//! replay), its decryption, and its dispatch to the receive stream of its root (data), to the
//! send side (feedback on this member's own stream), up an acknowledgement tree (reports) or to
//! the layers above (every other control message).

use std::time::Instant;

use crate::wire::{self, control::nack_offsets, Admit, Control, Flags, Frame, Kind, Repr};
use crate::Rank;

use super::{recv, send, DropReason, Engine, EngineEvent};

impl Engine {
    /// Handles one received PDU. Drops are counted and returned; they are never fatal.
    pub fn handle_frame(&mut self, now: Instant, pdu: &[u8]) -> Result<(), DropReason> {
        let r = Frame::new_checked(pdu)
            .map_err(DropReason::from)
            .and_then(|f| self.handle_checked_inner(now, &f));
        if let Err(d) = &r {
            self.stats.drops.count(d);
        }
        r
    }

    /// Handles a frame its caller already checked ([`Frame::new_checked`]), so that a layer
    /// that demultiplexes frames by their header checks each one once.
    pub fn handle_checked(&mut self, now: Instant, frame: &Frame<&[u8]>) -> Result<(), DropReason> {
        let r = self.handle_checked_inner(now, frame);
        if let Err(d) = &r {
            self.stats.drops.count(d);
        }
        r
    }

    fn handle_checked_inner(
        &mut self,
        now: Instant,
        frame: &Frame<&[u8]>,
    ) -> Result<(), DropReason> {
        if frame.group() != self.cfg.group {
            return Err(DropReason::ForeignGroup(frame.group()));
        }
        if frame.flags().contains(Flags::ENCRYPTED) {
            // Decrypted where it stays put while the batch lasts, if a stream may read it
            // there afterwards; else in room reused by the next frame.
            let mut opened = self.crypt.take_opened();
            let r = match self.crypt.open(frame, &mut opened) {
                Some(plain) => self.handle_authentic(now, &plain),
                None => Err(DropReason::BadMac),
            };
            self.crypt.put_back(opened);
            return r;
        }
        if let Some(key) = &self.cfg.key {
            if !frame.verify(key) {
                return Err(DropReason::BadMac);
            }
        }
        self.handle_authentic(now, frame)
    }

    /// A frame of this group whose tag verified (or that needs none: no key), its payload in
    /// the clear.
    fn handle_authentic(&mut self, now: Instant, frame: &Frame<&[u8]>) -> Result<(), DropReason> {
        let src = frame.src();
        if src.get() >= self.cfg.size {
            return Err(DropReason::NotMember(src));
        }
        if src == self.cfg.rank {
            return Err(DropReason::Own);
        }
        let dst = frame.dst();
        if dst != wire::ALL && dst != self.cfg.rank {
            return Err(DropReason::NotForMe(dst));
        }
        if !self.fellows.is_live(src) {
            return Err(DropReason::Evicted(src));
        }
        if frame.kind().is_data() {
            if frame.flags().contains(Flags::HEADER_CRC) && !self.cfg.payload_covered() {
                // Nothing this member checks covers the payload: delivering it would hand
                // the application bytes no check has seen.
                return Err(DropReason::Protocol(
                    "payload covered by neither a key nor an end-to-end check",
                ));
            }
            if !self.fellows.takes(src) {
                return Err(DropReason::Protocol("a stream this member does not take"));
            }
            let repr = Repr::parse(frame);
            let (rx, timers) = self.stream(now, src);
            let r = rx.on_data(now, timers, &repr, frame.payload());
            self.collect_rx(src);
            // A duplicate or stale data frame (a replay, say) is no sign of the root's life,
            // nor is a point-to-point repair: a fellow member may have relayed it.
            let relayed = frame.kind() == Kind::Repair && frame.flags().contains(Flags::P2P);
            if r.is_ok() && !relayed {
                self.fellows.heard(src, now);
            }
            return r;
        }
        let fresh = match self
            .fellows
            .admit(src, wire::control::control_counter(frame))
        {
            Admit::Refused => return Err(DropReason::Replayed),
            Admit::Late => false,
            Admit::Newest => true,
        };
        if fresh {
            self.fellows.heard(src, now);
        }
        let msg = Control::parse(frame).map_err(DropReason::BadControl)?;
        self.handle_control(now, src, dst, msg, fresh)
    }

    /// Handles a parsed control message from `src` addressed to `dst` (this member or all).
    fn handle_control(
        &mut self,
        now: Instant,
        src: Rank,
        dst: Rank,
        msg: Control,
        fresh: bool,
    ) -> Result<(), DropReason> {
        let to_me = dst == self.cfg.rank;
        if matches!(msg, Control::AckPoll | Control::PullPoll { .. }) && !self.fellows.takes(src) {
            // Polls for a stream: its root's alone.
            return Err(DropReason::Protocol("a stream this member does not take"));
        }
        let feedback = match msg {
            Control::AckPoll => {
                // The root's timer fired with frames of its stream not acknowledged by us.
                let (rx, timers) = self.stream(now, src);
                rx.on_ack_poll(now, timers);
                self.collect_rx(src);
                return Ok(());
            }
            Control::PullPoll { msg_id, designated } => {
                // The root polls its designated receiver for a lost pull request.
                self.stream(now, src).0.on_pull_poll(msg_id, designated);
                self.collect_rx(src);
                return Ok(());
            }
            Control::PeerNack {
                root,
                base,
                missing,
                unheld,
                more,
            } => {
                // A fellow receiver lost frames of a root's stream: serve those still held.
                if !to_me || root.get() >= self.cfg.size || root == self.cfg.rank {
                    return Err(DropReason::Protocol("peer NACK for a bad root or member"));
                }
                let budget = self.outbox.room();
                if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                    if unheld {
                        rx.on_unheld(now, &mut self.timers, base, missing, &more, src);
                    } else {
                        rx.serve_peer(now, &mut self.timers, (base, missing, &more), src, budget);
                    }
                    self.collect_rx(root);
                } else if !unheld && nack_offsets(missing, &more).next().is_some() && budget > 0 {
                    // No stream of that root here: nothing held.
                    let reply = recv::unheld_reply(src, root, base, missing, more);
                    reply.count(&mut self.stats);
                    self.outbox.push(reply);
                }
                return Ok(());
            }
            Control::PeerPending {
                root,
                base,
                missing,
                more,
            } => {
                // The parent asked for frames lacks them too, and relays each when it comes.
                if !to_me || root.get() >= self.cfg.size || root == self.cfg.rank {
                    return Err(DropReason::Protocol("peer answer for a bad root or member"));
                }
                if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                    rx.on_pending(now, &mut self.timers, base, missing, &more, src);
                    self.collect_rx(root);
                }
                return Ok(());
            }
            Control::TreeAck {
                root,
                next,
                laggard,
                view,
            } => {
                if !to_me {
                    return Err(DropReason::NotForMe(dst));
                }
                self.on_tree_ack(now, src, root, next, laggard, view);
                return Ok(());
            }
            Control::Ack { next, seen } => send::Feedback::Ack { next, seen },
            Control::Nack {
                base,
                missing,
                next,
                more,
            } => send::Feedback::Nack {
                base,
                missing,
                next,
                more,
            },
            Control::Pull { msg_id, next } => send::Feedback::Pull { msg_id, next },
            msg => {
                self.events
                    .push_back(EngineEvent::Control { src, msg, fresh });
                return Ok(());
            }
        };
        if !to_me {
            return Err(DropReason::NotForMe(dst));
        }
        self.stats.acks_handled += 1;
        match feedback {
            send::Feedback::Nack { .. } => self.stats.nacks_handled += 1,
            send::Feedback::Ack { seen: Some(_), .. } => self.stats.probe_answers_handled += 1,
            _ => {}
        }
        self.sending = true;
        self.tx.on_feedback(
            &self.cfg,
            now,
            src,
            &feedback,
            self.fellows.live(),
            &mut self.timers,
        );
        self.collect_tx();
        Ok(())
    }

    /// A report of `src` up the acknowledgement tree of `root`'s stream: as the root, every
    /// member of its subtree has everything before `next`; as a parent, one of the children's
    /// reports.
    fn on_tree_ack(
        &mut self,
        now: Instant,
        src: Rank,
        root: Rank,
        next: u32,
        laggard: Rank,
        view: u32,
    ) {
        if root == self.cfg.rank {
            self.stats.acks_handled += 1;
            self.stats.tree_acks_handled += 1;
            if view != self.trees.view() || self.cfg.ack_tree == 0 {
                self.stats.tree_acks_ignored += 1;
                return;
            }
            let t = self.trees.own(root, self.fellows.live(), self.cfg.ack_tree);
            if t.parent(src) != Some(root) {
                self.stats.tree_acks_ignored += 1;
                return;
            }
            let covered = t.subtree(src);
            self.sending = true;
            self.tx.on_tree_ack(
                &self.cfg,
                now,
                src,
                &covered,
                next,
                laggard,
                self.fellows.live(),
                &mut self.timers,
            );
            self.collect_tx();
            return;
        }
        let taken = match self.rx.get_mut(root) {
            Some(rx) => rx.on_report(now, &mut self.timers, src, next, laggard, view),
            _ => false,
        };
        if taken {
            self.collect_rx(root);
        } else {
            self.stats.tree_acks_ignored += 1;
        }
    }
}
