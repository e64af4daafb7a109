//! Join frames in: the checks every frame passes (its format's version, this join's group, the
//! sender's MAC sealed in the message, the tag with a key) and what each message does.

use std::time::Instant;

use crate::secret::Key;
use crate::wire::ethernet::MacAddr;
use crate::wire::join::JoinMsg;
use crate::wire::{self, Frame, Kind};
use crate::Rank;

use super::{challenge_key, join_key, Expect, Join, Taken, MAX_STRANGERS, MIN_PDU};

impl Join {
    /// Notes that `src` sends frames of wire version `v` (said once per host).
    fn heard_version(&mut self, src: MacAddr, v: u8) {
        if self.overheard.other_version(src, v) {
            tracing::warn!(
                "{src} sends frames of wire version {v}; this build speaks version {}: its frames are refused (run one release of ethbcast on every host)",
                wire::VERSION
            );
        }
    }

    pub(super) fn on_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]) {
        let Ok(f) = Frame::new_checked(pdu) else {
            if let Some(v) = wire::other_version(pdu) {
                self.heard_version(src, v);
            }
            return;
        };
        if src == self.cfg.mac {
            return;
        }
        if f.group() != self.cfg.group {
            // Rank 0 of another session: its sender (or coordinator), whose frames go to
            // every member.
            if f.src() == Rank::new(0) {
                self.overheard.other_session(src);
            }
            return;
        }
        if f.kind() != Kind::Join {
            return;
        }
        if self.done {
            // Joined: the coordinator repeats its roster until this member's confirmation
            // arrives; confirm again (as the member will, through `Joined::late`).
            if let Some(late) = &self.late {
                if let Some(answer) = late.answer(src, pdu) {
                    self.out.push_back(answer);
                }
            }
            return;
        }
        // The message names its nonce; the tag (with a key) decides whether to believe it.
        let Some(msg) = JoinMsg::decode(f.payload()) else {
            return;
        };
        let verified = |key: Key| f.verify(&key);
        match msg {
            JoinMsg::Challenge {
                nonce,
                size,
                coordinator,
                time,
            } => {
                if coordinator != src {
                    return;
                }
                if let Some(k) = &self.cfg.key {
                    if !verified(challenge_key(k)) {
                        self.overheard.failed_authentication(src);
                        return;
                    }
                }
                self.overheard.challenge_from(src);
                let from_coordinator = match &self.cfg.expect {
                    Expect::List(l) => l.first() == Some(&src),
                    Expect::Ranks { size: s, .. } => f.src() == Rank::new(0) && size == *s,
                    Expect::Discover { expected: s } => size == *s,
                    Expect::Invited => true,
                    Expect::InvitedBy(c) => *c == src,
                    Expect::FirstCome { .. } => false,
                };
                // Without a key the time is the sender's word, which a stranger could make
                // the largest there is and so keep every place: challenges are then ranked
                // by their arrival here instead (a place goes to the newest arrival).
                let time = match self.cfg.key {
                    Some(_) => time,
                    None => self.challenges.arrival(),
                };
                if !from_coordinator {
                    return;
                }
                if let Taken::Yes(displaced) = self.challenges.hold(src, nonce, time) {
                    if let Some(key) = displaced {
                        // The rosters of a challenge dropped go with it.
                        self.rosters.remove(key);
                    }
                    // Answer soon, but no sooner than a gap after the last round.
                    let earliest = self.challenges.next_round(now);
                    self.next_send = self.next_send.min(earliest);
                }
            }
            JoinMsg::Hello {
                nonce,
                member,
                claim,
                mac,
                pdu: offer,
            } => {
                if nonce != self.nonce || mac != src || offer < MIN_PDU {
                    return;
                }
                if let Some(k) = &self.cfg.key {
                    if !verified(join_key(k, nonce)) {
                        self.overheard.failed_authentication(src);
                        return;
                    }
                }
                if !self.acceptable(&src, claim) {
                    if self.strangers.len() < MAX_STRANGERS {
                        self.strangers.insert(src);
                    }
                    return;
                }
                let Some(c) = self.coord.as_mut() else {
                    return;
                };
                match c.hellos.iter_mut().find(|h| h.0 == src) {
                    Some(h) if c.roster.is_none() => *h = (src, claim, member, offer),
                    // Decided: the roster's frame size stands.
                    Some(h) => *h = (src, claim, member, h.3),
                    None if c.roster.is_none() => c.hellos.push((src, claim, member, offer)),
                    None => {}
                }
                self.decide(now);
            }
            JoinMsg::Confirm { nonce, member, mac } => {
                if nonce != self.nonce || mac != src {
                    return;
                }
                if let Some(k) = &self.cfg.key {
                    if !verified(join_key(k, nonce)) {
                        self.overheard.failed_authentication(src);
                        return;
                    }
                }
                let me = self.cfg.mac;
                let Some(c) = self.coord.as_mut() else {
                    return;
                };
                let Some(roster) = c.roster.clone() else {
                    return;
                };
                if roster.contains(&(src, member)) {
                    c.confirmed.insert(src);
                }
                if c.confirmed.len() == roster.len() && !self.done {
                    let pdu = c.pdu;
                    self.finish(me, self.nonce, &roster, pdu);
                }
            }
            JoinMsg::Roster {
                nonce,
                part,
                parts,
                pdu: size,
                entries,
            } => {
                if !self.challenges.holds(src, nonce) || self.done {
                    return;
                }
                if let Some(k) = &self.cfg.key {
                    if !verified(join_key(k, nonce)) {
                        self.overheard.failed_authentication(src);
                        return;
                    }
                }
                if parts == 0 || part >= parts {
                    return;
                }
                if entries.contains(&(self.cfg.mac, self.member_nonce)) {
                    self.challenges.answered(src, nonce);
                }
                if let Some(roster) = self.rosters.add((src, nonce), (part, parts, size), entries) {
                    self.accept_roster(src, nonce, roster, size);
                }
            }
        }
    }
}
