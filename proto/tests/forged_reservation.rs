//! What forged frames can make a receiver allocate: no more than the data they place.
//!
//! A frame names its message's length (`msg_len`, up to `max_message`, 1 GiB by default), and
//! a receiver that writes out-of-order frames straight into their message (receives posted
//! automatically) begins a message for each. If every begun message reserved room for its
//! claimed length, one forged frame per slot of the window (2048 in `ethbcast send/recv`)
//! would reserve gigabytes for messages that never come. Only the message right after the one
//! in progress is reserved up front, and only up to what the window can place ahead (a
//! window's worth of payload, the size of the window's own slots): whatever lengths the frames
//! claim, they cost no more than that plus the data they place.
//!
//! One test in this binary: the counting allocator sees every thread's allocations.

use std::time::Instant;

use ethbcast_proto::{Engine, EngineConfig, Kind, Rank, Repr};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[test]
fn forged_message_lengths_reserve_no_more_than_the_data_placed() {
    let window = 2048;
    let mut cfg = EngineConfig::new(7, Rank::new(1), 2);
    cfg.window = window;
    cfg.auto_post = true;
    let mut rx = Engine::new(cfg).unwrap();
    let now = Instant::now();
    let before = ALLOC.live_bytes();
    // Sequence 0 never comes; every later slot of the window gets one byte of a new message
    // that claims the largest length accepted.
    let mut placed = 0usize;
    for seq in 1..window as u32 {
        let mut r = Repr::new(Kind::Data);
        r.group = 7;
        r.src = Rank::new(0);
        r.dst = Rank::BROADCAST;
        r.seq = seq;
        r.msg_id = seq - 1;
        r.msg_len = 1 << 30;
        r.offset = 0;
        rx.handle_frame(now, &r.to_vec(&[0x5a]).unwrap()).unwrap();
        placed += 1;
    }
    let grown = ALLOC.live_bytes() - before;
    // The receive stream itself (window slots, pushed buffer) is allocated on the first frame.
    let stream = rx.receiver(Rank::new(0)).unwrap().heap_bytes();
    let other = grown.saturating_sub(stream);
    // The next message's buffer, reserved as far as frames can be placed ahead.
    let ahead = window * rx.config().slot_payload();
    assert!(
        other < ahead + (1 << 20) + 64 * placed,
        "{} frames carrying {placed} bytes made the receiver allocate {} MiB beyond its {} MiB stream",
        window - 1,
        other >> 20,
        stream >> 20
    );
}
