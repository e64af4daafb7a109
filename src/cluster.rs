//! A whole group on the simulated switch: N engines, a workload, and a checker.
//!
//! This is the main test-bed of the protocol. [`run`] builds a [`SimNet`] with the link model
//! and faults of a [`Scenario`], gives each port an [`Engine`], broadcasts a seeded mix of
//! messages from several roots with both algorithms, drives everything in virtual time until
//! every message is delivered everywhere (or a virtual-time limit is hit), and checks each
//! delivery against the message that was sent: corrupt, duplicated, out-of-order and missing
//! deliveries are counted, never assumed away. Same scenario and seed, same report.

use std::collections::VecDeque;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::eqa::Rank;
use crate::link::sim::{Faults, SimConfig, SimError, SimNet, SimPort};
use crate::link::{Link, LinkError, BROADCAST_MAC};
use crate::proto::{Algo, Config, Dest, Engine, Event};

/// What to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Members of the group (ports of the switch).
    pub nodes: u16,
    /// Messages in all, spread over the roots.
    pub messages: usize,
    /// Message sizes to draw from.
    pub sizes: Vec<usize>,
    /// Algorithms to draw from.
    pub algos: Vec<Algo>,
    /// Roots that broadcast, in turn.
    pub roots: Vec<Rank>,
    /// Seed of the workload and of the switch.
    pub seed: u64,
    /// Faults of every port.
    pub faults: Faults,
    /// Per-port overrides of the faults (a dead host, a lossy cable).
    pub per_port: Vec<(usize, Faults)>,
    /// Link rate (None: infinitely fast).
    pub rate_bps: Option<u64>,
    /// Link latency.
    pub latency: Duration,
    /// Give up (and report `completed: false`) after this much virtual time.
    pub limit: Duration,
    /// Retransmission buffer slots (= receive window) of every member, if not the default.
    pub window: Option<usize>,
    /// Adjusts every member's engine configuration (after `window`).
    pub tweak: fn(&mut Config),
}

impl Scenario {
    /// A scenario with `nodes` members and `messages` messages, no faults, 1 Gbit/s links.
    pub fn new(nodes: u16, messages: usize) -> Scenario {
        Scenario {
            nodes,
            messages,
            sizes: vec![8, 256, 4096, 65536],
            algos: vec![Algo::Simple, Algo::PushPull],
            roots: (0..nodes.min(4)).collect(),
            seed: 1,
            faults: Faults::NONE,
            per_port: Vec::new(),
            rate_bps: Some(1_000_000_000),
            latency: Duration::from_micros(5),
            limit: Duration::from_secs(3600),
            window: None,
            tweak: |_| {},
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Message deliveries expected (messages × receivers).
    pub expected: u64,
    /// Deliveries that arrived intact, first time, in order.
    pub delivered: u64,
    /// Deliveries whose bytes differ from what was sent.
    pub corrupt: u64,
    /// Deliveries of a message already delivered.
    pub duplicated: u64,
    /// Deliveries before an earlier message of the same root.
    pub out_of_order: u64,
    /// Expected deliveries that never happened.
    pub missing: u64,
    /// Data frames broadcast for the first time.
    pub data_frames: u64,
    /// Repair frames (point-to-point and re-broadcast).
    pub repair_frames: u64,
    /// Of which re-broadcasts.
    pub rebroadcasts: u64,
    /// Repair frames members relayed to fellow members (peer repair), besides the roots' own.
    pub peer_repairs: u64,
    /// Frames the simulator dropped (counted per receiving port).
    pub lost_frames: u64,
    /// ACK frames.
    pub ack_frames: u64,
    /// NACK frames.
    pub nack_frames: u64,
    /// Pull requests.
    pub pull_frames: u64,
    /// Frames dropped by the engines (bad CRC, duplicates, stale, ...).
    pub dropped_by_engines: u64,
    /// Of which failed the CRC.
    pub bad_crc: u64,
    /// Frames the simulator corrupted.
    pub corrupted_frames: u64,
    /// Virtual time the run took.
    pub virtual_time_us: u64,
    /// False if the limit was hit before everything was delivered.
    pub completed: bool,
}

/// Deterministic content of message `index` of `root`.
pub fn message_bytes(seed: u64, root: Rank, index: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(
        seed ^ (u64::from(root) << 48) ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

struct Member {
    engine: Engine,
    port: SimPort,
    /// Per root: next message id expected.
    next: Vec<u64>,
}

/// Why a scenario could not run.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The simulated switch refused the configuration.
    #[error("simulator: {0}")]
    Sim(#[from] SimError),
    /// A simulated port refused a frame (an engine bug: frames must fit the MTU).
    #[error("simulated link: {0}")]
    Link(#[from] LinkError),
    /// The engine configuration is invalid.
    #[error("engine configuration: {0}")]
    Config(#[from] crate::proto::ConfigError),
    /// The scenario itself is unusable.
    #[error("scenario: {0}")]
    Scenario(String),
}

/// Runs a scenario to completion (or its limit) and reports.
pub fn run(sc: &Scenario) -> Result<Report, ClusterError> {
    let n = usize::from(sc.nodes);
    if n < 2 {
        return Err(ClusterError::Scenario(format!(
            "--nodes {n}: a broadcast needs at least 2 members"
        )));
    }
    if let Some(r) = sc.roots.iter().find(|&&r| usize::from(r) >= n) {
        return Err(ClusterError::Scenario(format!(
            "root {r} is not a member of a group of {n} (ranks 0..{})",
            n - 1
        )));
    }
    if sc.roots.is_empty() || sc.sizes.is_empty() || sc.algos.is_empty() {
        return Err(ClusterError::Scenario(
            "roots, sizes and algorithms must not be empty".into(),
        ));
    }
    let net = SimNet::new(SimConfig {
        ports: n,
        rate_bps: sc.rate_bps,
        latency: sc.latency,
        mtu: 1500,
        seed: sc.seed,
        faults: sc.faults,
        per_port: sc.per_port.clone(),
        switch_buffer: None,
    })?;
    let mut members: Vec<Member> = (0..n)
        .map(|i| {
            let mut cfg = Config::new(0xEB, i as Rank, sc.nodes);
            if let Some(w) = sc.window {
                cfg.window = w;
            }
            (sc.tweak)(&mut cfg);
            Ok(Member {
                engine: Engine::new(cfg)?,
                port: net.port(i).map_err(ClusterError::Sim)?,
                next: vec![0; n],
            })
        })
        .collect::<Result<_, ClusterError>>()?;
    let macs: Vec<_> = members.iter().map(|m| m.port.local_mac()).collect();

    // The workload: per root, a queue of (size, algo).
    let mut rng = ChaCha8Rng::seed_from_u64(sc.seed);
    let mut pending: Vec<VecDeque<(usize, Algo)>> = vec![VecDeque::new(); n];
    let mut sent: Vec<Vec<usize>> = vec![Vec::new(); n];
    let roots: Vec<Rank> = sc
        .roots
        .iter()
        .copied()
        .filter(|&r| usize::from(r) < n)
        .collect();
    if n >= 2 && !roots.is_empty() {
        for i in 0..sc.messages {
            let root = roots[i % roots.len()];
            let size = sc.sizes[rng.gen_range(0..sc.sizes.len())];
            let algo = sc.algos[rng.gen_range(0..sc.algos.len())];
            pending[usize::from(root)].push_back((size, algo));
        }
    }
    let total: u64 = pending.iter().map(|p| p.len() as u64).sum();
    let mut report = Report {
        expected: total * (n as u64).saturating_sub(1),
        ..Report::default()
    };
    let start = net.now();
    let mut buf = vec![0u8; 1500];
    let mut done_deliveries = 0u64;

    loop {
        let now = net.now();
        // Hand queued messages to their roots while their send queues take them.
        for (r, queue) in pending.iter_mut().enumerate() {
            while let Some(&(size, algo)) = queue.front() {
                let idx = sent[r].len() as u64;
                let data = message_bytes(sc.seed, r as Rank, idx, size);
                match members[r].engine.bcast(now, data, algo) {
                    Ok(_) => {
                        sent[r].push(size);
                        queue.pop_front();
                    }
                    Err(_) => break,
                }
            }
        }
        // Transmit.
        for m in members.iter_mut() {
            while let Some(t) = m.engine.poll_transmit(now, &mut buf) {
                let dst = match t.dst {
                    Dest::All => BROADCAST_MAC,
                    Dest::Rank(r) => macs[usize::from(r)],
                };
                // A frame the simulated port refuses is a bug of ours: surface it.
                m.port.send(dst, &buf[..t.len])?;
            }
        }
        let all_sent = pending.iter().all(|p| p.is_empty());
        if all_sent
            && done_deliveries >= report.expected
            && members.iter().all(|m| m.engine.is_idle())
        {
            report.completed = true;
            break;
        }
        let next = [
            net.next_event(),
            members.iter().filter_map(|m| m.engine.poll_timeout()).min(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            report.completed = all_sent && done_deliveries >= report.expected;
            break;
        };
        if next.duration_since(start) > sc.limit {
            break;
        }
        net.advance_to(next.max(now));
        let now = net.now();
        for (i, m) in members.iter_mut().enumerate() {
            let engine = &mut m.engine;
            m.port.recv(None, &mut |_, pdu| {
                let _ = engine.handle_frame(now, pdu);
            })?;
            engine.handle_timeout(now);
            while let Some(ev) = engine.poll_event() {
                if let Event::Delivered { root, msg_id, data } = ev {
                    let r = usize::from(root);
                    let expect = m.next[r];
                    if msg_id < expect {
                        report.duplicated += 1;
                        continue;
                    }
                    if msg_id > expect {
                        report.out_of_order += 1;
                    }
                    m.next[r] = msg_id + 1;
                    let ok = sent[r]
                        .get(msg_id as usize)
                        .is_some_and(|&len| data == message_bytes(sc.seed, root, msg_id, len));
                    if ok && msg_id == expect {
                        report.delivered += 1;
                    } else if !ok {
                        report.corrupt += 1;
                    }
                    if i != r {
                        done_deliveries += 1;
                    }
                }
            }
        }
    }

    report.missing = report
        .expected
        .saturating_sub(report.delivered + report.corrupt);
    for m in &members {
        let s = m.engine.stats();
        report.data_frames += s.data_frames;
        report.repair_frames += s.repair_frames;
        report.peer_repairs += s.peer_repairs;
        report.rebroadcasts += s.rebroadcasts;
        report.ack_frames += s.ack_frames;
        report.nack_frames += s.nack_frames;
        report.pull_frames += s.pull_frames;
        report.dropped_by_engines += s.drops.total();
        report.bad_crc += s.drops.bad_crc;
    }
    let st = net.stats();
    report.lost_frames = st.lost;
    report.corrupted_frames = st.corrupted;
    report.virtual_time_us = net.now().duration_since(start).as_micros() as u64;
    Ok(report)
}
