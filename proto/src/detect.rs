//! Gossip failure detection: heartbeat tables spread on a deterministic schedule.
//!
//! This is the failure detector of P2P-MPI (Genaud & Rattanapoka, section 5 of the chapter in
//! `shared/seeds/004`): every member keeps a table with one heartbeat counter per member and,
//! every `T_gossip`, sends the table to one other member; receivers merge what they get. If a
//! member's entry has not been refreshed for `T_cleanup`, it is *suspected*; a confirmation
//! ping (the paper's consensus phase, section 5.3) decides: answered, the suspicion is
//! cleared; unanswered for `confirm_timeout`, the member is declared [`DetectorEvent::Dead`].
//!
//! **Counters are ages.** The paper's heartbeats grow and merge by maximum; we keep the
//! equivalent *age* form: entry `j` is how many gossip periods have passed since we last had
//! fresh news of `j`. Each tick adds one to every entry, our own stays 0, a merge keeps the
//! minimum, and hearing anything from `j` directly ([`Detector::mark_alive`]) sets it to 0.
//! Ages need no synchronised clocks and fit in a `u16` (they saturate).
//!
//! **Schedules** (section 5.1 and 5.2, equations 3 to 5), with `s` our position among the live
//! members, `n` their number, `r` the round (1-based, cyclic) and `L = ceil(log2 n)`:
//! - Round-robin ([`Gossip::RoundRobin`]): `d = (s + r) mod n`, `1 <= r < n`.
//! - Binary round-robin ([`Gossip::BinaryRoundRobin`]): `d = (s + 2^(r-1)) mod n`, `1 <= r <= L`.
//! - Double binary round-robin ([`Gossip::DoubleBinaryRoundRobin`]): BRR clockwise in the
//!   first half of a `2L`-round cycle, then `d = (s - 2^(r-L-1)) mod n` for `L < r <= 2L`,
//!   "a connection back ... counterclock-wise", so that no member depends on one-way links.
//!
//! **Timing** ([`rounds`], [`t_cleanup`]). The paper gives the minimum cleanup time, the rounds
//! `d` information needs to reach everybody when rounds are synchronous and the spread starts
//! at round 1: RR `ceil((sqrt(1+8n)-1)/2)`, BRR `L`, DBRR `2L`; and for DBRR the cleanup time it
//! actually uses, `3L * T_gossip` (section 5.2). It gives no figure for RR and BRR. Our members
//! tick on their own clocks, so rounds are not aligned: a message that lands just after the
//! receiver's tick waits a whole period, and a BRR path that misses its power of two waits for
//! the next cycle. Measured under random phases (test `steady_state_ages_stay_below_threshold`)
//! the largest age of a live member reaches `2L` for BRR at `n = 2` and `2L - 1` at `n = 64`,
//! so `2L` would suspect live members. We therefore use `3L` for BRR as the paper does for DBRR
//! ("with the same assumptions as for BRR"), and `2d` for RR (measured ages stay at or below
//! `1.5 d`). [`DetectorConfig::t_cleanup`] overrides it.
//!
//! **Invariants.** The schedule is computed over the members not [`Detector::evicted`], so the
//! ring re-forms over the survivors once the layer above agrees on an eviction. A member
//! declared dead stays dead (crash-stop) until it is evicted. Nothing here panics on input from
//! the network: a malformed table is a [`DecodeError`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::error::ConfigError;
use crate::wire::Control;
use crate::Rank;

/// Largest group a table can describe: 512 `u16` counters (1024 bytes) fit the payload of any
/// standard Ethernet frame.
pub const MAX_MEMBERS: u16 = 512;

/// Which schedule picks the gossip target of each round (section 5.1, 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Gossip {
    /// RR, equation (3): `d = (s + r) mod n`, cycle of `n - 1` rounds.
    RoundRobin,
    /// BRR, equation (4): `d = (s + 2^(r-1)) mod n`, cycle of `ceil(log2 n)` rounds.
    BinaryRoundRobin,
    /// DBRR, equation (5): BRR forward then backward, cycle of `2 ceil(log2 n)` rounds.
    #[default]
    DoubleBinaryRoundRobin,
}

/// `ceil(log2 n)`, 0 for `n <= 1`.
fn log2_ceil(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// The paper's `d`: rounds until news of one member has reached every member when its spread
/// starts at round 1 (the minimum cleanup time in units of `T_gossip`).
///
/// RR: the smallest integer `r` with `r(r+1)/2 >= n`, i.e. `ceil((sqrt(1+8n)-1)/2)`;
/// BRR: `ceil(log2 n)`; DBRR: `2 ceil(log2 n)`. Zero for a group of one.
pub(crate) fn rounds(protocol: Gossip, n: u16) -> u32 {
    let n = u32::from(n);
    if n <= 1 {
        return 0;
    }
    match protocol {
        Gossip::RoundRobin => {
            // Integer form of ceil((sqrt(1+8n)-1)/2): no floating point rounding.
            let mut r = 0;
            while r * (r + 1) / 2 < n {
                r += 1;
            }
            r
        }
        Gossip::BinaryRoundRobin => log2_ceil(n),
        Gossip::DoubleBinaryRoundRobin => 2 * log2_ceil(n),
    }
}

/// Length of one cycle of the schedule in rounds (after it, round numbers repeat).
pub(crate) fn cycle(protocol: Gossip, n: u16) -> u32 {
    let n = u32::from(n);
    if n <= 1 {
        return 0;
    }
    match protocol {
        Gossip::RoundRobin => n - 1,
        Gossip::BinaryRoundRobin => log2_ceil(n),
        Gossip::DoubleBinaryRoundRobin => 2 * log2_ceil(n),
    }
}

/// Time without fresh news after which a member is suspected.
///
/// DBRR: `3 ceil(log2 n) T_gossip`, the paper's setting (section 5.2); BRR the same (its
/// minimum is `ceil(log2 n)` but unaligned rounds need the margin, see the module docs); RR:
/// `2 d T_gossip` with `d =` [`rounds`].
pub(crate) fn t_cleanup(protocol: Gossip, n: u16, t_gossip: Duration) -> Duration {
    let periods = match protocol {
        Gossip::DoubleBinaryRoundRobin | Gossip::BinaryRoundRobin => 3 * log2_ceil(u32::from(n)),
        Gossip::RoundRobin => 2 * rounds(protocol, n),
    };
    t_gossip * periods
}

/// Position (among `n` live members) that position `s` gossips to in round `r` (1-based,
/// `1 <= r <` [`cycle`]` + 1`). `None` for a group of one.
pub(crate) fn target(protocol: Gossip, s: u32, n: u32, r: u32) -> Option<u32> {
    if n <= 1 {
        return None;
    }
    let l = log2_ceil(n);
    let d = match protocol {
        Gossip::RoundRobin => (s + r) % n,
        Gossip::BinaryRoundRobin => (s + (1 << (r - 1)) % n) % n,
        Gossip::DoubleBinaryRoundRobin if r <= l => (s + (1 << (r - 1)) % n) % n,
        Gossip::DoubleBinaryRoundRobin => (s + n - (1 << (r - l - 1)) % n) % n,
    };
    Some(d)
}

/// Configuration of one member's detector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Our rank.
    pub rank: Rank,
    /// Members of the group (ranks `0..size`).
    pub size: u16,
    /// Gossip schedule.
    pub protocol: Gossip,
    /// Period of gossip (one round).
    pub t_gossip: Duration,
    /// How long a suspect has to answer the confirmation ping before it is declared dead.
    pub confirm_timeout: Duration,
    /// Overrides the suspicion threshold computed from the protocol, the group's size and
    /// `t_gossip`.
    pub t_cleanup: Option<Duration>,
    /// Pings sent within `confirm_timeout` (evenly spaced), so that one lost ping or pong does
    /// not kill a live member.
    pub ping_attempts: u32,
}

impl DetectorConfig {
    /// DBRR by default, the paper's `T_cleanup`, and a confirmation of five pings over
    /// `5 T_gossip`: on the simulator at 64 members with 6% frame loss (bursts included), two
    /// pings over `2 T_gossip` declared a live member dead about once a minute.
    pub fn new(rank: Rank, size: u16, t_gossip: Duration) -> DetectorConfig {
        DetectorConfig {
            rank,
            size,
            protocol: Gossip::default(),
            t_gossip,
            confirm_timeout: t_gossip * 5,
            t_cleanup: None,
            ping_attempts: 5,
        }
    }

    /// The suspicion threshold in use.
    pub fn cleanup(&self) -> Duration {
        self.t_cleanup
            .unwrap_or_else(|| t_cleanup(self.protocol, self.size, self.t_gossip))
    }
}

/// Why a control frame was not accepted as a detector message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The table's byte length is not two bytes per member of our group.
    #[error("gossip table of {len} bytes, expected {expected} ({size} members)")]
    Length {
        /// Payload bytes received.
        len: usize,
        /// Bytes expected.
        expected: usize,
        /// Our group size.
        size: u16,
    },
    /// A ping or pong names a rank outside the group.
    #[error("rank {0} outside the group")]
    Rank(u32),
}

/// What a detector sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectorMsg {
    /// Our heartbeat (age) table, one entry per rank.
    Gossip(Vec<u16>),
    /// Confirmation probe of a suspect (the rank probed).
    Ping(Rank),
    /// Answer to a ping (our own rank).
    Pong(Rank),
}

impl DetectorMsg {
    /// The control message that carries it.
    pub fn to_control(&self) -> Control {
        match self {
            DetectorMsg::Gossip(t) => Control::Heartbeat { table: t.clone() },
            DetectorMsg::Ping(rank) => Control::Ping { rank: *rank },
            DetectorMsg::Pong(rank) => Control::Pong { rank: *rank },
        }
    }

    /// Reads a control message of a group of `size` members (`None`: not the detector's).
    pub fn from_control(msg: &Control, size: u16) -> Option<Result<DetectorMsg, DecodeError>> {
        let rank = |r: Rank| {
            if r.get() < size {
                Ok(r)
            } else {
                Err(DecodeError::Rank(u32::from(r.get())))
            }
        };
        Some(match msg {
            Control::Heartbeat { table } => {
                if table.len() != usize::from(size) || size > MAX_MEMBERS {
                    Err(DecodeError::Length {
                        len: 2 * table.len(),
                        expected: 2 * usize::from(size),
                        size,
                    })
                } else {
                    Ok(DetectorMsg::Gossip(table.clone()))
                }
            }
            Control::Ping { rank: r } => rank(*r).map(DetectorMsg::Ping),
            Control::Pong { rank: r } => rank(*r).map(DetectorMsg::Pong),
            _ => return None,
        })
    }
}

/// What the detector tells the layer above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DetectorEvent {
    /// No fresh news of this member for `T_cleanup`; a confirmation ping is on its way.
    Suspect(Rank),
    /// A suspect was heard from again (it answered, or somebody had fresher news).
    Cleared(Rank),
    /// A suspect did not answer within `confirm_timeout`. Final until evicted.
    Dead(Rank),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Alive,
    Suspected {
        deadline: Instant,
        next_ping: Instant,
        pings_left: u32,
    },
    Dead,
    Evicted,
}

/// One member's gossip failure detector (sans-IO).
///
/// Drive it like the engine: feed inputs (`handle_gossip`, `handle_ping`, `handle_pong`,
/// `mark_alive`, `evicted`), call [`Detector::handle_timeout`] when [`Detector::poll_timeout`]
/// is due (call it once at start: the first tick happens then), drain
/// [`Detector::poll_transmit`] and [`Detector::poll_event`].
#[derive(Debug)]
pub struct Detector {
    cfg: DetectorConfig,
    /// Suspicion threshold in gossip periods.
    threshold: u16,
    age: Vec<u16>,
    state: Vec<State>,
    /// Rounds done so far (the round of the next tick is `round % cycle + 1`).
    round: u64,
    next_tick: Option<Instant>,
    transmits: VecDeque<(Rank, DetectorMsg)>,
    events: VecDeque<DetectorEvent>,
}

impl Detector {
    /// Creates the detector of `cfg.rank`. Every member starts fresh (age 0).
    pub fn new(cfg: DetectorConfig) -> Result<Detector, ConfigError> {
        if cfg.size == 0 || cfg.size > MAX_MEMBERS || cfg.rank.get() >= cfg.size {
            return Err(ConfigError::DetectorRank {
                rank: cfg.rank,
                size: cfg.size,
            });
        }
        if cfg.t_gossip.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        if cfg.ping_attempts == 0 {
            return Err(ConfigError::NoPing);
        }
        let n = usize::from(cfg.size);
        let mut d = Detector {
            threshold: 1,
            age: vec![0; n],
            state: vec![State::Alive; n],
            round: 0,
            next_tick: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            cfg,
        };
        d.threshold = d.threshold_for(d.cfg.size);
        Ok(d)
    }

    fn threshold_for(&self, live: u16) -> u16 {
        let cleanup = self
            .cfg
            .t_cleanup
            .unwrap_or_else(|| t_cleanup(self.cfg.protocol, live, self.cfg.t_gossip));
        let periods = cleanup.as_nanos().div_ceil(self.cfg.t_gossip.as_nanos());
        u16::try_from(periods).unwrap_or(u16::MAX).max(1)
    }

    /// The configuration.
    pub fn config(&self) -> &DetectorConfig {
        &self.cfg
    }

    /// Suspicion threshold in gossip periods (`ceil(T_cleanup / T_gossip)`).
    pub fn threshold(&self) -> u16 {
        self.threshold
    }

    /// Our current table (ages in gossip periods; evicted members read `u16::MAX`).
    pub fn table(&self) -> &[u16] {
        &self.age
    }

    /// True if `rank` is suspected and not yet confirmed dead.
    pub fn is_suspected(&self, rank: Rank) -> bool {
        matches!(self.state.get(rank.index()), Some(State::Suspected { .. }))
    }

    /// True if `rank` has been declared dead (or evicted).
    pub fn is_dead(&self, rank: Rank) -> bool {
        matches!(
            self.state.get(rank.index()),
            Some(State::Dead | State::Evicted)
        )
    }

    /// Members in the schedule (not evicted), in rank order.
    fn ring(&self) -> Vec<Rank> {
        Rank::all(self.cfg.size)
            .filter(|r| self.state[r.index()] != State::Evicted)
            .collect()
    }

    /// The target of the next tick.
    fn next_target(&self) -> Option<Rank> {
        let ring = self.ring();
        let n = u16::try_from(ring.len()).ok()?;
        let c = cycle(self.cfg.protocol, n);
        if c == 0 {
            return None;
        }
        let s = ring.iter().position(|r| *r == self.cfg.rank)? as u32;
        let r = (self.round % u64::from(c)) as u32 + 1;
        let t = target(self.cfg.protocol, s, u32::from(n), r)?;
        ring.get(t as usize).copied()
    }

    /// Lets time pass: a gossip tick every `T_gossip` (ages grow, suspects are named, the
    /// table goes out), and confirmation pings and their deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        let tick = match self.next_tick {
            None => true,
            Some(t) => t <= now,
        };
        if tick {
            self.tick(now);
            // Catch up without bursts: the next tick is one period after this one, or now.
            let next = self.next_tick.map_or(now, |t| t + self.cfg.t_gossip);
            self.next_tick = Some(if next <= now {
                now + self.cfg.t_gossip
            } else {
                next
            });
        }
        self.confirm(now);
    }

    fn tick(&mut self, now: Instant) {
        let me = self.cfg.rank.index();
        // The first tick starts the clock: no period has passed yet.
        let elapsed = u16::from(self.round > 0);
        for j in 0..self.age.len() {
            if j == me || self.state[j] == State::Evicted {
                continue;
            }
            self.age[j] = self.age[j].saturating_add(elapsed);
            if self.age[j] >= self.threshold && self.state[j] == State::Alive {
                self.state[j] = State::Suspected {
                    deadline: now + self.cfg.confirm_timeout,
                    next_ping: now,
                    pings_left: self.cfg.ping_attempts,
                };
                self.events
                    .push_back(DetectorEvent::Suspect(Rank::new(j as u16)));
            }
        }
        if let Some(t) = self.next_target() {
            self.transmits
                .push_back((t, DetectorMsg::Gossip(self.age.clone())));
        }
        self.round += 1;
    }

    fn confirm(&mut self, now: Instant) {
        let spacing = self.cfg.confirm_timeout / self.cfg.ping_attempts;
        for j in 0..self.state.len() {
            if let State::Suspected {
                deadline,
                next_ping,
                pings_left,
            } = self.state[j]
            {
                if deadline <= now {
                    self.state[j] = State::Dead;
                    self.events
                        .push_back(DetectorEvent::Dead(Rank::new(j as u16)));
                } else if pings_left > 0 && next_ping <= now {
                    self.transmits
                        .push_back((Rank::new(j as u16), DetectorMsg::Ping(Rank::new(j as u16))));
                    self.state[j] = State::Suspected {
                        deadline,
                        next_ping: now + spacing,
                        pings_left: pings_left - 1,
                    };
                }
            }
        }
    }

    /// Sets `rank`'s age to `age` if that is fresher, and clears a suspicion it ends.
    fn refresh(&mut self, rank: usize, age: u16) {
        if rank == self.cfg.rank.index() || age >= self.age[rank] {
            return;
        }
        match self.state[rank] {
            State::Alive => self.age[rank] = age,
            State::Suspected { .. } => {
                self.age[rank] = age;
                if age < self.threshold {
                    self.state[rank] = State::Alive;
                    self.events
                        .push_back(DetectorEvent::Cleared(Rank::new(rank as u16)));
                }
            }
            State::Dead | State::Evicted => {}
        }
    }

    /// Anything heard directly from `rank` (any frame) is fresh news of it.
    pub fn mark_alive(&mut self, _now: Instant, rank: Rank) {
        if rank.index() < self.age.len() {
            self.refresh(rank.index(), 0);
        }
    }

    /// Merges a gossip table received from `src` (entry-wise minimum of ages). A table of the
    /// wrong length is refused.
    pub fn handle_gossip(
        &mut self,
        now: Instant,
        src: Rank,
        table: &[u16],
    ) -> Result<(), DecodeError> {
        if table.len() != self.age.len() {
            return Err(DecodeError::Length {
                len: 2 * table.len(),
                expected: 2 * self.age.len(),
                size: self.cfg.size,
            });
        }
        self.mark_alive(now, src);
        for (j, a) in table.iter().enumerate() {
            self.refresh(j, *a);
        }
        Ok(())
    }

    /// A ping from `src`: it hears from us with a pong.
    pub fn handle_ping(&mut self, now: Instant, src: Rank) {
        self.mark_alive(now, src);
        if src.get() < self.cfg.size && src != self.cfg.rank {
            self.transmits
                .push_back((src, DetectorMsg::Pong(self.cfg.rank)));
        }
    }

    /// A pong from `src`: it is alive.
    pub fn handle_pong(&mut self, now: Instant, src: Rank) {
        self.mark_alive(now, src);
    }

    /// Dispatches a detector message received from `src`.
    pub fn handle_msg(
        &mut self,
        now: Instant,
        src: Rank,
        msg: &DetectorMsg,
    ) -> Result<(), DecodeError> {
        match msg {
            DetectorMsg::Gossip(t) => self.handle_gossip(now, src, t),
            DetectorMsg::Ping(_) => {
                self.handle_ping(now, src);
                Ok(())
            }
            DetectorMsg::Pong(_) => {
                self.handle_pong(now, src);
                Ok(())
            }
        }
    }

    /// The group agreed that `rank` is gone: it leaves the schedule (the ring re-forms over the
    /// survivors) and is never suspected again.
    pub fn evicted(&mut self, rank: Rank) {
        let r = rank.index();
        if r >= self.state.len() || rank == self.cfg.rank || self.state[r] == State::Evicted {
            return;
        }
        self.state[r] = State::Evicted;
        self.age[r] = u16::MAX;
        let live = self.ring().len() as u16;
        self.threshold = self.threshold_for(live);
    }

    /// The next message to send, with its destination rank.
    pub fn poll_transmit(&mut self) -> Option<(Rank, DetectorMsg)> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<DetectorEvent> {
        self.events.pop_front()
    }

    /// When [`Detector::handle_timeout`] has work next; `None` before the first call.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let pings = self.state.iter().filter_map(|s| match s {
            State::Suspected {
                deadline,
                next_ping,
                pings_left,
            } => Some(if *pings_left > 0 {
                (*next_ping).min(*deadline)
            } else {
                *deadline
            }),
            _ => None,
        });
        self.next_tick.into_iter().chain(pings).min()
    }
}

#[cfg(test)]
mod tests;
