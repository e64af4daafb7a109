//! Packing a directory into a tar stream (see the module docs of [`super`]).

use std::fs::{File, Metadata};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use tar::{Builder, EntryType, Header};

use super::{pax_time, show};

/// What [`pack`] put in the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packed {
    /// Regular files.
    pub files: u64,
    /// Directories, the top one included.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Bytes of the regular files.
    pub bytes: u64,
    /// Entries not sent (sockets, named pipes, devices), by their path under the directory.
    pub skipped: Vec<PathBuf>,
}

/// Why [`pack`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file or directory of the tree could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path, shown (see [`show`]).
        path: String,
        /// What the system said.
        source: io::Error,
    },
    /// A regular file got shorter while it was read: its header announced more bytes.
    #[error("{path}: the file shrank from {expected} to {got} bytes while it was sent")]
    Shrank {
        /// The path, shown.
        path: String,
        /// Its size when it was opened.
        expected: u64,
        /// The bytes it had.
        got: u64,
    },
    /// The stream could not be written.
    #[error("writing the tree's stream: {0}")]
    Write(io::Error),
}

impl From<PackError> for io::Error {
    fn from(e: PackError) -> io::Error {
        match e {
            PackError::Write(e) => e,
            e => io::Error::other(e.to_string()),
        }
    }
}

/// Writes the tree under `dir` to `out` as a tar archive (see the module docs of [`super`]):
/// entries named relative to `dir` (`./` for `dir` itself), in the order of their names'
/// bytes, a directory before its contents; the archive's end included.
pub fn pack(dir: &Path, out: impl Write) -> Result<Packed, PackError> {
    let meta = std::fs::metadata(dir).map_err(|e| read_err(dir, e))?;
    if !meta.is_dir() {
        return Err(read_err(
            dir,
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    let mut b = Builder::new(out);
    let mut packed = Packed::default();
    // The top directory: its mode and time.
    let mut h = header(EntryType::Directory, &meta);
    pax_mtime(&mut b, &meta)?;
    b.append_data(&mut h, "./", io::empty())
        .map_err(PackError::Write)?;
    packed.dirs += 1;
    // Depth first: the stack holds what is still to be sent, the next entry on top.
    let mut stack: Vec<PathBuf> = children(dir, Path::new(""))?;
    stack.reverse();
    while let Some(rel) = stack.pop() {
        let path = dir.join(&rel);
        let meta = std::fs::symlink_metadata(&path).map_err(|e| read_err(&path, e))?;
        let t = meta.file_type();
        if t.is_dir() {
            let mut h = header(EntryType::Directory, &meta);
            pax_mtime(&mut b, &meta)?;
            b.append_data(&mut h, &rel, io::empty())
                .map_err(PackError::Write)?;
            packed.dirs += 1;
            let mut inner = children(dir, &rel)?;
            inner.reverse();
            stack.extend(inner);
        } else if t.is_file() {
            packed.bytes += append_file(&mut b, &path, &rel)?;
            packed.files += 1;
        } else if t.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| read_err(&path, e))?;
            append_symlink(&mut b, &meta, &rel, target.as_os_str().as_bytes())?;
            packed.symlinks += 1;
        } else {
            tracing::warn!(
                "{}: not sent (a socket, a named pipe or a device)",
                show(path.as_os_str().as_bytes())
            );
            packed.skipped.push(rel);
        }
    }
    b.into_inner()
        .and_then(|mut w| w.flush())
        .map_err(PackError::Write)?;
    Ok(packed)
}

/// The names in `dir/rel`, as paths under `dir`, in the order of their bytes.
fn children(dir: &Path, rel: &Path) -> Result<Vec<PathBuf>, PackError> {
    let at = dir.join(rel);
    let mut names = Vec::new();
    for e in std::fs::read_dir(&at).map_err(|e| read_err(&at, e))? {
        let e = e.map_err(|e| read_err(&at, e))?;
        names.push(e.file_name());
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names.into_iter().map(|n| rel.join(n)).collect())
}

fn read_err(path: &Path, source: io::Error) -> PackError {
    PackError::Read {
        path: show(path.as_os_str().as_bytes()),
        source,
    }
}

/// A header of `kind` with the mode and whole seconds of `meta`, and no owner.
fn header(kind: EntryType, meta: &Metadata) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(meta.mode() & 0o7777);
    h.set_mtime(meta.mtime().max(0) as u64);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(0);
    h
}

/// A PAX record with the exact modification time of the next entry, where whole seconds in its
/// header do not hold it.
fn pax_mtime<W: Write>(b: &mut Builder<W>, meta: &Metadata) -> Result<(), PackError> {
    let (secs, nanos) = (meta.mtime(), meta.mtime_nsec() as u32);
    if nanos == 0 && secs >= 0 {
        return Ok(());
    }
    let v = pax_time(secs, nanos);
    b.append_pax_extensions([("mtime", v.as_bytes())])
        .map_err(PackError::Write)
}

/// Appends the regular file at `path` as `rel`: its bytes as it had them when it was opened
/// (not through a symbolic link put in its place since). Returns its size.
fn append_file<W: Write>(b: &mut Builder<W>, path: &Path, rel: &Path) -> Result<u64, PackError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| read_err(path, e))?;
    let meta = f.metadata().map_err(|e| read_err(path, e))?;
    let size = meta.len();
    let mut h = header(EntryType::Regular, &meta);
    h.set_size(size);
    pax_mtime(b, &meta)?;
    // The tar crate copies 8 KiB at a time: read the file in larger steps behind them.
    let step = usize::try_from(size).map_or(READ_STEP, |s| s.clamp(8 << 10, READ_STEP));
    let mut data = Exact {
        f: io::BufReader::with_capacity(step, f.take(size)),
        got: 0,
        failed: None,
    };
    let shrank = |got| PackError::Shrank {
        path: show(path.as_os_str().as_bytes()),
        expected: size,
        got,
    };
    match b.append_data(&mut h, rel, &mut data) {
        Ok(()) => Ok(size),
        Err(e) => match data.failed {
            Some(Failed::Shrank) => Err(shrank(data.got)),
            Some(Failed::Read(e)) => Err(read_err(path, e)),
            None => Err(PackError::Write(e)),
        },
    }
}

/// Bytes read from a file at a time, at most.
const READ_STEP: usize = 1 << 20;

/// A file's bytes for its entry: at most its size, and an error if it ends before (recorded,
/// to tell it from an error of the stream).
struct Exact {
    f: io::BufReader<io::Take<File>>,
    got: u64,
    failed: Option<Failed>,
}

enum Failed {
    Shrank,
    Read(io::Error),
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.f.read(buf) {
            Ok(0) if self.f.get_ref().limit() > 0 && !buf.is_empty() => {
                self.failed = Some(Failed::Shrank);
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank",
                ))
            }
            Ok(n) => {
                self.got += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                let kind = e.kind();
                self.failed = Some(Failed::Read(e));
                Err(io::Error::new(kind, "reading the file"))
            }
        }
    }
}

/// Appends a symbolic link `rel` to `target`, the target byte for byte (the tar crate's own
/// setter would drop `.` components and repeated slashes of a short one).
fn append_symlink<W: Write>(
    b: &mut Builder<W>,
    meta: &Metadata,
    rel: &Path,
    target: &[u8],
) -> Result<(), PackError> {
    let mut h = header(EntryType::Symlink, meta);
    pax_mtime(b, meta)?;
    let field = &mut h.as_old_mut().linkname;
    if target.len() <= field.len() {
        field[..target.len()].copy_from_slice(target);
        b.append_data(&mut h, rel, io::empty())
    } else {
        b.append_link(&mut h, rel, Path::new(std::ffi::OsStr::from_bytes(target)))
    }
    .map_err(PackError::Write)
}

/// A directory's tar stream as a [`Read`]: [`pack`] runs on a thread of its own and writes
/// into a pipe, whose other end this reads. At the end of the stream it waits for the thread:
/// an error of the pack (a file that could not be read) is an error of the read, so the stream
/// never ends as if it were whole.
pub struct TreeReader {
    pipe: io::PipeReader,
    thread: Option<JoinHandle<Result<Packed, PackError>>>,
    packed: Option<Packed>,
}

/// The pipe's capacity: a megabyte, a sender's message, in as few system calls as the kernel
/// allows (it may cap it; the default 64 KiB works too).
const PIPE_SIZE: usize = 1 << 20;

impl TreeReader {
    /// Starts packing `dir`.
    pub fn spawn(dir: &Path) -> io::Result<TreeReader> {
        let (r, w) = io::pipe()?;
        let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
        let dir = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("ethbcast-pack".into())
            .spawn(move || pack(&dir, BufWriter::with_capacity(PIPE_SIZE, w)))?;
        Ok(TreeReader {
            pipe: r,
            thread: Some(thread),
            packed: None,
        })
    }

    /// What was packed, once the stream ended.
    pub fn packed(&self) -> Option<&Packed> {
        self.packed.as_ref()
    }
}

impl Read for TreeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if n > 0 || buf.is_empty() {
            return Ok(n);
        }
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(p)) => {
                    tracing::info!(
                        files = p.files,
                        dirs = p.dirs,
                        symlinks = p.symlinks,
                        bytes = p.bytes,
                        "tree packed"
                    );
                    self.packed = Some(p);
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(io::Error::other("the thread packing the tree panicked")),
            }
        }
        Ok(0)
    }
}
