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
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(self.segs.len());
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
