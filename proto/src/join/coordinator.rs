//! The coordinator's side of a join: the hellos it collects, the roster it decides once it has
//! everybody, and the rounds of its broadcasts (challenges, then the roster) with their
//! point-to-point copies for members a broadcast filter may hide.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::wire::ethernet::MacAddr;
use crate::Rank;

use super::{Expect, Join, JoinError};

/// Members a coordinator sends point-to-point copies of a round to, at most.
const UNICAST_PER_ROUND: usize = 16;

/// The coordinator's side.
#[derive(Debug)]
pub(super) struct Coordinating {
    /// Fresh hellos: MAC -> (claim, member nonce, largest frame), in arrival order of first
    /// hello.
    pub(super) hellos: Vec<(MacAddr, Rank, u64, u16)>,
    /// The roster, once decided, and who confirmed it.
    pub(super) roster: Option<Vec<(MacAddr, u64)>>,
    /// The group's largest frame, decided with the roster.
    pub(super) pdu: u16,
    pub(super) confirmed: BTreeSet<MacAddr>,
    /// Stepped down: a lower MAC coordinates (discovery).
    pub(super) stepped_down: bool,
    /// Broadcasts of the current phase (challenge, then roster) so far.
    rounds: u32,
    /// Where the next round's point-to-point copies start (round robin over the members).
    cursor: usize,
}

impl Coordinating {
    /// A coordinator that has heard nobody yet.
    pub(super) fn new() -> Coordinating {
        Coordinating {
            hellos: Vec::new(),
            roster: None,
            pdu: 0,
            confirmed: BTreeSet::new(),
            stepped_down: false,
            rounds: 0,
            cursor: 0,
        }
    }

    /// Counts a broadcast round of the coordinator and picks who gets a point-to-point copy
    /// of it: from the third round on, up to [`UNICAST_PER_ROUND`] of `waiting` (members a
    /// broadcast filter may hide), round robin, so that a member that hears no broadcast
    /// still joins, and late starters in a large group do not cost a frame each per round.
    /// `waiting` is asked only when copies are due.
    pub(super) fn unicast_round(
        &mut self,
        waiting: impl FnOnce(&Coordinating) -> Vec<MacAddr>,
    ) -> Vec<MacAddr> {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds < 3 {
            return Vec::new();
        }
        let waiting = waiting(self);
        if waiting.is_empty() {
            return Vec::new();
        }
        let take = waiting.len().min(UNICAST_PER_ROUND);
        let start = self.cursor % waiting.len();
        self.cursor = self.cursor.wrapping_add(take);
        (0..take)
            .map(|k| waiting[(start + k) % waiting.len()])
            .collect()
    }
}

impl Join {
    /// A round of the coordinator's broadcasts, and who gets a copy (see
    /// `Coordinating::unicast_round`); nothing if this member does not coordinate.
    pub(super) fn coord_round(
        &mut self,
        waiting: impl FnOnce(&Coordinating) -> Vec<MacAddr>,
    ) -> Vec<MacAddr> {
        self.coord
            .as_mut()
            .map_or_else(Vec::new, |c| c.unicast_round(waiting))
    }

    /// Whether a hello from `mac` claiming `claim` is acceptable to this coordinator.
    pub(super) fn acceptable(&self, mac: &MacAddr, claim: Rank) -> bool {
        match &self.cfg.expect {
            Expect::List(l) => l.get(claim.index()) == Some(mac),
            Expect::Ranks { size, .. } => claim.get() < *size && claim.get() != 0,
            Expect::Discover { .. } => true,
            Expect::FirstCome { only, .. } => only.as_ref().is_none_or(|l| l.contains(mac)),
            Expect::Invited | Expect::InvitedBy(_) => false,
        }
    }

    /// The coordinator decides the roster once it has everybody.
    pub(super) fn decide(&mut self, now: Instant) {
        let Some(size) = self.expected_size() else {
            return;
        };
        let me = self.cfg.mac;
        let own_pdu = self.own_pdu();
        let expect = self.cfg.expect.clone();
        let Some(c) = self.coord.as_mut() else {
            return;
        };
        if c.roster.is_some() || c.stepped_down || c.hellos.len() + 1 < size {
            return;
        }
        let mine = (me, self.member_nonce);
        let roster: Vec<(MacAddr, u64)> = match &expect {
            Expect::List(l) => l
                .iter()
                .map(|m| {
                    if *m == me {
                        mine
                    } else {
                        let h = c.hellos.iter().find(|h| h.0 == *m).expect("all heard");
                        (h.0, h.2)
                    }
                })
                .collect(),
            Expect::Ranks { .. } => {
                let mut by_rank: Vec<Option<(MacAddr, u64)>> = vec![None; size];
                by_rank[0] = Some(mine);
                for &(mac, claim, m, _) in &c.hellos {
                    match by_rank[claim.index()] {
                        Some((other, _)) => {
                            self.result = Some(Err(JoinError::RankClaimedTwice {
                                rank: claim,
                                a: other.to_string(),
                                b: mac.to_string(),
                            }));
                            return;
                        }
                        None => by_rank[claim.index()] = Some((mac, m)),
                    }
                }
                by_rank.into_iter().flatten().collect()
            }
            Expect::Discover { .. } if c.hellos.len() + 1 > size => {
                self.result = Some(Err(JoinError::Config(format!(
                    "{} members announced themselves, {size} expected",
                    c.hellos.len() + 1
                ))));
                self.done = true;
                return;
            }
            Expect::Discover { .. } => {
                let mut all: Vec<(MacAddr, u64)> = c.hellos.iter().map(|h| (h.0, h.2)).collect();
                all.push(mine);
                all.sort();
                if all[0].0 != me {
                    // A lower MAC coordinates; this member waits for its roster.
                    c.stepped_down = true;
                    return;
                }
                all
            }
            Expect::FirstCome { receivers, only } => {
                let mut r = vec![mine];
                match only {
                    // In the list's order; settled, only those heard.
                    Some(l) => r.extend(
                        l.iter()
                            .filter_map(|m| c.hellos.iter().find(|h| h.0 == *m))
                            .map(|h| (h.0, h.2)),
                    ),
                    None => r.extend(c.hellos.iter().take(*receivers).map(|h| (h.0, h.2))),
                }
                r
            }
            Expect::Invited | Expect::InvitedBy(_) => return,
        };
        if roster.len() != size {
            return;
        }
        c.confirmed.insert(me);
        let alone = roster.len() == 1;
        c.pdu = c
            .hellos
            .iter()
            .filter(|h| roster.iter().any(|e| e.0 == h.0))
            .map(|h| h.3)
            .fold(own_pdu, u16::min);
        let pdu = c.pdu;
        c.roster = Some(roster.clone());
        c.rounds = 0;
        self.next_send = now;
        if alone {
            self.finish(me, self.nonce, &roster, pdu);
        }
    }
}
