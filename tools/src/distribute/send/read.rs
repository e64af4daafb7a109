//! The sender's input: a file (which can start where every receiver's offer allows), standard
//! input or a pipe, or a directory packed as a tar stream; read a message at a time on a thread
//! of its own, which also computes the stream's digest.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver};

use ethbcast::Key;

use crate::transfer::{DigestAlgo, Offer, PrefixHasher, StreamHasher};
use crate::tree::TreeReader;

pub(super) enum Block {
    /// Where the data starts (the reader's first block), and the receiver (index in the
    /// offers) whose offer did not match the input, if one did not.
    Start(u64, Option<usize>),
    Data(Vec<u8>),
    /// The end of the input, with the digest of all of it.
    Eof([u8; 32]),
    Err(std::io::Error),
}

/// The sender's input.
pub(super) enum Input {
    /// A regular file: the stream can start at an offset (see [`resume_point`]).
    File(File),
    /// Standard input, a pipe, a device: read from its first byte.
    Stream(Box<dyn Read + Send>),
    /// A directory: packed into a tar stream as it is read (see [`crate::tree`]), from its
    /// first byte; the packing starts with the data, not at the join.
    Tree(PathBuf),
}

/// Where the data of a file starts, given the receivers' offers (see [`Offer`]): the smallest
/// offset any receiver holds if every offer's digest is that of the file's bytes before it
/// (keyed under `offer_key`, the transfer's [`offer_key`](crate::transfer::offer_key), when
/// it has a group key), else 0; with the stream digest of the bytes before the start, and the
/// file positioned there. The second value is the index of an offer that did not match, if
/// one did not.
fn resume_point(
    f: &mut File,
    algo: DigestAlgo,
    offer_key: Option<&Key>,
    offers: &[Offer],
) -> std::io::Result<(u64, StreamHasher, Option<usize>)> {
    use std::io::{Seek, SeekFrom};
    let mut points: Vec<u64> = offers.iter().map(|o| o.held).collect();
    points.sort_unstable();
    points.dedup();
    let mut h = PrefixHasher::new(algo, offer_key);
    let mut pos = 0u64;
    let mut at_start: Option<PrefixHasher> = None;
    let mut refused = None;
    let mut buf = vec![0u8; 1 << 20];
    for &p in points.iter().take_while(|&&p| p > 0) {
        while pos < p {
            let want = usize::try_from(p - pos)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = match f.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            pos += n as u64;
        }
        let d = h.offer();
        // Held past the input's end, or other bytes: nobody resumes.
        refused = offers
            .iter()
            .position(|o| o.held == p && (pos < p || o.digest != d));
        if refused.is_some() {
            break;
        }
        at_start.get_or_insert_with(|| h.clone());
    }
    let start = match (points.first(), at_start, refused) {
        (Some(&s), Some(h), None) if s > 0 => Some((s, h.into_stream())),
        _ => None,
    };
    let (offset, h) = start.unwrap_or_else(|| (0, StreamHasher::new(algo)));
    f.seek(SeekFrom::Start(offset))?;
    Ok((offset, h, refused))
}

/// Reads `msg` bytes at a time (each buffer starts with the `D` type byte) on a thread, which
/// also computes the stream digest (off the thread that drives the link, where every cycle
/// is a frame not sent). A file waits for the receivers' offers first (on `offers`) and
/// starts where they allow ([`resume_point`]); the first block says where.
pub(super) fn reader(
    input: Input,
    msg: usize,
    algo: DigestAlgo,
    offer_key: Option<Key>,
    offers: Receiver<Vec<Offer>>,
    spent: Receiver<Vec<u8>>,
) -> Receiver<Block> {
    let (tx, rx) = sync_channel(2);
    std::thread::spawn(move || {
        let (mut input, mut hasher): (Box<dyn Read + Send>, _) = match input {
            Input::File(mut f) => {
                let Ok(offers) = offers.recv() else {
                    return;
                };
                match resume_point(&mut f, algo, offer_key.as_ref(), &offers) {
                    Ok((offset, h, refused)) => {
                        if tx.send(Block::Start(offset, refused)).is_err() {
                            return;
                        }
                        (Box::new(f), h)
                    }
                    Err(e) => {
                        let _ = tx.send(Block::Err(e));
                        return;
                    }
                }
            }
            Input::Stream(r) => {
                if tx.send(Block::Start(0, None)).is_err() {
                    return;
                }
                (r, StreamHasher::new(algo))
            }
            Input::Tree(dir) => {
                let r = match TreeReader::spawn(&dir) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Block::Err(e));
                        return;
                    }
                };
                if tx.send(Block::Start(0, None)).is_err() {
                    return;
                }
                (Box::new(r), StreamHasher::new(algo))
            }
        };
        read_blocks(&mut input, msg, &mut hasher, &tx, &spent);
    });
    rx
}

/// The reader's loop (see [`reader`]), from where `input` stands: each block is read into a
/// buffer from `spent` (given back by the engine, see [`Transfer::give_back`](super::Transfer::give_back)), or a new one
/// when none is there.
fn read_blocks(
    input: &mut Box<dyn Read + Send>,
    msg: usize,
    hasher: &mut StreamHasher,
    tx: &std::sync::mpsc::SyncSender<Block>,
    spent: &Receiver<Vec<u8>>,
) {
    loop {
        // Read into spare capacity: zeroing every buffer first cost the sender more CPU than
        // hashing it.
        let mut buf = spent
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(msg + 1));
        buf.clear();
        buf.push(b'D');
        if let Err(e) = input.by_ref().take(msg as u64).read_to_end(&mut buf) {
            let _ = tx.send(Block::Err(e));
            return;
        }
        let n = buf.len();
        let eof = n < msg + 1;
        hasher.update(&buf[1..]);
        if n > 1 && tx.send(Block::Data(buf)).is_err() {
            return;
        }
        if eof {
            let _ = tx.send(Block::Eof(hasher.finalize()));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read_blocks, resume_point, Block};
    use crate::transfer::{offer_key, DigestAlgo, Offer, StreamHasher};
    use ethbcast::Key;
    use std::io::{Read, Seek};

    /// A buffer the engine gave back is where the reader reads its next block: the block's
    /// bytes are the input's, in a data message, whatever the buffer held before; without one
    /// the reader allocates, and the stream's digest is the same either way.
    #[test]
    fn the_reader_reads_into_the_buffers_given_back() {
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 13 + i / 5) as u8).collect();
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let (spent_tx, spent_rx) = std::sync::mpsc::channel();
        let mut old = Vec::with_capacity(1001);
        old.extend_from_slice(&[0xAA; 700]);
        let at = old.as_ptr();
        spent_tx.send(old).unwrap();
        let mut input: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(data.clone()));
        let mut hasher = StreamHasher::new(DigestAlgo::Xxh3);
        read_blocks(&mut input, 1000, &mut hasher, &tx, &spent_rx);
        drop(tx);
        let blocks: Vec<Block> = rx.iter().collect();
        let mut whole = StreamHasher::new(DigestAlgo::Xxh3);
        whole.update(&data);
        match &blocks[..] {
            [Block::Data(a), Block::Data(b), Block::Data(c), Block::Eof(d)] => {
                assert_eq!(a.as_ptr(), at, "the first block in the buffer given back");
                assert_ne!(b.as_ptr(), at);
                assert_eq!(a[0], b'D');
                assert_eq!(&a[1..], &data[..1000]);
                assert_eq!(&b[1..], &data[1000..2000]);
                assert_eq!(&c[1..], &data[2000..]);
                assert_eq!(*d, whole.finalize());
            }
            _ => panic!("three data blocks and the end expected"),
        }
    }

    #[test]
    fn a_file_starts_at_the_smallest_offer_only_if_every_offer_matches_it() {
        let path = std::env::temp_dir().join(format!("ethbcast-resume-{}", std::process::id()));
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let digest = |n: usize| {
            let mut h = StreamHasher::new(DigestAlgo::Blake3);
            h.update(&data[..n]);
            h.finalize()
        };
        let held = |n: usize| Offer {
            held: n as u64,
            digest: digest(n),
        };
        let mut wrong = held(2_500_000);
        wrong.digest[3] ^= 1;
        let past_the_end = Offer {
            held: 3_000_001,
            digest: digest(3_000_000),
        };
        for (offers, start, refused) in [
            (vec![], 0, None),
            (vec![held(0), held(1000)], 0, None),
            (vec![held(1_200_000)], 1_200_000, None),
            (
                vec![held(2_500_000), held(1_200_000), held(2_500_000)],
                1_200_000,
                None,
            ),
            (vec![held(3_000_000)], 3_000_000, None),
            (vec![held(1_200_000), wrong], 0, Some(1)),
            (vec![past_the_end, held(1000)], 0, Some(0)),
        ] {
            let mut f = std::fs::File::open(&path).unwrap();
            let (at, h, why) = resume_point(&mut f, DigestAlgo::Blake3, None, &offers).unwrap();
            assert_eq!((at, why), (start, refused), "{offers:?}");
            // The digest so far is of the bytes before the start, and the file stands there.
            assert_eq!(h.finalize(), digest(start as usize), "{offers:?}");
            assert_eq!(f.stream_position().unwrap(), start);
            let mut rest = Vec::new();
            f.read_to_end(&mut rest).unwrap();
            assert!(rest == data[start as usize..]);
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The attack: a local user who can write a receiver's partial file fills it with bytes
    /// that are not the input's but have the same XXH3 digest as its first bytes; that receiver
    /// then offers the input's own XXH3 digest. With a group key the sender checks offers under
    /// the keyed digest (`offer_key`), so that offer (and one keyed under the group key itself,
    /// or under another group's) is refused and the transfer starts at 0; the keyed digest of
    /// the input's bytes is taken. Without a key (`--insecure`) offers stay under the header's
    /// algorithm.
    #[test]
    fn with_a_key_an_offer_is_taken_only_under_the_keyed_digest() {
        let path = std::env::temp_dir().join(format!("ethbcast-forged-{}", std::process::id()));
        let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 17 + i / 5) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let key = Key::from_bytes([0x5a; 32]);
        let other = Key::from_bytes([0xa5; 32]);
        let held = 1_200_000;
        let prefix = &data[..held];
        for algo in [DigestAlgo::Xxh3, DigestAlgo::Blake3] {
            let mut h = StreamHasher::new(algo);
            h.update(prefix);
            let plain = h.finalize();
            let offer = |digest: [u8; 32]| {
                vec![Offer {
                    held: held as u64,
                    digest,
                }]
            };
            let start = |k: Option<&Key>, offers: &[Offer]| {
                let mut f = std::fs::File::open(&path).unwrap();
                let (at, h, why) =
                    resume_point(&mut f, algo, k.map(offer_key).as_ref(), offers).unwrap();
                assert_eq!(f.stream_position().unwrap(), at);
                (at, h.finalize(), why)
            };
            let refused = (0, StreamHasher::new(algo).finalize(), Some(0));
            // Without a key: the header's digest, as before.
            assert_eq!(
                start(None, &offer(plain)),
                (held as u64, plain, None),
                "{algo:?}"
            );
            // With one: the forger's digest, and digests under keys other than the offer key.
            assert_eq!(
                start(Some(&key), &offer(plain)),
                refused,
                "{algo:?}: forged"
            );
            let under = |k: &Key| *blake3::keyed_hash(k, prefix).as_bytes();
            assert_eq!(start(Some(&key), &offer(under(&key))), refused, "{algo:?}");
            let theirs = under(&offer_key(&other));
            assert_eq!(start(Some(&key), &offer(theirs)), refused, "{algo:?}");
            // The keyed digest of the input's first bytes: resumed there, and the stream
            // digest goes on from theirs under the header's algorithm.
            let good = under(&offer_key(&key));
            assert_eq!(
                start(Some(&key), &offer(good)),
                (held as u64, plain, None),
                "{algo:?}"
            );
        }
        let _ = std::fs::remove_file(&path);
    }
}
