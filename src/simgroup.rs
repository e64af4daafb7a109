//! The group API on the simulated switch: what `Group::bcast` and `Group::barrier` do, call
//! by call, for every member, under faults, with dead and deaf members.
//!
//! Every member runs the same schedule, MPI style: call `c` is a broadcast from a rotating
//! root with a size and an algorithm (push-pull, simple, or the binomial tree) drawn from the
//! seed, and every `barrier_every` calls a barrier. The members are [`Member`]s run by the
//! one driver in virtual time ([`crate::cluster::SimCluster`]), with failure detection on.
//! `kill` members die a third of the way through the run (their host stops: its port goes
//! dead and its member never runs again); `filter` members sit behind a filter that drops
//! every group-addressed frame, so the roots must fail them over to point-to-point. The
//! checker compares every broadcast a survivor completed with what its root sent, counts
//! barriers, and measures how long each death took to be noticed by every survivor against
//! the detector's bound. Same scenario and seed, same report.
//!
//! With `impostor` a host outside the group sits on one more port of the switch and attacks
//! the detector: it records every frame the members to be killed send while they live
//! (heartbeats, pongs, acknowledgements, data), and once they are dead it sends them again
//! under their MAC addresses, each followed by a forged copy with a fresh control counter
//! (and, in a keyed group, a tag of a key of its own). A replayed frame must be refused by
//! the replay windows, a forged one by the key, so the dead are still evicted in time.

use crate::Key;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rand::{seq::SliceRandom, Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{
    message_bytes, ClusterError, Deliveries, RunEnd, SimCluster, Traffic, Workload,
};
use crate::group::{Allgather, Detection, GroupError};
use crate::link::sim::{port_mac, Faults, SimNet, SimPort};
use crate::Rank;
use ethbcast_proto::{
    seal, Algorithm, BarrierAlgo, DetectorConfig, Done, EngineConfig, Event, Flags, Frame, Gossip,
    MacAddr, Member, MemberConfig, MemberError, Repr, ETH_HEADER_LEN, TAG_LEN,
};

/// A run of the group API on the simulator.
#[derive(Debug, Clone)]
pub struct GroupScenario {
    /// The group, its links and the broadcast calls (`messages`); the seed also draws the
    /// schedule and the victims.
    pub traffic: Traffic,
    /// Algorithms to draw from.
    pub algos: Vec<Algorithm>,
    /// A barrier after every this many broadcasts (0: none).
    pub barrier_every: usize,
    /// Members that die a third of the way through.
    pub kill: usize,
    /// Members whose group-addressed frames are all lost.
    pub filter: usize,
    /// Failure detection of every member.
    pub detection: Detection,
    /// Give up after this much virtual time.
    pub limit: Duration,
    /// Group key, if any.
    pub key: Option<Key>,
    /// A host outside the group replays the frames of the members that die, and forges
    /// fresh ones (see the module docs).
    pub impostor: bool,
    /// An allgather after every this many broadcasts (0: none): every member's part, of a
    /// length drawn per member and call from the traffic's sizes (so parts differ in length,
    /// as in MPI_Allgatherv), checked byte for byte at every survivor.
    pub allgather_every: usize,
}

impl GroupScenario {
    /// `nodes` members, `messages` broadcasts ([`Traffic::new`]), every algorithm, a barrier
    /// every 10 calls, DBRR detection with a 10 ms period.
    pub fn new(nodes: u16, messages: usize) -> GroupScenario {
        GroupScenario {
            traffic: Traffic::new(nodes, messages),
            algos: vec![Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree],
            barrier_every: 10,
            kill: 0,
            filter: 0,
            detection: Detection {
                protocol: Gossip::DoubleBinaryRoundRobin,
                t_gossip: Duration::from_millis(10),
            },
            limit: Duration::from_secs(600),
            key: None,
            impostor: false,
            allgather_every: 0,
        }
    }
}

/// What a run of the group API gave.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupReport {
    /// Broadcast deliveries at the survivors (calls × survivors but the root): completed with
    /// the root's bytes, other bytes, an earlier or a later call's bytes, or never.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub deliveries: Deliveries,
    /// Barriers expected at the survivors.
    pub barriers_expected: u64,
    /// Barriers the survivors completed.
    pub barriers_completed: u64,
    /// Calls that failed at a survivor (their errors).
    pub failed_calls: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// Members killed.
    pub killed: Vec<Rank>,
    /// Members every survivor evicted.
    pub evicted: Vec<Rank>,
    /// Survivors some member evicted (false positives).
    pub wrongly_evicted: Vec<Rank>,
    /// Members behind a broadcast filter.
    pub filtered: Vec<Rank>,
    /// Longest time from a death until the last survivor evicted the dead member.
    pub max_detect_ms: f64,
    /// The detector's bound.
    pub bound_ms: f64,
    /// Broadcasts the roots sent down the tree because hardware broadcast reached too few.
    pub tree_fallbacks: u64,
    /// Most events a member held at once.
    pub peak_queued_events: usize,
    /// Virtual time of the run.
    pub virtual_time_us: u64,
    /// Frames the impostor sent (replayed and forged).
    pub impostor_frames: u64,
    /// Allgathers expected at the survivors (calls × survivors).
    pub allgathers_expected: u64,
    /// Allgathers a survivor completed with every part right.
    pub allgathers_exact: u64,
    /// Allgathers a survivor completed with a part that is not its member's (never allowed).
    pub allgathers_wrong: u64,
    /// Allgathers that failed at a survivor because a killed member was evicted.
    pub allgathers_failed_dead: u64,
    /// Longest time a survivor's allgather waited, from the deaths or its start (whichever
    /// came later), until it failed because of them.
    pub max_allgather_fail_ms: f64,
    /// True if every survivor finished the schedule.
    pub completed: bool,
}

impl GroupReport {
    /// True if every survivor got every broadcast intact, exactly once, in order, every
    /// allgather whole or (only for a death) failed within the bound, every barrier completed, every dead member was evicted by all within the bound, and nobody
    /// alive was evicted.
    pub fn perfect(&self) -> bool {
        self.completed
            && self.deliveries.exact()
            && self.allgathers_wrong == 0
            && self.allgathers_exact + self.allgathers_failed_dead == self.allgathers_expected
            && self.max_allgather_fail_ms <= self.bound_ms
            && self.barriers_completed == self.barriers_expected
            && self.evicted == self.killed
            && self.wrongly_evicted.is_empty()
            && self.max_detect_ms <= self.bound_ms
    }
}

/// One call of the schedule.
#[derive(Debug, Clone, Copy)]
enum Step {
    Bcast {
        /// Index among the broadcasts (the message's identity).
        call: u64,
        root: Rank,
        size: usize,
        algo: Algorithm,
    },
    Barrier,
    Allgather {
        /// Index among the allgathers (the parts' identity).
        call: u64,
    },
}

/// Offset of allgather parts' message indices, far from the broadcasts'.
const ALLGATHER_CALLS: u64 = 1 << 40;

struct Schedule {
    seed: u64,
    /// The switch, whose clock stamps the deaths.
    net: SimNet,
    steps: Vec<Step>,
    /// Per member: the step it is in (or will start next), and whether a call is running.
    at: Vec<usize>,
    in_call: Vec<bool>,
    victims: Vec<usize>,
    survivor: Vec<bool>,
    kill_after: usize,
    killed_at: Option<Instant>,
    /// evicted[i][r]: when member i evicted r.
    evicted: Vec<Vec<Option<Instant>>>,
    impostor: Option<Impostor>,
    /// Per member: its allgather in progress, and the buffer its parts arrive in.
    allgathers: Vec<Option<(Allgather, Instant)>>,
    spare: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    report: GroupReport,
}

/// A host on the segment, outside the group, that speaks for the dead.
struct Impostor {
    port: SimPort,
    /// MAC addresses of the members that will die.
    victims: Vec<MacAddr>,
    /// Their frames, recorded while they lived (whole Ethernet frames).
    recorded: Vec<Vec<u8>>,
    next: usize,
    last: Option<Instant>,
    /// Control counter of the next forgery: far ahead of any real one.
    counter: u32,
    sent: u64,
}

/// Frames recorded at most.
const IMPOSTOR_RECORD: usize = 4096;
/// Recorded frames sent again per millisecond of virtual time (each with a forged copy).
const IMPOSTOR_BURST: usize = 16;

impl Impostor {
    fn step(&mut self, now: Instant, dead: bool) {
        let (victims, recorded) = (&self.victims, &mut self.recorded);
        self.port.recv_frames(&mut |f| {
            if !dead
                && recorded.len() < IMPOSTOR_RECORD
                && f.len() > 12
                && victims.iter().any(|v| f[6..12] == v[..])
            {
                recorded.push(f.to_vec());
            }
        });
        if !dead || self.recorded.is_empty() {
            return;
        }
        if self
            .last
            .is_some_and(|t| now < t + Duration::from_millis(1))
        {
            return;
        }
        self.last = Some(now);
        for _ in 0..IMPOSTOR_BURST {
            let f = self.recorded[self.next % self.recorded.len()].clone();
            self.next += 1;
            if self.port.send_frame(&f).is_ok() {
                self.sent += 1;
            }
            if let Some(forged) = self.forge(&f) {
                if self.port.send_frame(&forged).is_ok() {
                    self.sent += 1;
                }
            }
        }
    }

    /// The recorded frame `eth` with a fresh control counter (its `msg_len`), the CRC valid
    /// again, and a tag of the impostor's own key if the original had one.
    fn forge(&mut self, eth: &[u8]) -> Option<Vec<u8>> {
        let pdu = eth.get(ETH_HEADER_LEN..)?;
        let f = Frame::new_checked(pdu).ok()?;
        if f.kind().is_data() {
            return None;
        }
        let mut r = Repr::parse(&f);
        let keyed = r.flags.contains(Flags::KEYED);
        r.flags.remove(Flags::KEYED);
        self.counter = self.counter.wrapping_add(1);
        r.msg_len = self.counter;
        let mut out = r.to_vec(f.payload()).ok()?;
        if keyed {
            let n = out.len();
            out.resize(n + TAG_LEN, 0);
            seal(&[0x1F; 32], &mut out, n).ok()?;
        }
        let mut frame = eth[..ETH_HEADER_LEN].to_vec();
        frame.extend_from_slice(&out);
        Some(frame)
    }
}

impl Schedule {
    /// The part of member `r` in allgather `call`.
    fn part(&self, r: usize, call: u64) -> Vec<u8> {
        let len = self.sizes[(call as usize + r * 3) % self.sizes.len()];
        message_bytes(self.seed, Rank::new(r as u16), ALLGATHER_CALLS + call, len)
    }

    /// Takes what member `i`'s allgather has; true once it ended.
    fn poll_allgather(&mut self, i: usize, m: &mut Member, now: Instant, call: u64) -> bool {
        let Some((ag, started)) = self.allgathers[i].as_mut() else {
            return true;
        };
        let started = *started;
        let mut wrong = 0u64;
        let (seed, sizes) = (self.seed, &self.sizes);
        let mut sink = |root: Rank, data: &[u8]| {
            let r = root.index();
            let len = sizes[(call as usize + r * 3) % sizes.len()];
            if data != message_bytes(seed, root, ALLGATHER_CALLS + call, len).as_slice() {
                wrong += 1;
            }
            Ok(())
        };
        let Some(end) = ag.poll(now, m, &mut self.spare[i], &mut sink) else {
            return false;
        };
        self.allgathers[i] = None;
        if !self.survivor[i] {
            return true;
        }
        match end {
            Ok(()) if wrong == 0 => self.report.allgathers_exact += 1,
            Ok(()) => self.report.allgathers_wrong += 1,
            Err(GroupError::Member(MemberError::PeerDead(r)))
                if self.victims.contains(&r.index()) =>
            {
                self.report.allgathers_failed_dead += 1;
                if let Some(k) = self.killed_at {
                    // How long the call waited once it could know of the death.
                    let ms = now.saturating_duration_since(k.max(started)).as_secs_f64() * 1e3;
                    self.report.max_allgather_fail_ms = self.report.max_allgather_fail_ms.max(ms);
                }
            }
            Err(e) => {
                self.report.failed_calls += 1;
                self.report
                    .first_error
                    .get_or_insert_with(|| format!("member {i}, allgather {call}: {e}"));
            }
        }
        true
    }

    fn check(&mut self, step: Step, data: &[u8]) {
        let Step::Bcast {
            call, root, size, ..
        } = step
        else {
            return;
        };
        if data == message_bytes(self.seed, root, call, size).as_slice() {
            self.report.deliveries.delivered += 1;
            return;
        }
        // Which call of this root's did it get?
        let other = self.steps.iter().find_map(|s| match *s {
            Step::Bcast {
                call: c,
                root: r,
                size: z,
                ..
            } if r == root && c != call && data == message_bytes(self.seed, r, c, z).as_slice() => {
                Some(c)
            }
            _ => None,
        });
        match other {
            Some(c) if c < call => self.report.deliveries.duplicated += 1,
            Some(_) => self.report.deliveries.out_of_order += 1,
            None => self.report.deliveries.corrupt += 1,
        }
    }
}

impl Workload for Schedule {
    fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
        if let Some(imp) = self.impostor.as_mut() {
            imp.step(now, self.killed_at.is_some());
        }
        while let Some(ev) = m.poll_event() {
            if let Event::Evicted { rank } = ev {
                self.evicted[i][rank.index()].get_or_insert(now);
            }
        }
        self.report.peak_queued_events = self.report.peak_queued_events.max(m.queued_events());
        loop {
            if let (true, Some(Step::Allgather { call })) =
                (self.in_call[i], self.steps.get(self.at[i]).copied())
            {
                if !self.poll_allgather(i, m, now, call) {
                    return;
                }
                self.in_call[i] = false;
                self.at[i] += 1;
            }
            if self.in_call[i] {
                let Some(r) = m.take_result() else {
                    return;
                };
                self.in_call[i] = false;
                let step = self.steps[self.at[i]];
                self.at[i] += 1;
                if !self.survivor[i] {
                    continue;
                }
                match r {
                    Ok(Done::Bcast(data)) => {
                        if !matches!(step, Step::Bcast { root, .. } if root.index() == i) {
                            self.check(step, &data);
                        }
                    }
                    Ok(Done::Barrier) => self.report.barriers_completed += 1,
                    Err(e) => {
                        self.report.failed_calls += 1;
                        self.report.first_error.get_or_insert_with(|| {
                            format!("member {i}, step {}: {e}", self.at[i] - 1)
                        });
                    }
                }
            }
            let Some(&step) = self.steps.get(self.at[i]) else {
                return;
            };
            let started = match step {
                Step::Bcast {
                    call,
                    root,
                    size,
                    algo,
                } => {
                    let data = if root.index() == i {
                        message_bytes(self.seed, root, call, size)
                    } else {
                        Vec::new()
                    };
                    m.bcast(now, root, data, algo)
                }
                Step::Barrier => m.barrier(now, BarrierAlgo::Broadcast),
                Step::Allgather { call } => {
                    let mut part = self.part(i, call);
                    // Each member decides by its own part whether the roots take turns: with
                    // parts of differing lengths, some members take turns and some do not,
                    // and every allgather still ends.
                    let own = part.len();
                    Allgather::start(now, m, &mut part, Algorithm::Simple, own)
                        .map(|ag| self.allgathers[i] = Some((ag, now)))
                }
            };
            match started {
                Ok(()) => self.in_call[i] = true,
                Err(e) => {
                    self.at[i] += 1;
                    if self.survivor[i] {
                        self.report.failed_calls += 1;
                        self.report
                            .first_error
                            .get_or_insert_with(|| format!("member {i}: {e}"));
                    }
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.at
            .iter()
            .zip(&self.survivor)
            .all(|(&a, &s)| !s || a >= self.steps.len())
    }

    fn kill_now(&mut self) -> Vec<usize> {
        if self.killed_at.is_some() || self.victims.is_empty() {
            return Vec::new();
        }
        if self.at.iter().any(|&a| a >= self.kill_after) {
            self.killed_at = Some(self.net.now());
            return self.victims.clone();
        }
        Vec::new()
    }
}

/// Runs the group API on the simulator.
pub fn run_group(sc: &GroupScenario) -> Result<GroupReport, ClusterError> {
    let t = &sc.traffic;
    let n = t.members()?;
    if t.sizes.is_empty() || sc.algos.is_empty() {
        return Err(ClusterError::Scenario(
            "sizes and algorithms must not be empty".into(),
        ));
    }
    if sc.kill + sc.filter > n - 2 {
        return Err(ClusterError::Scenario(format!(
            "{} killed and {} filtered members leave fewer than 2 healthy ones of {n}",
            sc.kill, sc.filter
        )));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(t.seed);
    // Victims and filtered members: never rank 0, never both.
    let mut others: Vec<usize> = (1..n).collect();
    others.shuffle(&mut rng);
    let mut victims: Vec<usize> = others[..sc.kill].to_vec();
    let mut filtered: Vec<usize> = others[sc.kill..sc.kill + sc.filter].to_vec();
    victims.sort_unstable();
    filtered.sort_unstable();
    // Roots rotate over the members that survive.
    let roots: Vec<Rank> = (0..n)
        .filter(|i| !victims.contains(i))
        .map(|i| Rank::new(i as u16))
        .collect();
    let mut steps = Vec::new();
    for c in 0..t.messages {
        steps.push(Step::Bcast {
            call: c as u64,
            root: roots[c % roots.len()],
            size: t.sizes[rng.gen_range(0..t.sizes.len())],
            algo: sc.algos[rng.gen_range(0..sc.algos.len())],
        });
        if sc.barrier_every > 0 && (c + 1) % sc.barrier_every == 0 {
            steps.push(Step::Barrier);
        }
        if sc.allgather_every > 0 && (c + 1) % sc.allgather_every == 0 {
            steps.push(Step::Allgather {
                call: (c / sc.allgather_every) as u64,
            });
        }
    }
    let mut per_port = vec![];
    for &f in &filtered {
        per_port.push((
            f,
            Faults {
                group_loss: 1.0,
                ..t.faults
            },
        ));
    }
    if sc.impostor && sc.kill == 0 {
        return Err(ClusterError::Scenario(
            "an impostor speaks for killed members: kill at least one".into(),
        ));
    }
    let net = t.switch(n + usize::from(sc.impostor), per_port)?;
    let start = net.now();
    let macs: std::sync::Arc<[_]> = (0..n).map(|i| port_mac(i as u16)).collect();
    let members = (0..n)
        .map(|i| {
            let mut cfg = EngineConfig::new(0x6E0, Rank::new(i as u16), t.nodes);
            cfg.key = sc.key.clone();
            let mut mc = MemberConfig::new(cfg, macs.clone());
            let mut dc = DetectorConfig::new(Rank::new(i as u16), t.nodes, sc.detection.t_gossip);
            dc.protocol = sc.detection.protocol;
            mc.detector = Some(dc);
            Ok(Member::new(start, mc)?)
        })
        .collect::<Result<Vec<_>, ClusterError>>()?;
    let impostor = if sc.impostor {
        net.set_promiscuous(n, true)?;
        Some(Impostor {
            port: net.port(n)?,
            victims: victims.iter().map(|&v| macs[v]).collect(),
            recorded: Vec::new(),
            next: 0,
            last: None,
            counter: 1 << 30,
            sent: 0,
        })
    } else {
        None
    };
    let mut cluster = SimCluster::new(net, members)?;
    let survivor: Vec<bool> = (0..n).map(|i| !victims.contains(&i)).collect();
    let survivors = survivor.iter().filter(|&&s| s).count() as u64;
    let mut expected = 0;
    let mut barriers = 0;
    let mut allgathers = 0;
    for s in &steps {
        match s {
            Step::Bcast { root, .. } => {
                expected += survivors - u64::from(survivor[root.index()]);
            }
            Step::Barrier => barriers += survivors,
            Step::Allgather { .. } => allgathers += survivors,
        }
    }
    let mut w = Schedule {
        seed: t.seed,
        net: cluster.net().clone(),
        kill_after: steps.len() / 3,
        steps,
        at: vec![0; n],
        in_call: vec![false; n],
        victims: victims.clone(),
        survivor: survivor.clone(),
        killed_at: None,
        evicted: vec![vec![None; n]; n],
        impostor,
        allgathers: (0..n).map(|_| None).collect(),
        spare: vec![Vec::new(); n],
        sizes: t.sizes.clone(),
        report: GroupReport {
            allgathers_expected: allgathers,
            deliveries: Deliveries {
                expected,
                ..Deliveries::default()
            },
            barriers_expected: barriers,
            killed: victims.iter().map(|&v| Rank::new(v as u16)).collect(),
            filtered: filtered.iter().map(|&v| Rank::new(v as u16)).collect(),
            bound_ms: sc.detection.bound(t.nodes).as_secs_f64() * 1e3,
            ..GroupReport::default()
        },
    };
    let end = cluster.run(sc.limit, &mut w)?;
    let mut r = w.report.clone();
    r.completed = end == RunEnd::Done;
    r.deliveries.missing = r.deliveries.expected.saturating_sub(
        r.deliveries.delivered
            + r.deliveries.corrupt
            + r.deliveries.duplicated
            + r.deliveries.out_of_order,
    );
    let survivors_idx: Vec<usize> = (0..n).filter(|&i| survivor[i]).collect();
    let mut evicted_by_all = BTreeSet::new();
    let mut wrongly = BTreeSet::new();
    let mut max_detect = Duration::ZERO;
    for (v, &alive) in survivor.iter().enumerate() {
        let times: Vec<Option<Instant>> = survivors_idx.iter().map(|&i| w.evicted[i][v]).collect();
        if alive {
            if times.iter().any(Option::is_some) {
                wrongly.insert(Rank::new(v as u16));
            }
            continue;
        }
        if times.iter().all(Option::is_some) {
            evicted_by_all.insert(Rank::new(v as u16));
            if let Some(k) = w.killed_at {
                for t in times.into_iter().flatten() {
                    max_detect = max_detect.max(t.saturating_duration_since(k));
                }
            }
        }
    }
    r.evicted = evicted_by_all.into_iter().collect();
    r.wrongly_evicted = wrongly.into_iter().collect();
    r.max_detect_ms = max_detect.as_secs_f64() * 1e3;
    r.tree_fallbacks = cluster.members().map(|m| m.stats().tree_fallbacks).sum();
    r.virtual_time_us = cluster.net().now().duration_since(start).as_micros() as u64;
    r.impostor_frames = w.impostor.as_ref().map_or(0, |i| i.sent);
    Ok(r)
}
