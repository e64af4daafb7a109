//! The challenges a member holds and answers: at most [`MAX_CHALLENGES`], the newest of each
//! coordinator, and the rounds of hellos that answer them.

use super::*;

/// A challenge a member holds and answers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) coordinator: MacAddr,
    pub(super) nonce: u64,
    pub(super) time: u64,
    /// A roster of it named this member with its current nonce: the coordinator heard this
    /// member's hello of this join, so the challenge is live, not a recording.
    pub(super) answered: bool,
}

impl Join {
    /// Takes the challenge `nonce` of `coordinator` (sealed with `time`) into the challenges
    /// held, if it earns a place; true if it did. A coordinator has one challenge held, its
    /// newest (a recording of an earlier join has an older time); when every place is taken,
    /// a new challenge displaces the oldest one no roster has answered yet, and only if it is
    /// newer. A challenge whose roster named this member is never dropped. The rosters of a
    /// challenge dropped go with it.
    pub(super) fn hold(&mut self, coordinator: MacAddr, nonce: u64, time: u64) -> bool {
        let fresh = Held {
            coordinator,
            nonce,
            time,
            answered: false,
        };
        let mut victim = None;
        for (i, h) in self.challenges.iter().enumerate() {
            if h.coordinator != coordinator {
                continue;
            }
            if h.nonce == nonce || h.time > time || (h.time == time && h.answered) {
                return false;
            }
            if h.time < time && !h.answered {
                victim = Some(i);
            }
        }
        if victim.is_none() && self.challenges.len() >= MAX_CHALLENGES {
            victim = self
                .challenges
                .iter()
                .enumerate()
                .filter(|(_, h)| !h.answered && h.time < time)
                .min_by_key(|(_, h)| h.time)
                .map(|(i, _)| i);
            if victim.is_none() {
                return false;
            }
        }
        match victim {
            Some(i) => {
                let old = std::mem::replace(&mut self.challenges[i], fresh);
                self.rosters.remove(&(old.coordinator, old.nonce));
            }
            None => self.challenges.push(fresh),
        }
        true
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
        let Some(c) = self.coord.as_mut() else {
            return Vec::new();
        };
        c.rounds = c.rounds.saturating_add(1);
        if c.rounds < 3 {
            return Vec::new();
        }
        let waiting = waiting(c);
        if waiting.is_empty() {
            return Vec::new();
        }
        let take = waiting.len().min(UNICAST_PER_ROUND);
        let start = c.cursor % waiting.len();
        c.cursor = c.cursor.wrapping_add(take);
        (0..take)
            .map(|k| waiting[(start + k) % waiting.len()])
            .collect()
    }
}
