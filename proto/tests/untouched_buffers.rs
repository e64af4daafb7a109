//! Buffers a member never fills cost it no memory: the retransmission buffer of a member that
//! never broadcasts, and the window copies of a stream whose frames arrive in order. Each is
//! one zeroed block that the allocator maps as zero pages, resident only once written. (When
//! every slot was its own small allocation, the heap headers touched every page: `ethbcast
//! send` to 8 receivers faulted in 51 MiB at start, each receiver 13 MiB.)
//!
//! One test in this binary: it reads the process's resident set size.

use std::time::Instant;

use ethbcast_proto::{Engine, EngineConfig, Flags, Kind, Rank, Repr};

/// Resident bytes of this process (`/proc/self/statm`, second field, in pages).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_member_pays_for_the_buffers_it_uses_not_for_their_size() {
    let mut cfg = EngineConfig::new(1, Rank::new(1), 2);
    cfg.window = 16384;
    let size = cfg.window * cfg.slot_payload();
    let now = Instant::now();
    let before = resident();
    let mut member = Engine::new(cfg.clone()).unwrap();
    member.post_recv(now, Rank::new(0), 1 << 20).unwrap();
    // One whole message, its frames in order.
    let payload = [7u8; 1000];
    for i in 0..8u32 {
        let mut r = Repr::new(Kind::Data);
        r.group = cfg.group;
        r.src = Rank::new(0);
        r.dst = Rank::BROADCAST;
        r.seq = i;
        r.msg_len = 8000;
        r.offset = i * 1000;
        if i == 7 {
            r.flags |= Flags::LAST;
        }
        member
            .handle_frame(now, &r.to_vec(&payload).unwrap())
            .unwrap();
    }
    let got = member.poll_event();
    assert!(got.is_some(), "the message was delivered");
    let grown = resident().saturating_sub(before);
    assert!(
        grown < size / 4,
        "a receiver with two {} MiB buffers it never filled grew by {} MiB",
        size >> 20,
        grown >> 20
    );
    drop(member);
}
