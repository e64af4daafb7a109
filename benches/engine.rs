//! Micro-benchmarks of the hot paths: wire encode/decode, the EQA buffer, and the sans-IO
//! engine at a receiver (in-order data) and at the root (ACK handling, fresh data out, a
//! message queued from a slice).
//!
//! Run with `cargo bench --bench engine`. Measurement times are kept short (the build machine
//! is shared); pass criterion options after `--` for longer runs, e.g.
//! `cargo bench --bench engine -- --measurement-time 10 wire/`.
//!
//! Every input that the compiler could see through goes through `black_box`, and benches that
//! change state either rebuild it outside the timed section (`iter_batched_ref`, whose inputs
//! are also dropped outside it) or reset it with the clock stopped (`iter_custom`), so the same
//! thing is measured on every iteration.

use std::time::{Duration, Instant};

use criterion::{
    black_box, criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput,
};
use ethbcast::StreamOptions;
use ethbcast_proto::{
    Dest, Engine, EngineConfig, Eqa, Flags, Frame, HardwareAlgorithm, Kind, Rank, Repr, Seq,
};

/// Payload of a full frame at the default 1500-byte MTU.
const FULL: usize = 1460;
/// Message size of the receiver stream benchmark.
const MIB: usize = 1 << 20;
/// Setups per timed batch in `iter_batched_ref`: enough to amortise the clock reads, few
/// enough that the engines stay small in memory and warm in cache.
const BATCH: BatchSize = BatchSize::NumIterations(16);

fn short(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

/// The header of a data fragment in the middle of a 1 MiB message.
fn data_repr() -> Repr {
    Repr {
        kind: Some(Kind::Data),
        flags: Flags::BROADCAST,
        group: 7,
        src: Rank::new(0),
        dst: Rank::BROADCAST,
        seq: 12345,
        msg_id: 3,
        msg_len: MIB as u32,
        offset: 4 * FULL as u32,
        bitmap: 0,
        aux: 1,
    }
}

/// Frame encode (`Repr::emit`: header, payload copy, CRC32C) and decode
/// (`Frame::new_checked`: length, version, CRC32C, geometry; then `Repr::parse`).
fn wire_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    short(&mut g);
    for len in [64usize, FULL] {
        let repr = data_repr();
        let data = payload(len);
        let mut buf = vec![0u8; Repr::frame_len(len)];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("encode", len), &len, |b, _| {
            b.iter(|| {
                let n = black_box(&repr)
                    .emit(black_box(&data), black_box(&mut buf[..]))
                    .expect("buffer is large enough");
                black_box(n)
            })
        });
        let frame = repr.to_vec(&data).expect("fits");
        g.bench_with_input(BenchmarkId::new("decode", len), &len, |b, _| {
            b.iter(|| {
                let f = Frame::new_checked(black_box(&frame[..])).expect("valid frame");
                black_box(Repr::parse(&f));
                black_box(f.payload().len())
            })
        });
    }
    g.finish();
}

/// `Eqa::publish` of one full frame, then the cumulative ACK of it by each of `n` destinations
/// (the slot is released and the tail advances on the last one). The buffer ends every
/// iteration empty, so iterations are identical apart from the ring index.
fn eqa_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("eqa/publish_release");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    let data = payload(FULL);
    for n in [1u16, 8, 64] {
        let mut e = Eqa::new(
            16,
            FULL,
            (1..=n).map(Rank::new),
            64,
            Duration::from_millis(4),
        );
        let repr = data_repr();
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                let seq = e
                    .publish(black_box(repr), black_box(&data))
                    .expect("buffer is empty at the start of every iteration");
                for r in 1..=n {
                    black_box(e.ack(black_box(Rank::new(r)), seq + 1));
                }
                debug_assert_eq!(e.tail(), e.head());
            })
        });
    }
    g.finish();
}

/// The data frames (wire bytes, in order) that a real root engine broadcasts for one
/// `len`-byte simple broadcast from root 0 to one receiver, driven to completion; with
/// `end_to_end` as `ethbcast send` makes them (a CRC over the header only, the payload left to
/// the transfer's digest).
fn record_stream(len: usize, end_to_end: bool) -> Vec<Vec<u8>> {
    let mut now = Instant::now();
    let config = |rank| {
        let mut cfg = EngineConfig::new(1, rank, 2);
        cfg.end_to_end = end_to_end;
        cfg
    };
    let mut root = Engine::new(config(Rank::new(0))).expect("valid config");
    let mut peer = Engine::new(config(Rank::new(1))).expect("valid config");
    root.bcast(now, payload(len), HardwareAlgorithm::Simple)
        .expect("queue empty");
    let mut buf = vec![0u8; 1500];
    let mut frames = Vec::new();
    for _ in 0..100_000 {
        let mut moved = false;
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            moved = true;
            let pdu = &buf[..t.len];
            let f = Frame::new_checked(pdu).expect("root emits valid frames");
            if f.kind() == Kind::Data {
                assert_eq!(f.flags().contains(Flags::HEADER_CRC), end_to_end);
                frames.push(pdu.to_vec());
            }
            let _ = peer.handle_frame(now, pdu);
        }
        while let Some(t) = peer.poll_transmit(now, &mut buf) {
            moved = true;
            let _ = root.handle_frame(now, &buf[..t.len]);
        }
        if root.is_idle() && !moved {
            break;
        }
        if !moved {
            // Let the coalesced ACK of the tail of the message go out.
            now += Duration::from_millis(1);
            peer.handle_timeout(now);
            root.handle_timeout(now);
        }
    }
    assert!(root.is_idle(), "the recording broadcast completed");
    assert_eq!(
        frames.len(),
        len.div_ceil(FULL),
        "one data frame per 1460 bytes"
    );
    assert!(matches!(
        peer.poll_event(),
        Some(ethbcast_proto::EngineEvent::Delivered(ethbcast_proto::Message { data, .. })) if data.len() == len
    ));
    frames
}

fn receiver() -> Engine {
    Engine::new(EngineConfig::new(1, Rank::new(1), 2)).expect("valid config")
}

/// A receiver configured as `ethbcast recv`'s, for the frames of `record_stream(_, true)`: a
/// stream member's configuration ([`StreamOptions::config`]: the cache hint, messages held for
/// fellows, the payload left to the end-to-end digest) with the tool's defaults (a 2048-frame
/// window, an acknowledgement every 512 frames, requests gathered over a quarter window).
fn bulk_receiver() -> Engine {
    let opts = StreamOptions {
        group_id: 1,
        window: 2048,
        ack_every: 512,
        nack_gather: 512,
        end_to_end: true,
        ..StreamOptions::default()
    };
    Engine::new(opts.config(Rank::new(1), 2)).expect("valid config")
}

/// `frames` in the order a receiver behind 1 % loss takes them: every hundredth frame comes
/// 300 frames late (a repair after about 3 ms at 1 Gbit/s), or last if the message ends
/// before; so nearly every frame arrives behind a gap, as on a lossy segment.
fn behind_gaps(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut order: Vec<(usize, &Vec<u8>)> = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let at = if i % 100 == 50 { i + 300 } else { i };
        order.push((at, f));
    }
    // Stable: a late frame comes after the frame that took its place.
    order.sort_by_key(|&(at, _)| at);
    order.into_iter().map(|(_, f)| f.clone()).collect()
}

/// A receiver engine consuming the data frames of a 1 MiB message from root 0:
/// `handle_frame` per frame (CRC check, the copy into the message, coalesced ACKs, delivery
/// on the last). One iteration is one frame; when the stream is used up the receiver is
/// replaced with the clock stopped, so the mix of frames is always that of a whole message.
/// `in_order`: as sent; `behind_gaps`: as after 1 % loss (see [`behind_gaps`]).
fn receiver_benches(c: &mut Criterion) {
    let frames = record_stream(MIB, false);
    let bulk = record_stream(MIB, true);
    let late = behind_gaps(&bulk);
    let mut g = c.benchmark_group("engine/receiver");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    type Case<'a> = (&'a str, &'a [Vec<u8>], fn() -> Engine);
    let cases: [Case<'_>; 3] = [
        ("in_order_data_frame_1MiB_msg", &frames, receiver),
        ("bulk_in_order_data_frame_1MiB_msg", &bulk, bulk_receiver),
        ("bulk_behind_gaps_data_frame_1MiB_msg", &late, bulk_receiver),
    ];
    for (name, frames, make) in cases {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let now = Instant::now();
                let mut rx = make();
                let mut next = 0usize;
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let run = (frames.len() - next).min(left as usize);
                    let start = Instant::now();
                    for pdu in &frames[next..next + run] {
                        let r = rx.handle_frame(black_box(now), black_box(pdu));
                        debug_assert!(r.is_ok());
                        black_box(r.is_ok());
                    }
                    total += start.elapsed();
                    next += run;
                    left -= run as u64;
                    if next == frames.len() {
                        assert_eq!(rx.stats().delivered, 1, "the message was delivered");
                        black_box(rx.poll_event());
                        rx = make();
                        next = 0;
                    }
                }
                total
            })
        });
    }
    g.finish();
}

const ROOT_SIZE: u16 = 9; // root 0 and 8 destinations

/// A root of 9 members with a 32-frame simple broadcast queued, of which the first `sent`
/// frames have been transmitted (the buffer holds 16).
fn root_with(sent: usize) -> Engine {
    let now = Instant::now();
    let mut root =
        Engine::new(EngineConfig::new(1, Rank::new(0), ROOT_SIZE)).expect("valid config");
    root.bcast(now, payload(32 * FULL), HardwareAlgorithm::Simple)
        .expect("queue empty");
    let mut buf = vec![0u8; 1500];
    for _ in 0..sent {
        root.poll_transmit(now, &mut buf).expect("data to send");
    }
    root
}

fn ack(from: Rank, next: u32) -> Vec<u8> {
    Repr {
        kind: Some(Kind::Ack),
        group: 1,
        src: from,
        dst: Rank::new(0),
        seq: next,
        ..Repr::default()
    }
    .to_vec(&[])
    .expect("fits")
}

/// The root: `handle_frame` of one ACK, and `poll_transmit` of one fresh data frame.
fn root_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine/root");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    let now = Instant::now();

    // 16 frames outstanding to 8 destinations; rank 1 acknowledges the first one: its cursor
    // moves 0 -> 1, the slot keeps 7 references, the tail does not move.
    let a = ack(Rank::new(1), 1);
    g.bench_function("ack_advances_one_cursor", |b| {
        b.iter_batched_ref(
            || root_with(16),
            |root| {
                let r = root.handle_frame(black_box(now), black_box(&a));
                debug_assert!(r.is_ok());
                black_box(r.is_ok())
            },
            BATCH,
        )
    });

    // Ranks 1..=7 have acknowledged frame 0; rank 8's ACK is the last reference: the slot is
    // freed, the tail advances and the next fragment of the queued message is published.
    let last = ack(Rank::new(8), 1);
    g.bench_function("ack_frees_a_slot", |b| {
        b.iter_batched_ref(
            || {
                let mut root = root_with(16);
                for r in 1..8 {
                    root.handle_frame(now, &ack(Rank::new(r), 1))
                        .expect("valid ack");
                }
                assert_eq!(root.sender().eqa().tail(), Seq::new(0));
                root
            },
            |root| {
                let r = root.handle_frame(black_box(now), black_box(&last));
                debug_assert!(r.is_ok());
                debug_assert_eq!(root.sender().eqa().tail(), Seq::new(1));
                black_box(r.is_ok())
            },
            BATCH,
        )
    });

    // A published, never-sent frame goes out: header + 1460 bytes + CRC32C into the caller's
    // buffer, and the retransmission timers of the 8 destinations are armed.
    g.throughput(Throughput::Bytes(FULL as u64));
    g.bench_function("poll_transmit_fresh_data", |b| {
        b.iter_batched_ref(
            || (root_with(0), vec![0u8; 1500]),
            |(root, buf)| {
                let t = root.poll_transmit(black_box(now), black_box(&mut buf[..]));
                debug_assert!(matches!(t, Some(t) if t.dst == Dest::All));
                black_box(t)
            },
            BATCH,
        )
    });
    g.finish();
}

/// A root queues a 16 KiB message it holds in a slice (what `Group::bcast_into`, the C ABI
/// and the interposer do), into an empty window: its 12 frames are published at once.
/// `copied_then_lent`: the slice copied into a reused buffer, which is then lent
/// (`Engine::bcast_from`); `borrowed`: published from the slice (`Engine::bcast_slice`).
fn root_queue_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine/root_queue_16KiB");
    short(&mut g);
    const LEN: usize = 16 * 1024;
    g.throughput(Throughput::Bytes(LEN as u64));
    let now = Instant::now();
    let msg = payload(LEN);
    let fresh = || {
        (
            Engine::new(EngineConfig::new(1, Rank::new(0), ROOT_SIZE)).expect("valid config"),
            Vec::with_capacity(LEN),
        )
    };
    g.bench_function("copied_then_lent", |b| {
        b.iter_batched_ref(
            fresh,
            |(root, spare)| {
                spare.extend_from_slice(black_box(&msg));
                let r = root.bcast_from(black_box(now), spare, HardwareAlgorithm::Simple);
                black_box(r.is_ok())
            },
            BATCH,
        )
    });
    g.bench_function("borrowed", |b| {
        b.iter_batched_ref(
            fresh,
            |(root, spare)| {
                let r = root.bcast_slice(
                    black_box(now),
                    black_box(&msg),
                    spare,
                    HardwareAlgorithm::Simple,
                );
                debug_assert!(spare.capacity() == LEN, "nothing copied");
                black_box(r.is_ok())
            },
            BATCH,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = wire_benches, eqa_benches, receiver_benches, root_benches, root_queue_benches
}
criterion_main!(benches);
