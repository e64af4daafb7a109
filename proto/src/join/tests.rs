//! The join's decoder on its own: what is not a well-formed join message is dropped. Joins as
//! whole specifications run on the simulated switch (the `ethbcast` crate's tests/join.rs).

use std::time::Instant;

use super::*;

#[test]
fn join_messages_that_are_not_well_formed_are_ignored() {
    assert_eq!(JoinMsg::decode(&[]), None);
    assert_eq!(JoinMsg::decode(&[9, 1, 2]), None);
    assert_eq!(JoinMsg::decode(&[1; 5]), None);
    let mut roster = JoinMsg::Roster {
        nonce: 1,
        part: 0,
        parts: 1,
        pdu: 1500,
        entries: vec![(MacAddr([2; 6]), 3)],
    }
    .encode();
    assert!(JoinMsg::decode(&roster).is_some());
    for m in [
        JoinMsg::Challenge {
            nonce: 1,
            size: 3,
            coordinator: MacAddr([2, 0, 0, 0, 0, 9]),
            time: 77,
        },
        JoinMsg::Hello {
            nonce: 1,
            member: 2,
            claim: Rank::new(1),
            mac: MacAddr([2, 0, 0, 0, 0, 8]),
            pdu: 9000,
        },
        JoinMsg::Confirm {
            nonce: 1,
            member: 2,
            mac: MacAddr([2, 0, 0, 0, 0, 8]),
        },
    ] {
        let mut b = m.encode();
        assert_eq!(JoinMsg::decode(&b), Some(m));
        b.pop();
        assert_eq!(
            JoinMsg::decode(&b),
            None,
            "a message without its whole MAC or time"
        );
    }
    roster.pop();
    assert_eq!(JoinMsg::decode(&roster), None, "a truncated entry");
    let mut j = Join::new(
        JoinConfig {
            group: 7,
            mac: MacAddr([2, 0, 0, 0, 0, 0]),
            key: None,
            expect: Expect::Invited,
            max_pdu: 1500,
        },
        Instant::now(),
        1,
    )
    .unwrap();
    for junk in [&b""[..], &[0u8; 7][..], &[0xff; 64][..]] {
        j.handle_frame(Instant::now(), MacAddr([2, 0, 0, 0, 0, 1]), junk);
    }
    assert!(j.take_result().is_none());
}

/// The unkeyed join of `mac` in group 7, its link carrying frames of `max_pdu`.
fn join_of(mac: MacAddr, expect: Expect, max_pdu: usize, now: Instant) -> Join {
    let cfg = JoinConfig {
        group: 7,
        mac,
        key: None,
        expect,
        max_pdu,
    };
    Join::new(cfg, now, 1).unwrap()
}

/// A join frame carrying `msg`, unsealed, as a coordinator would send it.
fn frame_of(msg: &JoinMsg) -> Vec<u8> {
    Control::Join { body: msg.encode() }.to_vec(7, NO_RANK, NO_RANK, 0)
}

#[test]
fn a_member_refuses_a_roster_whose_frames_its_link_cannot_carry() {
    let coordinator = MacAddr([2, 0, 0, 0, 0, 9]);
    let me = MacAddr([2, 0, 0, 0, 0, 1]);
    let now = Instant::now();
    let mut j = join_of(me, Expect::Invited, 1500, now);
    let challenge = JoinMsg::Challenge {
        nonce: 42,
        size: 2,
        coordinator,
        time: 1,
    };
    j.handle_frame(now, coordinator, &frame_of(&challenge));
    let mine = j.member_nonce;
    let roster = |pdu| JoinMsg::Roster {
        nonce: 42,
        part: 0,
        parts: 1,
        pdu,
        entries: vec![(coordinator, 5), (me, mine)],
    };
    // Larger than this member's MTU, or smaller than any link's: not an answer to its hello.
    for pdu in [9000, 1501, MIN_PDU - 1, 0] {
        j.handle_frame(now, coordinator, &frame_of(&roster(pdu)));
        assert!(j.take_result().is_none(), "a roster of {pdu}-byte frames");
    }
    j.handle_frame(now, coordinator, &frame_of(&roster(1400)));
    let joined = j.take_result().expect("joined").expect("no error");
    assert_eq!(joined.max_pdu, 1400);
    assert_eq!(joined.peers, vec![coordinator, me]);
}

#[test]
fn a_hello_that_offers_a_frame_smaller_than_any_link_carries_is_ignored() {
    let me = MacAddr([2, 0, 0, 0, 0, 0]);
    let other = MacAddr([2, 0, 0, 0, 0, 1]);
    let now = Instant::now();
    let first_come = Expect::FirstCome {
        receivers: 1,
        only: None,
    };
    let mut j = join_of(me, first_come, 9000, now);
    let nonce = j.nonce;
    let hello = |pdu| JoinMsg::Hello {
        nonce,
        member: 3,
        claim: NO_RANK,
        mac: other,
        pdu,
    };
    j.handle_frame(now, other, &frame_of(&hello(MIN_PDU - 1)));
    assert!(
        j.coord.as_ref().unwrap().roster.is_none(),
        "no roster from it"
    );
    j.handle_frame(now, other, &frame_of(&hello(1500)));
    let c = j.coord.as_ref().unwrap();
    assert_eq!(c.roster.as_ref().map(Vec::len), Some(2));
    assert_eq!(c.pdu, 1500, "the smaller of the two offers");
}

#[test]
fn a_settled_first_come_join_starts_with_the_receivers_heard_in_the_list_order() {
    let me = MacAddr([2, 0, 0, 0, 0, 0]);
    let list: Vec<MacAddr> = (1..=4).map(|i| MacAddr([2, 0, 0, 0, 0, i])).collect();
    let now = Instant::now();
    let expect = Expect::FirstCome {
        receivers: 4,
        only: Some(list.clone()),
    };
    let mut j = join_of(me, expect, 1500, now);
    let nonce = j.nonce;
    let hello = |mac| JoinMsg::Hello {
        nonce,
        member: 3,
        claim: NO_RANK,
        mac,
        pdu: 1500,
    };
    // Hosts 3 and 1 answer (in that order); 2 and 4 never do.
    j.handle_frame(now, list[2], &frame_of(&hello(list[2])));
    assert!(!j.settle(now, 3), "two held, three wanted");
    assert!(j.coord.as_ref().unwrap().roster.is_none());
    j.handle_frame(now, list[0], &frame_of(&hello(list[0])));
    assert!(j.coord.as_ref().unwrap().roster.is_none(), "four expected");
    assert!(j.settle(now, 2));
    let roster: Vec<MacAddr> = j
        .coord
        .as_ref()
        .unwrap()
        .roster
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(roster, vec![me, list[0], list[2]]);
    // A late answer changes nothing.
    j.handle_frame(now, list[1], &frame_of(&hello(list[1])));
    assert_eq!(j.coord.as_ref().unwrap().roster.as_ref().unwrap().len(), 3);
    // Any other join does not settle.
    let mut listed = join_of(me, Expect::List(vec![me, list[0]]), 1500, now);
    assert!(!listed.settle(now, 0));
}

#[test]
fn a_settled_first_come_join_without_a_list_takes_at_most_its_receivers() {
    let me = MacAddr([2, 0, 0, 0, 0, 0]);
    let now = Instant::now();
    let mut j = join_of(
        me,
        Expect::FirstCome {
            receivers: 3,
            only: None,
        },
        1500,
        now,
    );
    let nonce = j.nonce;
    assert!(!j.settle(now, 0), "nobody heard yet");
    let a = MacAddr([2, 0, 0, 0, 0, 7]);
    j.handle_frame(
        now,
        a,
        &frame_of(&JoinMsg::Hello {
            nonce,
            member: 3,
            claim: NO_RANK,
            mac: a,
            pdu: 1500,
        }),
    );
    assert!(j.settle(now, 1));
    assert_eq!(j.coord.as_ref().unwrap().roster.as_ref().unwrap().len(), 2);
}

#[test]
fn a_full_roster_part_sealed_or_not_fits_the_frame_size_it_was_cut_for() {
    let key = Key::from_bytes([3u8; 32]);
    for max_pdu in [576usize, 1000, 1400, 1427, 1500, 9000] {
        for keyed in [false, true] {
            let per = entries_per_part(max_pdu, keyed);
            let msg = JoinMsg::Roster {
                nonce: u64::MAX,
                part: 1,
                parts: 2,
                pdu: max_pdu as u16,
                entries: vec![(MacAddr([2, 0, 0, 0, 0, 1]), u64::MAX); per],
            };
            let frame = frame_of(&msg);
            let sent = seal(keyed.then_some(&key), &frame).unwrap();
            assert!(
                sent.len() <= max_pdu,
                "{per} entries make a {}-byte part for frames of {max_pdu} (keyed: {keyed})",
                sent.len()
            );
            // And no more than one entry of room is left unused.
            assert!(sent.len() + 14 > max_pdu || per == ENTRIES_PER_PART);
        }
    }
}

/// Without a key a challenge's time is unsealed: strangers claiming the largest time in every
/// place must not keep a later coordinator's challenge out.
#[test]
fn keyless_a_claimed_time_shuts_no_coordinator_out() {
    let me = MacAddr([2, 0, 0, 0, 0, 1]);
    let now = Instant::now();
    let mut j = join_of(me, Expect::Invited, 1500, now);
    for i in 0..MAX_CHALLENGES as u8 {
        let stranger = MacAddr([2, 0, 0, 0, 0x50, i]);
        let flood = JoinMsg::Challenge {
            nonce: 1000 + u64::from(i),
            size: 2,
            coordinator: stranger,
            time: u64::MAX,
        };
        j.handle_frame(now, stranger, &frame_of(&flood));
    }
    assert_eq!(j.challenges.len(), MAX_CHALLENGES);
    let real = MacAddr([2, 0, 0, 0, 0, 9]);
    let challenge = JoinMsg::Challenge {
        nonce: 42,
        size: 2,
        coordinator: real,
        time: 1,
    };
    j.handle_frame(now, real, &frame_of(&challenge));
    assert!(
        j.challenges.holds(real, 42),
        "the real coordinator's challenge was refused"
    );
    let mine = j.member_nonce;
    let roster = JoinMsg::Roster {
        nonce: 42,
        part: 0,
        parts: 1,
        pdu: 1500,
        entries: vec![(real, 5), (me, mine)],
    };
    j.handle_frame(now, real, &frame_of(&roster));
    let joined = j.take_result().expect("joined").expect("no error");
    assert_eq!(joined.peers, vec![real, me]);
}

/// A receiver pinned to one coordinator takes no other's challenge or roster.
#[test]
fn a_member_invited_by_one_coordinator_ignores_another() {
    let me = MacAddr([2, 0, 0, 0, 0, 1]);
    let real = MacAddr([2, 0, 0, 0, 0, 9]);
    let stranger = MacAddr([2, 0, 0, 0, 0, 0x66]);
    let now = Instant::now();
    let mut j = join_of(me, Expect::InvitedBy(real), 1500, now);
    let mine = j.member_nonce;
    let challenge = |coordinator, nonce| JoinMsg::Challenge {
        nonce,
        size: 2,
        coordinator,
        time: 1,
    };
    let roster = |coordinator, nonce| JoinMsg::Roster {
        nonce,
        part: 0,
        parts: 1,
        pdu: 1500,
        entries: vec![(coordinator, 5), (me, mine)],
    };
    j.handle_frame(now, stranger, &frame_of(&challenge(stranger, 7)));
    j.handle_frame(now, stranger, &frame_of(&roster(stranger, 7)));
    assert!(j.challenges.is_empty(), "a stranger's challenge held");
    assert!(j.take_result().is_none(), "joined a stranger's roster");
    j.handle_frame(now, real, &frame_of(&challenge(real, 8)));
    j.handle_frame(now, real, &frame_of(&roster(real, 8)));
    let joined = j.take_result().expect("joined").expect("no error");
    assert_eq!(joined.peers, vec![real, me]);
}
