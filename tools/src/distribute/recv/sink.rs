//! Where a receiver's stream goes: standard output, a device or pipe written in place, a file
//! written under a fresh temporary name (or its partial name with `--resume`) and renamed into
//! place once the digest matched, a `-O` command's input, or a tree unpacked as it comes; and
//! how each is discarded when the transfer fails.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ethbcast::Key;

use crate::distribute::extract::Extract;
use crate::distribute::{Fatal, EXIT_FAILED};
use crate::transfer::{DigestAlgo, PrefixHasher};

use super::Output;

/// An open output, from its start to its commit or discard.
pub(super) enum Sink {
    /// Written in place, under its name (for errors): standard output, through its own
    /// descriptor (`std::io::Stdout` is line-buffered and split every write at its last
    /// newline), or a device or a named pipe given with `-o`.
    InPlace(BufWriter<Counted<File>>, String),
    File {
        tmp: PathBuf,
        dst: PathBuf,
        f: Option<BufWriter<Counted<File>>>,
        /// `--resume`: `tmp` is the partial name, kept when the transfer does not complete.
        keep: bool,
        /// `--no-clobber`: never replace a file at `dst`.
        no_clobber: bool,
    },
    Command {
        cmd: String,
        child: Option<Child>,
        stdin: Option<BufWriter<Counted<ChildStdin>>>,
        /// Where the command's input counts its bytes (see [`Counted`]).
        written: Arc<AtomicU64>,
    },
    /// A tree unpacked as it comes (`--extract`).
    Tree(Extract),
    Done,
}

/// A writer that counts the bytes its inner writer took: the file, the pipe or stdout, not
/// the buffer in front of them. The protocol loop watches the count to tell an output that
/// drains slowly from one that stopped taking data (a `-O` command that does not read).
///
/// Into a pipe or a socket it hands the inner writer at most [`COUNTED_STEP`] bytes per call:
/// a blocking write there returns only once all its bytes went through, so a megabyte written
/// at once would show no progress until the reader had taken all of it. A file (or
/// `/dev/null`) takes what it is given at once, in one system call.
pub(in crate::distribute) struct Counted<W> {
    inner: W,
    count: Arc<AtomicU64>,
    step: usize,
}

impl<W> Counted<W> {
    /// `piped`: the output is a pipe or a socket (see [`Counted`]).
    pub(in crate::distribute) fn new(inner: W, count: &Arc<AtomicU64>, piped: bool) -> Counted<W> {
        Counted {
            inner,
            count: count.clone(),
            step: if piped { COUNTED_STEP } else { usize::MAX },
        }
    }
}

/// Whether `path` names a device, a named pipe or a socket itself: not a regular file, a
/// directory, or a symbolic link (whose target is never written in place: a link planted in a
/// shared directory could point at a disk; a link is replaced by the file, as ever).
fn is_special(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        !t.is_file() && !t.is_dir() && !t.is_symlink()
    })
}

/// Whether `m` describes `/dev/null` (character device 1:3).
fn is_dev_null(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    m.file_type().is_char_device() && m.rdev() == nix::libc::makedev(1, 3)
}

/// Whether `out` is `/dev/null`, written in place (see [`Sink::direct`]): known before the
/// link is opened, which is sized for it (see `LinkOptions::open_receiving`).
pub(super) fn null_output(out: &Output) -> bool {
    use std::os::fd::AsFd;
    let m = match out {
        Output::Stdout => std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .and_then(|f| f.metadata()),
        Output::File(dst) => std::fs::symlink_metadata(dst),
        Output::Command(_) | Output::Tree(_) => return false,
    };
    m.is_ok_and(|m| is_dev_null(&m))
}

/// Whether `f` is a pipe or a socket, where a write blocks until a reader takes it.
fn is_piped(f: &File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    f.metadata().is_ok_and(|m| {
        let t = m.file_type();
        t.is_fifo() || t.is_socket()
    })
}

/// Bytes per write of [`Counted`]: a pipe's default capacity.
const COUNTED_STEP: usize = 64 << 10;

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(&buf[..buf.len().min(self.step)])?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Kills the `-O` command and everything it started: it runs in a process group of its own,
/// so that `sh -c 'a | b'` or a shell that forks its last command leaves no process holding
/// the pipe (or running on) after the receiver gave up.
fn kill_command(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Tries at most this many fresh names for the temporary output before giving up.
const TEMP_TRIES: usize = 16;

/// Creates the temporary output next to `dst` (so that the final rename stays within one file
/// system): `.NAME.ethbcast-PID-RANDOM.part`, with a name drawn from `suffix`.
///
/// Why this way: the target directory may be writable by others (`/tmp`, a shared scratch
/// space). A predictable name opened with `File::create` follows a symlink planted there, so
/// the transfer would overwrite whatever file the link points to, and then rename the link
/// into place. The name is random, and the file is opened with `O_CREAT | O_EXCL |
/// O_NOFOLLOW`: whatever already exists under the name, symlink or not, is never opened; the
/// next name is tried instead.
fn create_temp(dst: &Path, mut suffix: impl FnMut() -> u64) -> Result<(PathBuf, File), Fatal> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = dst
        .file_name()
        .ok_or_else(|| Fatal::io(format!("-o {}: not a file name", dst.display())))?;
    let dir = parent_dir(dst);
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let mut tmp = std::ffi::OsString::from(".");
        tmp.push(name);
        tmp.push(format!(
            ".ethbcast-{}-{:016x}.part",
            std::process::id(),
            suffix()
        ));
        let tmp = dir.join(tmp);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(tmp),
            Err(e) => return Err(Fatal::io(format!("cannot create {}: {e}", tmp.display()))),
        }
    }
    Err(Fatal::io(format!(
        "cannot create a temporary file next to {}: {TEMP_TRIES} fresh names were taken (last {})",
        dst.display(),
        last.map_or_else(String::new, |p| p.display().to_string())
    )))
}

/// The name under which `recv --resume -o DST` writes `DST` until the digest matched, and
/// keeps what arrived when the transfer does not complete: `.NAME.ethbcast.part` next to it,
/// made of the bytes of NAME (two names that are not UTF-8 never share one).
pub fn partial_name(dst: &Path) -> Option<PathBuf> {
    let name = dst.file_name()?;
    let mut part = std::ffi::OsString::from(".");
    part.push(name);
    part.push(".ethbcast.part");
    Some(parent_dir(dst).join(part))
}

/// Opens the partial output of `dst` for `--resume`, read and write, locked against a second
/// receiver writing it, or creates it if there is none. `Ok(None)` if what is there cannot be
/// trusted to be this user's own partial output: the caller then writes a fresh temporary file
/// instead, as without `--resume` (and keeps nothing).
///
/// How it is trusted: an existing file is opened without `O_CREAT` and never through a
/// symbolic link, and must then be a regular file of this user with one name, the very file
/// the name still names (a hard link planted and unlinked between the open and the check
/// leaves the name to another file, or none). One this user may not open (`EACCES`, `EPERM`:
/// another user's file, or a planted one in a sticky directory with `protected_regular`) is
/// not its own either. A new one is created with `O_EXCL`: one that appears meanwhile is not
/// taken.
fn open_partial(dst: &Path) -> Result<Option<(PathBuf, File)>, Fatal> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Some(part) = partial_name(dst) else {
        return Err(Fatal::io(format!("-o {}: not a file name", dst.display())));
    };
    let not_ours = [nix::libc::ELOOP, nix::libc::EACCES, nix::libc::EPERM];
    let existing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&part);
    let f = match existing {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&part)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(Fatal::io(format!("cannot create {}: {e}", part.display()))),
        },
        Err(e) if e.raw_os_error().is_some_and(|c| not_ours.contains(&c)) => return Ok(None),
        Err(e) => return Err(Fatal::io(format!("cannot open {}: {e}", part.display()))),
    };
    let m = f
        .metadata()
        .map_err(|e| Fatal::io(format!("cannot stat {}: {e}", part.display())))?;
    let named =
        std::fs::symlink_metadata(&part).is_ok_and(|n| n.dev() == m.dev() && n.ino() == m.ino());
    if !m.file_type().is_file()
        || m.uid() != nix::unistd::geteuid().as_raw()
        || m.nlink() != 1
        || !named
    {
        return Ok(None);
    }
    match f.try_lock() {
        Ok(()) => Ok(Some((part, f))),
        Err(std::fs::TryLockError::WouldBlock) => Err(Fatal::io(format!(
            "{} is being written by another ethbcast recv",
            part.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Fatal::io(format!("cannot lock {}: {e}", part.display())))
        }
    }
}

/// The mode a file this process creates gets: 0666 less the umask (0644 with the usual 022),
/// read from `/proc/self/status` (setting the umask to read it would race with other threads'
/// files); 0644 where the kernel does not say. A received file gets this mode whether it was
/// resumed or not; the sender's file mode is not carried.
fn new_file_mode() -> u32 {
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    0o666 & !umask
}

/// Renames the finished output into place; with `no_clobber`, only if nothing is there
/// (`RENAME_NOREPLACE`: a file that appeared during the transfer is kept).
fn rename_into_place(tmp: &Path, dst: &Path, no_clobber: bool) -> Result<(), Fatal> {
    let fail = |e: std::io::Error| {
        Fatal::io(format!(
            "cannot rename {} to {}: {e}",
            tmp.display(),
            dst.display()
        ))
    };
    if !no_clobber {
        return std::fs::rename(tmp, dst).map_err(fail);
    }
    use nix::fcntl::{renameat2, RenameFlags};
    match renameat2(None, tmp, None, dst, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EEXIST) => Err(Fatal::io(format!(
            "{} appeared during the transfer, and --no-clobber keeps it: the data received is discarded",
            dst.display()
        ))),
        Err(e) => Err(fail(e.into())),
    }
}

/// The directory of `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Makes a rename in `dir` durable: without it, a crash soon after the rename may leave the
/// directory without the new name although the file's data was synced. File systems that
/// cannot sync a directory (EINVAL) are taken at their word.
fn sync_dir(dir: &Path) -> Result<(), Fatal> {
    let r = File::open(dir).and_then(|d| d.sync_all());
    match r {
        Err(e) if e.raw_os_error() != Some(nix::libc::EINVAL) => Err(Fatal::io(format!(
            "cannot sync directory {}: {e}",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

pub(in crate::distribute) fn write_err(what: &str, e: std::io::Error) -> Fatal {
    if e.kind() == ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
        Fatal::io(format!("disk full writing {what}"))
    } else if e.kind() == ErrorKind::BrokenPipe {
        Fatal::new(
            EXIT_FAILED,
            format!("{what} closed its input before the end of the stream"),
        )
    } else {
        Fatal::io(format!("writing {what}: {e}"))
    }
}

impl Sink {
    /// An output written in place (see [`Sink::InPlace`]).
    pub(super) fn in_place(out: File, name: String, written: &Arc<AtomicU64>) -> Sink {
        let piped = is_piped(&out);
        Sink::InPlace(
            BufWriter::with_capacity(1 << 20, Counted::new(out, written, piped)),
            name,
        )
    }

    /// Opens the output; `written` counts the bytes it takes (see [`Counted`]). `resume`:
    /// into a regular file, its partial output (see [`open_partial`]).
    pub(super) fn open(
        out: &Output,
        written: &Arc<AtomicU64>,
        resume: bool,
        no_clobber: bool,
    ) -> Result<Sink, Fatal> {
        Ok(match out {
            Output::Stdout => {
                use std::os::fd::AsFd;
                let out = std::io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .map(File::from)
                    .map_err(|e| Fatal::io(format!("standard output: {e}")))?;
                Sink::in_place(out, "stdout".into(), written)
            }
            Output::File(dst) if is_special(dst) => {
                // A device or a named pipe (`-o /dev/null`) is written in place: a temporary
                // file next to it, renamed over it at the end, would replace the device.
                use std::os::unix::fs::OpenOptionsExt;
                let out = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(dst)
                    .map_err(|e| Fatal::io(format!("cannot open {}: {e}", dst.display())))?;
                Sink::in_place(out, dst.display().to_string(), written)
            }
            Output::File(dst) => {
                if dst.is_dir() {
                    return Err(Fatal::io(format!(
                        "-o {} is a directory: give a file name",
                        dst.display()
                    )));
                }
                let dir = parent_dir(dst);
                if !dir.is_dir() {
                    return Err(Fatal::io(format!(
                        "-o {}: directory {} does not exist",
                        dst.display(),
                        dir.display()
                    )));
                }
                if no_clobber && std::fs::symlink_metadata(dst).is_ok() {
                    return Err(Fatal::io(format!(
                        "-o {}: the file exists, and --no-clobber keeps it",
                        dst.display()
                    )));
                }
                let partial = if resume { open_partial(dst)? } else { None };
                if resume && partial.is_none() {
                    tracing::warn!(
                        "{} is not a partial output of this user (a link, another owner or one this user may not open, not a regular file): receiving into a fresh temporary file, which is not kept",
                        partial_name(dst).unwrap_or_default().display()
                    );
                }
                let keep = partial.is_some();
                let (tmp, f) = match partial {
                    Some(p) => p,
                    None => create_temp(dst, rand::random)?,
                };
                Sink::File {
                    tmp,
                    dst: dst.clone(),
                    f: Some(BufWriter::with_capacity(
                        1 << 20,
                        Counted::new(f, written, false),
                    )),
                    keep,
                    no_clobber,
                }
            }
            Output::Command(cmd) => Sink::Command {
                cmd: cmd.clone(),
                child: None,
                stdin: None,
                written: written.clone(),
            },
            Output::Tree(dst) => Sink::Tree(Extract::open(dst, written)?),
        })
    }

    /// Starts the command or the unpacker (at the header, so that no command runs for a
    /// transfer that never begins).
    pub(super) fn start(&mut self) -> Result<(), Fatal> {
        use std::os::unix::process::CommandExt;
        if let Sink::Tree(t) = self {
            return t.start();
        }
        if let Sink::Command {
            cmd,
            child,
            stdin,
            written,
        } = self
        {
            if child.is_none() {
                let mut c = Command::new("sh")
                    .arg("-c")
                    .arg(&*cmd)
                    .stdin(Stdio::piped())
                    .process_group(0)
                    .spawn()
                    .map_err(|e| Fatal::io(format!("cannot run sh -c {cmd:?}: {e}")))?;
                *stdin = c
                    .stdin
                    .take()
                    .map(|s| BufWriter::with_capacity(1 << 20, Counted::new(s, written, true)));
                *child = Some(c);
            }
        }
        Ok(())
    }

    pub(super) fn write(&mut self, data: &[u8]) -> Result<(), Fatal> {
        match self {
            Sink::InPlace(w, name) => w.write_all(data).map_err(|e| write_err(name, e)),
            Sink::File { tmp, f, .. } => f
                .as_mut()
                .expect("open file")
                .write_all(data)
                .map_err(|e| write_err(&tmp.display().to_string(), e)),
            Sink::Command { cmd, stdin, .. } => stdin
                .as_mut()
                .expect("command started at the header")
                .write_all(data)
                .map_err(|e| write_err(&format!("command {cmd:?}"), e)),
            Sink::Tree(t) => t.write(data),
            Sink::Done => Ok(()),
        }
    }

    /// `--resume`: how many of the stream's first bytes the partial output holds (at most
    /// `limit`), and their digests so far (the offer's under `offer_key` if given, see
    /// [`PrefixHasher`]).
    pub(super) fn hash_prefix(
        &mut self,
        algo: DigestAlgo,
        offer_key: Option<&Key>,
        limit: u64,
    ) -> Result<(u64, PrefixHasher), Fatal> {
        use std::io::{Read, Seek, SeekFrom};
        let mut h = PrefixHasher::new(algo, offer_key);
        let Sink::File {
            tmp,
            f: Some(w),
            keep: true,
            ..
        } = self
        else {
            return Ok((0, h));
        };
        let err = |e: std::io::Error| Fatal::io(format!("reading {}: {e}", tmp.display()));
        let mut file = &w.get_ref().inner;
        file.seek(SeekFrom::Start(0)).map_err(err)?;
        let mut r = file.take(limit);
        let mut buf = vec![0u8; 1 << 20];
        let mut held = 0u64;
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    h.update(&buf[..n]);
                    held += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok((held, h))
    }

    /// `--resume`: the stream goes on at `offset`; what the partial output holds beyond it is
    /// cut off, and the next write goes there.
    pub(super) fn resume_at(&mut self, offset: u64) -> Result<(), Fatal> {
        use std::io::{Seek, SeekFrom};
        let Sink::File {
            tmp,
            f: Some(w),
            keep: true,
            ..
        } = self
        else {
            return Ok(());
        };
        let err = |e: std::io::Error| Fatal::io(format!("resuming {}: {e}", tmp.display()));
        w.flush().map_err(err)?;
        let file = &mut w.get_mut().inner;
        file.set_len(offset).map_err(err)?;
        file.seek(SeekFrom::Start(offset)).map_err(err)?;
        Ok(())
    }

    /// Removes a partial output whose content turned out wrong (see [`Sink::abort`]).
    pub(super) fn discard(&mut self) {
        if let Sink::File { keep, .. } = self {
            *keep = false;
        }
        self.abort();
    }

    /// The output and its name, for writing it directly (see [`super::direct`]), if a write
    /// to it never waits: `/dev/null`. Not a file: a write into the page cache waits when the
    /// kernel throttles dirty pages, and the protocol thread waits with the ring's slots held
    /// (written this way, files of a 1%-loss transfer on the busy test-bed cost the sender
    /// 3 800-17 000 repairs instead of 60-1 700). Not a pipe, a socket or a terminal, nor a
    /// command's input, which wait for their reader.
    pub(super) fn direct(&self) -> Option<(File, String)> {
        let Sink::InPlace(w, name) = self else {
            return None;
        };
        let f = &w.get_ref().inner;
        if !is_dev_null(&f.metadata().ok()?) {
            return None;
        }
        Some((f.try_clone().ok()?, name.clone()))
    }

    /// Makes the output final: flush, fsync and rename; or close the command's input and
    /// check its exit status.
    pub(super) fn commit(&mut self) -> Result<(), Fatal> {
        match std::mem::replace(self, Sink::Done) {
            Sink::InPlace(mut w, name) => w.flush().map_err(|e| write_err(&name, e)),
            Sink::File {
                tmp,
                dst,
                f,
                no_clobber,
                ..
            } => {
                let r = (|| {
                    use std::os::unix::fs::PermissionsExt;
                    let w = f.expect("open file");
                    let file = w
                        .into_inner()
                        .map_err(|e| write_err(&tmp.display().to_string(), e.into_error()))?;
                    // The mode a new file of this user gets, whether it was written under a
                    // temporary name or resumed from a partial output (see `new_file_mode`).
                    let mode = std::fs::Permissions::from_mode(new_file_mode());
                    file.inner
                        .set_permissions(mode)
                        .map_err(|e| Fatal::io(format!("cannot chmod {}: {e}", tmp.display())))?;
                    file.inner
                        .sync_all()
                        .map_err(|e| write_err(&tmp.display().to_string(), e))?;
                    rename_into_place(&tmp, &dst, no_clobber)?;
                    sync_dir(&parent_dir(&dst))
                })();
                if r.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                r
            }
            Sink::Command {
                cmd, child, stdin, ..
            } => {
                let Some(mut child) = child else {
                    return Ok(());
                };
                let flushed = match stdin {
                    Some(mut w) => w
                        .flush()
                        .map_err(|e| write_err(&format!("command {cmd:?}"), e)),
                    None => Ok(()),
                }; // dropping the writer closes the pipe
                let status = child
                    .wait()
                    .map_err(|e| Fatal::io(format!("waiting for {cmd:?}: {e}")))?;
                flushed?;
                if status.success() {
                    Ok(())
                } else {
                    Err(Fatal::new(
                        EXIT_FAILED,
                        format!("command {cmd:?} failed: {status}"),
                    ))
                }
            }
            Sink::Tree(t) => t.commit().map(|u| {
                tracing::info!(
                    files = u.files,
                    dirs = u.dirs,
                    symlinks = u.symlinks,
                    hard_links = u.hard_links,
                    bytes = u.bytes,
                    "tree unpacked"
                );
            }),
            Sink::Done => Ok(()),
        }
    }

    /// What the protocol loop needs to discard this output while another thread may be stuck
    /// writing it: the temporary file to remove, the command to kill.
    pub(super) fn handle(&self) -> SinkHandle {
        match self {
            Sink::File { tmp, keep, .. } => SinkHandle::File {
                tmp: tmp.clone(),
                keep: *keep,
            },
            Sink::Command { child: Some(c), .. } => SinkHandle::Pid(c.id()),
            Sink::Tree(t) => SinkHandle::Tree(t.staging().to_path_buf()),
            _ => SinkHandle::None,
        }
    }

    /// Discards the output: removes the temporary file (keeps a partial output for
    /// `--resume`: what it holds is a prefix of the stream, checked when it is offered),
    /// kills the command.
    pub(super) fn abort(&mut self) {
        match std::mem::replace(self, Sink::Done) {
            Sink::File {
                f: Some(mut w),
                keep: true,
                ..
            } => {
                let _ = w.flush();
            }
            Sink::File { tmp, f, .. } => {
                drop(f);
                let _ = std::fs::remove_file(&tmp);
            }
            Sink::Command { child, stdin, .. } => {
                drop(stdin);
                if let Some(mut c) = child {
                    kill_command(c.id());
                    let _ = c.wait();
                }
            }
            Sink::InPlace(mut w, _) => {
                let _ = w.flush();
            }
            Sink::Tree(t) => t.abort(),
            Sink::Done => {}
        }
    }
}

/// Discards an output that was not committed, whatever way `run` leaves.
pub(super) struct Guard(pub(super) Sink);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// See [`Sink::handle`].
pub(super) enum SinkHandle {
    None,
    /// The temporary file; `keep`: a partial output kept for `--resume`.
    File {
        tmp: PathBuf,
        keep: bool,
    },
    Pid(u32),
    /// The directory a tree is unpacked into.
    Tree(PathBuf),
}

impl SinkHandle {
    /// As [`Sink::abort`].
    pub(super) fn discard(&self) {
        match self {
            SinkHandle::None | SinkHandle::File { keep: true, .. } => {}
            SinkHandle::File { tmp, .. } => {
                let _ = std::fs::remove_file(tmp);
            }
            SinkHandle::Pid(pid) => kill_command(*pid),
            SinkHandle::Tree(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    /// As [`Sink::discard`]: a partial output too.
    pub(super) fn remove(&self) {
        match self {
            SinkHandle::File { tmp, .. } => {
                let _ = std::fs::remove_file(tmp);
            }
            h => h.discard(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribute::recv::push;
    use crate::distribute::recv::verify::tests::xxh3;
    use crate::distribute::recv::writer::{Job, Writer};
    use crate::distribute::tests::scratch;
    use crate::transfer::Data;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// Records the size of each write it is given.
    struct Calls(Vec<usize>);
    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_is_written_in_pipe_sized_steps_only_into_pipes() {
        let count = Arc::new(AtomicU64::new(0));
        let mb = vec![7u8; 1 << 20];
        let mut file = Counted::new(Calls(Vec::new()), &count, false);
        file.write_all(&mb).unwrap();
        assert_eq!(file.inner.0, vec![1 << 20], "a file takes it in one call");
        let mut pipe = Counted::new(Calls(Vec::new()), &count, true);
        pipe.write_all(&mb).unwrap();
        assert_eq!(pipe.inner.0, vec![COUNTED_STEP; (1 << 20) / COUNTED_STEP]);
        assert_eq!(count.load(Ordering::Relaxed), 2 << 20, "every byte counted");
        let (r, w) = std::io::pipe().unwrap();
        assert!(is_piped(&File::from(std::os::fd::OwnedFd::from(w))));
        drop(r);
        let d = scratch("piped");
        assert!(!is_piped(&File::create(d.join("f")).unwrap()));
        assert!(!is_piped(
            &File::options().write(true).open("/dev/null").unwrap()
        ));
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A host user who can write to the target directory plants a symlink where the
    /// receiver's temporary file used to be (its name was `.NAME.ethbcast-PID.part`): the
    /// receiver must neither write through it nor rename it into place.
    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_not_followed() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dst = dir.join("out.bin");
        let old_name = dir.join(format!(".out.bin.ethbcast-{}.part", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old_name).unwrap();
        let mut sink =
            Sink::open(&Output::File(dst.clone()), &Arc::default(), false, false).unwrap();
        sink.write(b"the transfer").unwrap();
        sink.commit().unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(&dst).unwrap();
        assert!(meta.file_type().is_file(), "the output is a regular file");
        assert_eq!(std::fs::read(&dst).unwrap(), b"the transfer");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whatever sits at a drawn name (a symlink, dangling or not, a file) is skipped, never
    /// opened: the next name is drawn.
    #[test]
    fn names_that_exist_are_skipped_without_being_opened() {
        let dir = scratch("exists");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dst = dir.join("out.bin");
        let at = |k: u64| {
            dir.join(format!(
                ".out.bin.ethbcast-{}-{k:016x}.part",
                std::process::id()
            ))
        };
        std::os::unix::fs::symlink(&victim, at(1)).unwrap();
        std::os::unix::fs::symlink(dir.join("created-through-a-link"), at(2)).unwrap();
        std::fs::write(at(3), b"someone else's").unwrap();
        let mut next = 0;
        let (tmp, mut f) = create_temp(&dst, || {
            next += 1;
            next
        })
        .unwrap();
        assert_eq!(tmp, at(4));
        f.write_all(b"mine").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!dir.join("created-through-a-link").exists());
        assert_eq!(std::fs::read(at(3)).unwrap(), b"someone else's");
        // Every name taken: a clear error, nothing opened.
        let err = create_temp(&dst, || 1).unwrap_err();
        assert!(err.msg.contains("fresh names were taken"), "{}", err.msg);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--resume` writes and keeps only a partial output that is this user's own regular
    /// file with one name; a link planted there (to a file or dangling), a hard link to
    /// another file, a file of another user is never written: a fresh temporary file is.
    #[test]
    fn a_partial_output_is_used_only_when_it_is_this_users_own_file() {
        let dir = scratch("partial");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dst = dir.join("out.bin");
        let part = partial_name(&dst).unwrap();
        assert_eq!(part, dir.join(".out.bin.ethbcast.part"));
        let refused = |what: &str| {
            assert!(open_partial(&dst).unwrap().is_none(), "{what}");
            let _ = std::fs::remove_file(&part);
        };
        std::os::unix::fs::symlink(&victim, &part).unwrap();
        refused("a symbolic link");
        std::os::unix::fs::symlink(dir.join("nowhere"), &part).unwrap();
        refused("a dangling symbolic link");
        assert!(!dir.join("nowhere").exists());
        std::fs::hard_link(&victim, &part).unwrap();
        refused("a second name of another file");
        if nix::unistd::geteuid().is_root() {
            std::fs::write(&part, b"someone else's").unwrap();
            nix::unistd::chown(&part, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            refused("another user's file");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Its own file: opened, locked against a second receiver, kept by `abort`.
        std::fs::write(&part, b"the first bytes").unwrap();
        let (p, _f) = open_partial(&dst).unwrap().expect("its own partial output");
        assert_eq!(p, part);
        let second = open_partial(&dst).unwrap_err();
        assert!(
            second.msg.contains("another ethbcast recv"),
            "{}",
            second.msg
        );
        drop(_f);
        let mut sink =
            Sink::open(&Output::File(dst.clone()), &Arc::default(), true, false).unwrap();
        let (held, _) = sink.hash_prefix(DigestAlgo::Xxh3, None, 9).unwrap();
        assert_eq!(held, 9, "at most the stream's length");
        sink.abort();
        assert_eq!(std::fs::read(&part).unwrap(), b"the first bytes");
        let mut sink =
            Sink::open(&Output::File(dst.clone()), &Arc::default(), true, false).unwrap();
        sink.discard();
        assert!(!part.exists(), "discarded");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--resume` with a group key: the writer offers the keyed digest of what the partial
    /// output holds (under the offer key, not the header's algorithm, so that bytes a local
    /// user put there match only if they are the input's), and once the sender resumes there
    /// the whole file's digest under the header's algorithm still matches the trailer's.
    /// Without a key the offer is under the header's algorithm.
    #[test]
    fn a_partial_output_is_offered_under_the_keyed_digest_with_a_key() {
        let dir = scratch("offer");
        let data = b"the first bytes of the stream, then the rest of it";
        let key = Key::from_bytes([0x3c; 32]);
        let offer_key = crate::transfer::offer_key(&key);
        for keyed in [true, false] {
            let dst = dir.join(format!("out-{keyed}"));
            let part = partial_name(&dst).unwrap();
            std::fs::write(&part, &data[..21]).unwrap();
            let mut sink =
                Sink::open(&Output::File(dst.clone()), &Arc::default(), true, false).unwrap();
            sink.start().unwrap();
            let mut w = Writer::spawn(sink, Arc::default()).unwrap();
            let stop = AtomicBool::new(false);
            let patience = Duration::from_secs(10);
            let offer = Job::Offer {
                algo: DigestAlgo::Xxh3,
                key: keyed.then(|| offer_key.clone()),
                limit: data.len() as u64,
            };
            push(&mut w, offer, &stop, patience).unwrap();
            let t0 = Instant::now();
            let o = loop {
                if let Some(o) = w.offer() {
                    break o;
                }
                assert!(t0.elapsed() < patience, "no offer");
                std::thread::sleep(Duration::from_millis(1));
            };
            let want = match keyed {
                true => *blake3::keyed_hash(&offer_key, &data[..21]).as_bytes(),
                false => xxh3(&data[..21]),
            };
            assert_eq!((o.held, o.digest), (21, want), "keyed: {keyed}");
            for job in [
                Job::Start(21),
                Job::Data(Data::new(&data[21..])),
                Job::Verify {
                    bytes: data.len() as u64,
                    digest: Some(xxh3(data)),
                },
            ] {
                push(&mut w, job, &stop, patience).unwrap();
            }
            let done = w.finish(patience).expect("the writer ends");
            assert!(
                done.result.is_ok(),
                "keyed: {keyed}: {:?}",
                done.result.err()
            );
            assert_eq!(std::fs::read(&dst).unwrap(), data, "keyed: {keyed}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A received file gets the mode a new file of this user gets (the umask's), whether it was
    /// written under a temporary name or resumed from a partial output (created 0600).
    #[test]
    fn a_received_file_has_the_same_mode_with_and_without_resume() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("mode");
        let mut modes = Vec::new();
        for resume in [false, true] {
            let dst = dir.join(format!("out-{resume}"));
            let mut sink =
                Sink::open(&Output::File(dst.clone()), &Arc::default(), resume, false).unwrap();
            sink.write(b"the data").unwrap();
            sink.commit().unwrap();
            modes.push(std::fs::metadata(&dst).unwrap().permissions().mode() & 0o777);
        }
        assert_eq!(modes[0], modes[1], "{:o} {:o}", modes[0], modes[1]);
        assert_eq!(modes[0], new_file_mode());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `-o` into a directory that does not exist names the directory, not a temporary file.
    #[test]
    fn an_output_in_a_missing_directory_names_the_directory() {
        for resume in [false, true] {
            let dst = Output::File("/nonexistent-ethbcast-dir/sub/out.bin".into());
            let Err(e) = Sink::open(&dst, &Arc::default(), resume, false) else {
                panic!("opened an output in a missing directory");
            };
            assert_eq!(e.code, crate::distribute::EXIT_IO);
            assert!(
                e.msg
                    .contains("directory /nonexistent-ethbcast-dir/sub does not exist"),
                "{}",
                e.msg
            );
            assert!(!e.msg.contains(".part"), "{}", e.msg);
        }
    }

    /// `--no-clobber`: an existing file is refused at the start and kept; one that appears
    /// during the transfer is kept and the data discarded; without it a file is replaced.
    #[test]
    fn no_clobber_never_replaces_a_file() {
        let dir = scratch("noclobber");
        let there = dir.join("there");
        std::fs::write(&there, b"precious").unwrap();
        let Err(e) = Sink::open(&Output::File(there.clone()), &Arc::default(), false, true) else {
            panic!("--no-clobber opened an existing file");
        };
        assert!(e.msg.contains("--no-clobber"), "{}", e.msg);
        assert_eq!(std::fs::read(&there).unwrap(), b"precious");
        for resume in [false, true] {
            let late = dir.join(format!("late-{resume}"));
            let mut sink =
                Sink::open(&Output::File(late.clone()), &Arc::default(), resume, true).unwrap();
            sink.write(b"received").unwrap();
            std::fs::write(&late, b"someone's").unwrap();
            let e = sink.commit().unwrap_err();
            assert!(e.msg.contains("appeared during the transfer"), "{}", e.msg);
            assert_eq!(std::fs::read(&late).unwrap(), b"someone's");
        }
        let mut sink =
            Sink::open(&Output::File(there.clone()), &Arc::default(), false, false).unwrap();
        sink.write(b"replaced").unwrap();
        sink.commit().unwrap();
        assert_eq!(std::fs::read(&there).unwrap(), b"replaced");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".part")), "{names:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two output names that differ only in bytes that are not UTF-8 have partial outputs of
    /// their own: the partial name keeps the name's bytes.
    #[test]
    fn partial_names_keep_the_bytes_of_the_name() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let a = Path::new(std::ffi::OsStr::from_bytes(b"/d/image-\xff.raw"));
        let b = Path::new(std::ffi::OsStr::from_bytes(b"/d/image-\xfe.raw"));
        let (pa, pb) = (partial_name(a).unwrap(), partial_name(b).unwrap());
        assert_ne!(pa, pb);
        assert_eq!(
            pa.into_os_string().into_vec(),
            b"/d/.image-\xff.raw.ethbcast.part".to_vec()
        );
    }

    #[test]
    fn only_dev_null_itself_gets_the_retaining_ring() {
        assert!(null_output(&Output::File("/dev/null".into())));
        let dir = std::env::temp_dir().join(format!("ebc-null-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.join("l");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        // A file, a link to /dev/null (replaced by the file, never written in place), a
        // command, a name that does not exist yet.
        assert!(!null_output(&Output::File(file)));
        assert!(!null_output(&Output::File(link)));
        assert!(!null_output(&Output::Command("cat".into())));
        assert!(!null_output(&Output::File(dir.join("new"))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
