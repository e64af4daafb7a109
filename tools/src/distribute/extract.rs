//! `recv --extract DIR`: a receiver's output for a tree (`send -i DIR`, or any tar stream).
//!
//! The stream goes through a pipe to a thread that unpacks it as it comes ([`crate::tree::unpack`])
//! into a fresh directory next to DIR ([`Staging`]); once the trailer's digest matched, the
//! writer commits: the pipe is closed, the unpacker's result awaited, and the directory synced
//! and renamed to DIR. A refused entry, an archive that is not one, a full disk: the receiver
//! fails with the unpacker's reason, and the directory it unpacked into is removed. The bytes
//! the pipe took count as the output's progress (see `recv::Counted`), so an unpacker stuck on
//! a disk that stopped is a stalled output, as a `-O` command that stopped reading is.

use std::io::{BufWriter, ErrorKind, PipeWriter, Write};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::recv::{write_err, Counted};
use super::{Fatal, EXIT_FAILED};
use crate::tree::{self, Staging, UnpackError, Unpacked};

/// The pipe to the unpacker: a megabyte, a message of the sender's (the kernel may cap it).
const PIPE_SIZE: usize = 1 << 20;

/// A tree being unpacked (see the module docs).
pub(super) struct Extract {
    staging: Staging,
    /// The pipe's writing end (from the header on), and the unpacker reading the other.
    pipe: Option<BufWriter<Counted<PipeWriter>>>,
    thread: Option<JoinHandle<Result<Unpacked, UnpackError>>>,
    /// The unpacker was started (it runs once: after it stopped, nothing starts it again).
    started: bool,
    written: Arc<AtomicU64>,
}

impl Extract {
    /// Checks DIR (missing, or an empty directory) and makes the directory to unpack into,
    /// before the join: a target that cannot take the tree fails at once (exit 4).
    pub(super) fn open(dst: &Path, written: &Arc<AtomicU64>) -> Result<Extract, Fatal> {
        Staging::check_target(dst).map_err(|e| Fatal::io(format!("--extract {e}")))?;
        let staging = Staging::create(dst, rand::random).map_err(Fatal::io)?;
        Ok(Extract {
            staging,
            pipe: None,
            thread: None,
            started: false,
            written: written.clone(),
        })
    }

    /// The directory unpacked into, to remove from another thread (see `SinkHandle`).
    pub(super) fn staging(&self) -> &Path {
        &self.staging.path
    }

    /// Starts the unpacker (at the header: no thread waits for a transfer that never begins).
    pub(super) fn start(&mut self) -> Result<(), Fatal> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let (r, w) = std::io::pipe().map_err(|e| Fatal::io(format!("cannot make a pipe: {e}")))?;
        let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
        let root = self.staging.path.clone();
        let thread = std::thread::Builder::new()
            .name("ethbcast-unpack".into())
            .spawn(move || tree::unpack(r, &root))
            .map_err(|e| Fatal::io(format!("cannot start the unpacking thread: {e}")))?;
        self.pipe = Some(BufWriter::with_capacity(
            PIPE_SIZE,
            Counted::new(w, &self.written, true),
        ));
        self.thread = Some(thread);
        Ok(())
    }

    /// Hands `data` to the unpacker. If it stopped (a refused entry, a full disk), its reason.
    pub(super) fn write(&mut self, data: &[u8]) -> Result<(), Fatal> {
        self.start()?;
        let Some(pipe) = self.pipe.as_mut() else {
            return Err(Fatal::new(EXIT_FAILED, "the unpacker stopped"));
        };
        match pipe.write_all(data) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.stopped(e)),
        }
    }

    /// Why the pipe refused a write: the unpacker's error when it stopped with one.
    fn stopped(&mut self, e: std::io::Error) -> Fatal {
        self.pipe = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(u))) => unpack_error(u, &self.staging),
            Some(Err(_)) => Fatal::new(EXIT_FAILED, "the unpacking thread panicked"),
            _ => write_err(&format!("the tree into {}", self.staging.shown()), e),
        }
    }

    /// All data is in and its digest matched: waits for the unpacker, then syncs the tree and
    /// renames it to DIR.
    pub(super) fn commit(mut self) -> Result<Unpacked, Fatal> {
        self.start()?;
        let flushed = match self.pipe.take() {
            Some(mut p) => p.flush(),
            None => Ok(()),
        };
        let r = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Ok(u))) => match flushed {
                Ok(()) => self.staging.commit().map(|()| u).map_err(Fatal::io),
                Err(e) => Err(write_err(&self.staging.shown(), e)),
            },
            Some(Ok(Err(u))) => Err(unpack_error(u, &self.staging)),
            Some(Err(_)) => Err(Fatal::new(EXIT_FAILED, "the unpacking thread panicked")),
            None => Err(Fatal::new(EXIT_FAILED, "the unpacker stopped")),
        };
        if r.is_err() {
            self.staging.remove();
        }
        r
    }

    /// Gives the tree up: the unpacker stops at the end of the pipe, and what it unpacked is
    /// removed.
    pub(super) fn abort(mut self) {
        drop(self.pipe.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.staging.remove();
    }
}

/// A receiver's error for the unpacker's: a refused entry or a stream that is no archive fail
/// the receiver (exit 1), a full disk or another error of the file system is one of I/O
/// (exit 4).
fn unpack_error(e: UnpackError, staging: &Staging) -> Fatal {
    match &e {
        UnpackError::Refused { .. } => Fatal::new(EXIT_FAILED, e.to_string()),
        UnpackError::Archive(_) => Fatal::new(
            EXIT_FAILED,
            format!("{e} (--extract takes a tree, `send -i DIR`, or a tar stream)"),
        ),
        UnpackError::Io { name, source } => {
            let what = format!("tree entry \"{name}\" into {}", staging.dst.display());
            match source.kind() {
                ErrorKind::StorageFull => {
                    write_err(&what, std::io::Error::from(ErrorKind::StorageFull))
                }
                _ => Fatal::io(format!("{e} (unpacking into {})", staging.shown())),
            }
        }
    }
}
