//! The writer thread: it takes the stream's data from the protocol loop through a bounded
//! queue, writes (and, resumed, hashes) it into the output, and commits the output once the
//! trailer's count and digest hold, so that a slow output never stops the loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast::Key;

use crate::distribute::{Fatal, EXIT_FAILED};
use crate::transfer::{Data, DigestAlgo, Offer, StreamHasher};

use super::sink::{Guard, Sink, SinkHandle};

/// Messages of data in the writer's queue at most (about a megabyte each by default).
///
/// Why a queue: writing (and hashing) happens on its own thread so that a disk that pauses or
/// a `-O` command that reads in bursts does not stop the protocol loop, which must keep
/// acknowledging and asking for repairs. When the queue is full the loop waits for it: the
/// receiver then stops acknowledging, and the sender's shared buffer paces the transfer to
/// what this receiver drains (or, if it drains nothing for the sender's timeout, evicts it).
const WRITE_QUEUE: usize = 32;

/// What the protocol loop hands the writer thread.
pub(super) enum Job {
    /// `--resume`, at the header: find how many of the stream's first bytes (at most
    /// `limit`) the partial output holds and their digest (see [`Sink::hash_prefix`]; keyed
    /// under `key`, the transfer's [`offer_key`](crate::transfer::offer_key), when it has a
    /// group key), and tell the protocol loop through [`Writer::offer`].
    Offer {
        algo: DigestAlgo,
        key: Option<Key>,
        limit: u64,
    },
    /// The sender's data starts at this offset: the output keeps its first bytes up to there
    /// (0 unless resumed) and the writer goes on from them.
    Start(u64),
    Data(Data),
    /// Bytes of data the protocol thread wrote to the output itself (see [`super::direct`]).
    Direct(u64),
    /// The trailer, its digest checked already (unless the stream resumed, see
    /// [`Job::Start`]: then `digest` is the trailer's, which the writer checks against what
    /// the output holds): check the byte count, then commit the output.
    Verify {
        bytes: u64,
        digest: Option<[u8; 32]>,
    },
}

/// What the writer thread ends with.
#[derive(Clone)]
pub(super) struct Written {
    pub(super) result: Result<(), Fatal>,
    pub(super) bytes: u64,
    /// Resumed past 0: the digest of the output from its first byte, as the writer hashed it
    /// (the protocol loop's covers only what it received).
    pub(super) digest: Option<[u8; 32]>,
}

/// The writer thread and its queue.
pub(super) struct Writer {
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<Written>>,
    pub(super) handle: SinkHandle,
    done: Option<Written>,
    /// Set when the protocol loop gives up: the writer stops at its next job instead of
    /// writing out what is still queued.
    abandoned: Arc<AtomicBool>,
    /// Bytes the output took so far (see [`Counted`](super::Counted)).
    written: Arc<AtomicU64>,
    /// The answer to [`Job::Offer`]: bytes held and their digest.
    offer: Arc<Mutex<Option<Offer>>>,
}

/// How [`Writer::push`] ended.
pub(super) enum Pushed {
    /// The job is in the queue.
    Queued,
    /// The writer stopped (its error is in [`Writer::finish`]).
    Stopped,
    /// Ctrl-C (or SIGTERM) while waiting for room.
    Interrupted,
    /// The output took no data for the patience given while waiting for room.
    Stalled,
}

/// Why the output has not drained for `patience`.
pub(super) fn stalled(patience: Duration) -> Fatal {
    Fatal::new(
        EXIT_FAILED,
        format!(
            "the output took no data for {}: is the -O command reading its input?",
            crate::distribute::render_seconds(patience)
        ),
    )
}

impl Writer {
    pub(super) fn spawn(sink: Sink, written: Arc<AtomicU64>) -> Result<Writer, Fatal> {
        let handle = sink.handle();
        let (tx, rx) = sync_channel::<Job>(WRITE_QUEUE);
        let abandoned = Arc::new(AtomicBool::new(false));
        let give_up = abandoned.clone();
        let offer = Arc::new(Mutex::new(None));
        let offered = offer.clone();
        let counted = written.clone();
        let thread = std::thread::Builder::new()
            .name("ethbcast-writer".into())
            .spawn(move || {
                let mut sink = Guard(sink);
                let mut bytes = 0u64;
                // `--resume`: what the partial output holds (bytes, digest so far), and once
                // the stream resumed past 0, the digest of the output from its first byte.
                let mut held: Option<(u64, StreamHasher)> = None;
                let mut resumed: Option<StreamHasher> = None;
                // The header's digest algorithm (from the offer).
                let mut algo = DigestAlgo::Xxh3;
                let result = loop {
                    let job = rx.recv();
                    if give_up.load(Ordering::SeqCst) {
                        break Err(Fatal::new(EXIT_FAILED, "transfer ended early"));
                    }
                    match job {
                        Ok(Job::Offer { algo: a, key, limit }) => match sink
                            .0
                            .hash_prefix(a, key.as_ref(), limit)
                        {
                            Ok((n, h)) => {
                                *offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(Offer {
                                    held: n,
                                    digest: h.offer(),
                                });
                                held = Some((n, h.into_stream()));
                                algo = a;
                            }
                            Err(e) => break Err(e),
                        },
                        Ok(Job::Start(offset)) => {
                            if offset > 0 {
                                // The digest of the bytes kept: the offer's, or (the sender
                                // starts before the end of what this output holds) read again.
                                let h = match held.take() {
                                    Some((n, h)) if n == offset => Ok(h),
                                    Some(_) => match sink.0.hash_prefix(algo, None, offset) {
                                        Ok((n, h)) if n == offset => Ok(h.into_stream()),
                                        Ok((n, _)) => Err(Fatal::new(
                                            EXIT_FAILED,
                                            format!("the sender resumed at byte {offset}, the partial output holds {n}"),
                                        )),
                                        Err(e) => Err(e),
                                    },
                                    None => Err(Fatal::new(
                                        EXIT_FAILED,
                                        "the sender resumed a stream this receiver offered nothing of",
                                    )),
                                };
                                match h {
                                    Ok(h) => resumed = Some(h),
                                    Err(e) => break Err(e),
                                }
                            }
                            if let Err(e) = sink.0.resume_at(offset) {
                                break Err(e);
                            }
                            bytes = offset;
                            counted.fetch_add(offset, Ordering::Relaxed);
                        }
                        Ok(Job::Data(d)) => {
                            bytes += d.bytes().len() as u64;
                            if let Some(h) = resumed.as_mut() {
                                h.update(d.bytes());
                            }
                            if let Err(e) = sink.0.write(d.bytes()) {
                                break Err(e);
                            }
                        }
                        Ok(Job::Direct(n)) => bytes += n,
                        Ok(Job::Verify { bytes: b, digest }) => {
                            if b != bytes {
                                break Err(Fatal::new(
                                    EXIT_FAILED,
                                    format!(
                                        "integrity check failed: wrote {bytes} bytes, the sender sent {b} bytes"
                                    ),
                                ));
                            }
                            if let (Some(h), Some(d)) = (&resumed, digest) {
                                if h.finalize() != d {
                                    // Not a prefix of this stream after all: kept no longer.
                                    sink.0.discard();
                                    break Err(Fatal::new(
                                        EXIT_FAILED,
                                        format!(
                                            "integrity check failed: the output resumed from the partial file holds {}, the sender sent {}; the partial file is removed",
                                            algo.render(&h.finalize()),
                                            algo.render(&d)
                                        ),
                                    ));
                                }
                            }
                            break sink.0.commit();
                        }
                        // The protocol loop gave up: the guard discards the output.
                        Err(_) => break Err(Fatal::new(EXIT_FAILED, "transfer ended early")),
                    }
                };
                Written {
                    result,
                    bytes,
                    digest: resumed.map(|h| h.finalize()),
                }
            })
            .map_err(|e| Fatal::io(format!("cannot start the writer thread: {e}")))?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
            handle,
            done: None,
            abandoned,
            written,
            offer,
        })
    }

    /// Queues a job, waiting for room as long as the output takes data. Why not a blocking
    /// send: an output that stopped taking data (a `-O` command that does not read) would
    /// hold the protocol loop for good, deaf to Ctrl-C.
    pub(super) fn push(&mut self, job: Job, stop: &AtomicBool, patience: Duration) -> Pushed {
        let Some(tx) = self.tx.as_ref() else {
            return Pushed::Stopped;
        };
        let mut job = job;
        let mut seen = (self.written.load(Ordering::Relaxed), Instant::now());
        loop {
            match tx.try_send(job) {
                Ok(()) => return Pushed::Queued,
                Err(TrySendError::Disconnected(_)) => return Pushed::Stopped,
                Err(TrySendError::Full(j)) => job = j,
            }
            if stop.load(Ordering::SeqCst) {
                return Pushed::Interrupted;
            }
            let now = Instant::now();
            let w = self.written.load(Ordering::Relaxed);
            if w != seen.0 {
                seen = (w, now);
            } else if now.duration_since(seen.1) > patience {
                return Pushed::Stalled;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The answer to [`Job::Offer`], once the writer has it.
    pub(super) fn offer(&self) -> Option<Offer> {
        self.offer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Bytes the output took so far.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Gives the output up from the protocol loop: the temporary file is removed, the command
    /// killed, and the writer stops at its next job, even while it is stuck writing.
    pub(super) fn abandon(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
        self.handle.discard();
    }

    /// The writer stopped on its own (an error, or done after `Verify`).
    pub(super) fn stopped(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Closes the queue and waits for the writer. `None` if it did not end within `patience`
    /// (stuck writing): the output is then discarded from here. Later calls return the same.
    pub(super) fn finish(&mut self, patience: Duration) -> Option<Written> {
        if self.done.is_some() {
            return self.done.clone();
        }
        self.tx = None;
        let deadline = Instant::now() + patience;
        while !self.stopped() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !self.stopped() {
            self.handle.discard();
            return None;
        }
        self.done = self.thread.take()?.join().ok();
        self.done.clone()
    }
}
