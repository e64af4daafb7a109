//! What a host without the key can make a member allocate by speaking as its peers: nothing.
//!
//! The session's group id is in every frame and the members' MACs are on the segment, so a
//! host without the key can send frames that pass every check but the tag: from each peer's
//! MAC, for the group's streams and for every pair's channel. A member makes no receive
//! stream, point-to-point channel or receive for such a frame. Without a key, a member that
//! takes one rank's stream alone ([`MemberConfig::senders`]) makes nothing for another's.
//! Measured in bytes with a counting allocator (one measurement at a time: it counts every
//! thread's allocations, so the test harness's own bookkeeping of the other tests, a few
//! hundred bytes, may fall into a measurement: [`NOISE`] allows for it, far below the
//! megabytes of one receive stream or channel).

use std::sync::Mutex;
use std::time::Instant;

use ethbcast_proto::{
    pair_group, seal, Control, EngineConfig, Flags, FrameCipher, Kind, MacAddr, Member,
    MemberConfig, Rank, Repr, TAG_LEN,
};

use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// One measurement at a time.
static MEASURE: Mutex<()> = Mutex::new(());

/// Bytes the test harness may allocate meanwhile on its own threads.
const NOISE: usize = 16 << 10;

const GROUP: u32 = 0x5e55_1011;
const SIZE: u16 = 8;
const KEY: [u8; 32] = [0x4b; 32];
const WRONG: [u8; 32] = [0x4c; 32];

fn mac(i: u16) -> MacAddr {
    let [hi, lo] = i.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

/// Rank 1 of a streaming group of [`SIZE`] with the window of `ethbcast send/recv`.
fn member(key: Option<[u8; 32]>, senders: Option<Vec<Rank>>) -> (Member, Instant) {
    let now = Instant::now();
    let mut cfg = EngineConfig::new(GROUP, Rank::new(1), SIZE);
    cfg.window = 2048;
    cfg.key = key.map(Into::into);
    let mut mc = MemberConfig::new(cfg, (0..SIZE).map(mac).collect::<Vec<_>>());
    mc.prepost = 64;
    mc.senders = senders;
    (Member::new(now, mc).unwrap(), now)
}

/// [`data`], encrypted as a keyed member sends it (AES-256-GCM under `key`'s key of `group`).
fn encrypted(group: u32, src: Rank, dst: Rank, key: &[u8; 32]) -> Vec<u8> {
    let mut v = data(group, src, dst, None);
    let len = v.len();
    v.resize(len + TAG_LEN, 0);
    let n = FrameCipher::new(&(*key).into(), group)
        .seal(&mut v, len)
        .unwrap();
    v.truncate(n);
    v
}

/// The first data frame of a 1 GiB message of `src` in group `group`, sealed with `key`.
fn data(group: u32, src: Rank, dst: Rank, key: Option<&[u8; 32]>) -> Vec<u8> {
    let mut r = Repr::new(Kind::Data);
    r.group = group;
    r.src = src;
    r.dst = dst;
    r.flags = Flags::BROADCAST;
    r.msg_len = 1 << 30;
    let mut v = r.to_vec(&[0x5a; 1000]).unwrap();
    if let Some(k) = key {
        let len = v.len();
        v.resize(len + TAG_LEN, 0);
        let n = seal(k, &mut v, len).unwrap();
        v.truncate(n);
    }
    v
}

/// Bytes still allocated after `f` ran, beyond those before.
fn grown(f: impl FnOnce()) -> usize {
    let before = ALLOC.live_bytes();
    f();
    ALLOC.live_bytes().saturating_sub(before)
}

#[test]
fn group_frames_with_a_bad_tag_make_no_receive_stream_or_receive() {
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let (mut m, now) = member(Some(KEY), None);
    let bytes = grown(|| {
        for src in (0..SIZE).filter(|&r| r != 1) {
            for dst in [Rank::BROADCAST, Rank::new(1)] {
                m.handle_frame(
                    now,
                    mac(src),
                    &data(GROUP, Rank::new(src), dst, Some(&WRONG)),
                );
                m.handle_frame(now, mac(src), &data(GROUP, Rank::new(src), dst, None));
                let wrong = encrypted(GROUP, Rank::new(src), dst, &WRONG);
                m.handle_frame(now, mac(src), &wrong);
            }
        }
    });
    assert!(
        bytes < NOISE,
        "forged frames made the member allocate {bytes} bytes"
    );
    for src in 0..SIZE {
        assert!(
            m.engine().receiver(Rank::new(src)).is_none(),
            "a stream of rank {src}"
        );
    }
    assert_eq!(m.stats().accepted, 0);
    // The same frame sealed with the key is taken: the stream is made then; encrypted too.
    m.handle_frame(
        now,
        mac(0),
        &data(GROUP, Rank::new(0), Rank::BROADCAST, Some(&KEY)),
    );
    assert_eq!(m.stats().accepted, 1);
    assert!(m.engine().receiver(Rank::new(0)).is_some());
    m.handle_frame(
        now,
        mac(2),
        &encrypted(GROUP, Rank::new(2), Rank::BROADCAST, &KEY),
    );
    assert_eq!(m.stats().accepted, 2);
    assert!(m.engine().receiver(Rank::new(2)).is_some());
}

#[test]
fn channel_frames_with_a_bad_tag_make_no_point_to_point_channel() {
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let (mut m, now) = member(Some(KEY), None);
    let bytes = grown(|| {
        for peer in (0..SIZE).filter(|&r| r != 1) {
            let group = pair_group(GROUP, Rank::new(1), Rank::new(peer));
            let src = u16::from(peer > 1);
            m.handle_frame(
                now,
                mac(peer),
                &data(group, Rank::new(src), Rank::BROADCAST, Some(&WRONG)),
            );
            m.handle_frame(
                now,
                mac(peer),
                &data(group, Rank::new(src), Rank::BROADCAST, None),
            );
            let wrong = encrypted(group, Rank::new(src), Rank::BROADCAST, &WRONG);
            m.handle_frame(now, mac(peer), &wrong);
        }
    });
    assert!(
        bytes < NOISE,
        "forged frames made the member allocate {bytes} bytes"
    );
    assert_eq!(m.stats().accepted, 0);
    // Sealed with the key, the first frame of a channel is taken (and makes the channel).
    let grew = grown(|| {
        m.handle_frame(
            now,
            mac(0),
            &data(
                pair_group(GROUP, Rank::new(1), Rank::new(0)),
                Rank::new(0),
                Rank::BROADCAST,
                Some(&KEY),
            ),
        )
    });
    assert_eq!(m.stats().accepted, 1);
    assert!(grew > 0);
    // Encrypted with the key, too.
    let pair = pair_group(GROUP, Rank::new(1), Rank::new(2));
    m.handle_frame(
        now,
        mac(2),
        &encrypted(pair, Rank::new(1), Rank::BROADCAST, &KEY),
    );
    assert_eq!(m.stats().accepted, 2);
}

#[test]
fn without_a_key_a_member_makes_nothing_for_a_rank_whose_stream_it_does_not_take() {
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let (mut m, now) = member(None, Some(vec![Rank::new(0)]));
    let bytes = grown(|| {
        for src in 2..SIZE {
            m.handle_frame(
                now,
                mac(src),
                &data(GROUP, Rank::new(src), Rank::BROADCAST, None),
            );
            let group = pair_group(GROUP, Rank::new(1), Rank::new(src));
            m.handle_frame(
                now,
                mac(src),
                &data(group, Rank::new(1), Rank::BROADCAST, None),
            );
            // Polls of the stream it would have sent, which a member answers for its root.
            let polls = [
                Control::AckPoll,
                Control::PullPoll {
                    msg_id: 0,
                    designated: Rank::new(1),
                },
            ];
            for (i, poll) in polls.iter().enumerate() {
                let f = poll.to_vec(GROUP, Rank::new(src), Rank::new(1), 1 + i as u32);
                m.handle_frame(now, mac(src), &f);
            }
        }
    });
    assert!(
        bytes < NOISE,
        "a second rank's frames made the member allocate {bytes} bytes"
    );
    for src in 2..SIZE {
        assert!(
            m.engine().receiver(Rank::new(src)).is_none(),
            "a stream of rank {src}"
        );
    }
    assert_eq!(m.stats().accepted, 0);
    // The root's stream is taken.
    m.handle_frame(
        now,
        mac(0),
        &data(GROUP, Rank::new(0), Rank::BROADCAST, None),
    );
    assert_eq!(m.stats().accepted, 1);
    assert!(m.engine().receiver(Rank::new(0)).is_some());
}
