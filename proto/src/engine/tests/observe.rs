//! Observers: the bytes a receiver consumes, in order, once; the keep limit; frames left in
//! the link.

use std::time::{Duration, Instant};

use crate::engine::{
    Engine, EngineConfig, EngineEvent, HardwareAlgorithm, Message, Observe, Piece,
};
use crate::{machine, Rank};

use super::{broadcast_all, frames_of, lossy, message, Net};

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
            let mut c = EngineConfig::new(7, Rank::new(1), 2);
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
            if let EngineEvent::Delivered(Message { msg_id, data, .. }) = ev {
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
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
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
        .bcast(now, small.clone(), HardwareAlgorithm::PushPull)
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

/// Receivers that leave frames in a link that keeps them (`Engine::leave_in_link`) and observe
/// nothing: the end of each batch still reaches their streams, so the frames behind a gap and
/// the copies kept for fellows, which wait in the link, are consumed or served from there or
/// copied when they leave it, and every message is delivered once, in order, intact, whether
/// the link keeps more frames than a gap lasts or so few (4) that most leave while waiting.
#[test]
fn frames_left_in_the_link_without_an_observer_are_consumed_at_the_end_of_each_batch() {
    for keep in [4096, 4] {
        let mut net = holding_net(11);
        net.retain = Some(keep);
        let now = net.now;
        for r in 1..4 {
            net.engines[r].leave_in_link(now, Rank::new(0));
            assert!(net.engines[r].wants_frames_done(), "rank {r}");
        }
        // Messages of one frame, mostly, and some of several.
        let msgs: Vec<Vec<u8>> = (0..80)
            .map(|i| message(if i % 7 == 0 { 9_000 } else { 100 + i * 13 }, i as u8))
            .collect();
        broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
        assert!(net.lost > 0, "the test lost nothing");
        let want: Vec<(Rank, u64, Vec<u8>)> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| (Rank::new(0), i as u64, m.clone()))
            .collect();
        for r in 1..4 {
            assert_eq!(net.delivered[r], want, "keeping {keep}: rank {r}");
        }
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
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
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
