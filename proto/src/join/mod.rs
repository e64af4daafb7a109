//! Joining a group, as a sans-IO state machine: who the members are, in which rank order, and
//! which session they share.
//!
//! One protocol serves every way a group is formed: an explicit list of MACs or a hostfile
//! ([`Expect::List`]), ranks from a launcher's environment ([`Expect::Ranks`]), pure discovery
//! ([`Expect::Discover`]), and the file distribution of `ethbcast send/recv`, where the sender
//! takes the first receivers that answer ([`Expect::FirstCome`], [`Expect::Invited`]).
//!
//! **The exchange.** A coordinator (rank 0 where ranks are known beforehand; every member is a
//! candidate in pure discovery, and the lowest MAC of the complete set coordinates) picks a
//! fresh random nonce `N` and broadcasts a *challenge* carrying it. Every member answers each
//! challenge it accepts with a *hello* that echoes `N` and carries a fresh nonce `m` of its
//! own (and its rank claim). Once the coordinator has the whole group it broadcasts the
//! *roster* — every member's MAC and `m`, in rank order, under `N` — until each member has
//! *confirmed* it. A member accepts only a roster that names it with its own `m`.
//!
//! **The frame size.** Each hello also offers the member's MTU; the roster carries the smallest
//! offer of the members it names and the coordinator's own, and that is the group's largest
//! frame ([`Joined::max_pdu`]). A link drops frames above its MTU, so on a segment with one
//! host left at 1500 bytes among jumbo-frame hosts the group uses 1500 rather than losing every
//! large frame at that host. A member refuses a roster whose frames its link cannot carry.
//!
//! **Why it is safe to replay nothing.** `N` is new in every session, so a hello recorded in an
//! earlier session echoes the wrong nonce and is ignored; `m` is new too, so a recorded roster
//! never names a member with its current nonce. With a group key every join frame is sealed: the
//! challenge under a key derived from the group key, the rest under one derived from the key
//! and `N`, so a host without the key can neither join, claim a rank, nor fill the roster. The
//! session ([`Session`]) that the members then share is derived from `N` and the roster: its
//! wire group id and, with a key, its session key, so frames of another session (an earlier
//! run with the same key, say) fail the group check or the tag of every frame.
//!
//! **Why a stranger cannot stall it.** A recorded frame can be sent again from any MAC. So
//! every join message seals its sender's MAC and is ignored from another: a challenge names
//! its coordinator, a hello or confirmation its member (else a re-sent hello would take a
//! first-come slot, claim a rank twice or announce a member too many). A challenge also seals
//! its coordinator's clock: a member keeps the newest challenge of each coordinator and, of
//! [`MAX_CHALLENGES`] places, gives one up only for a newer challenge and never once the
//! coordinator's roster has named it, so recordings of earlier joins cannot push the current
//! one out. Without a key the clock is unsealed, anyone's word: challenges are then ranked by
//! their arrival instead, so a stranger's claim of the latest time shuts no one out. Rosters are collected for held challenges only, and hellos go out in rounds at
//! least [`HELLO_GAP`] apart, so a flood costs bounded memory and bounded answers.
//!
//! Nonces and clocks come from the caller, so that runs on the simulator repeat exactly.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::machine::Machine;
use crate::machine::Transmit;
use crate::secret::Key;
use crate::wire::ethernet::{MacAddr, BROADCAST_MAC};
use crate::wire::join::{Field, JoinMsg};
use crate::wire::{self, Control};
use crate::Rank;

mod challenges;
mod config;
mod coordinator;
mod input;
mod outcome;
mod overheard;
mod rosters;
mod session;

use challenges::{Challenges, Taken};
pub use config::{Expect, JoinConfig};
use coordinator::Coordinating;
pub use outcome::{JoinError, JoinStats, Joined, LateRoster};
pub use overheard::Overheard;
use rosters::Rosters;
use session::{challenge_key, join_key};
pub use session::{session, Session};

/// Rank claim of a member that has none yet.
pub(crate) const NO_RANK: Rank = Rank::new(u16::MAX);

/// How often challenges, hellos and rosters are repeated until answered.
pub const REPEAT: Duration = Duration::from_millis(10);

/// Challenges a member holds and answers at once (and rosters it collects: one per challenge).
pub const MAX_CHALLENGES: usize = 8;

/// Least time between two rounds of hellos, however many challenges arrive: a flood of
/// challenges costs a member at most [`MAX_CHALLENGES`] hellos per gap.
pub const HELLO_GAP: Duration = Duration::from_millis(5);

/// Hosts outside the expectation remembered for a timeout message, at most.
const MAX_STRANGERS: usize = 64;

/// The smallest frame size a hello may offer or a roster decide: the IPv4 minimum datagram
/// size, which every link carries (an offer below it is malformed, not a small MTU).
pub const MIN_PDU: u16 = 576;

/// Roster entries per frame: MAC (6) and member nonce (8), after the part's
/// [`ROSTER_HEADER`], in a payload of 1400 bytes (a 1500-byte MTU less header, tag and CRC,
/// with room to spare).
const ENTRIES_PER_PART: usize = (1400 - ROSTER_HEADER) / 14;

/// Bytes of a roster part before its entries: type (1), nonce (8), part (2), parts (2),
/// frame size (2), entry count (2).
const ROSTER_HEADER: usize = 17;

/// Roster entries in one part of a frame of at most `max_pdu` bytes: after the frame's header
/// and CRC, the tag with a key, and the part's own header.
fn entries_per_part(max_pdu: usize, keyed: bool) -> usize {
    let tag = if keyed { wire::TAG_LEN } else { 0 };
    ENTRIES_PER_PART
        .min(max_pdu.saturating_sub(wire::OVERHEAD + tag + ROSTER_HEADER) / 14)
        .max(1)
}

/// Seals an emitted frame with `key`, if any.
fn seal(key: Option<&Key>, frame: &[u8]) -> Option<Vec<u8>> {
    match key {
        None => Some(frame.to_vec()),
        Some(k) => {
            let mut v = frame.to_vec();
            v.resize(frame.len() + wire::TAG_LEN, 0);
            let n = wire::seal(k, &mut v, frame.len()).ok()?;
            v.truncate(n);
            Some(v)
        }
    }
}

/// The join of one member (sans-IO).
#[derive(Debug)]
pub struct Join {
    cfg: JoinConfig,
    /// This member's nonce (the challenge's, if it coordinates).
    nonce: u64,
    /// The member nonce of this member's hellos.
    member_nonce: u64,
    coord: Option<Coordinating>,
    /// This join's clock value, sealed in its challenges (see [`Join::with_clock`]).
    clock: u64,
    /// Challenges held (at most [`MAX_CHALLENGES`]) and the rounds of hellos answering them.
    challenges: Challenges,
    /// Rosters being collected, one per challenge held at most.
    rosters: Rosters,
    /// How to confirm a repeated roster once joined (the result may have been taken).
    late: Option<LateRoster>,
    /// Hosts heard that the expectation excludes.
    strangers: BTreeSet<MacAddr>,
    /// Frames beside this join's exchange (see [`Overheard`]).
    overheard: Overheard,
    next_send: Instant,
    out: VecDeque<(MacAddr, Vec<u8>)>,
    result: Option<Result<Joined, JoinError>>,
    done: bool,
    /// A first-come coordinator told to start with the receivers it holds ([`Join::settle`]).
    settled: bool,
}

impl Join {
    /// Starts the join of `cfg` at `now`. `nonce` must be fresh and unpredictable (a random
    /// number); the member nonce is derived from it.
    pub fn new(cfg: JoinConfig, now: Instant, nonce: u64) -> Result<Join, JoinError> {
        let candidate = match &cfg.expect {
            Expect::List(l) => {
                if l.is_empty() || l.len() >= usize::from(u16::MAX) {
                    return Err(JoinError::Config(format!(
                        "{} members listed (1..65534)",
                        l.len()
                    )));
                }
                if !l.contains(&cfg.mac) {
                    return Err(JoinError::Config(format!(
                        "this interface's MAC {} is not in the member list",
                        cfg.mac
                    )));
                }
                l[0] == cfg.mac
            }
            Expect::Ranks { size, rank } => {
                if rank.get() >= *size {
                    return Err(JoinError::Config(format!(
                        "rank {rank} is not in a group of {size}"
                    )));
                }
                rank.get() == 0
            }
            Expect::Discover { expected: size } => {
                if *size == 0 || *size == u16::MAX {
                    return Err(JoinError::Config("a group needs 1..65534 members".into()));
                }
                true
            }
            Expect::FirstCome { receivers, only } => {
                if *receivers == 0 && only.is_none() {
                    return Err(JoinError::Config("no receivers expected".into()));
                }
                true
            }
            Expect::Invited | Expect::InvitedBy(_) => false,
        };
        let member_nonce = {
            let h = blake3::hash(&nonce.to_be_bytes());
            // A hash has 32 bytes: the first 8 are always there.
            u64::take(&mut &h.as_bytes()[..]).unwrap_or_default()
        };
        let mut j = Join {
            cfg,
            nonce,
            member_nonce,
            coord: candidate.then(Coordinating::new),
            clock: 0,
            challenges: Challenges::default(),
            rosters: Rosters::default(),
            late: None,
            strangers: BTreeSet::new(),
            overheard: Overheard::default(),
            next_send: now,
            out: VecDeque::new(),
            result: None,
            done: false,
            settled: false,
        };
        j.decide(now);
        Ok(j)
    }

    /// Sets the value this join seals in its challenges as their time: the wall clock (in
    /// microseconds since the UNIX epoch, say), or anything that grows from one join of this
    /// host to the next. A member prefers the challenge of a coordinator with the largest
    /// time, so that challenges recorded in earlier joins and sent again cannot displace the
    /// current one. Joins that leave it at 0 tie, and then the challenges that came first are
    /// kept.
    pub fn with_clock(mut self, time: u64) -> Join {
        self.clock = time;
        self
    }

    /// The join's outcome, once there is one.
    pub fn take_result(&mut self) -> Option<Result<Joined, JoinError>> {
        self.result.take()
    }

    /// Members known so far (this one included) and members expected, for a timeout message.
    pub fn progress(&self) -> (usize, usize) {
        let heard = self.coord.as_ref().map_or(0, |c| c.hellos.len()) + 1;
        let expected = match &self.cfg.expect {
            Expect::List(l) => l.len(),
            Expect::Ranks { size, .. } | Expect::Discover { expected: size } => usize::from(*size),
            Expect::FirstCome { receivers, only } => only.as_ref().map_or(*receivers, Vec::len) + 1,
            Expect::Invited | Expect::InvitedBy(_) => 0,
        };
        (heard, expected)
    }

    /// MACs that answered and are not expected (a hostfile that misses them).
    pub fn strangers(&self) -> Vec<MacAddr> {
        self.strangers.iter().copied().collect()
    }

    /// Hosts heard sending frames of another version of the wire format (another release of
    /// ethbcast), with the version they speak: their frames are refused, so they never join.
    pub fn other_versions(&self) -> Vec<(MacAddr, u8)> {
        self.overheard.other_versions()
    }

    /// MACs heard from that the coordinator has accepted so far.
    pub fn heard(&self) -> Vec<MacAddr> {
        self.coord
            .as_ref()
            .map(|c| c.hellos.iter().map(|h| h.0).collect())
            .unwrap_or_default()
    }

    /// Members of the roster the coordinator decided that confirmed it, this one included
    /// (`None` before a roster is decided, and on a member that does not coordinate).
    pub fn confirmed(&self) -> Option<(usize, usize)> {
        let c = self.coord.as_ref()?;
        let roster = c.roster.as_ref()?;
        Some((c.confirmed.len(), roster.len()))
    }

    /// What this join overheard beside its own exchange (see [`Overheard`]).
    pub fn overheard(&self) -> &Overheard {
        &self.overheard
    }

    /// What the join holds and has sent so far.
    pub fn stats(&self) -> JoinStats {
        JoinStats {
            hellos: self.challenges.hellos(),
            challenges: self.challenges.len(),
            rosters: self.rosters.len(),
            peak_rosters: self.rosters.peak(),
        }
    }

    /// True if this member coordinates (and has not stepped down).
    pub fn is_coordinator(&self) -> bool {
        self.coord.as_ref().is_some_and(|c| !c.stepped_down)
    }

    /// A first-come coordinator ([`Expect::FirstCome`]) that has not decided its roster yet
    /// and holds at least `min` receivers decides it now with those (the earliest to answer,
    /// in the order of `only` if given); the receivers not heard from are left out. Returns
    /// whether the roster is decided. Any other join is unchanged (false).
    pub fn settle(&mut self, now: Instant, min: usize) -> bool {
        if !matches!(self.cfg.expect, Expect::FirstCome { .. }) || self.done {
            return false;
        }
        let Some(c) = self.coord.as_ref() else {
            return false;
        };
        if c.roster.is_some() {
            return true;
        }
        if c.hellos.len() < min.max(1) {
            return false;
        }
        self.settled = true;
        self.decide(now);
        self.coord.as_ref().is_some_and(|c| c.roster.is_some())
    }

    fn send(&mut self, dst: MacAddr, key: Option<&Key>, msg: &JoinMsg, claim: Rank) {
        let frame = Control::Join { body: msg.encode() }.to_vec(self.cfg.group, claim, NO_RANK, 0);
        if let Some(f) = seal(key, &frame) {
            self.out.push_back((dst, f));
        }
    }

    fn claim(&self) -> Rank {
        match &self.cfg.expect {
            Expect::List(l) => l
                .iter()
                .position(|m| *m == self.cfg.mac)
                .map_or(NO_RANK, |p| Rank::new(p as u16)),
            Expect::Ranks { rank, .. } => *rank,
            Expect::FirstCome { .. } => Rank::new(0),
            _ => NO_RANK,
        }
    }

    fn expected_size(&self) -> Option<usize> {
        match &self.cfg.expect {
            Expect::List(l) => Some(l.len()),
            Expect::Ranks { size, .. } | Expect::Discover { expected: size } => {
                Some(usize::from(*size))
            }
            Expect::FirstCome { receivers, only } => {
                let all = only.as_ref().map_or(*receivers, Vec::len);
                let heard = self.coord.as_ref().map_or(0, |c| c.hellos.len());
                Some(if self.settled { heard.min(all) } else { all } + 1)
            }
            Expect::Invited | Expect::InvitedBy(_) => None,
        }
    }

    /// This member's offer: its link's MTU, as the wire carries it.
    fn own_pdu(&self) -> u16 {
        self.cfg.max_pdu.min(usize::from(u16::MAX)) as u16
    }

    fn finish(&mut self, coordinator: MacAddr, nonce: u64, roster: &[(MacAddr, u64)], pdu: u16) {
        let peers: Vec<MacAddr> = roster.iter().map(|e| e.0).collect();
        let Some(rank) = peers.iter().position(|m| *m == self.cfg.mac) else {
            return;
        };
        self.done = true;
        let late = LateRoster {
            group: self.cfg.group,
            nonce,
            member_nonce: self.member_nonce,
            member: self.cfg.mac,
            coordinator,
            key: self.cfg.key.clone(),
        };
        self.late = Some(late.clone());
        self.result = Some(Ok(Joined {
            rank: Rank::new(rank as u16),
            session: session(self.cfg.group, self.cfg.key.as_ref(), nonce, roster),
            max_pdu: usize::from(pdu),
            late,
            peers,
            stats: self.stats(),
        }));
    }

    /// A member checks a complete roster against what it expects.
    fn accept_roster(&mut self, from: MacAddr, nonce: u64, roster: Vec<(MacAddr, u64)>, pdu: u16) {
        // A frame size this member's link cannot carry (or too small for any frame) is not
        // the answer to its hello, whatever the roster says.
        if !roster.contains(&(self.cfg.mac, self.member_nonce))
            || roster.first().map(|e| e.0) != Some(from)
            || !(MIN_PDU..=self.own_pdu()).contains(&pdu)
        {
            return;
        }
        let ok = match &self.cfg.expect {
            Expect::List(l) => {
                if roster.iter().map(|e| e.0).ne(l.iter().copied()) {
                    self.result = Some(Err(JoinError::RosterMismatch));
                    self.done = true;
                    return;
                }
                true
            }
            Expect::Ranks { size, rank } => {
                roster.len() == usize::from(*size)
                    && roster.get(rank.index()).map(|e| e.0) == Some(self.cfg.mac)
            }
            Expect::Discover { expected: size } => {
                roster.len() == usize::from(*size) && roster.windows(2).all(|w| w[0].0 < w[1].0)
            }
            Expect::Invited => true,
            Expect::InvitedBy(c) => roster.first().map(|e| e.0) == Some(*c),
            Expect::FirstCome { .. } => false,
        };
        if !ok {
            return;
        }
        let confirm = JoinMsg::Confirm {
            nonce,
            member: self.member_nonce,
            mac: self.cfg.mac,
        };
        let key = self.cfg.key.as_ref().map(|k| join_key(k, nonce));
        self.send(from, key.as_ref(), &confirm, NO_RANK);
        self.finish(from, nonce, &roster, pdu);
    }

    /// Queues what is due: challenges, hellos, roster parts.
    fn on_timeout(&mut self, now: Instant) {
        if now < self.next_send || self.done {
            return;
        }
        self.next_send = now + REPEAT;
        let challenges = self.challenges.round(now);
        let key = self.cfg.key.clone();
        let claim = self.claim();
        let coordinating = self
            .coord
            .as_ref()
            .map(|c| (c.stepped_down, c.roster.clone(), c.pdu));
        match coordinating {
            Some((false, None, _)) => {
                let size = self.expected_size().unwrap_or(0).min(usize::from(u16::MAX)) as u16;
                let msg = JoinMsg::Challenge {
                    nonce: self.nonce,
                    size,
                    coordinator: self.cfg.mac,
                    time: self.clock,
                };
                self.send(
                    BROADCAST_MAC,
                    key.as_ref().map(|k| challenge_key(k)).as_ref(),
                    &msg,
                    claim,
                );
                // Members known beforehand that broadcast does not seem to reach get copies.
                let me = self.cfg.mac;
                let list = match &self.cfg.expect {
                    Expect::List(l) => Some(l.clone()),
                    _ => None,
                };
                let copies = self.coord_round(|c| {
                    let Some(l) = &list else {
                        return Vec::new();
                    };
                    let heard: BTreeSet<MacAddr> = c.hellos.iter().map(|h| h.0).collect();
                    l.iter()
                        .filter(|m| **m != me && !heard.contains(*m))
                        .copied()
                        .collect()
                });
                for dst in copies {
                    self.send(
                        dst,
                        key.as_ref().map(|k| challenge_key(k)).as_ref(),
                        &msg,
                        claim,
                    );
                }
            }
            Some((false, Some(roster), pdu)) => {
                let per = entries_per_part(self.cfg.max_pdu, key.is_some());
                let parts = roster.len().div_ceil(per) as u16;
                let copies = self.coord_round(|c| {
                    roster
                        .iter()
                        .map(|e| e.0)
                        .filter(|m| !c.confirmed.contains(m))
                        .collect()
                });
                for (i, chunk) in roster.chunks(per).enumerate() {
                    let msg = JoinMsg::Roster {
                        nonce: self.nonce,
                        part: i as u16,
                        parts,
                        pdu,
                        entries: chunk.to_vec(),
                    };
                    for &dst in std::iter::once(&BROADCAST_MAC).chain(&copies) {
                        self.send(
                            dst,
                            key.as_ref().map(|k| join_key(k, self.nonce)).as_ref(),
                            &msg,
                            claim,
                        );
                    }
                }
            }
            _ => {}
        }
        // As a member: answer every challenge heard.
        for (coordinator, nonce) in challenges {
            let msg = JoinMsg::Hello {
                nonce,
                member: self.member_nonce,
                claim,
                mac: self.cfg.mac,
                pdu: self.own_pdu(),
            };
            self.send(
                coordinator,
                key.as_ref().map(|k| join_key(k, nonce)).as_ref(),
                &msg,
                claim,
            );
            self.challenges.hello_sent();
        }
    }
}

impl Machine for Join {
    fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]) {
        self.on_frame(now, src, pdu);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.on_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done).then_some(self.next_send)
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (dst, frame) = self.out.pop_front()?;
        let len = frame.len().min(buf.len());
        buf[..len].copy_from_slice(&frame[..len]);
        Some(Transmit { dst, len })
    }
}

#[cfg(test)]
mod tests;
