//! Writing a stream's data to its output straight from the link's frames.
//!
//! Why: a receiver that assembles each megabyte message in a buffer, only to write the buffer
//! out, copies every byte once more than it must. Over a mapped ring the frames stay in the
//! ring until the batch they came in is handed back (`Link::holds_frames`), so the data can go
//! from there to the output in one `writev` per batch. Measured on the test-bed (8 receivers
//! of 256 MiB into `/dev/null`, no loss): the receivers' CPU fell from 0.85-0.99 s to
//! 0.58-0.72 s (three transfers each), their `memmove` samples from 487 to 63.
//!
//! How: the engine keeps no more than [`KEEP`] bytes of a message (`Stream::keep_at_most`):
//! the data messages are handed to the observer, [`Direct`], alone. It hashes each piece as
//! it comes (the digest the trailer is checked against), and notes where the piece's data is
//! when it stays there until the batch ends (`Piece::held`): in a frame the ring holds (the
//! one handed in, or one that came behind a gap and waited in the ring, which retains a
//! window's worth of frames: `Stream::leave_in_link`), or in the engine's copy of a frame.
//! Other pieces (consumed outside a batch) it copies into a side buffer. When the batch ends
//! (`Observe::frames_done`), it finds its notes in the memory named and writes everything,
//! in stream order, with `writev`. Only an output whose writes never wait qualifies, `/dev/null` (see
//! `Sink::direct`): the protocol thread writes with the ring's slots held, and a write that
//! waits (a pipe's reader, the page cache's dirty throttling) lets the ring overflow. Files,
//! pipes and commands keep the writer thread and its queue.

use std::fs::File;
use std::io::{IoSlice, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::transfer::{Budget, PieceDigest};
use ethbcast::{Held, Observe, Piece};

use super::recv::{lock, write_err, Hashed};
use super::{Fatal, EXIT_FAILED};

/// Bytes of a message the engine keeps in direct mode: the stream's header (19 bytes), its
/// trailer (41) and an abort's reason fit; a data message of the default chunk (1 MiB) is
/// observed only. A data message this short is kept as well, and ignored by the loop: the
/// observer writes all data.
pub(super) const KEEP: usize = 64 << 10;

/// Pieces per `writev` at most (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Where a piece of data waits to be written.
#[derive(Debug, Clone, Copy)]
enum Seg {
    /// Where it stays until the batch ends (`Piece::held`): its address and length, found
    /// again in the memory `frames_done` names.
    Held { at: usize, len: usize },
    /// In the side buffer, from `start`.
    Side { start: usize, len: usize },
}

/// Why the observer stopped writing, for the protocol loop: the first error (the output
/// refused a write, or the data went past a limit). What it wrote, the output's byte count
/// says (`took`).
pub(super) type Failure = Arc<Mutex<Option<Fatal>>>;

/// The observer that writes a stream's data to its output (see the module's doc).
pub(super) struct Direct {
    digest: PieceDigest,
    hashed: Arc<Mutex<Hashed>>,
    failure: Failure,
    /// The output (a duplicate of the sink's descriptor: same file, same offset).
    out: File,
    /// The output's name, for errors.
    what: String,
    max_bytes: Option<u64>,
    budget: Option<Budget>,
    segs: Vec<Seg>,
    side: Vec<u8>,
    /// The room of the last batch's `writev` list, kept empty between batches so that a batch
    /// allocates none (see [`reuse`]).
    iov: Vec<IoSlice<'static>>,
    /// Bytes the output took (the count the protocol loop watches).
    took: Arc<AtomicU64>,
    failed: bool,
}

impl Direct {
    /// An observer writing to `out` (named `what`), at most `max_bytes` of data, sharing its
    /// digest in `hashed` and why it stopped in `failure`, counting what the output took in
    /// `took`.
    pub(super) fn new(
        out: File,
        what: String,
        max_bytes: Option<u64>,
        hashed: Arc<Mutex<Hashed>>,
        failure: Failure,
        took: Arc<AtomicU64>,
    ) -> Direct {
        Direct {
            digest: PieceDigest::new(),
            hashed,
            failure,
            out,
            what,
            max_bytes,
            budget: None,
            segs: Vec::new(),
            side: Vec::new(),
            iov: Vec::new(),
            took,
            failed: false,
        }
    }

    fn fail(&mut self, e: Fatal) {
        self.failed = true;
        self.segs.clear();
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
    }

    /// Whether `n` more data bytes are within the header's total and `--max-bytes`.
    fn admit(&mut self, n: usize) -> Result<(), Fatal> {
        if self.budget.is_none() {
            // Data is hashed (and so handed here) only after a header.
            let announced = self.digest.announced().unwrap_or(None);
            let b = Budget::new(announced, self.max_bytes)
                .map_err(|e| Fatal::new(EXIT_FAILED, e.to_string()))?;
            self.budget = Some(b);
        }
        let b = self.budget.as_mut().expect("just set");
        b.take(n as u64)
            .map_err(|e| Fatal::new(EXIT_FAILED, e.to_string()))
    }

    /// Writes the noted pieces, in order, from `memory` and the side buffer.
    fn write_out(&mut self, memory: &dyn Held) -> Result<(), Fatal> {
        let mut slices: Vec<IoSlice<'_>> = reuse(std::mem::take(&mut self.iov));
        let r = self.write_segs(memory, &mut slices);
        self.iov = reuse(slices);
        r
    }

    /// [`Direct::write_out`] with `slices`, an empty list to fill.
    fn write_segs<'a>(
        &'a self,
        memory: &'a dyn Held,
        slices: &mut Vec<IoSlice<'a>>,
    ) -> Result<(), Fatal> {
        slices.reserve(self.segs.len());
        for seg in &self.segs {
            let bytes = match *seg {
                Seg::Side { start, len } => &self.side[start..start + len],
                Seg::Held { at, len } => memory.find(at, len).ok_or_else(|| {
                    Fatal::new(
                        EXIT_FAILED,
                        "internal error: received data is no longer where the engine said it stays",
                    )
                })?,
            };
            slices.push(IoSlice::new(bytes));
        }
        for chunk in slices.chunks_mut(IOV_MAX) {
            let mut rest = chunk;
            while !rest.is_empty() {
                let n = (&self.out)
                    .write_vectored(rest)
                    .map_err(|e| write_err(&self.what, e))?;
                if n == 0 {
                    return Err(write_err(
                        &self.what,
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ));
                }
                self.took.fetch_add(n as u64, Ordering::Relaxed);
                IoSlice::advance_slices(&mut rest, n);
            }
        }
        Ok(())
    }
}

/// An empty list of slices of any lifetime in `v`'s room: the standard library collects a
/// vector's own iterator, mapped to a type of the same size and alignment, into the same
/// allocation (the test `a_batch_allocates_nothing_once_the_lists_have_grown` checks that it
/// still does). With `v` emptied first no slice outlives what it borrowed.
fn reuse<'b>(mut v: Vec<IoSlice<'_>>) -> Vec<IoSlice<'b>> {
    v.clear();
    v.into_iter().map(|_| IoSlice::new(&[])).collect()
}

impl Observe for Direct {
    fn piece(&mut self, p: &Piece<'_>) {
        let data = self.digest.piece_data(p);
        if p.offset + p.bytes.len() == p.msg_len {
            // Shared once a message (see `Hashed`).
            *lock(&self.hashed) = Hashed::of(&self.digest);
        }
        if data.is_empty() || self.failed {
            return;
        }
        if let Err(e) = self.admit(data.len()) {
            self.fail(e);
            return;
        }
        if p.held {
            self.segs.push(Seg::Held {
                at: data.as_ptr() as usize,
                len: data.len(),
            });
        } else {
            let start = self.side.len();
            self.side.extend_from_slice(data);
            match self.segs.last_mut() {
                Some(Seg::Side { len, .. }) => *len += data.len(),
                _ => self.segs.push(Seg::Side {
                    start,
                    len: data.len(),
                }),
            }
        }
    }

    fn frames_done(&mut self, memory: &dyn Held) {
        if self.segs.is_empty() || self.failed {
            return;
        }
        match self.write_out(memory) {
            Ok(()) => {
                self.segs.clear();
                self.side.clear();
            }
            Err(e) => self.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::{DigestAlgo, Msg};
    use ethbcast::Frames;
    use ethbcast_sys::alloc::CountingAlloc;
    use std::io::Read;

    /// A `Direct` writing to a new file in the temporary directory, and the file's path.
    fn direct_to_file(tag: &str) -> (Direct, std::path::PathBuf) {
        let path =
            std::env::temp_dir().join(format!("ethbcast-direct-{tag}-{}", std::process::id()));
        let out = File::create(&path).expect("create the output");
        let d = Direct::new(
            out,
            path.display().to_string(),
            None,
            Arc::new(Mutex::new(Hashed::default())),
            Arc::new(Mutex::new(None)),
            Arc::new(AtomicU64::new(0)),
        );
        (d, path)
    }

    /// The stream's header message, consumed outside a batch.
    fn header(d: &mut Direct, total: u64) {
        let h = Msg::Header {
            total: Some(total),
            chunk: 1 << 20,
            digest: DigestAlgo::Xxh3,
        }
        .encode();
        d.piece(&Piece {
            msg_id: 0,
            msg_len: h.len(),
            offset: 0,
            bytes: &h,
            held: false,
        });
    }

    /// Hands `frames` in as the held pieces of data message 1 (of `msg_len` bytes, its first
    /// byte the message type), starting at `offset`, and ends the batch.
    fn batch(d: &mut Direct, frames: &[&[u8]], offset: usize, msg_len: usize) {
        let mut at = offset;
        for &f in frames {
            d.piece(&Piece {
                msg_id: 1,
                msg_len,
                offset: at,
                bytes: f,
                held: true,
            });
            at += f.len();
        }
        d.frames_done(&Frames(frames));
    }

    fn slices(b: &[Vec<u8>]) -> Vec<&[u8]> {
        b.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn a_batch_allocates_nothing_once_the_lists_have_grown() {
        const FRAMES: usize = 200;
        const PAYLOAD: usize = 1460;
        let msg_len = 1 + 3 * FRAMES * PAYLOAD + 1;
        let (mut d, path) = direct_to_file("alloc");
        header(&mut d, (msg_len - 1) as u64);
        // The data message's type byte, then three batches of frames of distinct bytes.
        let frame = |b: usize, i: usize| -> Vec<u8> {
            (0..PAYLOAD).map(|k| (b * 7 + i * 13 + k) as u8).collect()
        };
        let mut first: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(0, i)).collect();
        first.insert(0, vec![b'D']);
        batch(&mut d, &slices(&first), 0, msg_len);
        let rest: Vec<Vec<Vec<u8>>> = (1..3)
            .map(|b| (0..FRAMES).map(|i| frame(b, i)).collect())
            .collect();
        let (second, third) = (slices(&rest[0]), slices(&rest[1]));
        let before = CountingAlloc::thread_allocations();
        batch(&mut d, &second, 1 + FRAMES * PAYLOAD, msg_len);
        batch(&mut d, &third, 1 + 2 * FRAMES * PAYLOAD, msg_len);
        let during = CountingAlloc::thread_allocations() - before;
        assert!(d.failure.lock().unwrap().is_none(), "the writes failed");
        assert_eq!(during, 0, "allocations in two batches of {FRAMES} frames");
        // What was written is every frame's payload, in order, once.
        let mut want: Vec<u8> = first[1..].concat();
        want.extend(rest.iter().flat_map(|b| b.concat()));
        let mut got = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut got))
            .expect("read the output");
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the output differs from the frames' payloads");
        assert_eq!(d.took.load(Ordering::Relaxed), want.len() as u64);
    }
}
