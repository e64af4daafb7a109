//! The join's decoder on its own: what is not a well-formed join message is dropped. Joins as
//! whole specifications run on the simulated switch (the `ethbcast` crate's tests/join.rs).

use std::time::Instant;

use super::*;

#[test]
fn join_messages_that_are_not_well_formed_are_ignored() {
    assert_eq!(Msg::decode(&[]), None);
    assert_eq!(Msg::decode(&[9, 1, 2]), None);
    assert_eq!(Msg::decode(&[1; 5]), None);
    let mut roster = Msg::Roster {
        nonce: 1,
        part: 0,
        parts: 1,
        entries: vec![(MacAddr([2; 6]), 3)],
    }
    .encode();
    assert!(Msg::decode(&roster).is_some());
    for m in [
        Msg::Challenge {
            nonce: 1,
            size: 3,
            coordinator: MacAddr([2, 0, 0, 0, 0, 9]),
            time: 77,
        },
        Msg::Hello {
            nonce: 1,
            member: 2,
            claim: 1,
            mac: MacAddr([2, 0, 0, 0, 0, 8]),
        },
        Msg::Confirm {
            nonce: 1,
            member: 2,
            mac: MacAddr([2, 0, 0, 0, 0, 8]),
        },
    ] {
        let mut b = m.encode();
        assert_eq!(Msg::decode(&b), Some(m));
        b.pop();
        assert_eq!(
            Msg::decode(&b),
            None,
            "a message without its whole MAC or time"
        );
    }
    roster.pop();
    assert_eq!(Msg::decode(&roster), None, "a truncated entry");
    let mut j = Join::new(
        JoinConfig {
            group: 7,
            mac: MacAddr([2, 0, 0, 0, 0, 0]),
            key: None,
            expect: Expect::Invited,
            max_payload: 1400,
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
