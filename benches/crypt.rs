//! What sealing and opening a full frame costs with each keyed format: AES-256-GCM (what a
//! keyed session encrypts with, `ethbcast_proto::FrameCipher`), ChaCha20-Poly1305 (the other AEAD
//! measured before AES-256-GCM was chosen, over the same payload with the header as associated
//! data), and the keyed BLAKE3 tag of an unencrypted keyed frame (`ethbcast_proto::seal`,
//! `Frame::verify`). docs/security.md gives the figures.
//!
//! Run with `cargo bench --bench crypt` (short measurement times: the build machine is shared).

use std::time::Duration;

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ethbcast_proto::Rank;
use ethbcast_proto::{seal, Flags, Frame, FrameCipher, Kind, Repr, HEADER_LEN, OVERHEAD, TAG_LEN};

/// Payload of a full frame at the default 1500-byte MTU, with a key's tag.
const FULL: usize = 1500 - OVERHEAD - TAG_LEN;
const KEY: [u8; 32] = [0x42; 32];

/// A data frame of a full payload as the engine emits it, with room for the tag.
fn frame() -> (Vec<u8>, usize) {
    let mut r = Repr::new(Kind::Data);
    r.group = 0x5eed;
    r.src = Rank::new(0);
    r.dst = Rank::BROADCAST;
    r.seq = 7;
    r.msg_len = 1 << 20;
    r.flags = Flags::BROADCAST | Flags::HEADER_CRC;
    let payload: Vec<u8> = (0..FULL).map(|i| (i * 31 + 7) as u8).collect();
    let mut v = vec![0u8; 1600];
    let n = r.emit(&payload, &mut v).unwrap();
    (v, n)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("crypt");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .throughput(Throughput::Bytes(FULL as u64));
    let (plain, n) = frame();
    let aes = FrameCipher::new(&KEY.into(), 0x5eed);
    let mut buf = plain.clone();
    g.bench_function("aes-256-gcm/seal", |b| {
        b.iter(|| {
            buf[..n].copy_from_slice(&plain[..n]);
            black_box(aes.seal(&mut buf, n).unwrap())
        })
    });
    let mut sealed = plain.clone();
    let len = aes.seal(&mut sealed, n).unwrap();
    let mut out = vec![0u8; 1600];
    g.bench_function("aes-256-gcm/open", |b| {
        b.iter(|| {
            let f = Frame::new_unchecked(black_box(&sealed[..len]));
            black_box(aes.open(&f, &mut out).is_some())
        })
    });
    let chacha = chacha20poly1305::ChaCha20Poly1305::new(&KEY.into());
    let nonce = [7u8; 12];
    g.bench_function("chacha20-poly1305/seal", |b| {
        b.iter(|| {
            let (header, rest) = buf.split_at_mut(HEADER_LEN);
            black_box(
                chacha
                    .encrypt_in_place_detached(&nonce.into(), header, &mut rest[..FULL])
                    .unwrap(),
            )
        })
    });
    let (header, rest) = buf.split_at_mut(HEADER_LEN);
    let tag = chacha
        .encrypt_in_place_detached(&nonce.into(), header, &mut rest[..FULL])
        .unwrap();
    let ciphertext = buf.clone();
    g.bench_function("chacha20-poly1305/open", |b| {
        b.iter(|| {
            out[..n].copy_from_slice(&ciphertext[..n]);
            let (header, rest) = out.split_at_mut(HEADER_LEN);
            black_box(
                chacha
                    .decrypt_in_place_detached(&nonce.into(), header, &mut rest[..FULL], &tag)
                    .is_ok(),
            )
        })
    });
    g.bench_function("blake3-tag/seal", |b| {
        b.iter(|| {
            buf[..n].copy_from_slice(&plain[..n]);
            black_box(seal(&KEY, &mut buf, n).unwrap())
        })
    });
    let mut tagged = plain.clone();
    let len = seal(&KEY, &mut tagged, n).unwrap();
    g.bench_function("blake3-tag/verify", |b| {
        b.iter(|| black_box(Frame::new_unchecked(black_box(&tagged[..len])).verify(&KEY)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
