//! The challenges a member holds and answers: at most [`MAX_CHALLENGES`], the newest of each
//! coordinator, and the rounds of hellos that answer them.
//!
//! **Invariants.** At most [`MAX_CHALLENGES`] are held, one per coordinator, in arrival order.
//! A challenge gives up its place only for a newer challenge (a larger sealed time, or
//! without a key a later arrival), and never once a roster of its coordinator named this
//! member with its current nonce. Hellos go out in rounds at least [`HELLO_GAP`] apart.

use std::time::Instant;

use crate::wire::ethernet::MacAddr;

use super::{HELLO_GAP, MAX_CHALLENGES};

/// A challenge a member holds and answers.
#[derive(Debug, Clone, Copy)]
struct Held {
    coordinator: MacAddr,
    nonce: u64,
    time: u64,
    /// A roster of it named this member with its current nonce: the coordinator heard this
    /// member's hello of this join, so the challenge is live, not a recording.
    answered: bool,
}

/// Whether a challenge was taken (see [`Challenges::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// It earned no place.
    No,
    /// It is held, in a place of its own or of the challenge named here (whose rosters go
    /// with it).
    Yes(Option<(MacAddr, u64)>),
}

/// The challenges of one member. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Challenges {
    held: Vec<Held>,
    /// Challenges heard so far: without a key, the time a challenge is ranked by.
    arrivals: u64,
    /// When the last round of hellos went out.
    last_round: Option<Instant>,
    /// Hellos sent so far.
    hellos: u64,
}

impl Challenges {
    /// Challenges held now.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no challenge is held.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Hellos sent so far.
    pub(super) fn hellos(&self) -> u64 {
        self.hellos
    }

    /// The next arrival's rank (without a key, the time challenges are ranked by).
    pub(super) fn arrival(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    /// Takes the challenge `nonce` of `coordinator` (sealed with `time`) into the challenges
    /// held, if it earns a place. A coordinator has one challenge held, its newest (a
    /// recording of an earlier join has an older time); when every place is taken, a new
    /// challenge displaces the oldest one no roster has answered yet, and only if it is newer.
    /// A challenge whose roster named this member is never dropped.
    pub(super) fn hold(&mut self, coordinator: MacAddr, nonce: u64, time: u64) -> Taken {
        let fresh = Held {
            coordinator,
            nonce,
            time,
            answered: false,
        };
        let mut victim = None;
        for (i, h) in self.held.iter().enumerate() {
            if h.coordinator != coordinator {
                continue;
            }
            if h.nonce == nonce || h.time > time || (h.time == time && h.answered) {
                return Taken::No;
            }
            if h.time < time && !h.answered {
                victim = Some(i);
            }
        }
        if victim.is_none() && self.held.len() >= MAX_CHALLENGES {
            victim = self
                .held
                .iter()
                .enumerate()
                .filter(|(_, h)| !h.answered && h.time < time)
                .min_by_key(|(_, h)| h.time)
                .map(|(i, _)| i);
            if victim.is_none() {
                return Taken::No;
            }
        }
        match victim {
            Some(i) => {
                let old = std::mem::replace(&mut self.held[i], fresh);
                Taken::Yes(Some((old.coordinator, old.nonce)))
            }
            None => {
                self.held.push(fresh);
                Taken::Yes(None)
            }
        }
    }

    /// Whether the challenge `nonce` of `coordinator` is held.
    pub(super) fn holds(&self, coordinator: MacAddr, nonce: u64) -> bool {
        self.held
            .iter()
            .any(|h| h.coordinator == coordinator && h.nonce == nonce)
    }

    /// A roster of the challenge `nonce` of `coordinator` named this member with its nonce.
    pub(super) fn answered(&mut self, coordinator: MacAddr, nonce: u64) {
        if let Some(h) = self
            .held
            .iter_mut()
            .find(|h| h.coordinator == coordinator && h.nonce == nonce)
        {
            h.answered = true;
        }
    }

    /// The earliest instant, from `now`, the next round of hellos may go.
    pub(super) fn next_round(&self, now: Instant) -> Instant {
        self.last_round.map_or(now, |t| (t + HELLO_GAP).max(now))
    }

    /// A round of hellos goes now: the challenges to answer, (coordinator, nonce) each.
    pub(super) fn round(&mut self, now: Instant) -> Vec<(MacAddr, u64)> {
        self.last_round = Some(now);
        self.held.iter().map(|h| (h.coordinator, h.nonce)).collect()
    }

    /// A hello went out.
    pub(super) fn hello_sent(&mut self) {
        self.hellos += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn mac(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    #[test]
    fn a_coordinators_newest_challenge_is_held_and_an_answered_one_stays() {
        let mut c = Challenges::default();
        assert_eq!(c.hold(mac(1), 10, 5), Taken::Yes(None));
        assert_eq!(c.hold(mac(1), 10, 6), Taken::No, "the same nonce");
        assert_eq!(c.hold(mac(1), 11, 4), Taken::No, "an older recording");
        assert_eq!(c.hold(mac(1), 12, 6), Taken::Yes(Some((mac(1), 10))));
        assert!(c.holds(mac(1), 12) && !c.holds(mac(1), 10));
        c.answered(mac(1), 12);
        assert_eq!(c.hold(mac(1), 13, 6), Taken::No, "answered, same time");
    }

    #[test]
    fn when_every_place_is_taken_only_a_newer_challenge_displaces_the_oldest_unanswered() {
        let mut c = Challenges::default();
        for i in 0..MAX_CHALLENGES as u8 {
            assert_eq!(
                c.hold(mac(i), u64::from(i), 10 + u64::from(i)),
                Taken::Yes(None)
            );
        }
        c.answered(mac(0), 0);
        assert_eq!(
            c.hold(mac(99), 99, 5),
            Taken::No,
            "older than every held one"
        );
        assert_eq!(c.hold(mac(99), 99, 50), Taken::Yes(Some((mac(1), 1))));
        assert_eq!(c.len(), MAX_CHALLENGES);
    }

    #[test]
    fn rounds_of_hellos_are_a_gap_apart() {
        let mut c = Challenges::default();
        let t0 = Instant::now();
        assert_eq!(c.next_round(t0), t0);
        c.hold(mac(1), 1, 1);
        assert_eq!(c.round(t0), [(mac(1), 1)]);
        c.hello_sent();
        assert_eq!(c.hellos(), 1);
        assert_eq!(c.next_round(t0 + Duration::from_millis(1)), t0 + HELLO_GAP);
        assert_eq!((c.arrival(), c.arrival()), (1, 2));
    }
}
