//! Protocol specifications, run on a tiny in-test network: engines, a frame queue, a virtual
//! clock and a drop rule. Losing a frame is one closure.

use std::time::{Duration, Instant};

use crate::engine::{
    Dest, Engine, EngineConfig, EngineEvent, EngineStats, HardwareAlgorithm, Message,
};
use crate::machine::{self, BatchEnd, Frames};
use crate::wire::{Control, Flags, Frame, Kind, Repr};
use crate::{wire, Rank};

mod broadcast;
mod gather;
mod hostile;
mod observe;
mod outbox;
mod payload;
mod peer;
mod timing;

type DropRule = Box<dyn FnMut(&Repr, usize) -> bool>;

struct Net {
    engines: Vec<Engine>,
    now: Instant,
    drop: DropRule,
    delivered: Vec<Vec<(Rank, u64, Vec<u8>)>>,
    /// Messages that went to an observer alone (`EngineEvent::Observed`): root, id, length.
    observed: Vec<Vec<(Rank, u64, usize)>>,
    stable: Vec<Vec<u64>>,
    sent: usize,
    lost: usize,
    /// Call `handle_timeout` on every engine after every round, due or not, instead of only on
    /// those with a due timer (a driver that polls often must see the same protocol as one
    /// that wakes only for due timers).
    eager_timeouts: bool,
    /// The links keep this many frames after each is handled (see `BatchEnd`); `None`: each
    /// goes back once handled.
    retain: Option<usize>,
    /// The frames each engine's link keeps, oldest first.
    kept: Vec<Vec<Vec<u8>>>,
}

/// Frames a test link keeps (see `Net::retain`).
struct Kept<'a>(&'a [Vec<u8>]);

impl machine::Held for Kept<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.0.iter().find_map(|f| machine::within(f, at, len))
    }
}

impl Net {
    fn new(n: u16, tweak: impl Fn(&mut EngineConfig)) -> Net {
        let engines = (0..n)
            .map(|r| {
                let mut c = EngineConfig::new(7, Rank::new(r), n);
                tweak(&mut c);
                Engine::new(c).unwrap()
            })
            .collect();
        Net {
            engines,
            now: Instant::now(),
            drop: Box::new(|_, _| false),
            delivered: vec![Vec::new(); n as usize],
            observed: vec![Vec::new(); n as usize],
            stable: vec![Vec::new(); n as usize],
            sent: 0,
            lost: 0,
            eager_timeouts: false,
            retain: None,
            kept: vec![Vec::new(); n as usize],
        }
    }

    /// Moves frames until nothing is in flight, then lets time pass; stops when `done` holds.
    fn run(&mut self, mut done: impl FnMut(&Net) -> bool) {
        let n = self.engines.len();
        let mut buf = vec![0u8; 1500];
        for _round in 0..200_000 {
            if done(self) {
                return;
            }
            let mut moved = false;
            for i in 0..n {
                let mut out = Vec::new();
                while let Some(t) = self.engines[i].poll_transmit(self.now, &mut buf) {
                    out.push((t.dst, buf[..t.len].to_vec()));
                }
                for (dst, pdu) in out {
                    moved = true;
                    self.sent += 1;
                    let repr = Repr::parse(&Frame::new_checked(&pdu[..]).unwrap());
                    let targets: Vec<usize> = match dst {
                        Dest::All => (0..n).filter(|&j| j != i).collect(),
                        Dest::Rank(r) => vec![r.index()],
                    };
                    for j in targets {
                        if (self.drop)(&repr, j) {
                            self.lost += 1;
                            continue;
                        }
                        match self.retain {
                            // A link that holds each frame until it is handled.
                            None => {
                                let _ = self.engines[j].handle_frame(self.now, &pdu);
                                let held = Frames(&[&pdu[..]]);
                                let end = BatchEnd {
                                    held: &held,
                                    leaving: &held,
                                };
                                self.engines[j].frames_done(self.now, end);
                            }
                            // One that keeps the last `keep` frames after that, where they
                            // were handed in.
                            Some(keep) => {
                                let kept = &mut self.kept[j];
                                kept.push(pdu.clone());
                                let frame = kept.last().expect("just pushed");
                                let _ = self.engines[j].handle_frame(self.now, frame);
                                let leaving = kept.len().saturating_sub(keep);
                                let end = BatchEnd {
                                    held: &Kept(kept),
                                    leaving: &Kept(&kept[..leaving]),
                                };
                                self.engines[j].frames_done(self.now, end);
                                kept.drain(..leaving);
                            }
                        }
                    }
                }
            }
            // Due timers fire (a driver that sleeps until the earliest), or every engine is
            // told the time whether it has a due timer or not (one that polls).
            for e in &mut self.engines {
                if self.eager_timeouts || e.poll_timeout().is_some_and(|t| t <= self.now) {
                    e.handle_timeout(self.now);
                }
            }
            self.collect();
            if !moved {
                let next = self.engines.iter().filter_map(|e| e.poll_timeout()).min();
                match next {
                    Some(t) => self.now = self.now.max(t),
                    None => return,
                }
                for e in &mut self.engines {
                    e.handle_timeout(self.now);
                }
            } else {
                self.now += Duration::from_micros(10);
            }
        }
        for e in &self.engines {
            eprintln!(
                "{:?} idle={} tail={} head={} q={}",
                e.stats(),
                e.is_idle(),
                e.sender().eqa().tail(),
                e.sender().eqa().head(),
                e.sender().queued()
            );
            for r in 0..self.engines.len() as u16 {
                if let Some(rx) = e.receiver(Rank::new(r)) {
                    eprintln!(
                        "  rx {r}: expected {} next_msg {}",
                        rx.expected(),
                        rx.next_msg()
                    );
                }
            }
        }
        eprintln!(
            "delivered {:?}",
            self.delivered.iter().map(|d| d.len()).collect::<Vec<_>>()
        );
        panic!("no progress after 200000 rounds");
    }

    fn collect(&mut self) {
        for (i, e) in self.engines.iter_mut().enumerate() {
            while let Some(ev) = e.poll_event() {
                match ev {
                    EngineEvent::Delivered(Message { root, msg_id, data }) => {
                        self.delivered[i].push((root, msg_id, data))
                    }
                    EngineEvent::Stable { msg_id } => self.stable[i].push(msg_id),
                    EngineEvent::Observed { root, msg_id, len } => {
                        self.observed[i].push((root, msg_id, len))
                    }
                    _ => {}
                }
            }
        }
    }

    fn all_got(&self, root: usize, count: usize) -> bool {
        (0..self.engines.len()).filter(|&i| i != root).all(|i| {
            self.delivered[i]
                .iter()
                .filter(|d| d.0.index() == root)
                .count()
                >= count
        })
    }
}

/// A drop rule that loses data frame `seq` once, on its way to member `to`.
fn lose_once(seq: u32, to: usize) -> impl FnMut(&Repr, usize) -> bool {
    let mut dropped = false;
    move |r, t| {
        let hit = !dropped && r.kind == Some(Kind::Data) && r.seq == seq && t == to;
        dropped |= hit;
        hit
    }
}

/// Root 0 broadcasts `m`; runs until every other member has it.
fn broadcast_to_all(net: &mut Net, m: &[u8]) {
    broadcast_all(net, &[m.to_vec()], HardwareAlgorithm::Simple);
}

/// Root 0 queues every one of `msgs` with `algo`; runs until every other member has them all.
fn broadcast_all(net: &mut Net, msgs: &[Vec<u8>], algo: HardwareAlgorithm) {
    for m in msgs {
        net.engines[0].bcast(net.now, m.clone(), algo).unwrap();
    }
    net.run(|n| n.all_got(0, msgs.len()));
}

/// The root (rank 0) and the receiver (rank 1) of a two-member group with defaults.
fn root_and_receiver() -> (Engine, Engine) {
    (
        Engine::new(EngineConfig::new(7, Rank::new(0), 2)).unwrap(),
        Engine::new(EngineConfig::new(7, Rank::new(1), 2)).unwrap(),
    )
}

fn message(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// A NACK-like frame (`kind` Nack) from `src` to `dst` with `flags`, naming `root` in
/// `msg_id`, base `seq` and `bitmap`.
fn nack_frame(src: Rank, dst: Rank, flags: Flags, root: u32, seq: u32, bitmap: u16) -> Vec<u8> {
    let mut r = Repr::new(Kind::Nack);
    r.group = 7;
    r.src = src;
    r.dst = dst;
    r.flags = flags;
    r.msg_id = root;
    r.seq = seq;
    r.bitmap = bitmap;
    r.msg_len = 1; // the sender's control counter: a fresh frame
    r.to_vec(&[]).unwrap()
}

/// Member 1 of 3 with peer repair, holding the first frame of root 0's stream.
fn member_with_a_stream_of_root_0() -> (Engine, Instant) {
    let mut e = Engine::new({
        let mut c = EngineConfig::new(7, Rank::new(1), 3);
        c.peer_repair = true;
        c
    })
    .unwrap();
    let now = Instant::now();
    let mut d = Repr::new(Kind::Data);
    d.group = 7;
    d.src = Rank::new(0);
    d.dst = wire::ALL;
    d.msg_len = 2000;
    e.handle_frame(now, &d.to_vec(&[1; 1000]).unwrap()).unwrap();
    (e, now)
}

fn peer_net(n: u16) -> Net {
    Net::new(n, |c| c.peer_repair = true)
}

/// What receiver `rx` (rank 1 of group 7) sends back when rank 2 asks it, as a fellow, for
/// frame `seq` of root 0's stream (`ctr`: rank 2's control counter).
fn ask_as_fellow(rx: &mut Engine, now: Instant, seq: u32, ctr: u32) -> Vec<Vec<u8>> {
    let ask = Control::PeerNack {
        root: Rank::new(0),
        base: seq,
        missing: 1,
        unheld: false,
        more: vec![],
    };
    fellow_sends(rx, now, &ask, ctr)
}

/// What receiver `rx` (rank 1 of group 7) sends back when rank 2 sends it `ask` (`ctr`: rank
/// 2's control counter).
fn fellow_sends(rx: &mut Engine, now: Instant, ask: &Control, ctr: u32) -> Vec<Vec<u8>> {
    fellow_asks(rx, now, ask, ctr);
    drain(rx, now)
}

/// Rank 2 sends receiver `rx` (rank 1 of group 7) `ask` (`ctr`: rank 2's control counter).
fn fellow_asks(rx: &mut Engine, now: Instant, ask: &Control, ctr: u32) {
    let mut buf = vec![0u8; 1500];
    let n = ask
        .emit(7, Rank::new(2), Rank::new(1), ctr, &mut buf)
        .unwrap();
    assert_eq!(rx.handle_frame(now, &buf[..n]), Ok(()));
}

/// The frames root 0 sends at once for its broadcast of `m` with `algo`, not delivered.
fn root_frames(net: &mut Net, m: &[u8], algo: HardwareAlgorithm) -> Vec<Vec<u8>> {
    net.engines[0].bcast(net.now, m.to_vec(), algo).unwrap();
    drain(&mut net.engines[0], net.now)
}

/// A seeded drop rule: every data, repair and ACK frame is lost with probability `p`.
fn lossy(seed: u64, p: f64) -> DropRule {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    Box::new(move |r, _| {
        matches!(r.kind, Some(Kind::Data | Kind::Repair | Kind::Ack)) && rng.gen::<f64>() < p
    })
}

/// Every message of `root` (ids `0..count`, made by `message(len, id)`) reached every live
/// member but `root` once, intact, in order.
fn assert_exact(net: &Net, root: usize, count: usize, len: usize, skip: &[usize]) {
    for (i, got) in net.delivered.iter().enumerate() {
        if i == root || skip.contains(&i) {
            continue;
        }
        let mine: Vec<_> = got.iter().filter(|d| d.0.index() == root).collect();
        assert_eq!(mine.len(), count, "member {i}: every message once");
        for (k, d) in mine.iter().enumerate() {
            assert_eq!(d.1, k as u64, "member {i}: in order");
            assert_eq!(d.2, message(len, k as u8), "member {i}: intact");
        }
    }
}

/// Length of the messages of [`lossy_stream`]: 14 frames.
const LOSSY_LEN: usize = 20_000;

/// Root 0 of `n` members streams `count` messages under 1% loss of data, repair and
/// acknowledgement frames (tree reports included); returns the root's stats.
fn lossy_stream(n: u16, tweak: impl Fn(&mut EngineConfig), count: usize) -> (Net, EngineStats) {
    let mut net = Net::new(n, tweak);
    net.drop = lossy(5, 0.01);
    for i in 0..count {
        net.engines[0]
            .bcast(
                net.now,
                message(LOSSY_LEN, i as u8),
                HardwareAlgorithm::Simple,
            )
            .unwrap();
    }
    net.run(|n| n.all_got(0, count) && n.engines[0].is_idle());
    let stats = net.engines[0].stats().clone();
    (net, stats)
}

/// The payloads of the repairs among `out`.
fn repair_payloads(out: &[Vec<u8>]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|f| Frame::new_checked(&f[..]).ok())
        .filter(|f| f.kind() == Kind::Repair)
        .map(|f| f.payload().to_vec())
        .collect()
}

/// Every frame `e` has to send now.
fn drain(e: &mut Engine, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 1500];
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// The root's data frames for `msgs`, broadcast with no receiver answering.
fn frames_of(msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut c = EngineConfig::new(7, Rank::new(0), 2);
    c.window = 256;
    let mut root = Engine::new(c).unwrap();
    let now = Instant::now();
    for m in msgs {
        root.bcast(now, m.clone(), HardwareAlgorithm::Simple)
            .unwrap();
    }
    let mut buf = vec![0u8; 1500];
    let mut frames = Vec::new();
    while let Some(t) = root.poll_transmit(now, &mut buf) {
        frames.push(buf[..t.len].to_vec());
    }
    frames
}
