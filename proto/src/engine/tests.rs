//! Protocol specifications, run on a tiny in-test network: engines, a frame queue, a virtual
//! clock and a drop rule. Losing a frame is one closure.

use super::recv::{COPY_TAIL, PEER_HOLD_WAIT};
use super::send::PUBLISH_AHEAD;
use super::*;
use crate::machine::{self, BatchEnd, Frames};
use crate::wire::{Flags, Frame, Kind};

type DropRule = Box<dyn FnMut(&Repr, usize) -> bool>;

struct Net {
    engines: Vec<Engine>,
    now: Instant,
    drop: DropRule,
    delivered: Vec<Vec<(Rank, u64, Vec<u8>)>>,
    /// Messages that went to an observer alone (`Event::Observed`): root, id, length.
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
    fn new(n: u16, tweak: impl Fn(&mut Config)) -> Net {
        let engines = (0..n)
            .map(|r| {
                let mut c = Config::new(7, Rank::new(r), n);
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
                    Event::Delivered(Message { root, msg_id, data }) => {
                        self.delivered[i].push((root, msg_id, data))
                    }
                    Event::Stable { msg_id } => self.stable[i].push(msg_id),
                    Event::Observed { root, msg_id, len } => {
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
    broadcast_all(net, &[m.to_vec()], Algorithm::Simple);
}

/// Root 0 queues every one of `msgs` with `algo`; runs until every other member has them all.
fn broadcast_all(net: &mut Net, msgs: &[Vec<u8>], algo: Algorithm) {
    for m in msgs {
        net.engines[0].bcast(net.now, m.clone(), algo).unwrap();
    }
    net.run(|n| n.all_got(0, msgs.len()));
}

/// The root (rank 0) and the receiver (rank 1) of a two-member group with defaults.
fn root_and_receiver() -> (Engine, Engine) {
    (
        Engine::new(Config::new(7, Rank::new(0), 2)).unwrap(),
        Engine::new(Config::new(7, Rank::new(1), 2)).unwrap(),
    )
}

fn message(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// A message a byte over a megabyte (a bulk transfer's chunk behind its type byte) is
/// reserved whole by its first frame: filling it never reallocates, which would copy all of it.
#[test]
fn a_message_just_over_a_megabyte_is_filled_without_reallocating() {
    let mut net = Net::new(2, |_| {});
    let m = message((1 << 20) + 1, 3);
    broadcast_to_all(&mut net, &m);
    let (_, _, data) = &net.delivered[1][0];
    assert_eq!(data, &m);
    assert_eq!(
        data.capacity(),
        m.len(),
        "the buffer grew while it was filled"
    );
}

#[test]
fn simple_broadcast_delivers_every_message_once_in_order() {
    let mut net = Net::new(4, |_| {});
    let msgs: Vec<Vec<u8>> = (0..20).map(|i| message(i * 700, i as u8)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>());
        let ids: Vec<u64> = net.delivered[r].iter().map(|d| d.1).collect();
        assert_eq!(ids, (0..20).collect::<Vec<u64>>());
    }
    assert_eq!(
        net.engines[0].stats().repair_frames,
        0,
        "no loss, no repair"
    );
}

/// A window of any size works, not only a power of two: 24 slots, a stream that wraps them
/// many times, frames lost on the way to two of the three receivers, past the first wrap. A
/// slot found wrongly (a mask of 23, say) costs 12 repairs, not 4.
#[test]
fn a_window_that_is_not_a_power_of_two_wraps_and_repairs_like_any_other() {
    let mut net = Net::new(4, |c| c.window = 24);
    let lost = [30u32, 31, 77, 200];
    net.drop =
        Box::new(move |r, to| r.kind == Some(Kind::Data) && lost.contains(&r.seq) && to != 1);
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| message(60_000, i as u8)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "receiver {r}");
    }
    let tx = net.engines[0].sender().eqa();
    assert_eq!(tx.lms(Rank::new(1)).unwrap().stats.repairs, 0);
    for r in [2, 3] {
        assert_eq!(
            tx.lms(Rank::new(r)).unwrap().stats.repairs,
            4,
            "receiver {r}: its four lost frames, once each"
        );
    }
}

#[test]
fn only_the_destination_that_lost_a_frame_is_repaired() {
    let mut net = Net::new(4, |_| {});
    net.drop = Box::new(lose_once(3, 2));
    let m = message(20_000, 1);
    broadcast_to_all(&mut net, &m);
    for r in 1..4 {
        assert_eq!(net.delivered[r][0].2, m);
    }
    let tx = net.engines[0].sender().eqa();
    assert_eq!(tx.lms(Rank::new(2)).unwrap().stats.repairs, 1);
    assert_eq!(tx.lms(Rank::new(1)).unwrap().stats.repairs, 0);
    assert_eq!(tx.lms(Rank::new(3)).unwrap().stats.repairs, 0);
    assert_eq!(net.engines[0].stats().rebroadcasts, 0);
}

#[test]
fn a_frame_lost_by_several_destinations_is_rebroadcast_once() {
    let mut net = Net::new(5, |_| {});
    net.drop = Box::new(|r, to| r.kind == Some(Kind::Data) && r.seq == 2 && to != 1);
    let m = message(10_000, 2);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    let st = net.engines[0].stats();
    assert_eq!(st.rebroadcasts, 1, "{st:?}");
    assert_eq!(st.repair_frames, 1);
}

#[test]
fn a_lost_tail_frame_is_recovered_by_the_retransmission_timer() {
    let mut net = Net::new(3, |_| {});
    let mut first = true;
    net.drop = Box::new(move |r, to| {
        if first && r.kind == Some(Kind::Data) && r.flags.contains(Flags::LAST) && to == 2 {
            first = false;
            return true;
        }
        false
    });
    net.engines[0]
        .bcast(net.now, message(3000, 3), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert!(
        net.engines[0]
            .sender()
            .eqa()
            .lms(Rank::new(2))
            .unwrap()
            .stats
            .timeouts
            >= 1
    );
}

#[test]
fn lost_acks_are_recovered_and_the_buffer_drains() {
    let mut net = Net::new(3, |_| {});
    let mut k = 0;
    net.drop = Box::new(move |r, _| {
        if r.kind != Some(Kind::Ack) {
            return false;
        }
        k += 1;
        k % 2 == 0
    });
    for i in 0..50 {
        net.engines[0]
            .bcast(net.now, message(2000, i), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, 50) && n.engines[0].is_idle());
    assert_eq!(net.stable[0].len(), 50);
}

#[test]
fn push_pull_waits_for_the_designated_receiver() {
    let mut net = Net::new(4, |_| {});
    let m = message(50_000, 4);
    // Before any pull, only the push part (two frames) may leave.
    let firsts: Vec<Repr> = root_frames(&mut net, &m, Algorithm::PushPull)
        .iter()
        .map(|pdu| Repr::parse(&Frame::new_checked(&pdu[..]).unwrap()))
        .collect();
    assert_eq!(firsts.len(), 2);
    assert_eq!((firsts[0].offset, firsts[1].offset), (0, 80));
    assert!(firsts[1].flags.contains(Flags::PULL_WAIT));
    assert_eq!(firsts[1].aux, 1, "rank 1 is designated");
    // Hand them over; only rank 1 may ask for the rest.
    for r in &firsts {
        let off = r.offset as usize;
        let end = if off == 0 { 80 } else { 860 };
        let pdu = r.to_vec(&m[off..end]).unwrap();
        for j in 1..4 {
            net.engines[j].handle_frame(net.now, &pdu).unwrap();
        }
    }
    let pulls: Vec<usize> = (1..4)
        .filter(|&j| {
            let mut b = vec![0u8; 1500];
            let mut pulled = false;
            while let Some(t) = net.engines[j].poll_transmit(net.now, &mut b) {
                pulled |= Frame::new_checked(&b[..t.len]).unwrap().kind() == Kind::Pull;
            }
            pulled
        })
        .collect();
    assert_eq!(pulls, vec![1]);
}

#[test]
fn push_pull_completes_under_loss_of_pulls_and_push_frames() {
    let mut net = Net::new(4, |_| {});
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut pulls = 0u32;
    net.drop = Box::new(move |r, _| {
        if r.kind == Some(Kind::Pull) {
            // The first pull request is always lost, later ones half of the time.
            pulls += 1;
            return pulls == 1 || rng.gen_bool(0.5);
        }
        r.flags.contains(Flags::PUSH) && rng.gen_bool(0.3)
    });
    let msgs: Vec<Vec<u8>> = (0..30)
        .map(|i| message([4, 100, 900, 5000, 40_000][i % 5], i as u8))
        .collect();
    broadcast_all(&mut net, &msgs, Algorithm::PushPull);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    }
}

#[test]
fn an_unposted_receiver_keeps_pushed_data_and_delivers_when_posted() {
    let mut net = Net::new(3, |c| {
        c.auto_post = false;
        c.pushed_buffer = 4096;
    });
    let now = net.now;
    net.engines[1]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.engines[1]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    let m = message(30_000, 5);
    let small = message(500, 6);
    net.engines[0]
        .bcast(now, small.clone(), Algorithm::PushPull)
        .unwrap();
    net.engines[0]
        .bcast(now, m.clone(), Algorithm::PushPull)
        .unwrap();
    // Rank 2 has not posted: it holds at most 4096 bytes, and the shared buffer makes the
    // root wait for it (the paper's "the broadcast operation may be stopped").
    let until = now + Duration::from_millis(100);
    net.run(|n| n.now >= until);
    assert!(net.delivered[2].is_empty());
    assert_eq!(net.delivered[1].len(), 1);
    assert!(
        net.engines[2]
            .receiver(Rank::new(0))
            .unwrap()
            .pushed_bytes()
            <= 4096
    );
    let now = net.now;
    net.engines[2]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.engines[2]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.run(|n| n.delivered[2].len() == 2 && n.delivered[1].len() == 2);
    assert_eq!(net.delivered[1][1].2, m);
    assert_eq!(net.delivered[2][0].2, small);
    assert_eq!(net.delivered[2][1].2, m);
}

#[test]
fn a_too_small_receive_reports_truncation() {
    let mut net = Net::new(2, |c| c.auto_post = false);
    let now = net.now;
    net.engines[1].post_recv(now, Rank::new(0), 10).unwrap();
    net.engines[0]
        .bcast(now, message(100, 1), Algorithm::Simple)
        .unwrap();
    let mut truncated = false;
    net.run(|_| false);
    while let Some(ev) = net.engines[1].poll_event() {
        truncated |= matches!(
            ev,
            Event::Truncated {
                len: 100,
                max: 10,
                ..
            }
        );
    }
    assert!(truncated || net.delivered[1].is_empty());
}

#[test]
fn any_member_can_be_root_and_streams_interleave() {
    let mut net = Net::new(4, |_| {});
    for round in 0..10u8 {
        for root in 0..4usize {
            let m = message(100 + usize::from(round) * 300, round ^ root as u8);
            let algo = if round % 2 == 0 {
                Algorithm::Simple
            } else {
                Algorithm::PushPull
            };
            net.engines[root].bcast(net.now, m, algo).unwrap();
        }
    }
    net.run(|n| (0..4).all(|r| n.all_got(r, 10)));
    for me in 0..4 {
        for root in 0..4 {
            if me == root {
                continue;
            }
            let ids: Vec<u64> = net.delivered[me]
                .iter()
                .filter(|d| d.0.index() == root)
                .map(|d| d.1)
                .collect();
            assert_eq!(ids, (0..10).collect::<Vec<_>>());
        }
    }
}

#[test]
fn eviction_lets_the_survivors_complete() {
    let mut net = Net::new(4, |_| {});
    net.drop = Box::new(|_, to| to == 3); // rank 3 is dead
    for i in 0..40 {
        net.engines[0]
            .bcast(net.now, message(3000, i), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, 0) && n.delivered[1].len() >= 5);
    let now = net.now;
    assert!(net.engines[0].evict(now, Rank::new(3)));
    net.run(|n| n.delivered[1].len() == 40 && n.delivered[2].len() == 40 && n.engines[0].is_idle());
    assert!(net.delivered[3].is_empty());
}

#[test]
fn foreign_stale_and_garbage_frames_are_counted_and_dropped() {
    let mut e = Engine::new(Config::new(7, Rank::new(1), 3)).unwrap();
    let now = Instant::now();
    let mut r = Repr::new(Kind::Data);
    r.group = 8;
    r.src = Rank::new(0);
    r.dst = wire::ALL;
    r.msg_len = 1;
    assert_eq!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(Drop::ForeignGroup(8))
    );
    r.group = 7;
    r.src = Rank::new(9);
    assert_eq!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(Drop::NotMember(Rank::new(9)))
    );
    r.src = Rank::new(0);
    r.seq = 1000;
    assert!(matches!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(Drop::FarFuture(s)) if s == Seq::new(1000)
    ));
    r.seq = 0;
    r.flags = Flags::LAST;
    assert_eq!(e.handle_frame(now, &r.to_vec(b"x").unwrap()), Ok(()));
    assert!(matches!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(Drop::Stale(s)) if s == Seq::new(0)
    ));
    assert!(matches!(
        e.handle_frame(now, &[1, 2, 3]),
        Err(Drop::Malformed(_))
    ));
    let d = &e.stats().drops;
    assert_eq!(
        (
            d.foreign_group,
            d.not_member,
            d.far_future,
            d.stale,
            d.truncated
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(e.stats().delivered, 1);
}

proptest::proptest! {
    #[test]
    fn random_bytes_never_panic_the_engine(frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..120), 1..50)) {
        let mut e = Engine::new(Config::new(7, Rank::new(1), 3)).unwrap();
        let now = Instant::now();
        let mut buf = vec![0u8; 1500];
        for f in frames {
            let _ = e.handle_frame(now, &f);
            // Well-formed frames with random fields, too.
            let mut r = Repr::new(Kind::from_code(f.first().copied().unwrap_or(1) % 12).unwrap_or(Kind::Data));
            r.group = 7;
            r.src = Rank::new(u16::from(f.get(1).copied().unwrap_or(0) % 4));
            r.dst = if f.get(2).is_some_and(|b| b % 2 == 0) { wire::ALL } else { Rank::new(1) };
            r.seq = u32::from(f.get(3).copied().unwrap_or(0) % 40);
            r.msg_id = u32::from(f.get(4).copied().unwrap_or(0) % 3);
            r.msg_len = u32::from(f.get(5).copied().unwrap_or(0));
            r.offset = 0;
            r.bitmap = u16::from(f.get(6).copied().unwrap_or(0));
            r.flags = Flags::from_bits_truncate(u16::from(f.get(7).copied().unwrap_or(0)));
            let n = (r.msg_len as usize).min(f.len());
            if let Ok(pdu) = r.to_vec(&f[..n]) {
                let _ = e.handle_frame(now, &pdu);
            }
            e.handle_timeout(now + Duration::from_millis(5));
            while e.poll_transmit(now, &mut buf).is_some() {}
            while e.poll_event().is_some() {}
        }
    }
}

#[test]
fn with_a_group_key_forged_and_unkeyed_frames_are_rejected() {
    let key = [7u8; 32];
    let mut net = Net::new(3, |c| c.key = Some([7u8; 32].into()));
    let m = message(5000, 9);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::PushPull)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.delivered[1][0].2, m, "keyed members talk normally");
    // A host outside the group forges a data frame of root 0's stream.
    let mut forged = Repr::new(Kind::Data);
    forged.group = 7;
    forged.src = Rank::new(0);
    forged.dst = wire::ALL;
    forged.seq = 4;
    forged.msg_id = 1;
    forged.msg_len = 3;
    forged.flags = Flags::LAST;
    let plain = forged.to_vec(b"bad").unwrap();
    assert_eq!(
        net.engines[1].handle_frame(net.now, &plain),
        Err(Drop::BadMac)
    );
    let mut buf = vec![0u8; 200];
    let n = forged.emit(b"bad", &mut buf).unwrap();
    let n = wire::seal(&[8u8; 32], &mut buf, n).unwrap();
    assert_eq!(
        net.engines[1].handle_frame(net.now, &buf[..n]),
        Err(Drop::BadMac),
        "wrong key"
    );
    assert_eq!(net.engines[1].stats().drops.bad_mac, 2);
    let n2 = forged.emit(b"bad", &mut buf).unwrap();
    let n2 = wire::seal(&key, &mut buf, n2).unwrap();
    assert!(Frame::new_checked(&buf[..n2]).unwrap().verify(&key));
}

#[test]
fn a_member_that_broadcast_does_not_reach_is_served_point_to_point() {
    let mut net = Net::new(4, |_| {});
    // Every broadcast frame towards rank 2 is lost; unicast still works.
    net.drop = Box::new(|r, to| to == 2 && r.flags.contains(Flags::BROADCAST));
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(4000, i)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    assert_eq!(
        net.delivered[2]
            .iter()
            .map(|d| d.2.clone())
            .collect::<Vec<_>>(),
        msgs
    );
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    assert_eq!(net.engines[0].stats().failovers, 1);
    let tx = net.engines[0].sender().eqa();
    assert!(
        !tx.lms(Rank::new(1)).unwrap().p2p && !tx.lms(Rank::new(3)).unwrap().p2p,
        "the others stay on broadcast"
    );
}

#[test]
fn a_member_served_point_to_point_is_polled_point_to_point() {
    let mut net = Net::new(4, |_| {});
    // Nothing sent to the whole group reaches rank 2 (data, re-broadcasts, polls).
    net.drop = Box::new(|r, to| to == 2 && r.dst == wire::ALL);
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(4000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, msgs.len()) && n.engines[0].is_idle());
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    let probes = |net: &Net| {
        net.engines[0]
            .sender()
            .eqa()
            .lms(Rank::new(2))
            .unwrap()
            .stats
            .probes
    };
    let before = (probes(&net), net.engines[0].stats().ack_polls);
    // One short message, acknowledged by nobody on its own: every timer fires together.
    net.engines[0]
        .bcast(net.now, vec![9; 8], Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, msgs.len() + 1) && n.engines[0].is_idle());
    assert_eq!(
        probes(&net),
        before.0,
        "rank 2 answered its poll: no probe needed"
    );
    assert_eq!(
        net.engines[0].stats().ack_polls - before.1,
        3,
        "one poll per member, none to the group that rank 2 would miss"
    );
}

#[test]
fn members_that_broadcast_does_not_reach_are_probed_point_to_point_and_fail_over() {
    // Two members miss every broadcast frame, re-broadcasts included: the frame each one lacks
    // is wanted by both, and a re-broadcast would never reach them. A member whose timer
    // fired is repaired point to point, which reaches it, until it NACKs again.
    let mut net = Net::new(5, |_| {});
    net.drop = Box::new(|r, to| (to == 1 || to == 3) && r.flags.contains(Flags::BROADCAST));
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(20_000, i)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    for r in 1..5 {
        let got: Vec<Vec<u8>> = net.delivered[r].iter().map(|d| d.2.clone()).collect();
        assert_eq!(got, msgs, "rank {r}");
    }
    assert_eq!(
        net.engines[0].sender().failed_over(),
        vec![Rank::new(1), Rank::new(3)]
    );
}
/// The root's data frames for `msgs`, broadcast with no receiver answering.
fn frames_of(msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut c = Config::new(7, Rank::new(0), 2);
    c.window = 256;
    let mut root = Engine::new(c).unwrap();
    let now = Instant::now();
    for m in msgs {
        root.bcast(now, m.clone(), Algorithm::Simple).unwrap();
    }
    let mut buf = vec![0u8; 1500];
    let mut frames = Vec::new();
    while let Some(t) = root.poll_transmit(now, &mut buf) {
        frames.push(buf[..t.len].to_vec());
    }
    frames
}

proptest::proptest! {
    /// Frames arriving in any order, some twice, still give every message once, whole and in
    /// order: out-of-order frames written straight into their message (receives posted
    /// automatically) or kept in their window slot (receives posted by hand).
    #[test]
    fn any_arrival_order_delivers_every_message_once_and_intact(
        lens in proptest::collection::vec(0usize..6000, 1..8),
        order in proptest::collection::vec(proptest::num::usize::ANY, 1..200),
        auto in proptest::bool::ANY,
    ) {
        let msgs: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| message(l, i as u8)).collect();
        let frames = frames_of(&msgs);
        // A shuffle (swaps drawn from `order`), then a few duplicates.
        let mut idx: Vec<usize> = (0..frames.len()).collect();
        for (k, &r) in order.iter().enumerate() {
            let n = idx.len();
            idx.swap(k % n, r % n);
        }
        for &r in order.iter().take(5) {
            idx.insert(r % idx.len(), idx[(r / 7) % idx.len()]);
        }
        let mut rx = Engine::new({
            let mut c = Config::new(7, Rank::new(1), 2);
            c.auto_post = auto;
            c.window = 256;
            c
        })
        .unwrap();
        let now = Instant::now();
        let seen = observed(&mut rx, now, Rank::new(0));
        if !auto {
            for _ in &msgs {
                rx.post_recv(now, Rank::new(0), usize::MAX).unwrap();
            }
        }
        for &i in &idx {
            let _ = rx.handle_frame(now, &frames[i]);
        }
        let mut got = Vec::new();
        while let Some(ev) = rx.poll_event() {
            if let Event::Delivered(Message { msg_id, data, .. }) = ev {
                got.push((msg_id, data));
            }
        }
        let want: Vec<(u64, Vec<u8>)> = msgs.into_iter().enumerate().map(|(i, m)| (i as u64, m)).collect();
        proptest::prop_assert_eq!(&got, &want);
        proptest::prop_assert_eq!(pieced(&seen), want);
    }
}

/// The messages with their ids (0, 1, 2, ...), as a root's stream numbers them.
fn numbered(msgs: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    msgs.iter()
        .cloned()
        .enumerate()
        .map(|(i, m)| (i as u64, m))
        .collect()
}

/// Four members whose fellows repair each other and hold messages back for it, losing 5% of
/// the data, repairs and acknowledgements (`seed` draws which).
fn holding_net(seed: u64) -> Net {
    let mut net = Net::new(4, |c| {
        c.peer_repair = true;
        c.peer_hold = true;
    });
    net.drop = lossy(seed, 0.05);
    net
}

/// The pieces an observer of `root`'s stream at `e` is handed: (message id, length, offset,
/// bytes).
type Pieces = std::sync::Arc<std::sync::Mutex<Vec<(u64, usize, usize, Vec<u8>)>>>;

fn observed(e: &mut Engine, now: Instant, root: Rank) -> Pieces {
    let seen = Pieces::default();
    let log = seen.clone();
    e.observe(
        now,
        root,
        Box::new(move |p: &Piece<'_>| {
            log.lock()
                .unwrap()
                .push((p.msg_id, p.msg_len, p.offset, p.bytes.to_vec()))
        }),
    );
    seen
}

/// The messages the pieces make, checking as it goes that they come in order: each message
/// from offset 0, each piece where the one before it ended, each message to its length before
/// the next begins.
fn pieced(seen: &Pieces) -> Vec<(u64, Vec<u8>)> {
    let mut msgs: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    for (id, len, off, bytes) in seen.lock().unwrap().iter() {
        match msgs.last_mut() {
            Some((last, l, m)) if *last == *id => {
                assert_eq!(
                    (*l, m.len()),
                    (*len, *off),
                    "message {id}: a piece out of place"
                );
                m.extend_from_slice(bytes);
            }
            prev => {
                if let Some((last, l, m)) = prev {
                    assert_eq!(m.len(), *l, "message {last} ended short");
                    assert_eq!(*id, *last + 1, "message {id} after {last}");
                }
                assert_eq!(*off, 0, "message {id} begun at {off}");
                msgs.push((*id, *len, bytes.clone()));
            }
        }
    }
    msgs.into_iter().map(|(id, _, m)| (id, m)).collect()
}

/// Under loss, with fellows repairing and messages held back for them, and with pushed data
/// kept for a receive posted late: what an observer is handed is what is delivered, in order,
/// each byte once.
#[test]
fn an_observer_sees_the_bytes_delivered_in_order_once() {
    let mut net = holding_net(11);
    let now = net.now;
    let seen: Vec<Pieces> = (1..4)
        .map(|r| observed(&mut net.engines[r], now, Rank::new(0)))
        .collect();
    let msgs: Vec<Vec<u8>> = (0..12).map(|i| message(i * 2_900 + 1, i as u8)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    assert!(net.lost > 0, "the test lost nothing");
    let want = numbered(&msgs);
    for (k, s) in seen.iter().enumerate() {
        let got: Vec<(u64, Vec<u8>)> = net.delivered[k + 1]
            .iter()
            .map(|d| (d.1, d.2.clone()))
            .collect();
        assert_eq!(got, want, "rank {} delivered", k + 1);
        assert_eq!(pieced(s), want, "rank {} observed", k + 1);
    }
}

/// A receiver that keeps pushed data until its receive is posted observes the pushed bytes as
/// they come, once, and not again when they move into the posted buffer.
#[test]
fn pushed_bytes_are_observed_once() {
    let mut net = Net::new(2, |c| {
        c.auto_post = false;
        c.pushed_buffer = 4096;
    });
    let now = net.now;
    let seen = observed(&mut net.engines[1], now, Rank::new(0));
    let small = message(500, 6);
    net.engines[0]
        .bcast(now, small.clone(), Algorithm::PushPull)
        .unwrap();
    let until = now + Duration::from_millis(50);
    net.run(|n| n.now >= until);
    assert!(net.delivered[1].is_empty());
    assert_eq!(pieced(&seen), vec![(0, small.clone())]);
    let now = net.now;
    net.engines[1]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.run(|n| n.delivered[1].len() == 1);
    assert_eq!(net.delivered[1][0].2, small);
    assert_eq!(pieced(&seen), vec![(0, small)]);
}

/// An observer that logs its pieces like `observed`'s and checks the contract of
/// `Piece::held`: each piece said to stay until the next `frames_done` lies, unchanged, in the
/// memory that call names.
struct Held {
    log: Pieces,
    /// Held pieces not yet found: where, and their bytes.
    pending: Vec<(usize, Vec<u8>)>,
    /// Held pieces found where they were said to stay, not found (or changed); pieces not
    /// held.
    counts: std::sync::Arc<std::sync::Mutex<[usize; 3]>>,
}

impl Observe for Held {
    fn piece(&mut self, p: &Piece<'_>) {
        self.log
            .lock()
            .unwrap()
            .push((p.msg_id, p.msg_len, p.offset, p.bytes.to_vec()));
        if p.held {
            self.pending
                .push((p.bytes.as_ptr() as usize, p.bytes.to_vec()));
        } else {
            self.counts.lock().unwrap()[2] += 1;
        }
    }
    fn frames_done(&mut self, memory: &dyn machine::Held) {
        let mut c = self.counts.lock().unwrap();
        for (at, bytes) in self.pending.drain(..) {
            match memory.find(at, bytes.len()) {
                Some(m) if m == &bytes[..] => c[0] += 1,
                _ => c[1] += 1,
            }
        }
    }
}

/// A receiver that keeps at most `keep` bytes of a root's messages (one that writes from its
/// observer): a longer message's bytes go to the observer alone, in order, once, and it comes
/// as `Observed` with its length; shorter ones are delivered as ever. Its frames in order are
/// observed in the frame handed in, those behind a loss in the engine's copies, both held
/// there until `frames_done`; and under loss, with fellows repairing each other, every
/// receiver gets everything although none keeps the long messages to serve them from.
#[test]
fn messages_longer_than_the_keep_limit_go_to_the_observer_alone() {
    keep_limited(holding_net(5), false);
}

/// As `messages_longer_than_the_keep_limit_go_to_the_observer_alone`, over links that keep
/// frames after they are handled, the receivers leaving there the frames they would copy
/// (`Engine::leave_in_link`): those behind a gap are consumed from the link when it fills,
/// fellows are served from it, and the bytes are as ever, whether the link keeps more
/// frames than a gap lasts or so few (4) that most frames leave it while still waiting and
/// are copied then.
#[test]
fn frames_left_in_a_link_that_keeps_them_are_consumed_and_served_from_there() {
    for keep in [4096, 4] {
        let mut net = holding_net(9);
        net.retain = Some(keep);
        let served = keep_limited(net, true);
        assert!(served > 0, "keeping {keep}: no fellow was served");
    }
}

/// Runs 16 messages, short and long, from root 0 to three receivers of `net` that keep at
/// most 2000 bytes of a message (and leave frames in the link, if `in_link`), and checks
/// what each delivered and observed. Returns the frames fellows repaired.
fn keep_limited(mut net: Net, in_link: bool) -> u64 {
    let now = net.now;
    let keep = 2_000;
    let mut logs = Vec::new();
    for r in 1..4 {
        let log = Pieces::default();
        let counts = std::sync::Arc::new(std::sync::Mutex::new([0; 3]));
        if in_link {
            net.engines[r].leave_in_link(now, Rank::new(0));
        }
        net.engines[r].keep_at_most(now, Rank::new(0), keep);
        net.engines[r].observe(
            now,
            Rank::new(0),
            Box::new(Held {
                log: log.clone(),
                pending: Vec::new(),
                counts: counts.clone(),
            }),
        );
        logs.push((log, counts));
    }
    // Short and long messages, mixed.
    let msgs: Vec<Vec<u8>> = (0..16)
        .map(|i| message(if i % 3 == 0 { 900 } else { i * 3_100 + 7 }, i as u8))
        .collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| (1..4).all(|r| n.delivered[r].len() + n.observed[r].len() == msgs.len()));
    assert!(net.lost > 0, "the test lost nothing");
    let want = numbered(&msgs);
    let short: Vec<(Rank, u64, Vec<u8>)> = want
        .iter()
        .filter(|(_, m)| m.len() <= keep)
        .map(|(i, m)| (Rank::new(0), *i, m.clone()))
        .collect();
    let long: Vec<(Rank, u64, usize)> = want
        .iter()
        .filter(|(_, m)| m.len() > keep)
        .map(|(i, m)| (Rank::new(0), *i, m.len()))
        .collect();
    for (k, (log, counts)) in logs.iter().enumerate() {
        let r = k + 1;
        assert_eq!(net.delivered[r], short, "rank {r} delivered");
        assert_eq!(net.observed[r], long, "rank {r} observed only");
        assert_eq!(pieced(log), want, "rank {r}: the observer's bytes");
        let [found, astray, _] = *counts.lock().unwrap();
        assert!(found > 0, "rank {r}: no piece held");
        assert_eq!(
            astray, 0,
            "rank {r}: held pieces not where they were said to stay"
        );
    }
    (1..4).map(|r| net.engines[r].stats().peer_repairs).sum()
}

fn peer_net(n: u16) -> Net {
    Net::new(n, |c| c.peer_repair = true)
}

#[test]
fn with_peer_repair_a_fellow_receiver_repairs_and_the_root_sends_nothing_again() {
    let mut net = peer_net(4);
    net.drop = Box::new(lose_once(3, 2));
    // Long enough that the peer is still assembling it when asked (a peer serves only
    // frames of messages it has not delivered yet).
    let m = message(150_000, 1);
    broadcast_to_all(&mut net, &m);
    for r in 1..4 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    // Rank 2's peer is rank 3 (the next rank after it that is not the root).
    assert_eq!(net.engines[0].stats().repair_frames, 0);
    assert_eq!(net.engines[3].stats().peer_repairs, 1);
    assert_eq!(net.engines[1].stats().peer_repairs, 0);
    assert_eq!(net.engines[2].stats().peer_nacks, 1);
    assert_eq!(net.engines[2].stats().drops.total(), 0);
}

/// Root 0 broadcasts one-frame messages in `batches` (frame `i` is message `i`), each batch
/// once every member has the one before; rank 2 loses the frames in `lost` once each.
/// Returns the network after every member has them all.
fn one_frame_messages_with_losses(batches: &[u8], lost: &'static [u32]) -> Net {
    let mut net = peer_net(4);
    let mut losers: Vec<_> = lost.iter().map(|&s| lose_once(s, 2)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let mut msgs = Vec::new();
    for &count in batches {
        for _ in 0..count {
            let m = message(100, msgs.len() as u8);
            net.engines[0]
                .bcast(net.now, m.clone(), Algorithm::Simple)
                .unwrap();
            msgs.push(m);
        }
        net.run(|n| n.all_got(0, msgs.len()));
    }
    let want: Vec<_> = (0..msgs.len())
        .map(|i| (Rank::new(0), i as u64, msgs[i].clone()))
        .collect();
    assert_eq!(net.delivered[2], want);
    net
}

#[test]
fn a_peer_nobody_asked_keeps_no_copies_so_a_frame_it_delivered_comes_from_the_root() {
    // The peer (rank 3) has handed message 3 to its application long before rank 2 finds
    // frame 3 missing (when frame 4 arrives). Without loss nobody asks it, so it kept no
    // second copy of its frames: it says so, and the root repairs.
    let net = one_frame_messages_with_losses(&[6], &[3]);
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        0,
        "the peer held nothing"
    );
    assert_eq!(net.engines[2].stats().peer_nacks, 1, "the peer was asked");
    assert_eq!(net.engines[0].stats().repair_frames, 1, "the root repaired");
}

#[test]
fn once_asked_a_peer_keeps_copies_and_repairs_frames_it_delivered_already() {
    // The first request (frame 3) finds no copy; from then on the peer keeps copies, so the
    // next loss (frame 8, in a later batch, its message delivered at the peer) is repaired by
    // the peer.
    let net = one_frame_messages_with_losses(&[6, 6], &[3, 8]);
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        1,
        "the peer repaired frame 8"
    );
    assert_eq!(net.engines[2].stats().peer_nacks, 2);
    assert_eq!(
        net.engines[0].stats().repair_frames,
        1,
        "the root repaired frame 3 only"
    );
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

/// Root 0 and receiver 1 of group 7 (3 members, peer repair, a window of four copied
/// tails); `hold`: `Config::peer_hold`.
fn fellow_pair(hold: bool) -> (Engine, Engine) {
    let cfg = |rank| {
        let mut c = Config::new(7, rank, 3);
        c.window = 4 * COPY_TAIL;
        c.peer_repair = true;
        c.peer_hold = hold;
        c
    };
    (
        Engine::new(cfg(Rank::new(0))).unwrap(),
        Engine::new(cfg(Rank::new(1))).unwrap(),
    )
}

/// The payloads of the repairs among `out`.
fn repair_payloads(out: &[Vec<u8>]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|f| Frame::new_checked(&f[..]).ok())
        .filter(|f| f.kind() == Kind::Repair)
        .map(|f| f.payload().to_vec())
        .collect()
}

#[test]
fn once_asked_a_receiver_keeps_copies_of_the_last_frames_of_each_message_only() {
    // A window wider than the copied tail: a frame far from its message's end was in the
    // message's buffer while the fellow's request could come; only the tail outlives the
    // delivery in slot copies (one copy of the stream, not two, on a lossy segment).
    let (mut root, mut rx) = fellow_pair(false);
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut send_all = |root: &mut Engine, rx: &mut Engine, m: Vec<u8>| {
        root.bcast(now, m, Algorithm::Simple).unwrap();
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            assert_eq!(rx.handle_frame(now, &buf[..t.len]), Ok(()));
        }
        assert!(matches!(rx.poll_event(), Some(Event::Delivered(_))));
    };
    // Message 0 (frame 0), delivered before anybody asked: no copy. The request turns copies on.
    send_all(&mut root, &mut rx, vec![1; 8]);
    let unheld = |out: &[Vec<u8>], seq: u32| {
        out.iter().any(|f| {
            Frame::new_checked(&f[..])
                .ok()
                .and_then(|f| Control::parse(&f).ok())
                == Some(Control::PeerNack {
                    root: Rank::new(0),
                    base: seq,
                    missing: 1,
                    unheld: true,
                    more: vec![],
                })
        })
    };
    let out = ask_as_fellow(&mut rx, now, 0, 1);
    assert!(unheld(&out, 0), "nothing kept before anybody asked");
    // Message 1: frames 1..=frames, delivered whole.
    let per = root.config().max_payload();
    let frames = COPY_TAIL + 40;
    let m = message(frames * per, 9);
    send_all(&mut root, &mut rx, m.clone());
    // Its frame 10 (frames - 10 from the end): no copy, the fellow is sent to the root.
    let out = ask_as_fellow(&mut rx, now, 1 + 10, 2);
    assert!(unheld(&out, 11), "frame 10 of the message is not kept");
    assert!(repair_payloads(&out).is_empty());
    // Its last frame and the first within the tail: repaired from their copies, intact.
    for (k, ctr) in [(frames - 1, 3), (frames - COPY_TAIL, 4)] {
        let out = ask_as_fellow(&mut rx, now, 1 + k as u32, ctr);
        assert_eq!(
            repair_payloads(&out),
            vec![m[k * per..(k + 1) * per].to_vec()],
            "frame {k}"
        );
    }
    // One frame before the tail: not kept.
    let k = frames - COPY_TAIL - 1;
    assert!(unheld(
        &ask_as_fellow(&mut rx, now, 1 + k as u32, 5),
        1 + k as u32
    ));
    assert_eq!(rx.stats().peer_repairs, 2);
}

/// What `rx` delivered so far: (message id, bytes) of each `Delivered`, in order.
fn delivered_now(rx: &mut Engine) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    while let Some(ev) = rx.poll_event() {
        if let Event::Delivered(m) = ev {
            got.push((m.msg_id, m.data));
        }
    }
    got
}

#[test]
fn with_peer_hold_a_message_is_held_back_for_fellows_instead_of_copied() {
    let (mut root, mut rx) = fellow_pair(true);
    let now = Instant::now();
    // Rank 2 only asks (as a fellow): the root does not wait for its acknowledgements.
    assert!(root.evict(now, Rank::new(2)));
    let mut buf = vec![0u8; 1500];
    // Root 0 broadcasts `m` at `at`; rank 1's acknowledgements go back to it.
    let mut send = |root: &mut Engine, rx: &mut Engine, at: Instant, m: &[u8]| {
        root.bcast(at, m.to_vec(), Algorithm::Simple).unwrap();
        loop {
            let mut moved = false;
            while let Some(t) = root.poll_transmit(at, &mut buf) {
                moved = true;
                assert_eq!(rx.handle_frame(at, &buf[..t.len]), Ok(()));
            }
            while let Some(t) = rx.poll_transmit(at, &mut buf) {
                moved = true;
                let _ = root.handle_frame(at, &buf[..t.len]);
            }
            if !moved {
                break;
            }
        }
    };
    // Before any fellow asked: delivered at once.
    send(&mut root, &mut rx, now, &[1; 8]);
    assert_eq!(delivered_now(&mut rx), vec![(0, vec![1; 8])]);
    assert!(repair_payloads(&ask_as_fellow(&mut rx, now, 0, 1)).is_empty());
    // A fellow asked: the next message (frames 1..=frames) is complete but held back.
    let per = root.config().max_payload();
    let frames = COPY_TAIL + 40;
    let m1 = message(frames * per, 9);
    send(&mut root, &mut rx, now, &m1);
    assert!(delivered_now(&mut rx).is_empty(), "held for fellows");
    // Any frame of it is served from the message itself: the first (which a copy of the
    // tail would not have kept), the last.
    for (k, ctr) in [(0, 2), (frames - 1, 3)] {
        let out = ask_as_fellow(&mut rx, now, 1 + k as u32, ctr);
        assert_eq!(
            repair_payloads(&out),
            vec![m1[k * per..(k + 1) * per].to_vec()],
            "frame {k}"
        );
    }
    // A message completed meanwhile waits behind it: delivery stays in order.
    send(&mut root, &mut rx, now, &[2; 8]);
    assert!(delivered_now(&mut rx).is_empty());
    assert_eq!(rx.poll_timeout(), Some(now + PEER_HOLD_WAIT));
    rx.handle_timeout(now + PEER_HOLD_WAIT);
    assert_eq!(delivered_now(&mut rx), vec![(1, m1), (2, vec![2; 8])]);
    // Delivered, the message is gone: no copy of its tail stayed in the window.
    let out = ask_as_fellow(&mut rx, now, frames as u32, 4);
    assert!(
        repair_payloads(&out).is_empty(),
        "the last frame of message 1 was not copied"
    );
    // The wait runs from the stream's last move: a frame 4 ms later puts it off.
    let t0 = now + PEER_HOLD_WAIT;
    let t1 = t0 + Duration::from_millis(4);
    send(&mut root, &mut rx, t0, &[3; 8]);
    send(&mut root, &mut rx, t1, &[4; 8]);
    rx.handle_timeout(t0 + PEER_HOLD_WAIT);
    assert!(delivered_now(&mut rx).is_empty(), "the stream moved at t1");
    rx.handle_timeout(t1 + PEER_HOLD_WAIT);
    assert_eq!(
        delivered_now(&mut rx),
        vec![(3, vec![3; 8]), (4, vec![4; 8])]
    );
    // A window's worth of frames after its end releases a held message without the timer.
    let t2 = t1 + PEER_HOLD_WAIT;
    let m5 = message(2 * per, 5);
    send(&mut root, &mut rx, t2, &m5);
    assert!(delivered_now(&mut rx).is_empty());
    let m6 = message((4 * COPY_TAIL + 1) * per, 6);
    send(&mut root, &mut rx, t2, &m6);
    assert_eq!(delivered_now(&mut rx), vec![(5, m5)]);
    // The root evicted, its complete message is still delivered.
    assert!(rx.evict(t2, Rank::new(0)));
    assert_eq!(delivered_now(&mut rx), vec![(6, m6)]);
}

#[test]
fn when_the_peer_cannot_help_the_root_repairs_after_the_retry_interval() {
    let mut net = peer_net(4);
    // Rank 2 loses frame 3, and every repair a peer sends it is lost too.
    let mut lose = lose_once(3, 2);
    net.drop = Box::new(move |r, to| {
        let peer_repair = r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P);
        (to == 2 && peer_repair) || lose(r, to)
    });
    let m = message(150_000, 4);
    broadcast_to_all(&mut net, &m);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    assert_eq!(net.engines[2].stats().peer_nacks, 2, "asked the peer twice");
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        2,
        "the peer tried twice"
    );
    let tx = net.engines[0].sender().eqa();
    assert_eq!(
        tx.lms(Rank::new(2)).unwrap().stats.repairs,
        1,
        "then the root repaired"
    );
}

#[test]
fn after_an_eviction_the_next_live_member_is_the_peer() {
    let mut net = peer_net(4);
    let now = net.now;
    for e in 0..3 {
        assert!(net.engines[e].evict(now, Rank::new(3)));
    }
    let mut lose = lose_once(2, 2);
    // Rank 3 is gone.
    net.drop = Box::new(move |r, to| to == 3 || lose(r, to));
    let m = message(150_000, 5);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.delivered[1].len() == 1 && n.delivered[2].len() == 1);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    // Rank 2's peer was 3; with 3 evicted it wraps around past the root to rank 1.
    assert_eq!(net.engines[1].stats().peer_repairs, 1);
    assert_eq!(net.engines[0].stats().repair_frames, 0);
}

#[test]
fn a_peer_nack_naming_a_bad_root_is_dropped() {
    let mut e = Engine::new({
        let mut c = Config::new(7, Rank::new(1), 3);
        c.peer_repair = true;
        c
    })
    .unwrap();
    let now = Instant::now();
    // Rank 2 asks rank 1 for frames of `root`'s stream (each with a fresh control counter).
    let ctr = std::cell::Cell::new(0);
    let peer_nack = |root: u32, seq: u32, bitmap: u16| {
        let mut r = Repr::new(Kind::Nack);
        r.group = 7;
        r.src = Rank::new(2);
        r.dst = Rank::new(1);
        r.flags = Flags::PEER;
        r.msg_id = root;
        r.seq = seq;
        r.bitmap = bitmap;
        ctr.set(ctr.get() + 1);
        r.msg_len = ctr.get();
        r.to_vec(&[]).unwrap()
    };
    for root in [1u32, 3, 99] {
        assert!(
            matches!(
                e.handle_frame(now, &peer_nack(root, 0, 1)),
                Err(Drop::Protocol(_))
            ),
            "root {root}"
        );
    }
    // A root this member has no stream of yet: nothing held, and the asker is told so.
    assert!(e.handle_frame(now, &peer_nack(0, 5, 0xffff)).is_ok());
    let mut buf = vec![0u8; 1500];
    let t = e.poll_transmit(now, &mut buf).expect("a reply");
    assert_eq!(t.dst, Dest::Rank(Rank::new(2)));
    let reply = Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap());
    assert_eq!(reply.kind, Some(Kind::Nack));
    assert!(reply.flags.contains(Flags::PEER | Flags::UNHELD));
    assert_eq!((reply.seq, reply.bitmap, reply.msg_id), (5, 0xffff, 0));
    assert!(e.poll_transmit(now, &mut buf).is_none());
}

#[test]
fn a_peer_that_lost_the_frame_too_says_so_and_the_root_is_asked_at_once() {
    // Ranks 1 and 2 are each other's peer, and both lose frame 3.
    let mut net = peer_net(3);
    let mut lost = [false; 3];
    net.drop = Box::new(move |r, to| {
        if r.kind == Some(Kind::Data) && r.seq == 3 && !lost[to] {
            lost[to] = true;
            return true;
        }
        false
    });
    let start = net.now;
    let m = message(150_000, 6);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, m.clone())]);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    assert_eq!(net.engines[1].stats().peer_repairs, 0);
    assert_eq!(net.engines[2].stats().peer_repairs, 0);
    assert!(net.engines[0].stats().repair_frames >= 1);
    // Without the answer, each would have waited out its retry interval before asking the root.
    let retry = Config::new(7, Rank::new(0), 3).nack_retry;
    assert!(net.now - start < retry, "took {:?}", net.now - start);
}

/// A group of 8 with a tree of fan-out 2 and peer repair: from root 0, ranks 1 and 2 are the
/// root's children, 3 and 4 rank 1's, 5 and 6 rank 2's, 7 rank 3's.
fn tree_net() -> Net {
    Net::new(8, |c| {
        c.peer_repair = true;
        c.ack_tree = 2;
        c.nack_retry = Duration::from_millis(1);
    })
}

#[test]
fn with_a_tree_a_member_asks_its_parent_which_relays_a_frame_it_lacked_too_when_it_comes() {
    // Ranks 3 and 7 (3's child) lose frame 3. Rank 7 asks its parent, which lacks it too and
    // says so; rank 3 asks its own parent (rank 1), and relays the frame to rank 7 as soon as
    // it comes: rank 7 asks once, and the root repairs nothing.
    let mut net = tree_net();
    let mut losers: Vec<_> = [3, 7].into_iter().map(|r| lose_once(3, r)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let m = message(150_000, 6);
    broadcast_to_all(&mut net, &m);
    for r in 1..8 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    assert_eq!(net.engines[0].stats().repair_frames, 0, "the root repaired");
    assert_eq!(net.engines[1].stats().peer_repairs, 1, "1 repaired 3");
    assert_eq!(net.engines[3].stats().peer_repairs, 1, "3 relayed to 7");
    assert_eq!(net.engines[7].stats().peer_nacks, 1, "7 asked once");
    let others: u64 = [2, 4, 5, 6]
        .iter()
        .map(|&r| net.engines[r].stats().peer_repairs)
        .sum();
    assert_eq!(others, 0, "members outside the branch repaired");
}

#[test]
fn with_a_tree_a_frame_every_member_lost_is_asked_of_the_root_by_its_children_alone() {
    // Every receiver loses frame 3 (as when the root's own port drops it). The root's two
    // children ask the root; every other member asks its parent, which lacks it too. The root
    // hears two NACKs, not seven, and re-broadcasts once; the parents, which saw the
    // re-broadcast their children saw, relay nothing.
    let mut net = tree_net();
    let mut losers: Vec<_> = (1..8).map(|r| lose_once(3, r)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let m = message(150_000, 8);
    broadcast_to_all(&mut net, &m);
    for r in 1..8 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    let root = net.engines[0].stats();
    assert_eq!(root.nacks_handled, 2, "NACKs into the root");
    assert_eq!((root.repair_frames, root.rebroadcasts), (1, 1));
    let relayed: u64 = (1..8).map(|r| net.engines[r].stats().peer_repairs).sum();
    assert_eq!(relayed, 0, "relays of a re-broadcast frame");
}

#[test]
fn with_a_tree_a_member_whose_parent_is_dead_gets_every_frame_from_the_root() {
    // Rank 3 is dead, and only the root knows it: rank 7 still asks it first. Every tenth data
    // frame to rank 7 is lost; it gets each from the root, once, in order.
    let mut net = tree_net();
    let now = net.now;
    assert!(net.engines[0].evict(now, Rank::new(3)));
    net.drop = Box::new(|r, to| {
        to == 3
            || r.src == Rank::new(3)
            || (to == 7 && r.kind == Some(Kind::Data) && r.seq % 10 == 5)
    });
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(150_000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| {
        [1, 2, 4, 5, 6, 7]
            .iter()
            .all(|&r| n.delivered[r].len() == 10)
    });
    for r in [1, 2, 4, 5, 6, 7] {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "rank {r}");
    }
    let repairs = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(7))
        .unwrap()
        .stats
        .repairs;
    assert!(repairs >= 90, "{repairs} repairs of rank 7 by the root");
}

#[test]
fn a_peer_that_never_answers_is_given_up_and_the_root_is_asked_directly() {
    let mut net = peer_net(4);
    let now = net.now;
    // Rank 3 is gone, but only the root and rank 1 know it: rank 2 still takes it as its
    // peer. Every tenth data frame to rank 2 is lost.
    assert!(net.engines[0].evict(now, Rank::new(3)));
    assert!(net.engines[1].evict(now, Rank::new(3)));
    net.drop = Box::new(|r, to| {
        let from_peer = (r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P))
            || r.flags.contains(Flags::PEER);
        to == 3
            || (to == 2 && from_peer)
            || (to == 2 && r.kind == Some(Kind::Data) && r.seq % 10 == 5)
    });
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(150_000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.delivered[1].len() == 10 && n.delivered[2].len() == 10);
    let got: Vec<&Vec<u8>> = net.delivered[2].iter().map(|d| &d.2).collect();
    assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    let lost = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(2))
        .unwrap()
        .stats
        .repairs;
    let asked_peer = net.engines[2].stats().peer_nacks;
    assert!(lost >= 90, "{lost} repairs");
    // Asked until it left 16 requests unanswered (a request that repeats frames asked before,
    // or sends them on to the root, counts once), then not for the next 128 losses: about
    // 200 requests if it were never given up.
    assert!(asked_peer <= 40, "asked the silent peer {asked_peer} times");
}

/// A peer silent for a while (a stalled host) is given up for a pause, not for good: once the
/// stream has moved on, the receiver asks it again, and the later losses are repaired by it,
/// not by the root.
#[test]
fn a_peer_silent_for_a_while_is_asked_again_after_a_pause() {
    let mut net = peer_net(4);
    // Every fifth data frame to rank 2 is lost; whatever its peer (rank 3) sends it is lost
    // too until the root has sent frame 500.
    let mut highest = 0u32;
    net.drop = Box::new(move |r, to| {
        if r.kind == Some(Kind::Data) {
            highest = highest.max(r.seq);
        }
        let from_peer = (r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P))
            || r.flags.contains(Flags::PEER);
        (to == 2 && from_peer && highest < 500)
            || (to == 2 && r.kind == Some(Kind::Data) && r.seq % 5 == 2)
    });
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(150_000, i)).collect();
    broadcast_all(&mut net, &msgs, Algorithm::Simple);
    let got: Vec<&Vec<u8>> = net.delivered[2].iter().map(|d| &d.2).collect();
    assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    let frames = net.engines[0].sender().eqa().head().get();
    let lost = frames / 5;
    let root = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(2))
        .unwrap()
        .stats
        .repairs;
    assert!(lost > 700, "{lost} losses");
    assert!(
        root < lost / 2,
        "the root repaired {root} of {lost} lost frames: the peer was never asked again"
    );
}

#[test]
fn frames_placed_ahead_into_a_message_that_contradicts_its_start_are_asked_for_again() {
    let mut rx = Engine::new({
        let mut c = Config::new(7, Rank::new(1), 2);
        c.window = 64;
        c
    })
    .unwrap();
    let now = Instant::now();
    let frame = |seq: u32, msg_id: u32, msg_len: u32, offset: u32, len: usize, last: bool| {
        let mut r = Repr::new(Kind::Data);
        r.group = 7;
        r.src = Rank::new(0);
        r.dst = wire::ALL;
        r.seq = seq;
        r.msg_id = msg_id;
        r.msg_len = msg_len;
        r.offset = offset;
        if last {
            r.flags |= Flags::LAST;
        }
        let payload: Vec<u8> = (0..len)
            .map(|i| (i as u32 + offset + 7 * msg_id) as u8)
            .collect();
        r.to_vec(&payload).unwrap()
    };
    // Message 0 is in progress when a frame of message 1 arrives ahead, claiming a length
    // that its first frame will contradict.
    rx.handle_frame(now, &frame(0, 0, 2000, 0, 1000, false))
        .unwrap();
    rx.handle_frame(now, &frame(3, 1, 500, 0, 100, false))
        .unwrap();
    rx.handle_frame(now, &frame(1, 0, 2000, 1000, 1000, true))
        .unwrap();
    rx.handle_frame(now, &frame(2, 1, 1000, 0, 500, false))
        .unwrap();
    // The contradicting frame was forgotten: its sequence is taken again.
    rx.handle_frame(now, &frame(3, 1, 1000, 500, 500, true))
        .unwrap();
    let mut got = Vec::new();
    while let Some(ev) = rx.poll_event() {
        if let Event::Delivered(Message { msg_id, data, .. }) = ev {
            got.push((msg_id, data));
        }
    }
    let want = |id: u32, len: u32| -> Vec<u8> { (0..len).map(|i| (i + 7 * id) as u8).collect() };
    assert_eq!(got, vec![(0, want(0, 2000)), (1, want(1, 1000))]);
}

/// Performs the attack: a recorded acknowledgement sent again is refused (its control counter
/// was seen), so it can neither keep a dead receiver alive nor move a cursor.
#[test]
fn a_replayed_control_frame_is_refused() {
    let (mut root, mut rx) = root_and_receiver();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    root.bcast(now, vec![1; 10], Algorithm::Simple).unwrap();
    let t = root.poll_transmit(now, &mut buf).unwrap();
    rx.handle_frame(now, &buf[..t.len]).unwrap();
    // The root's timer fires: its poll asks for the acknowledgement.
    let later = now + Duration::from_secs(1);
    root.handle_timeout(later);
    let t = root
        .poll_transmit(later, &mut buf)
        .expect("the root's poll");
    rx.handle_frame(later, &buf[..t.len]).unwrap();
    let t = rx
        .poll_transmit(later, &mut buf)
        .expect("an acknowledgement");
    let ack = buf[..t.len].to_vec();
    assert_eq!(Frame::new_checked(&ack[..]).unwrap().kind(), Kind::Ack);
    assert_eq!(root.handle_frame(now, &ack), Ok(()));
    assert_eq!(root.handle_frame(now, &ack), Err(Drop::Replayed));
    assert_eq!(root.stats().drops.replayed, 1);
    assert_eq!(root.stats().acks_handled, 1);
}

#[test]
fn only_frames_that_pass_every_check_are_a_sign_of_life() {
    let key = [3u8; 32];
    let mut e = Engine::new({
        let mut c = Config::new(7, Rank::new(1), 3);
        c.key = Some(key.into());
        c
    })
    .unwrap();
    let t0 = Instant::now();
    let mut r = Repr::new(Kind::Heartbeat);
    r.src = Rank::new(0);
    r.dst = wire::ALL;
    r.msg_len = 1; // the sender's control counter (a fresh frame, not a replay)
    let sealed = |r: &Repr, k: &[u8; 32]| {
        let mut buf = vec![0u8; 200];
        let n = r.emit(b"", &mut buf).unwrap();
        let n = wire::seal(k, &mut buf, n).unwrap();
        buf.truncate(n);
        buf
    };
    r.group = 8; // another group on the segment
    let _ = e.handle_frame(t0, &sealed(&r, &key));
    r.group = 7;
    let _ = e.handle_frame(t0, &r.to_vec(b"").unwrap()); // no tag
    let _ = e.handle_frame(t0, &sealed(&r, &[4u8; 32])); // wrong key
    let mut garbage = sealed(&r, &key);
    garbage[20] ^= 1;
    let _ = e.handle_frame(t0, &garbage);
    assert_eq!(e.last_heard(Rank::new(0)), None);
    let t1 = t0 + Duration::from_millis(5);
    e.handle_frame(t1, &sealed(&r, &key)).unwrap();
    assert_eq!(e.last_heard(Rank::new(0)), Some(t1));
    assert_eq!(e.last_heard(Rank::new(2)), None);
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
        let mut c = Config::new(7, Rank::new(1), 3);
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

#[test]
fn a_peer_nack_whose_base_lies_before_the_stream_is_answered_without_overflow() {
    // Extended against sequence 0, base 0xffff_ffff is "one before the start", which wraps
    // to the top of the 64-bit sequence space; base + bit overflowed (found by fuzzing).
    let (mut e, now) = member_with_a_stream_of_root_0();
    let nack = nack_frame(Rank::new(2), Rank::new(1), Flags::PEER, 0, u32::MAX, 0xffff);
    assert!(e.handle_frame(now, &nack).is_ok());
    let mut buf = vec![0u8; 1500];
    let t = e.poll_transmit(now, &mut buf).expect("a reply");
    let reply = Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap());
    assert!(reply.flags.contains(Flags::PEER | Flags::UNHELD));
}
#[test]
fn a_not_held_reply_whose_base_lies_before_the_stream_is_ignored_without_overflow() {
    // Rank 2 is rank 1's peer for root 0's stream; its "not held" reply names base
    // 0xffff_ffff (found by fuzzing).
    let (mut e, now) = member_with_a_stream_of_root_0();
    let reply = nack_frame(
        Rank::new(2),
        Rank::new(1),
        Flags::PEER | Flags::UNHELD,
        0,
        u32::MAX,
        0xffff,
    );
    assert!(e.handle_frame(now, &reply).is_ok());
}
#[test]
fn a_nack_to_the_root_whose_base_lies_before_the_stream_asks_for_nothing() {
    let mut root = Engine::new(Config::new(7, Rank::new(0), 3)).unwrap();
    let now = Instant::now();
    root.bcast(now, vec![5; 100], Algorithm::Simple).unwrap();
    let mut buf = vec![0u8; 1500];
    while root.poll_transmit(now, &mut buf).is_some() {}
    let nack = nack_frame(
        Rank::new(1),
        Rank::new(0),
        Flags::empty(),
        0,
        u32::MAX,
        0xffff,
    );
    assert!(root.handle_frame(now, &nack).is_ok());
    assert!(
        root.poll_transmit(now, &mut buf).is_none(),
        "nothing repaired"
    );
}

/// Performs the attack: a recorded data frame sent again is a duplicate, no sign of its root's
/// life (a receiver that waits for a dead sender must not be kept waiting by replays).
#[test]
fn a_replayed_data_frame_is_no_sign_of_life() {
    let (mut root, mut rx) = root_and_receiver();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1500];
    root.bcast(t0, vec![1; 10], Algorithm::Simple).unwrap();
    let t = root.poll_transmit(t0, &mut buf).unwrap();
    let data = buf[..t.len].to_vec();
    rx.handle_frame(t0, &data).unwrap();
    assert_eq!(rx.last_heard(Rank::new(0)), Some(t0));
    let t1 = t0 + Duration::from_secs(1);
    assert!(rx.handle_frame(t1, &data).is_err(), "a duplicate");
    assert_eq!(
        rx.last_heard(Rank::new(0)),
        Some(t0),
        "the replay is not a sign of life"
    );
}

/// A seeded drop rule: every data, repair and ACK frame is lost with probability `p`.
fn lossy(seed: u64, p: f64) -> DropRule {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    Box::new(move |r, _| {
        matches!(r.kind, Some(Kind::Data | Kind::Repair | Kind::Ack)) && rng.gen::<f64>() < p
    })
}

#[test]
fn the_protocol_does_not_depend_on_how_often_timeouts_are_handled() {
    // A driver that wakes only for due timers (one that schedules the members an event
    // concerns) and one that calls `handle_timeout` on every member after every frame must see
    // the same frames: a timer's effects happen when it fires, never again on a later call.
    let run = |eager: bool| {
        let mut net = Net::new(8, |_| {});
        net.eager_timeouts = eager;
        net.drop = lossy(1, 0.2);
        for i in 0..40 {
            net.engines[0]
                .bcast(net.now, message(1000 + 97 * i, i as u8), Algorithm::Simple)
                .unwrap();
        }
        net.run(|n| n.all_got(0, 40) && n.engines[0].is_idle());
        let stats: Vec<Stats> = net.engines.iter().map(|e| e.stats().clone()).collect();
        (stats, net.sent, net.delivered)
    };
    let (lazy, eager) = (run(false), run(true));
    assert!(lazy.0[0].repair_frames > 0, "the loss must cause repairs");
    assert!(
        lazy.0.iter().map(|s| s.drops.stale).sum::<u64>() > 0,
        "and stale repairs, as when a probe crosses an acknowledgement"
    );
    assert!(
        lazy == eager,
        "root's counters, driven lazily then eagerly: {:?} / {:?}",
        lazy.0[0],
        eager.0[0]
    );
}

#[test]
fn a_member_makes_its_destination_structures_at_its_first_broadcast() {
    let mut net = Net::new(200, |_| {});
    net.engines[0]
        .bcast(net.now, message(3000, 9), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.engines[0].sender().eqa().dests().len(), 199);
    for e in &net.engines[1..] {
        assert!(
            e.sender().eqa().dests().is_empty(),
            "a receiver holds no LDPs"
        );
    }
    // A member evicted before the first broadcast starts out evicted.
    assert!(net.engines[1].evict(net.now, Rank::new(7)));
    net.engines[1]
        .bcast(net.now, message(10, 1), Algorithm::Simple)
        .unwrap();
    let eqa = net.engines[1].sender().eqa();
    assert_eq!(eqa.dests().len(), 199);
    assert!(!eqa.lms(Rank::new(7)).unwrap().is_live());
    assert_eq!(eqa.hms().live(), 198);
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
fn lossy_stream(n: u16, tweak: impl Fn(&mut Config), count: usize) -> (Net, Stats) {
    let mut net = Net::new(n, tweak);
    net.drop = lossy(5, 0.01);
    for i in 0..count {
        net.engines[0]
            .bcast(net.now, message(LOSSY_LEN, i as u8), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, count) && n.engines[0].is_idle());
    let stats = net.engines[0].stats().clone();
    (net, stats)
}

#[test]
fn with_an_acknowledgement_tree_the_root_hears_a_few_reports_not_every_receiver() {
    let (n, count) = (48, 40);
    let (flat_net, flat) = lossy_stream(
        n,
        |c| {
            c.ack_tree = 0;
            c.peer_repair = true;
        },
        count,
    );
    assert_exact(&flat_net, 0, count, LOSSY_LEN, &[]);
    let (tree_net, tree) = lossy_stream(
        n,
        |c| {
            c.ack_tree = 4;
            c.peer_repair = true;
        },
        count,
    );
    assert_exact(&tree_net, 0, count, LOSSY_LEN, &[]);
    let members: Vec<&Stats> = tree_net.engines[1..].iter().map(|e| e.stats()).collect();
    assert!(
        members.iter().map(|s| s.tree_ack_frames).sum::<u64>() > 0,
        "receivers report up the tree"
    );
    assert_eq!(tree.tree_acks_ignored, 0, "one view: every report is taken");
    // Without the tree every receiver acknowledges every 8 frames: about n/8 per data frame.
    assert!(
        flat.acks_handled > 3 * flat.data_frames,
        "flat: {} control frames for {} data frames",
        flat.acks_handled,
        flat.data_frames
    );
    assert!(
        tree.acks_handled <= tree.data_frames,
        "tree: {} control frames for {} data frames",
        tree.acks_handled,
        tree.data_frames
    );
}

#[test]
fn a_dead_member_inside_the_tree_is_evicted_and_its_subtree_completes() {
    // Fan-out 2 over 20 members, root 0: rank 1 reports for ranks 3, 4, 7-10, 15-18.
    let mut net = Net::new(20, |c| c.ack_tree = 2);
    net.drop = Box::new(|_, to| to == 1); // rank 1 is dead
    let count = 30;
    for i in 0..count {
        net.engines[0]
            .bcast(net.now, message(3000, i as u8), Algorithm::Simple)
            .unwrap();
    }
    // Its subtree's reports do not reach the root, which probes them and hears their answers
    // directly: they keep receiving while rank 1 is still a member.
    let t0 = net.now;
    net.run(|n| n.now >= t0 + Duration::from_millis(100));
    assert!(net.delivered[9].len() < count, "the root waits for rank 1");
    let probes: u64 = net.engines[0]
        .sender()
        .eqa()
        .dests()
        .iter()
        .map(|l| l.stats.probes)
        .sum();
    assert!(probes > 0, "the silent subtree is probed");
    let now = net.now;
    for e in &mut net.engines {
        e.evict(now, Rank::new(1));
    }
    net.run(|n| (0..20).all(|i| i <= 1 || n.delivered[i].len() == count) && n.engines[0].is_idle());
    assert_exact(&net, 0, count, 3000, &[1]);
    assert!(
        net.engines[3].stats().tree_ack_frames > 0,
        "rank 3 reports up the new tree"
    );
}

/// A push-pull message that fits one frame (the root side).
mod one_frame_push_pull {
    use crate::engine::{Algorithm, Config, Dest, Engine, Event, Message};
    use crate::wire::{Flags, Frame, Kind, Repr};
    use crate::Rank;
    use std::time::Instant;

    /// What the root sends for one push-pull message of `len` bytes before any answer.
    fn first_frames(len: usize) -> (Vec<Repr>, Vec<Vec<u8>>) {
        let mut root = Engine::new(Config::new(7, Rank::new(0), 3)).unwrap();
        let now = Instant::now();
        root.bcast(now, vec![5; len], Algorithm::PushPull).unwrap();
        let (mut reprs, mut pdus) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 1500];
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            assert_eq!(t.dst, Dest::All);
            reprs.push(Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap()));
            pdus.push(buf[..t.len].to_vec());
        }
        (reprs, pdus)
    }

    #[test]
    fn a_message_that_fits_one_frame_is_pushed_whole_and_needs_no_pull() {
        let max = Config::new(7, Rank::new(0), 3).max_payload();
        for len in [1, 80, 81, 256, 860, 861, max] {
            let (reprs, pdus) = first_frames(len);
            assert_eq!(reprs.len(), 1, "{len} B: one frame");
            let f = reprs[0].flags;
            assert!(f.contains(Flags::PUSH | Flags::LAST), "{len} B: {f:?}");
            assert!(!f.contains(Flags::PULL_WAIT), "{len} B: waits for a pull");
            // A receiver delivers it from that frame alone and asks for nothing.
            let mut rx = Engine::new(Config::new(7, Rank::new(1), 3)).unwrap();
            let now = Instant::now();
            rx.handle_frame(now, &pdus[0]).unwrap();
            match rx.poll_event() {
                Some(Event::Delivered(Message { data, .. })) => assert_eq!(data, vec![5; len]),
                other => panic!("{len} B: {other:?}"),
            }
            let mut buf = vec![0u8; 1500];
            while let Some(t) = rx.poll_transmit(now, &mut buf) {
                let kind = Frame::new_checked(&buf[..t.len]).unwrap().kind();
                assert_ne!(kind, Kind::Pull, "{len} B: pulled");
            }
        }
    }

    #[test]
    fn a_longer_message_still_pushes_btp1_then_btp2_and_waits() {
        let max = Config::new(7, Rank::new(0), 3).max_payload();
        let (reprs, _) = first_frames(max + 1);
        assert_eq!(reprs.len(), 2);
        assert_eq!((reprs[0].offset, reprs[1].offset), (0, 80));
        assert!(reprs[1].flags.contains(Flags::PULL_WAIT));
    }
}

/// A receiver of a busy stream of one-frame messages: how many acknowledgements it sends
/// while `count` messages arrive `every` apart, and after the stream went quiet.
fn acks_of_a_stream(count: usize, every: Duration) -> (usize, usize, Engine, Engine) {
    let (mut root, mut rx) = root_and_receiver();
    let mut now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut acks = 0;
    let mut pump = |root: &mut Engine, rx: &mut Engine, now: Instant| {
        let mut n = 0;
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            let _ = rx.handle_frame(now, &buf[..t.len]);
        }
        while let Some(t) = rx.poll_transmit(now, &mut buf) {
            if Frame::new_checked(&buf[..t.len]).unwrap().kind() == Kind::Ack {
                n += 1;
            }
            let _ = root.handle_frame(now, &buf[..t.len]);
        }
        n
    };
    for i in 0..count {
        root.bcast(now, vec![i as u8; 8], Algorithm::Simple)
            .unwrap();
        acks += pump(&mut root, &mut rx, now);
        now += every;
        for e in [&mut root, &mut rx] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        acks += pump(&mut root, &mut rx, now);
    }
    let mut quiet = 0;
    for _ in 0..100 {
        now += Duration::from_micros(100);
        for e in [&mut root, &mut rx] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        quiet += pump(&mut root, &mut rx, now);
    }
    assert!(root.is_idle(), "the root heard every acknowledgement");
    assert_eq!(
        root.stats().repair_frames,
        0,
        "no spurious repair: {:?}",
        root.stats()
    );
    while rx.poll_event().is_some() {}
    (acks, quiet, rx, root)
}

#[test]
fn a_busy_stream_of_small_messages_is_acknowledged_once_per_half_window_and_once_when_the_root_asks(
) {
    let cfg = Config::new(7, Rank::new(1), 2);
    assert_eq!(cfg.ack_every, cfg.window / 2);
    // Messages 100 µs apart: one acknowledgement per ack_every frames while they come; the
    // rest once the root's timer fires on the idle stream and it asks (one poll).
    let (acks, quiet, _, root) = acks_of_a_stream(20, Duration::from_micros(100));
    assert_eq!(acks, 20 / cfg.ack_every);
    assert_eq!(quiet, 1);
    assert_eq!(root.stats().ack_polls, 1);
    // Messages further apart, fewer than ack_every: nothing while they come, one answer to
    // the root's poll for all of them.
    let (acks, quiet, _, root) = acks_of_a_stream(5, Duration::from_micros(400));
    assert_eq!((acks, quiet), (0, 1));
    assert_eq!(root.stats().ack_polls, 1);
}

#[test]
fn a_receiver_arms_no_timer_of_its_own_and_answers_the_roots_poll_at_once() {
    // Why it matters: a receiver that sleeps with a sub-millisecond deadline re-armed per
    // message pays for a clock-event reprogramming each time (an exit to the hypervisor on a
    // virtual machine); the root's one timer per idle period does the asking instead.
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 8]).collect();
    let frames = frames_of(&msgs);
    let c = Config::new(7, Rank::new(1), 2);
    assert!(frames.len() < c.ack_every);
    let mut rx = Engine::new(c).unwrap();
    let mut now = Instant::now();
    let mut buf = vec![0u8; 1500];
    for f in &frames {
        rx.handle_frame(now, f).unwrap();
        assert!(
            rx.poll_transmit(now, &mut buf).is_none(),
            "nothing while frames come"
        );
        assert_eq!(rx.poll_timeout(), None, "no timer of the receiver's own");
        now += Duration::from_micros(100);
    }
    assert!(rx.owes_acks(), "it holds frames the root has not heard of");
    let poll = Control::AckPoll
        .emit(7, Rank::new(0), Rank::new(1), 1, &mut buf)
        .unwrap();
    let poll = buf[..poll].to_vec();
    rx.handle_frame(now, &poll).unwrap();
    let t = rx
        .poll_transmit(now, &mut buf)
        .expect("the answer, at once");
    let f = Frame::new_checked(&buf[..t.len]).unwrap();
    let want = frames.len() as u32;
    assert_eq!(
        Control::parse(&f).unwrap(),
        Control::Ack {
            next: want,
            seen: Some(want)
        }
    );
    assert!(rx.poll_transmit(now, &mut buf).is_none());
    assert!(!rx.owes_acks());
    while rx.poll_event().is_some() {}
}

#[test]
fn a_lost_last_frame_is_repaired_after_the_answer_to_the_roots_poll() {
    let (mut root, mut rx) = root_and_receiver();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1500];
    for i in 0..3u8 {
        root.bcast(t0, vec![i; 8], Algorithm::Simple).unwrap();
    }
    for i in 0..3 {
        let t = root.poll_transmit(t0, &mut buf).unwrap();
        if i < 2 {
            rx.handle_frame(t0, &buf[..t.len]).unwrap();
        }
    }
    assert_eq!(
        rx.poll_timeout(),
        None,
        "nothing tells the receiver the last frame exists"
    );
    let fired = root
        .poll_timeout()
        .expect("the root's retransmission timer");
    root.handle_timeout(fired);
    let t = root.poll_transmit(fired, &mut buf).expect("the poll");
    let f = Frame::new_checked(&buf[..t.len]).unwrap();
    assert_eq!(
        Control::parse(&f).unwrap(),
        Control::AckPoll,
        "a poll, not a retransmission"
    );
    assert_eq!(root.stats().repair_frames, 0);
    rx.handle_frame(fired, &buf[..t.len]).unwrap();
    let t = rx.poll_transmit(fired, &mut buf).expect("the answer");
    root.handle_frame(fired, &buf[..t.len]).unwrap();
    let t = root
        .poll_transmit(fired, &mut buf)
        .expect("the lost frame again");
    assert_eq!(
        Frame::new_checked(&buf[..t.len]).unwrap().kind(),
        Kind::Repair
    );
    rx.handle_frame(fired, &buf[..t.len]).unwrap();
    let got: Vec<u64> = std::iter::from_fn(|| rx.poll_event())
        .filter_map(|e| match e {
            Event::Delivered(Message { msg_id, .. }) => Some(msg_id),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(root.stats().repair_frames, 1, "only the lost frame");
}

/// One data frame of a 3000-byte broadcast from root 0 of `net`, its payload corrupted after
/// the root emitted it (as a switch's memory might, past every Ethernet FCS).
fn first_frame_corrupted(net: &mut Net, m: &[u8]) -> Vec<u8> {
    net.engines[0]
        .bcast(net.now, m.to_vec(), Algorithm::Simple)
        .unwrap();
    let mut buf = vec![0u8; 1500];
    let t = net.engines[0].poll_transmit(net.now, &mut buf).unwrap();
    let mut pdu = buf[..t.len].to_vec();
    pdu[wire::HEADER_LEN + 10] ^= 0x40;
    pdu
}

#[test]
fn with_a_key_the_crc_leaves_the_payload_to_the_tag_which_refuses_a_corrupted_one_for_repair() {
    let mut net = Net::new(2, |c| c.key = Some([7u8; 32].into()));
    let m = message(3000, 4);
    let pdu = first_frame_corrupted(&mut net, &m);
    let f = Frame::new_checked(&pdu[..]).expect("the CRC covers the header only");
    assert!(f.flags().contains(Flags::HEADER_CRC));
    assert_eq!(
        net.engines[1].handle_frame(net.now, &pdu),
        Err(Drop::BadMac)
    );
    net.run(|n| n.all_got(0, 1));
    assert_eq!(
        net.delivered[1],
        vec![(Rank::new(0), 0, m)],
        "repaired, delivered intact"
    );
}

#[test]
fn a_member_that_checks_nothing_end_to_end_refuses_payloads_no_crc_covers() {
    let mut net = Net::new(3, |c| c.end_to_end = c.rank != Rank::new(2));
    let m = message(3000, 5);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.delivered[1].len() == 1);
    assert_eq!(
        net.delivered[1][0].2, m,
        "a member that checks end to end takes them"
    );
    assert!(
        net.delivered[2].is_empty(),
        "no unchecked bytes are delivered"
    );
    assert!(
        net.engines[2].stats().drops.protocol >= 3,
        "every frame refused"
    );
}

#[test]
fn without_a_key_an_end_to_end_member_takes_the_payload_as_it_came_for_its_digest_to_judge() {
    let mut net = Net::new(2, |c| c.end_to_end = true);
    let m = message(3000, 6);
    let pdu = first_frame_corrupted(&mut net, &m);
    assert_eq!(net.engines[1].handle_frame(net.now, &pdu), Ok(()));
    net.run(|n| n.all_got(0, 1));
    let got = &net.delivered[1][0].2;
    let differ: Vec<usize> = (0..m.len()).filter(|&i| got[i] != m[i]).collect();
    assert_eq!(
        differ,
        vec![10],
        "the one corrupted byte is the application's check's to find"
    );
}

thread_local! {
    /// What the recording cache hint was asked for, as (address, length).
    static HINTS: std::cell::RefCell<Vec<(usize, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn record_hint(at: *const u8, len: usize) {
    HINTS.with(|h| h.borrow_mut().push((at as usize, len)));
}

/// Two members, rank 1 recording its cache hints (none recorded yet), after `tweak`.
fn hinting_net(tweak: impl Fn(&mut Config)) -> Net {
    HINTS.with(|h| h.borrow_mut().clear());
    Net::new(2, |c| {
        tweak(c);
        if c.rank == Rank::new(1) {
            c.prefetch = Some(record_hint);
        }
    })
}

/// The frames root 0 sends at once for its broadcast of `m` with `algo`, not delivered.
fn root_frames(net: &mut Net, m: &[u8], algo: Algorithm) -> Vec<Vec<u8>> {
    net.engines[0].bcast(net.now, m.to_vec(), algo).unwrap();
    let mut buf = vec![0u8; 1500];
    let mut frames = Vec::new();
    while let Some(t) = net.engines[0].poll_transmit(net.now, &mut buf) {
        frames.push(buf[..t.len].to_vec());
    }
    frames
}

#[test]
fn a_receiver_hints_where_the_frame_after_the_next_lands_in_its_message() {
    let mut net = hinting_net(|_| {});
    let per = net.engines[0].config().max_payload();
    // Five full frames and a short sixth.
    let m = message(5 * per + 100, 9);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    let got = &net.delivered[1][0].2;
    assert_eq!(got, &m);
    let base = got.as_ptr() as usize;
    let hints = HINTS.with(|h| h.borrow().clone());
    // Each frame appended in order hints the place of the frame after the next (a frame's
    // length further), as far as the message's buffer reaches: here the first four frames.
    let lens = [per, per, per, per, per, 100];
    let mut expected = Vec::new();
    let mut filled = 0;
    for len in lens {
        filled += len;
        let at = filled + len;
        let ahead = len.min(got.capacity().saturating_sub(at));
        if ahead > 0 {
            expected.push((base + at, ahead));
        }
    }
    assert_eq!(expected.len(), 4, "{expected:?}");
    assert_eq!(hints, expected);
    // The root's own engine was given no hint function and called none.
    assert!(net.engines[0].config().prefetch.is_none());
}

/// A root publishes each frame into the shared buffer just before it sends it, at most
/// `PUBLISH_AHEAD` frames ahead (the slot is still in the cache for the copy out), and hints
/// the bytes of the frames after those in the message: a long message still goes out in
/// order, each frame once, and arrives whole.
#[test]
fn a_root_publishes_frames_just_before_it_sends_them_and_hints_the_next_ones() {
    HINTS.with(|h| h.borrow_mut().clear());
    let mut net = Net::new(2, |c| {
        // Room for the whole message: only publishing ahead limits what is published.
        c.window = 128;
        if c.rank == Rank::new(0) {
            c.prefetch = Some(record_hint);
        }
    });
    let per = net.engines[0].config().max_payload();
    let m = message(100 * per + 7, 5);
    net.engines[0]
        .bcast(net.now, m.clone(), Algorithm::Simple)
        .unwrap();
    let published = |e: &Engine| e.sender().eqa().head().get();
    assert_eq!(published(&net.engines[0]), PUBLISH_AHEAD);
    let mut buf = vec![0u8; 1500];
    let mut frames = Vec::new();
    while let Some(t) = net.engines[0].poll_transmit(net.now, &mut buf) {
        let repr = Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap());
        assert_eq!(
            u64::from(repr.seq),
            frames.len() as u64,
            "sent out of order"
        );
        frames.push(buf[..t.len].to_vec());
        let ahead = published(&net.engines[0]) - frames.len() as u64;
        assert!(ahead <= PUBLISH_AHEAD, "{ahead} frames published ahead");
    }
    assert_eq!(frames.len(), 101);
    assert_eq!(published(&net.engines[0]), 101);
    // The message's bytes from its fifth frame on were each hinted (a frame is hinted while
    // the one four before it is published, and the start of the next batch at the end of
    // each), and nothing outside the message was: the lowest hint is the fifth frame's.
    assert_eq!(
        net.engines[0].sender().queued(),
        0,
        "the message left the queue"
    );
    let hints = HINTS.with(|h| h.borrow().clone());
    let base = hints.iter().map(|h| h.0).min().unwrap() - 4 * per;
    let mut hinted = vec![false; m.len()];
    for &(at, len) in &hints {
        assert!(len <= 4 * per, "a hint of {len} bytes");
        assert!(at + len <= base + m.len(), "a hint past the message");
        for b in &mut hinted[at - base..at - base + len] {
            *b = true;
        }
    }
    assert!(hinted[4 * per..].iter().all(|&b| b), "bytes not hinted");
    for f in &frames {
        net.engines[1].handle_frame(net.now, f).unwrap();
    }
    net.collect();
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, m)]);
}

#[test]
fn a_frame_kept_in_its_slot_hints_the_place_two_slots_on() {
    let mut net = hinting_net(|c| c.auto_post = false);
    let per = net.engines[0].config().max_payload();
    let cap = net.engines[1].config().slot_payload();
    let m = message(4 * per, 3);
    let frames = root_frames(&mut net, &m, Algorithm::Simple);
    assert_eq!(frames.len(), 4);
    // Frames 2 and 3 before frame 0: nothing is posted, so they wait in slots 2 and 3.
    for f in &frames[2..] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    let hints = HINTS.with(|h| h.borrow().clone());
    assert_eq!(hints.len(), 2, "{hints:?}");
    assert_eq!(hints[0].1, per);
    assert_eq!(hints[1].1, per);
    // Slots 4 and 5: one slot's capacity apart.
    assert_eq!(hints[1].0 - hints[0].0, cap);
    // Posted now, the message is whole and intact.
    net.engines[1]
        .post_recv(net.now, Rank::new(0), 1 << 20)
        .unwrap();
    for f in &frames[..2] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    net.collect();
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, m)]);
}

#[test]
fn a_frame_placed_behind_a_gap_hints_where_the_frame_after_the_next_lands() {
    let mut net = hinting_net(|_| {});
    let per = net.engines[0].config().max_payload();
    let m = message(6 * per, 8);
    let frames = root_frames(&mut net, &m, Algorithm::Simple);
    // Frame 0 in order, frame 1 lost, frame 2 placed behind the gap.
    for f in [&frames[0], &frames[2]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    let hints = HINTS.with(|h| h.borrow().clone());
    assert_eq!(hints.len(), 2, "{hints:?}");
    // In order, frame 0 hints frame 2's place; placed, frame 2 hints frame 4's.
    assert_eq!(hints[1].0 - hints[0].0, 2 * per);
    assert_eq!((hints[0].1, hints[1].1), (per, per));
    for f in [&frames[1], &frames[3], &frames[4], &frames[5]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    net.collect();
    let got = &net.delivered[1][0].2;
    assert_eq!(got, &m);
    assert_eq!(hints[0].0, got.as_ptr() as usize + 2 * per);
}

/// Root 0's frames of messages `a` and then `b`, sent at once, not delivered.
fn two_messages(net: &mut Net, a: &[u8], b: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = root_frames(net, a, Algorithm::Simple);
    frames.extend(root_frames(net, b, Algorithm::Simple));
    frames
}

#[test]
fn with_receives_posted_the_next_messages_frames_behind_a_gap_go_straight_into_its_buffer() {
    let mut net = hinting_net(|c| c.auto_post = false);
    let per = net.engines[0].config().max_payload();
    let (a, b) = (message(2 * per, 1), message(3 * per, 2));
    let frames = two_messages(&mut net, &a, &b);
    assert_eq!(frames.len(), 5);
    // A streaming member keeps receives posted: one for each message.
    for _ in 0..2 {
        net.engines[1]
            .post_recv(net.now, Rank::new(0), 1 << 20)
            .unwrap();
    }
    // Message a's second frame is lost for now; b's first two come behind the gap.
    for f in [&frames[0], &frames[2], &frames[3]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    let hints = HINTS.with(|h| h.borrow().clone());
    for f in [&frames[1], &frames[4]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    net.collect();
    assert_eq!(
        net.delivered[1],
        vec![(Rank::new(0), 0, a), (Rank::new(0), 1, b.clone())]
    );
    let got = &net.delivered[1][1].2;
    // b's first frame was written into b's own buffer (and hinted the place of its third),
    // not kept in a window slot to be copied again; the buffer was reserved whole then.
    assert_eq!(hints, vec![(got.as_ptr() as usize + 2 * per, per)]);
    assert_eq!(
        got.capacity(),
        b.len(),
        "the buffer grew while it was filled"
    );
}

#[test]
fn without_a_receive_posted_the_next_messages_frames_wait_in_their_slots() {
    let mut net = hinting_net(|c| c.auto_post = false);
    let per = net.engines[0].config().max_payload();
    let cap = net.engines[1].config().slot_payload();
    let (a, b) = (message(2 * per, 3), message(3 * per, 4));
    let frames = two_messages(&mut net, &a, &b);
    // One receive, for message a only.
    net.engines[1]
        .post_recv(net.now, Rank::new(0), 1 << 20)
        .unwrap();
    for f in [&frames[0], &frames[2], &frames[3]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    // Kept in slots 2 and 3, each hinting the slot two on.
    let hints = HINTS.with(|h| h.borrow().clone());
    assert_eq!(hints.len(), 2, "{hints:?}");
    assert_eq!(hints[1].0 - hints[0].0, cap);
    for f in [&frames[1], &frames[4]] {
        assert_eq!(net.engines[1].handle_frame(net.now, f), Ok(()));
    }
    net.collect();
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, a)]);
    // Posted now, b is delivered whole and intact from what waited.
    net.engines[1]
        .post_recv(net.now, Rank::new(0), 1 << 20)
        .unwrap();
    net.collect();
    assert_eq!(net.delivered[1][1], (Rank::new(0), 1, b));
}

/// Under steady loss most messages begin behind a gap: such a message is reserved whole too.
#[test]
fn a_message_begun_behind_a_gap_is_filled_without_reallocating() {
    let mut net = Net::new(2, |_| {});
    let per = net.engines[0].config().max_payload();
    // The last frame of the first message is lost; the second message comes behind it.
    net.drop = Box::new(lose_once(1, 1));
    let (a, b) = (message(2 * per, 5), message(40 * per + 7, 6));
    for m in [&a, &b] {
        net.engines[0]
            .bcast(net.now, m.clone(), Algorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, 2));
    assert_eq!(net.lost, 1);
    assert_eq!(
        net.delivered[1],
        vec![(Rank::new(0), 0, a), (Rank::new(0), 1, b.clone())]
    );
    assert_eq!(
        net.delivered[1][1].2.capacity(),
        b.len(),
        "the buffer grew while it was filled"
    );
}

/// Root 0 and receiver 1 with `nack_gather` frames of gathering; the root broadcasts one
/// message of `frames` full frames and receiver 1 loses the frames in `lost` once each.
/// Returns the network once the message is delivered, and the time that took.
fn gathering(gather: usize, frames: usize, lost: &'static [u32]) -> (Net, Duration) {
    let mut net = Net::new(2, |c| {
        c.window = 256;
        c.ack_every = 256;
        c.nack_gather = gather;
    });
    net.drop = {
        let mut hit = Vec::new();
        Box::new(move |r: &Repr, to: usize| {
            let lose = r.kind == Some(Kind::Data) && to == 1 && lost.contains(&r.seq);
            let first = lose && !hit.contains(&r.seq);
            if first {
                hit.push(r.seq);
            }
            first
        })
    };
    let len = frames * net.engines[0].config().max_payload() - 10;
    let start = net.now;
    net.engines[0]
        .bcast(net.now, message(len, 3), Algorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, message(len, 3))]);
    let took = net.now - start;
    (net, took)
}

#[test]
fn a_gathering_receiver_asks_for_every_gap_in_one_nack() {
    // Three gaps in 100 frames, up to 37 frames apart (three words of the bitmap). Asking at
    // once takes a NACK per gap; gathering 64 frames takes one, sent once 64 frames followed
    // the first gap.
    let lost = &[3, 10, 40];
    let (at_once, _) = gathering(0, 100, lost);
    assert_eq!(at_once.engines[1].stats().nack_frames, 3);
    let (gathered, _) = gathering(64, 100, lost);
    assert_eq!(gathered.engines[1].stats().nack_frames, 1);
    let root = gathered.engines[0].stats();
    assert_eq!(root.nacks_handled, 1);
    assert_eq!(root.repair_frames, 3, "each lost frame repaired once");
}

#[test]
fn gaps_that_fewer_frames_follow_are_asked_for_when_the_gathering_wait_ends() {
    // The stream ends 5 frames after its gap: the NACK goes at `nack_gather_wait`, and the
    // repair comes before the root's retransmission timer would have probed the receiver.
    let cfg = Config::new(7, Rank::new(1), 2);
    assert!(cfg.nack_gather_wait < cfg.rto);
    let (net, took) = gathering(64, 20, &[14]);
    assert_eq!(net.engines[1].stats().nack_frames, 1);
    let root = net.engines[0].stats();
    assert_eq!((root.repair_frames, root.ack_polls), (1, 0));
    assert!(took >= cfg.nack_gather_wait, "asked after {took:?}");
    assert!(took < cfg.rto, "asked after {took:?}");
}

#[test]
fn gathering_for_more_than_half_the_window_is_refused() {
    let mut c = Config::new(7, Rank::new(1), 2);
    c.window = 256;
    c.nack_gather = 128;
    assert!(Engine::new(c.clone()).is_ok());
    c.nack_gather = 129;
    assert_eq!(Engine::new(c).err(), Some(ConfigError::Gather(129, 256)));
}

#[test]
fn gathering_receivers_with_peer_repair_deliver_every_message_intact_under_loss() {
    let (net, _) = lossy_stream(
        8,
        |c| {
            c.peer_repair = true;
            c.window = 128;
            c.nack_gather = 32;
        },
        40,
    );
    assert_exact(&net, 0, 40, LOSSY_LEN, &[]);
    let peer_nacks: u64 = net.engines[1..].iter().map(|e| e.stats().peer_nacks).sum();
    assert!(peer_nacks > 0, "fellows were asked");
}

#[test]
fn a_fellow_asked_for_frames_across_the_bitmap_answers_what_it_lacks_in_one_reply() {
    // Member 1 holds frame 0 of root 0's stream only. Asked for frames 0, 1 and 17 (the
    // bitmap's second word), it repairs frame 0 and says in one reply that it lacks 1 and 17.
    let (mut e, now) = member_with_a_stream_of_root_0();
    let ask = Control::PeerNack {
        root: Rank::new(0),
        base: 0,
        missing: 0b11,
        unheld: false,
        more: vec![0b10],
    };
    let out = fellow_sends(&mut e, now, &ask, 1);
    let frames: Vec<_> = out
        .iter()
        .map(|f| Frame::new_checked(&f[..]).unwrap())
        .collect();
    let repairs: Vec<u32> = frames
        .iter()
        .filter(|f| f.kind() == Kind::Repair)
        .map(|f| f.seq())
        .collect();
    assert_eq!(repairs, vec![0]);
    let replies: Vec<Control> = frames
        .iter()
        .filter(|f| f.kind() == Kind::Nack)
        .map(|f| Control::parse(f).unwrap())
        .collect();
    assert_eq!(
        replies,
        vec![Control::PeerNack {
            root: Rank::new(0),
            base: 0,
            missing: 0b10,
            unheld: true,
            more: vec![0b10],
        }]
    );
}

/// What root `root` (rank 0 of group 7) transmits after rank `from` sends it `nack` (`ctr`:
/// `from`'s control counter): each frame's kind, sequence number and whether it went to
/// every member.
fn root_answers(
    root: &mut Engine,
    now: Instant,
    from: u16,
    nack: &Control,
    ctr: u32,
) -> Vec<(Kind, u32, bool)> {
    let mut buf = vec![0u8; 1500];
    let n = nack
        .emit(7, Rank::new(from), Rank::new(0), ctr, &mut buf)
        .unwrap();
    assert_eq!(root.handle_frame(now, &buf[..n]), Ok(()));
    let mut out = Vec::new();
    while let Some(t) = root.poll_transmit(now, &mut buf) {
        let f = Frame::new_checked(&buf[..t.len]).unwrap();
        out.push((f.kind(), f.seq(), f.flags().contains(Flags::BROADCAST)));
    }
    out
}

#[test]
fn nacks_that_crossed_a_rebroadcast_of_their_frame_are_combined_with_it() {
    // Frame 1 of root 0's stream is lost at members 1, 2 and 3 of 6. Members 1 and 2 ask for
    // it in one batch: the root re-broadcasts it. Member 3's NACK arrives right after, sent
    // before the re-broadcast reached it: the re-broadcast serves it, and the root sends
    // nothing more. Member 3 lost the re-broadcast too and asks again a retry interval
    // (`Config::nack_retry`) later: the root repairs it, to member 3 alone.
    let mut root = Engine::new(Config::new(7, Rank::new(0), 6)).unwrap();
    let retry = root.config().nack_retry;
    let mut now = Instant::now();
    root.bcast(now, message(4000, 9), Algorithm::Simple)
        .unwrap();
    let mut buf = vec![0u8; 1500];
    let mut data = 0;
    while root.poll_transmit(now, &mut buf).is_some() {
        data += 1;
    }
    assert_eq!(data, 3, "the message's three data frames");
    let nack = Control::Nack {
        base: 1,
        missing: 1,
        next: 1,
        more: vec![],
    };
    let mut buf = vec![0u8; 1500];
    for from in [1u16, 2] {
        let n = nack
            .emit(7, Rank::new(from), Rank::new(0), 1, &mut buf)
            .unwrap();
        assert_eq!(root.handle_frame(now, &buf[..n]), Ok(()));
    }
    let mut sent = Vec::new();
    while let Some(t) = root.poll_transmit(now, &mut buf) {
        let f = Frame::new_checked(&buf[..t.len]).unwrap();
        sent.push((f.kind(), f.seq(), f.flags().contains(Flags::BROADCAST)));
    }
    assert_eq!(sent, vec![(Kind::Repair, 1, true)], "one re-broadcast");
    now += Duration::from_micros(100);
    assert_eq!(
        root_answers(&mut root, now, 3, &nack, 1),
        vec![],
        "the NACK that crossed the re-broadcast"
    );
    now += retry;
    assert_eq!(
        root_answers(&mut root, now, 3, &nack, 2),
        vec![(Kind::Repair, 1, false)],
        "asked again a retry interval later"
    );
    assert_eq!(root.stats().rebroadcasts, 1);
    assert_eq!(root.stats().nacks_handled, 4);
}

#[test]
fn with_a_tree_a_parent_whose_repairs_are_lost_is_asked_again_not_the_root() {
    // Rank 7 asks its parent, rank 3. Rank 7 loses frame 3, and rank 3's first four repairs
    // of it (as under burst loss at rank 7, or answers queued behind data at its port): the
    // parent is asked until its repair comes, and the root, whose NACKs would otherwise grow
    // with the group, repairs nothing. (The root's retransmission timeout is long here, so
    // that it does not step in.)
    let mut net = Net::new(8, |c| {
        c.peer_repair = true;
        c.ack_tree = 2;
        c.nack_retry = Duration::from_millis(1);
        c.rto = Duration::from_millis(100);
    });
    let mut repairs_lost = 0;
    net.drop = Box::new(move |r, to| {
        if to != 7 || r.seq != 3 {
            return false;
        }
        match r.kind {
            Some(Kind::Data) => true,
            Some(Kind::Repair) if r.flags.contains(Flags::P2P) && repairs_lost < 4 => {
                repairs_lost += 1;
                true
            }
            _ => false,
        }
    });
    let m = message(150_000, 7);
    broadcast_to_all(&mut net, &m);
    for r in 1..8 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    assert_eq!(net.engines[0].stats().repair_frames, 0, "the root repaired");
    assert_eq!(
        net.engines[0].stats().nacks_handled,
        0,
        "NACKs into the root"
    );
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        5,
        "rank 3 repaired rank 7"
    );
    assert_eq!(net.engines[7].stats().peer_nacks, 5, "rank 7 asked rank 3");
}

#[test]
fn with_a_tree_the_end_of_a_stream_is_shown_to_every_member_at_the_first_timeout() {
    // Root 0 of 6, a tree of fan-out 2, sends one message of three frames and hears nothing
    // back. Members that lost the stream's last frame cannot tell, and a subtree's report
    // names one laggard only: at the first timeout the root re-broadcasts the last frame
    // besides its repairs, and not again within the retransmission timeout.
    let cfg = {
        let mut c = Config::new(7, Rank::new(0), 6);
        c.ack_tree = 2;
        c
    };
    let rto = cfg.rto;
    let mut root = Engine::new(cfg).unwrap();
    let now = Instant::now();
    root.bcast(now, message(4000, 3), Algorithm::Simple)
        .unwrap();
    let mut buf = vec![0u8; 1500];
    while root.poll_transmit(now, &mut buf).is_some() {}
    let sent = |root: &mut Engine, at: Instant| {
        root.handle_timeout(at);
        let mut buf = vec![0u8; 1500];
        let mut out = Vec::new();
        while let Some(t) = root.poll_transmit(at, &mut buf) {
            let f = Frame::new_checked(&buf[..t.len]).unwrap();
            out.push((f.kind(), f.seq(), f.flags().contains(Flags::BROADCAST)));
        }
        out
    };
    let first = sent(&mut root, now + rto);
    assert!(
        first.contains(&(Kind::Repair, 2, true)),
        "the last frame re-broadcast: {first:?}"
    );
    let soon = sent(&mut root, now + rto + rto / 2);
    assert!(
        !soon.contains(&(Kind::Repair, 2, true)),
        "not again within rto: {soon:?}"
    );
}

/// A receiver that posts no receive keeps complete messages for the receive to come, within
/// its pushed buffer's bytes and the receive queue's count: a root that sends empty or tiny
/// messages cannot make it hold more. Then the root waits (the paper's stopped broadcast),
/// and once receives are posted every message arrives, in order.
#[test]
fn an_unposted_receiver_holds_at_most_a_receive_queue_of_tiny_messages() {
    const QUEUE: usize = 16;
    const SENT: usize = 200;
    let mut net = Net::new(3, |c| {
        c.auto_post = false;
        c.pushed_buffer = 4096;
        c.recv_queue = QUEUE;
    });
    for r in 1..3 {
        for _ in 0..QUEUE {
            net.engines[r].post_recv(net.now, Rank::new(0), 64).unwrap();
        }
    }
    let msgs: Vec<Vec<u8>> = (0..SENT).map(|i| message(i % 2, i as u8)).collect();
    let mut queued = 0;
    let until = net.now + Duration::from_millis(200);
    while queued < SENT && net.now < until {
        while queued < SENT {
            match net.engines[0].bcast(net.now, msgs[queued].clone(), Algorithm::Simple) {
                Ok(_) => queued += 1,
                Err(SendError::QueueFull(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let step = net.now + Duration::from_millis(5);
        net.run(|n| n.now >= step);
    }
    // Each has its first receives' messages, and holds at most a receive queue's more.
    let held = |net: &Net| {
        net.engines[2]
            .receiver(Rank::new(0))
            .unwrap()
            .held_messages()
    };
    assert_eq!(net.delivered[2].len(), QUEUE);
    assert!(held(&net) <= QUEUE, "holds {} messages", held(&net));
    for _ in 0..(SENT / QUEUE + 1) {
        for r in 1..3 {
            for _ in net.engines[r].receiver(Rank::new(0)).unwrap().posted()..QUEUE {
                net.engines[r].post_recv(net.now, Rank::new(0), 64).unwrap();
            }
        }
        while queued < SENT {
            match net.engines[0].bcast(net.now, msgs[queued].clone(), Algorithm::Simple) {
                Ok(_) => queued += 1,
                Err(_) => break,
            }
        }
        let step = net.now + Duration::from_millis(20);
        net.run(|n| n.now >= step);
        assert!(held(&net) <= QUEUE, "holds {} messages", held(&net));
    }
    net.run(|n| n.delivered[1].len() == SENT && n.delivered[2].len() == SENT);
    for r in 1..3 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "rank {r}");
    }
}

/// Receiver 1 of root 0 (3 members, peer repair, an outbox of `outbox` frames), a bulk
/// receiver: an observer takes the stream's bytes and frames stay in the link. Rank 2 asked it
/// for a frame once (copies are on); then frames 1..=15 of a message came in a batch that has
/// not ended. Returns the receiver, the link's frames of the batch, and the instant.
fn in_link_fellow(outbox: usize) -> (Engine, Vec<Vec<u8>>, Instant) {
    let cfg = |rank| {
        let mut c = Config::new(7, Rank::new(rank), 3);
        c.peer_repair = true;
        c.outbox = outbox;
        c
    };
    let mut root = Engine::new(cfg(0)).unwrap();
    let mut rx = Engine::new(cfg(1)).unwrap();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    rx.observe(now, Rank::new(0), Box::new(|_: &Piece<'_>| {}));
    rx.leave_in_link(now, Rank::new(0));
    // The link's frames, kept where they were handed in until the batch ends.
    let mut link: Vec<Vec<u8>> = Vec::new();
    let mut send = |root: &mut Engine, rx: &mut Engine, link: &mut Vec<Vec<u8>>, m: Vec<u8>| {
        root.bcast(now, m, Algorithm::Simple).unwrap();
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            link.push(buf[..t.len].to_vec());
            assert_eq!(rx.handle_frame(now, link.last().unwrap()), Ok(()));
        }
    };
    // Frame 0, then a first request: copies (here, in the link) are on from now.
    send(&mut root, &mut rx, &mut link, vec![1; 8]);
    batch_end(&mut rx, now, &link);
    link.clear();
    let _ = ask_as_fellow(&mut rx, now, 0, 1);
    // The next message's frames: 15 of its 16 (the root's window holds frame 0 too).
    let per = root.config().max_payload();
    send(&mut root, &mut rx, &mut link, message(16 * per, 3));
    assert_eq!(link.len(), 15);
    (rx, link, now)
}

/// The batch of `link`'s frames ends at `rx`: all of them go back to the link.
fn batch_end(rx: &mut Engine, now: Instant, link: &[Vec<u8>]) {
    let frames: Vec<&[u8]> = link.iter().map(|f| &f[..]).collect();
    let all = Frames(&frames);
    rx.frames_done(
        now,
        BatchEnd {
            held: &all,
            leaving: &all,
        },
    );
}

/// Rank 2 asks `rx` for the 16 frames from 1 (`ctr`: its control counter).
fn ask_for_16(rx: &mut Engine, now: Instant, ctr: u32) {
    let nack = Control::PeerNack {
        root: Rank::new(0),
        base: 1,
        missing: 0xffff,
        unheld: false,
        more: vec![],
    };
    fellow_asks(rx, now, &nack, ctr);
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

/// What a batch's end does for a stream (frames consumed from the link, fellows served from
/// it) leaves the engine at once: a fellow's repairs served from the link are sent when the
/// batch ends, not when the stream next receives a frame or its timer fires (which at the end
/// of a stream may be the root's poll, a retransmission timeout later).
#[test]
fn repairs_served_from_the_link_leave_when_the_batch_ends() {
    let (mut rx, link, now) = in_link_fellow(4096);
    ask_for_16(&mut rx, now, 2);
    batch_end(&mut rx, now, &link);
    let out = drain(&mut rx, now);
    assert_eq!(repair_payloads(&out).len(), 15, "frames 1..=15 served");
}

/// Performs the misbehaviour: a fellow that asks, again and again within one batch of the
/// link, for frames a receiver left in the link (`Engine::leave_in_link`). Repairs it serves
/// from the link wait for the batch's end; they count against the outbox as the ones served
/// at once do, so that a batch of requests makes it hold at most `Config::outbox` of them,
/// not one per frame asked for in every request.
#[test]
fn repairs_served_from_the_link_are_bounded_by_the_outbox_whatever_a_fellow_asks() {
    const OUTBOX: usize = 32;
    const ASKS: u32 = 50;
    let (mut rx, link, now) = in_link_fellow(OUTBOX);
    for ctr in 2..2 + ASKS {
        ask_for_16(&mut rx, now, ctr);
    }
    batch_end(&mut rx, now, &link);
    let out = drain(&mut rx, now);
    let repairs = repair_payloads(&out).len();
    assert!(repairs > 0, "nothing served");
    assert!(
        repairs <= OUTBOX,
        "{repairs} repairs for {} frames asked ({ASKS} requests of 16): the outbox holds {OUTBOX}",
        16 * ASKS
    );
}

/// Performs the misbehaviour: a root that polls a receiver for its acknowledgement over and
/// over (each poll with a fresh control counter) while the receiver's link takes nothing (a
/// driver flushes only what the link takes; the rest waits in the engine). Each poll is
/// answered, but what waits to be sent is at most `Config::outbox` control frames: beyond it
/// a control frame is dropped and counted, as a link would lose it (acknowledgements,
/// requests and reports are all repeated by their timers). Once the link takes frames again
/// the next poll is answered.
#[test]
fn a_receiver_polled_faster_than_its_link_sends_holds_at_most_an_outbox_of_answers() {
    const OUTBOX: usize = 64;
    const POLLS: u32 = 1000;
    let mut rx = Engine::new({
        let mut c = Config::new(7, Rank::new(1), 2);
        c.outbox = OUTBOX;
        c
    })
    .unwrap();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut poll = |rx: &mut Engine, ctr: u32| {
        let n = Control::AckPoll
            .emit(7, Rank::new(0), Rank::new(1), ctr, &mut buf)
            .unwrap();
        assert_eq!(rx.handle_frame(now, &buf[..n]), Ok(()));
    };
    let bytes = rx.outbox_bytes();
    for ctr in 1..=POLLS {
        poll(&mut rx, ctr);
    }
    let out = drain(&mut rx, now);
    assert!(
        out.len() <= OUTBOX,
        "{} answers waited for {POLLS} polls: the outbox holds {OUTBOX}",
        out.len()
    );
    assert_eq!(rx.outbox_bytes(), bytes, "the outbox grew");
    assert_eq!(
        rx.stats().outbox_full,
        u64::from(POLLS) - out.len() as u64,
        "every answer dropped is counted"
    );
    poll(&mut rx, POLLS + 1);
    assert_eq!(drain(&mut rx, now).len(), 1, "answered again");
}

/// An outbox of no frames would drop every control frame (no acknowledgement would ever
/// leave, see `Stats::outbox_full`): such an engine is refused.
#[test]
fn an_engine_without_room_in_its_outbox_is_refused() {
    let mut c = Config::new(7, Rank::new(0), 2);
    c.outbox = 0;
    assert_eq!(Engine::new(c).err(), Some(ConfigError::Zero));
}
