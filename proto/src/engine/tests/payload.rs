//! Payload checks end to end, cache hints, and frames placed ahead into their messages.

use crate::engine::send::PUBLISH_AHEAD;
use crate::engine::{DropReason, Engine, EngineConfig, HardwareAlgorithm};
use crate::wire::{Flags, Frame, Repr};
use crate::{wire, Rank};

use super::{lose_once, message, root_frames, Kept, Net};
use crate::machine::BatchEnd;

/// One data frame of a 3000-byte broadcast from root 0 of `net`, its payload corrupted after
/// the root emitted it (as a switch's memory might, past every Ethernet FCS).
fn first_frame_corrupted(net: &mut Net, m: &[u8]) -> Vec<u8> {
    net.engines[0]
        .bcast(net.now, m.to_vec(), HardwareAlgorithm::Simple)
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
        Err(DropReason::BadMac)
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
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
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
fn hinting_net(tweak: impl Fn(&mut EngineConfig)) -> Net {
    HINTS.with(|h| h.borrow_mut().clear());
    Net::new(2, |c| {
        tweak(c);
        if c.rank == Rank::new(1) {
            c.prefetch = Some(record_hint);
        }
    })
}

#[test]
fn a_receiver_hints_where_the_frame_after_the_next_lands_in_its_message() {
    let mut net = hinting_net(|_| {});
    let per = net.engines[0].config().max_payload();
    // Five full frames and a short sixth.
    let m = message(5 * per + 100, 9);
    net.engines[0]
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
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
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
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
    let frames = root_frames(&mut net, &m, HardwareAlgorithm::Simple);
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
    let frames = root_frames(&mut net, &m, HardwareAlgorithm::Simple);
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
    let mut frames = root_frames(net, a, HardwareAlgorithm::Simple);
    frames.extend(root_frames(net, b, HardwareAlgorithm::Simple));
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
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
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

/// A gap found while frames behind an earlier gap wait in the link for the batch's end is
/// asked for at once, as it is without the link: frames that wait to be consumed are no gap,
/// and what is missing after them is still missing, not left to the NACK retry a round of
/// repairs later. Frames wait in the link whether or not a receive is posted for their
/// message (without one, they are not placed into it ahead).
#[test]
fn a_gap_found_while_frames_wait_in_the_link_is_asked_for_at_once() {
    for (in_link, posted) in [(false, true), (true, true), (false, false), (true, false)] {
        let mut net = Net::new(2, |c| c.auto_post = posted);
        let per = net.engines[0].config().max_payload();
        let frames = root_frames(&mut net, &message(8 * per, 9), HardwareAlgorithm::Simple);
        assert_eq!(frames.len(), 8);
        let now = net.now;
        let rx = &mut net.engines[1];
        if in_link {
            rx.leave_in_link(now, Rank::new(0));
        }
        // Each batch ends with every frame still held by the link.
        let batch = |rx: &mut Engine, seqs: &[usize]| {
            for &s in seqs {
                assert_eq!(rx.handle_frame(now, &frames[s]), Ok(()));
            }
            rx.frames_done(
                now,
                BatchEnd {
                    held: &Kept(&frames),
                    leaving: &Kept(&[]),
                },
            );
        };
        // Frame 2 is lost; 3 and 4 come behind the gap, which is asked for.
        batch(rx, &[0, 1, 3, 4]);
        assert_eq!(
            rx.stats().nack_frames,
            1,
            "in link: {in_link}, posted: {posted}"
        );
        // Its repair comes in one batch with frame 6: frame 5 is lost.
        batch(rx, &[2, 6]);
        assert_eq!(
            rx.stats().nack_frames,
            2,
            "the new gap waits for a retry (in link: {in_link}, posted: {posted})"
        );
        assert_eq!(
            rx.receiver(Rank::new(0)).map(|r| r.expected().get()),
            Some(5)
        );
    }
}
