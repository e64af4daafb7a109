//! The receiving side: join, write the stream as it arrives, verify, commit or discard.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast::{Dest, Event, JoinSeen, Key, Message, Piece, Rank, Role, Stream};
use serde::Serialize;

use super::direct;
use super::extract::Extract;
use super::{Fatal, LinkOptions, EXIT_FAILED, EXIT_INTERRUPTED};
use crate::transfer::{
    Budget, Data, DigestAlgo, Final, Msg, Offer, PieceDigest, PrefixHasher, Progress, StreamHasher,
    ABORT, EVICTED,
};

/// Where the stream goes.
#[derive(Debug, Clone)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// A file, written under a temporary name and renamed after the digest matched.
    File(PathBuf),
    /// The standard input of `sh -c COMMAND`.
    Command(String),
    /// A directory (`--extract`): the stream is a tar archive (`send -i DIR`), unpacked into a
    /// fresh directory next to this one and renamed to it after the digest matched (see
    /// `super::extract`).
    Tree(PathBuf),
}

/// What `ethbcast recv` was asked to do.
#[derive(Debug, Clone)]
pub struct RecvArgs {
    /// Interface, group, backend.
    pub link: LinkOptions,
    /// Output.
    pub output: Output,
    /// Give up after this long without a frame from the sender.
    pub timeout: Duration,
    /// How long to wait for a sender's roster.
    pub wait: Duration,
    /// Refuse a stream larger than this many bytes (`--max-bytes`); the header's total is
    /// enforced in any case.
    pub max_bytes: Option<u64>,
    /// No chatter on stderr.
    pub quiet: bool,
    /// The user to run as once the link is open (`--user`).
    pub user: Option<String>,
    /// Into a file: keep what arrived under a fixed partial name when the transfer does not
    /// complete, and offer it to the next sender (`--resume`, see [`partial_name`]).
    pub resume: bool,
    /// Write the counters to this file every second and at the end (`--status-file`).
    pub status_file: Option<PathBuf>,
    /// Into a file: never replace an existing one (`--no-clobber`).
    pub no_clobber: bool,
}

/// A receiver's outcome: of a transfer, or of a run that ended before one began (a join
/// timeout, an interruption, a link or output error: `error` says which; `--json` writes one
/// on every exit but a usage error).
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    /// Completed and verified.
    pub ok: bool,
    /// Rank in the transfer (none before the join).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<Rank>,
    /// Bytes received.
    pub bytes: u64,
    /// Seconds from the header to the end.
    pub seconds: f64,
    /// Digest of what was received (`xxh3:HEX` or `blake3:HEX`; empty if nothing was).
    pub digest: String,
    /// Whether the data went from the link's frames to the output with no copy in between
    /// (a ring link, and `/dev/null` for output: see `direct.rs`).
    pub direct: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Exit code.
    pub code: u8,
    /// Bytes at the start of the stream taken from the partial output of an earlier transfer
    /// (`--resume`), not received.
    pub resumed: u64,
    /// What the receiver's engine did.
    pub counters: RecvCounters,
}

/// A receiver's counters, in its report, its status file, and (sent before its final report)
/// the sender's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecvCounters {
    /// Stream bytes received from the link (without those `resumed`).
    pub data_bytes: u64,
    /// Bytes at the start of the stream kept from a partial output (`--resume`).
    pub resumed: u64,
    /// Bytes the output took (the file, the pipe, the command).
    pub written: u64,
    /// Requests for repair sent (NACK frames), to the sender or to fellow receivers.
    pub repair_requests: u64,
    /// Of those, to fellow receivers (peer repair).
    pub repair_requests_to_peers: u64,
    /// Frames this receiver repaired for fellow receivers.
    pub repairs_served: u64,
    /// Acknowledgement frames sent.
    pub ack_frames: u64,
    /// Frames received twice (a repair that crossed the original, say).
    pub duplicate_frames: u64,
}

/// First byte of the point-to-point message carrying a receiver's [`RecvCounters`].
const COUNTERS: u8 = b'C';

/// The sender's rank: the root of the stream, to whom a receiver reports.
const SENDER: Rank = Rank::new(0);

impl RecvCounters {
    /// What `node` counted so far, with the stream's bytes as the receiver sees them.
    fn of(node: &Stream, data_bytes: u64, resumed: u64, written: u64) -> RecvCounters {
        let st = node.stats();
        RecvCounters {
            data_bytes,
            resumed,
            written,
            repair_requests: st.nack_frames,
            repair_requests_to_peers: st.peer_nacks,
            repairs_served: st.peer_repairs,
            ack_frames: st.ack_frames + st.tree_ack_frames,
            duplicate_frames: st.drops.duplicate,
        }
    }

    fn fields(&self) -> [u64; 8] {
        [
            self.data_bytes,
            self.resumed,
            self.written,
            self.repair_requests,
            self.repair_requests_to_peers,
            self.repairs_served,
            self.ack_frames,
            self.duplicate_frames,
        ]
    }

    /// Encodes (`C` and eight u64).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![COUNTERS];
        for f in self.fields() {
            v.extend_from_slice(&f.to_be_bytes());
        }
        v
    }

    /// Decodes.
    pub fn decode(m: &[u8]) -> Option<RecvCounters> {
        if m.len() != 65 || m[0] != COUNTERS {
            return None;
        }
        let f = |i: usize| u64::from_be_bytes(m[1 + 8 * i..9 + 8 * i].try_into().expect("8"));
        Some(RecvCounters {
            data_bytes: f(0),
            resumed: f(1),
            written: f(2),
            repair_requests: f(3),
            repair_requests_to_peers: f(4),
            repairs_served: f(5),
            ack_frames: f(6),
            duplicate_frames: f(7),
        })
    }
}

/// A receiver's status file (`--status-file`): what it did so far.
#[derive(Debug, Clone, Serialize)]
struct RecvStatus<'a> {
    /// `waiting` (for a sender), `receiving`, `completed` or `failed`.
    state: &'a str,
    rank: u16,
    /// Stream bytes this receiver holds (kept and received).
    bytes: u64,
    /// The stream's size, if the sender said.
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<u64>,
    seconds: f64,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    counters: RecvCounters,
}

impl RecvStatus<'static> {
    /// Before the join.
    fn waiting() -> RecvStatus<'static> {
        RecvStatus {
            state: "waiting",
            rank: 0,
            bytes: 0,
            total: None,
            seconds: 0.0,
            error: "",
            counters: RecvCounters::default(),
        }
    }
}

enum Sink {
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
pub(super) struct Counted<W> {
    inner: W,
    count: Arc<AtomicU64>,
    step: usize,
}

impl<W> Counted<W> {
    /// `piped`: the output is a pipe or a socket (see [`Counted`]).
    pub(super) fn new(inner: W, count: &Arc<AtomicU64>, piped: bool) -> Counted<W> {
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
fn null_output(out: &Output) -> bool {
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

pub(super) fn write_err(what: &str, e: std::io::Error) -> Fatal {
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
    fn in_place(out: File, name: String, written: &Arc<AtomicU64>) -> Sink {
        let piped = is_piped(&out);
        Sink::InPlace(
            BufWriter::with_capacity(1 << 20, Counted::new(out, written, piped)),
            name,
        )
    }

    /// Opens the output; `written` counts the bytes it takes (see [`Counted`]). `resume`:
    /// into a regular file, its partial output (see [`open_partial`]).
    fn open(
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
    fn start(&mut self) -> Result<(), Fatal> {
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

    fn write(&mut self, data: &[u8]) -> Result<(), Fatal> {
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
    fn hash_prefix(
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
    fn resume_at(&mut self, offset: u64) -> Result<(), Fatal> {
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
    fn discard(&mut self) {
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
    fn direct(&self) -> Option<(File, String)> {
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
    fn commit(&mut self) -> Result<(), Fatal> {
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
    fn handle(&self) -> SinkHandle {
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
    fn abort(&mut self) {
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
struct Guard(Sink);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// See [`Sink::handle`].
enum SinkHandle {
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
    fn discard(&self) {
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
    fn remove(&self) {
        match self {
            SinkHandle::File { tmp, .. } => {
                let _ = std::fs::remove_file(tmp);
            }
            h => h.discard(),
        }
    }
}

/// Messages of data in the writer's queue at most (about a megabyte each by default).
///
/// Why a queue: writing (and hashing) happens on its own thread so that a disk that pauses or
/// a `-O` command that reads in bursts does not stop the protocol loop, which must keep
/// acknowledging and asking for repairs. When the queue is full the loop waits for it: the
/// receiver then stops acknowledging, and the sender's shared buffer paces the transfer to
/// what this receiver drains (or, if it drains nothing for the sender's timeout, evicts it).
const WRITE_QUEUE: usize = 32;

/// What the protocol loop hands the writer thread.
enum Job {
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
struct Written {
    result: Result<(), Fatal>,
    bytes: u64,
    /// Resumed past 0: the digest of the output from its first byte, as the writer hashed it
    /// (the protocol loop's covers only what it received).
    digest: Option<[u8; 32]>,
}

/// The writer thread and its queue.
struct Writer {
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<Written>>,
    handle: SinkHandle,
    done: Option<Written>,
    /// Set when the protocol loop gives up: the writer stops at its next job instead of
    /// writing out what is still queued.
    abandoned: Arc<AtomicBool>,
    /// Bytes the output took so far (see [`Counted`]).
    written: Arc<AtomicU64>,
    /// The answer to [`Job::Offer`]: bytes held and their digest.
    offer: Arc<Mutex<Option<Offer>>>,
}

/// How [`Writer::push`] ended.
enum Pushed {
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
fn stalled(patience: Duration) -> Fatal {
    Fatal::new(
        EXIT_FAILED,
        format!(
            "the output took no data for {}: is the -O command reading its input?",
            super::render_seconds(patience)
        ),
    )
}

impl Writer {
    fn spawn(sink: Sink, written: Arc<AtomicU64>) -> Result<Writer, Fatal> {
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
    fn push(&mut self, job: Job, stop: &AtomicBool, patience: Duration) -> Pushed {
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
    fn offer(&self) -> Option<Offer> {
        self.offer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Bytes the output took so far.
    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Gives the output up from the protocol loop: the temporary file is removed, the command
    /// killed, and the writer stops at its next job, even while it is stuck writing.
    fn abandon(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
        self.handle.discard();
    }

    /// The writer stopped on its own (an error, or done after `Verify`).
    fn stopped(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Closes the queue and waits for the writer. `None` if it did not end within `patience`
    /// (stuck writing): the output is then discarded from here. Later calls return the same.
    fn finish(&mut self, patience: Duration) -> Option<Written> {
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

/// What the engine had consumed of the stream when its last message ended: data bytes and
/// their digest (`None` before a header, see [`PieceDigest::digest`]). The observer keeps the
/// digest's state to itself and shares only this, once a message.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hashed {
    bytes: u64,
    digest: Option<(DigestAlgo, [u8; 32])>,
}

impl Hashed {
    pub(super) fn of(d: &PieceDigest) -> Hashed {
        Hashed {
            bytes: d.bytes(),
            digest: d.digest(),
        }
    }
}

/// The shared result, whatever a panic elsewhere left it as (a plain value: nothing to break).
pub(super) fn lock(d: &Mutex<Hashed>) -> std::sync::MutexGuard<'_, Hashed> {
    d.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether what the engine consumed of the stream is what the trailer says the sender sent:
/// as many data bytes, the same digest.
fn check_digest(seen: &Mutex<Hashed>, bytes: u64, digest: &[u8; 32]) -> Result<(), Fatal> {
    let d = *lock(seen);
    match d.digest {
        Some((_, mine)) if d.bytes == bytes && &mine == digest => Ok(()),
        Some((algo, mine)) => Err(Fatal::new(
            EXIT_FAILED,
            format!(
                "integrity check failed: got {} bytes {}, the sender sent {bytes} bytes {}",
                d.bytes,
                algo.render(&mine),
                algo.render(digest)
            ),
        )),
        None => Err(Fatal::new(
            EXIT_FAILED,
            "integrity check failed: stream data came before its header",
        )),
    }
}

/// Resumed at `from`: whether the engine consumed the rest of the stream, as many data bytes
/// as the trailer's count leaves after `from` (the digest is the writer's to check).
fn check_count(seen: &Mutex<Hashed>, from: u64, bytes: u64) -> Result<(), Fatal> {
    let got = lock(seen).bytes;
    if from.checked_add(got) == Some(bytes) {
        Ok(())
    } else {
        Err(Fatal::new(
            EXIT_FAILED,
            format!("integrity check failed: resumed at byte {from} and got {got} bytes more, the sender sent {bytes} bytes"),
        ))
    }
}

fn interrupted() -> Fatal {
    Fatal::new(EXIT_INTERRUPTED, "interrupted")
}

/// What a control frame of the sender ends this receiver with, if anything: an abort or an
/// eviction notice.
fn sender_verdict(ev: &Event) -> Option<Fatal> {
    let Event::Notice {
        src: SENDER,
        body: payload,
    } = ev
    else {
        return None;
    };
    if payload.starts_with(ABORT) {
        return Some(Fatal::new(
            EXIT_INTERRUPTED,
            "the sender aborted the transfer",
        ));
    }
    if payload.starts_with(EVICTED) {
        return Some(Fatal::new(
            EXIT_FAILED,
            "evicted by the sender (this receiver was too slow or silent)",
        ));
    }
    None
}

/// How often a receiver finishing its output tells the sender how far it got (see
/// [`Progress`]).
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// After the trailer (`total` bytes in the stream): keeps answering the sender while the
/// writer delivers the rest of the stream to the output and commits it, and tells the sender
/// how far the output got. Gives up on Ctrl-C, on the sender's abort or eviction notice, and
/// when the output took no data for `patience` while bytes were left to give it (once it took
/// them all, flushing, syncing and the command's exit take what they take: the sender's
/// `--report-wait` bounds them).
fn await_writer(
    node: &mut Stream,
    w: &Writer,
    total: u64,
    stop: &AtomicBool,
    patience: Duration,
) -> Result<(), Fatal> {
    let mut seen = (w.written(), Instant::now());
    let mut told: Option<Instant> = None;
    while !w.stopped() {
        if stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        if told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
            let took = w.written();
            let p = Progress {
                took,
                all_taken: took >= total,
            };
            let _ = node.notice(Dest::Rank(Rank::new(0)), p.encode());
            told = Some(Instant::now());
        }
        node.turn(Duration::from_millis(10))?;
        while let Some(ev) = node.poll_event() {
            if let Some(f) = sender_verdict(&ev) {
                return Err(f);
            }
        }
        let now = Instant::now();
        let took = w.written();
        if took != seen.0 || took >= total {
            seen = (took, now);
        } else if now.duration_since(seen.1) > patience {
            return Err(stalled(patience));
        }
    }
    Ok(())
}

/// The longest message a receiver limited to `max_bytes` of data takes: a data message of
/// them all (after its one-byte type), and never less than the stream's other messages need.
fn longest_message(max_bytes: u64) -> usize {
    const OTHERS: usize = 64 << 10;
    usize::try_from(max_bytes.saturating_add(1))
        .unwrap_or(usize::MAX)
        .max(OTHERS)
}

/// Runs `ethbcast recv`, its steps in order: [`open`], [`join`], [`Receiving::start`],
/// [`Receiving::run`], [`Receiving::report`]. Returns the report in every case (its `code` is
/// the exit code).
pub fn run(a: &RecvArgs) -> RecvReport {
    let opened = match open(a) {
        Ok(o) => o,
        Err(f) => return RecvReport::not_started(f),
    };
    let mut seen = JoinSeen::default();
    let (mut setup, node) = join(a, opened, &mut seen);
    let node = match node {
        Ok(n) => n,
        Err(f) => {
            if let Some(st) = setup.status.as_mut() {
                let mut end = RecvStatus::waiting();
                end.state = "failed";
                end.error = &f.msg;
                st.update(&end, true);
            }
            return RecvReport::not_started(f);
        }
    };
    let mut r = Receiving::start(a, setup, node);
    let outcome = r.run();
    r.report(outcome)
}

impl RecvReport {
    /// The report of a run that ended before its transfer began.
    fn not_started(f: Fatal) -> RecvReport {
        RecvReport {
            ok: false,
            rank: None,
            bytes: 0,
            seconds: 0.0,
            digest: String::new(),
            direct: false,
            error: f.msg,
            code: f.code,
            resumed: 0,
            counters: RecvCounters::default(),
        }
    }
}

/// A receiver's link, open, before the join.
pub struct Opened {
    link: Box<dyn ethbcast::Link + Send>,
    setup: Setup,
}

/// A receiver's output, open, its status file and its interruption flag.
pub struct Setup {
    /// The link has room for frames the receiver keeps in it (see
    /// `LinkOptions::open_receiving`).
    retaining: bool,
    /// The output, discarded unless committed, whatever way the receiver ends.
    guard: Guard,
    /// Bytes the output took (see [`Counted`]).
    output_took: Arc<AtomicU64>,
    status: Option<super::StatusFile>,
    stop: Arc<AtomicBool>,
}

/// Step 1: opens the link; becomes `--user`, drops every capability; opens the output and
/// the status file.
pub fn open(a: &RecvArgs) -> Result<Opened, Fatal> {
    // Decided before the output is opened (the link needs the capabilities dropped below);
    // `Sink::direct` checks the output itself.
    let retaining = null_output(&a.output);
    a.link.check_up()?;
    let link = a
        .link
        .open_receiving(retaining)
        .map_err(|e| super::link_error(&a.link.iface, e))?;
    // Before any thread starts (the Ctrl-C handler's, the writer): they inherit the user and
    // the empty sets. The output is opened afterwards, with the same rights its final rename
    // has.
    if let Some(user) = &a.user {
        super::become_user(user)?;
    }
    super::drop_capabilities()?;
    let stop = super::interrupt_flag();
    let output_took = Arc::new(AtomicU64::new(0));
    let guard = Guard(Sink::open(&a.output, &output_took, a.resume, a.no_clobber)?);
    let status = match &a.status_file {
        Some(p) => Some(super::StatusFile::create(p, &RecvStatus::waiting())?),
        None => None,
    };
    if !a.quiet {
        eprintln!(
            "ethbcast: {} ({}) waiting for a sender, group {:#x}",
            a.link.iface,
            link.local_mac(),
            a.link.stream.group_id
        );
    }
    Ok(Opened {
        link,
        setup: Setup {
            retaining,
            guard,
            output_took,
            status,
            stop,
        },
    })
}

/// Step 2: waits for a sender whose roster names this host ([`LinkOptions::join`]).
pub fn join(a: &RecvArgs, o: Opened, seen: &mut JoinSeen) -> (Setup, Result<Stream, Fatal>) {
    // No message longer than `--max-bytes` allows is reserved or kept: its frames are
    // dropped as they come (see `StreamOptions::max_message`) and the transfer refused.
    let mut link = a.link.clone();
    if let Some(max) = a.max_bytes {
        link.stream.max_message = longest_message(max).min(link.stream.max_message);
    }
    let node = link.join(o.link, Role::Receiver, a.wait, &o.setup.stop, seen);
    (o.setup, node)
}

/// Why the writer stopped before the trailer (it returns its own error from `finish`).
fn writer_failed(w: &mut Writer) -> Fatal {
    match w.finish(Duration::from_secs(2)) {
        Some(Written { result: Err(e), .. }) => e,
        _ => Fatal::new(EXIT_FAILED, "the writer stopped"),
    }
}

/// Queues `job` for the writer ([`Writer::push`]), waiting at most `patience` for an output
/// that takes no data.
fn push(w: &mut Writer, job: Job, stop: &AtomicBool, patience: Duration) -> Result<(), Fatal> {
    match w.push(job, stop, patience) {
        Pushed::Queued => Ok(()),
        Pushed::Stopped => Err(writer_failed(w)),
        Pushed::Interrupted => Err(interrupted()),
        Pushed::Stalled => Err(stalled(patience)),
    }
}

/// Steps 3 and 4: the transfer, from the sender's header to its trailer and the output's
/// commit.
pub struct Receiving<'a> {
    a: &'a RecvArgs,
    node: Stream,
    rank: Rank,
    setup: Setup,
    /// What the engine consumed of the stream (see `PieceDigest`).
    seen: Arc<Mutex<Hashed>>,
    /// Written straight from the link's frames (see `super::direct`), and the direct
    /// observer's failure (an output that refused a write, data past a limit).
    direct: bool,
    failure: direct::Failure,
    start: Instant,
    writer: Option<Writer>,
    /// What this receiver accepts of the stream, from the header on.
    budget: Option<Budget>,
    /// Only frames of this transfer from the sender count as hearing from it (not frames of
    /// other groups on the segment, nor garbage).
    heard_since: Instant,
    written: Option<Written>,
    /// The offer (see `Offer`): waiting for the writer's answer, then what it said was held.
    offer_pending: bool,
    told_alive: Option<Instant>,
    offered: Option<u64>,
    /// The sender's start (see `Msg::Start`): where its data begins.
    resumed: Option<u64>,
    /// The output's content is wrong (not only incomplete): a partial output is removed.
    spoilt: bool,
    /// The header's total, and the progress bar from the header on.
    announced: Option<u64>,
    pb: Option<indicatif::ProgressBar>,
    pb_told: Option<Instant>,
}

impl<'a> Receiving<'a> {
    /// Step 3: watches the sender's data as the engine consumes it: its digest, and where
    /// both allow it, the output written straight from the link's frames.
    pub fn start(a: &'a RecvArgs, setup: Setup, mut node: Stream) -> Receiving<'a> {
        let rank = node.rank();
        let seen = Arc::new(Mutex::new(Hashed::default()));
        let shared = seen.clone();
        let failure = direct::Failure::default();
        let out = if node.link_holds_frames() {
            setup.guard.0.direct()
        } else {
            None
        };
        let direct = out.is_some();
        if let Some((out, what)) = out {
            node.keep_at_most(SENDER, direct::KEEP);
            // Frames behind a gap wait for it in the ring, not in copies (see
            // `super::direct`), where the ring was opened with room for them.
            if setup.retaining {
                node.leave_in_link(SENDER, super::RETAINED);
            }
            node.observe(
                SENDER,
                Box::new(direct::Direct::new(
                    out,
                    what,
                    a.max_bytes,
                    shared,
                    failure.clone(),
                    setup.output_took.clone(),
                )),
            );
        } else {
            let mut digest = PieceDigest::new();
            node.observe(
                SENDER,
                Box::new(move |p: &Piece<'_>| {
                    digest.piece(p);
                    if p.offset + p.bytes.len() == p.msg_len {
                        // What this loop looks at, the trailer or a failure, comes after a
                        // message ends: the result is shared once a message, not locked once
                        // a frame (a lock and an unlock per frame were half the observer's
                        // samples).
                        *lock(&shared) = Hashed::of(&digest);
                    }
                }),
            );
        }
        Receiving {
            a,
            node,
            rank,
            setup,
            seen,
            direct,
            failure,
            start: Instant::now(),
            writer: None,
            budget: None,
            heard_since: Instant::now(),
            written: None,
            offer_pending: false,
            told_alive: None,
            offered: None,
            resumed: None,
            spoilt: false,
            announced: None,
            pb: None,
            pb_told: None,
        }
    }

    /// Step 4: receives until the output is committed (`Ok`) or the transfer fails here.
    pub fn run(&mut self) -> Result<(), Fatal> {
        loop {
            self.tick()?;
            while let Some(ev) = self.node.poll_event() {
                if self.on_event(ev)? {
                    return Ok(());
                }
            }
        }
    }

    /// The direct observer's failure, if it had one.
    fn direct_failed(&self) -> Option<Fatal> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One turn of the link, and everything checked once a turn: an interruption, the
    /// writer, limits, progress, the status file, the offer, the sender's silence.
    fn tick(&mut self) -> Result<(), Fatal> {
        let a = self.a;
        if self.setup.stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        if let Some(w) = self.writer.as_mut() {
            if w.stopped() {
                return Err(writer_failed(w));
            }
        }
        self.node.turn(Duration::from_millis(20))?;
        if let Some(max) = a.max_bytes.filter(|_| self.node.stats().drops.too_long > 0) {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!("the sender sent a message longer than --max-bytes {max} allows: refused"),
            ));
        }
        if let Some(e) = self.direct.then(|| self.direct_failed()).flatten() {
            return Err(e);
        }
        self.show_progress();
        // While the writer reads the partial output, the sender hears that this receiver is
        // alive (it waits for every offer).
        if self.offer_pending
            && self
                .told_alive
                .is_none_or(|t| t.elapsed() >= PROGRESS_EVERY)
        {
            let p = Progress {
                took: 0,
                all_taken: false,
            };
            let _ = self.node.notice(Dest::Rank(SENDER), p.encode());
            self.told_alive = Some(Instant::now());
        }
        if let (true, Some(o)) = (
            self.offer_pending,
            self.writer.as_ref().and_then(Writer::offer),
        ) {
            self.offer_pending = false;
            self.offered = Some(o.held);
            self.node.send_to(SENDER, o.encode())?;
        }
        let heard = self
            .node
            .last_heard(SENDER)
            .map_or(self.heard_since, |t| t.max(self.heard_since));
        if Instant::now().saturating_duration_since(heard) > a.timeout {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!(
                    "nothing heard from the sender for {:.0} s: giving up",
                    a.timeout.as_secs_f64()
                ),
            ));
        }
        Ok(())
    }

    /// Stream bytes this receiver holds (kept and received).
    fn held(&self) -> u64 {
        lock(&self.seen).bytes + self.resumed.unwrap_or(0)
    }

    /// The progress bar and the status file.
    fn show_progress(&mut self) {
        let held = self.held();
        if let Some(pb) = self.pb.as_ref() {
            pb.set_position(held);
            if self.pb_told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                pb.set_message(format!("{} repairs asked", self.node.stats().nack_frames));
                self.pb_told = Some(Instant::now());
            }
        }
        if let Some(st) = self.setup.status.as_mut() {
            let c = RecvCounters::of(
                &self.node,
                held - self.resumed.unwrap_or(0),
                self.resumed.unwrap_or(0),
                self.setup.output_took.load(Ordering::Relaxed),
            );
            let state = if self.writer.is_some() {
                "receiving"
            } else {
                "waiting"
            };
            let now = RecvStatus {
                state,
                rank: self.rank.get(),
                bytes: held,
                total: self.announced,
                seconds: self.start.elapsed().as_secs_f64(),
                error: "",
                counters: c,
            };
            st.update(&now, false);
        }
    }

    /// One event of the link: the stream's messages, and the sender's verdicts. `Ok(true)`
    /// once the output is committed.
    fn on_event(&mut self, ev: Event) -> Result<bool, Fatal> {
        let Event::Delivered(Message {
            root: SENDER, data, ..
        }) = ev
        else {
            return match sender_verdict(&ev) {
                Some(f) => Err(f),
                None => Ok(false),
            };
        };
        match Msg::decode(data) {
            Ok(Msg::Header { total, digest, .. }) if self.writer.is_none() => {
                self.on_header(total, digest)?
            }
            Ok(Msg::Start { offset }) if self.resumed.is_none() => self.on_start(offset)?,
            Ok(Msg::Data(d)) => self.on_data(d)?,
            Ok(Msg::Trailer { bytes, digest }) => {
                self.on_trailer(bytes, digest)?;
                return Ok(true);
            }
            Ok(Msg::Abort(why)) => {
                return Err(Fatal::new(
                    EXIT_INTERRUPTED,
                    format!("the sender aborted the transfer ({why})"),
                ))
            }
            Ok(Msg::Header { .. }) => {
                return Err(Fatal::new(EXIT_FAILED, "a second stream header"))
            }
            Ok(Msg::Start { .. }) => return Err(Fatal::new(EXIT_FAILED, "a second stream start")),
            Err(e) => return Err(Fatal::new(EXIT_FAILED, e)),
        }
        Ok(false)
    }

    /// The header: the stream's budget, the output started, the writer, and the offer.
    fn on_header(&mut self, total: Option<u64>, digest: DigestAlgo) -> Result<(), Fatal> {
        let a = self.a;
        // Before the output starts: a stream refused here never runs a command or writes a
        // byte.
        let b =
            Budget::new(total, a.max_bytes).map_err(|e| Fatal::new(EXIT_FAILED, e.to_string()))?;
        self.budget = Some(b);
        if !a.quiet {
            eprintln!(
                "ethbcast: rank {}: receiving {}",
                self.rank,
                total.map_or("a stream".into(), |t| format!("{t} bytes"))
            );
        }
        self.announced = total;
        self.pb = Some(super::send::progress_bar(total, a.quiet));
        let sink = &mut self.setup.guard.0;
        sink.start()?;
        let partial = matches!(sink, Sink::File { keep: true, .. });
        let out = std::mem::replace(sink, Sink::Done);
        let mut w = Writer::spawn(out, self.setup.output_took.clone())?;
        // What this receiver holds of the stream already, for the sender's start: a partial
        // output's (once the writer read it), else nothing.
        match (partial, total) {
            (true, Some(limit)) => {
                let job = Job::Offer {
                    algo: digest,
                    key: a.link.stream.key.as_ref().map(crate::transfer::offer_key),
                    limit,
                };
                push(&mut w, job, &self.setup.stop, a.timeout)?;
                self.offer_pending = true;
            }
            _ => {
                self.offered = Some(0);
                let none = Offer {
                    held: 0,
                    digest: [0; 32],
                };
                self.node.send_to(SENDER, none.encode())?;
            }
        }
        self.writer = Some(w);
        Ok(())
    }

    /// The sender's start: where its data begins (0, or where the partial output ends).
    fn on_start(&mut self, offset: u64) -> Result<(), Fatal> {
        let (Some(w), Some(b)) = (self.writer.as_mut(), self.budget.as_mut()) else {
            return Err(Fatal::new(EXIT_FAILED, "stream start before its header"));
        };
        let held = self.offered.unwrap_or(0);
        if offset > held {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!("the sender starts at byte {offset}, this receiver holds {held} bytes of the stream"),
            ));
        }
        if let Err(e) = b.take(offset) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        if offset > 0 && !self.a.quiet {
            let rank = self.rank;
            let say = || {
                eprintln!(
                    "ethbcast: rank {rank}: resuming at byte {offset} (the partial output's first {offset} bytes match the sender's input)"
                )
            };
            match self.pb.as_ref() {
                Some(pb) => pb.suspend(say),
                None => say(),
            }
        }
        push(w, Job::Start(offset), &self.setup.stop, self.a.timeout)?;
        self.resumed = Some(offset);
        Ok(())
    }

    /// A data message: to the writer (unless the observer writes it).
    fn on_data(&mut self, d: Data) -> Result<(), Fatal> {
        let (Some(w), Some(b), Some(_)) =
            (self.writer.as_mut(), self.budget.as_mut(), self.resumed)
        else {
            return Err(Fatal::new(
                EXIT_FAILED,
                "stream data before its header and start",
            ));
        };
        if self.direct {
            // Written by the observer, which keeps its own budget.
            return Ok(());
        }
        if let Err(e) = b.take(d.bytes().len() as u64) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        push(w, Job::Data(d), &self.setup.stop, self.a.timeout)
    }

    /// The trailer: the byte count and digest checked, the output committed.
    fn on_trailer(&mut self, bytes: u64, digest: [u8; 32]) -> Result<(), Fatal> {
        let a = self.a;
        let (Some(w), Some(b)) = (self.writer.as_mut(), self.budget.as_ref()) else {
            return Err(Fatal::new(EXIT_FAILED, "stream trailer before its header"));
        };
        if let Err(e) = b.end(bytes) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        if self.direct {
            // Copies the engine handed over outside a batch go out now.
            self.node.flush_observer();
            if let Some(e) = self
                .failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(e);
            }
            // Nothing else writes to the output in this mode.
            let n = self.setup.output_took.load(Ordering::Relaxed);
            push(w, Job::Direct(n), &self.setup.stop, a.timeout)?;
        }
        // Resumed: the data received is the rest of the stream, whose digest the writer
        // checks with the bytes the output kept.
        let from = self.resumed.unwrap_or(0);
        let checked = if from > 0 {
            check_count(&self.seen, from, bytes)
        } else {
            check_digest(&self.seen, bytes, &digest)
        };
        if let Err(e) = checked {
            self.spoilt = true;
            return Err(e);
        }
        let job = Job::Verify {
            bytes,
            digest: (from > 0).then_some(digest),
        };
        push(w, job, &self.setup.stop, a.timeout)?;
        await_writer(&mut self.node, w, bytes, &self.setup.stop, a.timeout)?;
        let done = w.finish(Duration::ZERO);
        let result = match &done {
            Some(d) => d.result.as_ref().map(|_| ()).map_err(Clone::clone),
            None => Err(Fatal::new(EXIT_FAILED, "the writer stopped")),
        };
        self.written = done;
        result
    }

    /// Step 5: the outcome. A failure discards the output (a partial output is kept for
    /// `--resume` unless what it holds is wrong); the sender is told (best effort for
    /// failures) what this receiver counted and how it ended.
    pub fn report(mut self, outcome: Result<(), Fatal>) -> RecvReport {
        let (ok, error, code) = match &outcome {
            Ok(()) => (true, String::new(), super::EXIT_OK),
            Err(f) => {
                self.discard();
                (false, f.msg.clone(), f.code)
            }
        };
        if let Some(pb) = self.pb.take() {
            pb.finish_and_clear();
        }
        let bytes = self.written.as_ref().map_or(0, |w| w.bytes);
        let digest = match (&self.written, lock(&self.seen).digest) {
            (Some(w), Some((algo, d))) => algo.render(&w.digest.unwrap_or(d)),
            _ => String::new(),
        };
        let resumed = self.resumed.unwrap_or(0);
        let counters = RecvCounters::of(
            &self.node,
            lock(&self.seen).bytes,
            resumed,
            self.setup.output_took.load(Ordering::Relaxed),
        );
        let report = Final {
            ok,
            bytes,
            error: error.clone(),
        };
        let _ = self.node.send_to(SENDER, counters.encode());
        if self.node.send_to(SENDER, report.encode()).is_ok() {
            let patience = if ok {
                Duration::from_secs(3)
            } else {
                Duration::from_millis(500)
            };
            let _ = self.node.settle(patience);
        }
        let seconds = self.start.elapsed().as_secs_f64();
        let held = self.held();
        if let Some(st) = self.setup.status.as_mut() {
            let end = RecvStatus {
                state: if ok { "completed" } else { "failed" },
                rank: self.rank.get(),
                bytes: held,
                total: self.announced,
                seconds,
                error: &error,
                counters,
            };
            st.update(&end, true);
        }
        RecvReport {
            ok,
            rank: Some(self.rank),
            bytes,
            seconds,
            digest,
            direct: self.direct,
            error,
            code,
            resumed,
            counters,
        }
    }

    /// Discards the output, wherever it is: still here, or with the writer (which may be
    /// stuck writing to a command that does not read: it is killed first).
    fn discard(&mut self) {
        let sink = &mut self.setup.guard.0;
        if self.spoilt {
            sink.discard();
        } else {
            sink.abort();
        }
        if let Some(w) = self.writer.as_mut() {
            if !w.stopped() {
                w.abandon();
            }
            self.written = w.finish(Duration::from_millis(500));
            if self.spoilt {
                w.handle.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a digest fed the header and one data message of `data`, in two pieces each,
    /// shares.
    fn digest_of(data: &[u8]) -> Mutex<Hashed> {
        let mut d = PieceDigest::new();
        let header = Msg::Header {
            total: Some(data.len() as u64),
            chunk: 1 << 20,
            digest: crate::transfer::DigestAlgo::Xxh3,
        }
        .encode();
        for (id, m) in [header, Msg::Data(Data::new(data)).encode()]
            .iter()
            .enumerate()
        {
            let half = m.len() / 2;
            for (offset, bytes) in [(0, &m[..half]), (half, &m[half..])] {
                d.piece(&ethbcast::Piece {
                    msg_id: id as u64,
                    msg_len: m.len(),
                    offset,
                    bytes,
                    held: false,
                });
            }
        }
        Mutex::new(Hashed::of(&d))
    }

    fn xxh3(data: &[u8]) -> [u8; 32] {
        let mut h = crate::transfer::StreamHasher::new(crate::transfer::DigestAlgo::Xxh3);
        h.update(data);
        h.finalize()
    }

    #[test]
    fn the_trailer_is_checked_against_what_the_engine_consumed() {
        let data = b"the stream's bytes";
        let seen = digest_of(data);
        assert!(check_digest(&seen, data.len() as u64, &xxh3(data)).is_ok());
        let e = check_digest(&seen, data.len() as u64, &xxh3(b"other bytes")).unwrap_err();
        assert_eq!(e.code, EXIT_FAILED);
        assert!(e.msg.contains("integrity check failed"), "{}", e.msg);
        let e = check_digest(&seen, data.len() as u64 + 1, &xxh3(data)).unwrap_err();
        assert!(e.msg.contains("the sender sent 19 bytes"), "{}", e.msg);
        let e = check_digest(&Mutex::new(Hashed::default()), 0, &xxh3(b"")).unwrap_err();
        assert!(e.msg.contains("before its header"), "{}", e.msg);
    }

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

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ethbcast-recv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
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
    fn counters_round_trip_and_nothing_else_parses_as_them() {
        let c = RecvCounters {
            data_bytes: 1 << 40,
            resumed: 2,
            written: 3,
            repair_requests: 4,
            repair_requests_to_peers: 5,
            repairs_served: 6,
            ack_frames: 7,
            duplicate_frames: u64::MAX,
        };
        assert_eq!(RecvCounters::decode(&c.encode()), Some(c));
        assert_eq!(RecvCounters::decode(&c.encode()[..64]), None);
        let f = Final {
            ok: true,
            bytes: 9,
            error: String::new(),
        };
        assert_eq!(RecvCounters::decode(&f.encode()), None);
        assert_eq!(Final::decode(&c.encode()), None);
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
