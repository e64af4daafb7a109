//! Gathering gaps into one NACK, fellows answering across the bitmap, NACKs combined with a
//! re-broadcast, and the end of a stream with a tree.

use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineConfig, HardwareAlgorithm};
use crate::wire::{Control, Flags, Frame, Kind, Repr};
use crate::{ConfigError, Rank};

use super::{
    assert_exact, broadcast_to_all, fellow_sends, lossy_stream, member_with_a_stream_of_root_0,
    message, Net, LOSSY_LEN,
};

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
        .bcast(net.now, message(len, 3), HardwareAlgorithm::Simple)
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
    let cfg = EngineConfig::new(7, Rank::new(1), 2);
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
    let mut c = EngineConfig::new(7, Rank::new(1), 2);
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
    // (`EngineConfig::nack_retry`) later: the root repairs it, to member 3 alone.
    let mut root = Engine::new(EngineConfig::new(7, Rank::new(0), 6)).unwrap();
    let retry = root.config().nack_retry;
    let mut now = Instant::now();
    root.bcast(now, message(4000, 9), HardwareAlgorithm::Simple)
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
        let mut c = EngineConfig::new(7, Rank::new(0), 6);
        c.ack_tree = 2;
        c
    };
    let rto = cfg.rto;
    let mut root = Engine::new(cfg).unwrap();
    let now = Instant::now();
    root.bcast(now, message(4000, 3), HardwareAlgorithm::Simple)
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
