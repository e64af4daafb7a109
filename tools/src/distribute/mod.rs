//! `ethbcast send` / `ethbcast recv`: distribute a file or a stream to many hosts at once,
//! over the switch's hardware broadcast, reliably.
//!
//! # How a transfer goes
//!
//! 1. **Join** ([`ethbcast_proto::Join`], the library's join): the sender broadcasts a
//!    challenge with a fresh random nonce every 10 ms; every receiver answers with a hello
//!    that echoes it and carries a nonce of its own. The sender takes the first `--receivers
//!    N` distinct hosts (or exactly the hosts of `--hostfile`), then broadcasts the roster:
//!    the sender is rank 0, the receivers follow in the order they were accepted. A receiver
//!    named in the roster with its own nonce confirms it; the sender repeats the roster until
//!    everyone has. The transfer's frames then carry a group id derived from the nonces, so
//!    no frame of another transfer (an earlier one recorded and replayed, say) is taken for
//!    one of this transfer. With `--key-file` every join frame is sealed and every frame of
//!    the transfer is authenticated under a key of this session. A missing receiver ends the
//!    join after `--wait` seconds with exit code 3.
//! 2. **Stream** (`ethbcast::stream`): broadcast messages from rank 0: a header (magic, version,
//!    total size or "unknown", chunk size), chunks of `--chunk` bytes (1 MiB by default)
//!    read until EOF (so a pipe of unknown length works; a directory, `-i DIR`, is such a
//!    stream: a tar archive packed as it is read, which `recv --extract` unpacks, see
//!    [`crate::tree`] and `extract.rs`), and a trailer with the byte count
//!    and the digest of the whole stream (XXH3-128, or BLAKE3 with `--digest blake3`; the
//!    header names which). After the header every receiver offers what it holds of the stream
//!    already (`recv --resume`: the partial output of an interrupted transfer, its length and
//!    digest; else nothing), and the sender, reading a file, starts its data at the smallest
//!    offset every receiver holds if every offer's digest matches its input, else at 0 (see
//!    `crate::transfer::Offer`).
//! 3. **Rate**: by default the engine's shared retransmission buffer paces the sender: no
//!    more than `window` frames are ever unacknowledged by the slowest live receiver, and
//!    no more than a few chunks are queued in the engine. `--max-rate` adds a token bucket
//!    on the sender (`500mbit`, `1gbit`, `50MB/s`, `20MiB/s`); with it, messages shrink
//!    to about 5 ms worth of bytes so that bursts stay small.
//! 4. **Failures**: a receiver whose acknowledgement cursor has not moved and that has not
//!    been heard from for `send --timeout` seconds (3 by default) while it has data
//!    outstanding is evicted: the engine releases its buffer references and the transfer
//!    continues for the others. A receiver that reports a local failure (disk full, digest
//!    mismatch, its `-O` command failing) is evicted at once. A receiver that acknowledged
//!    everything tells the sender every 200 ms how far its output got while it finishes; one
//!    whose output took nothing for `send --timeout` (a `-O` command that stopped reading)
//!    is failed and evicted then, not after `--report-wait`. Each receiver ends by sending
//!    the sender a point-to-point completion report (bytes, digest verdict, error); the
//!    sender prints a REPORT (per receiver: rank, MAC, completed/failed/evicted, bytes,
//!    time) and exits 1 unless every receiver completed.
//! 5. **Interruption**: Ctrl-C (or SIGTERM) on the sender broadcasts an abort; receivers
//!    remove their temporary file (or kill their `-O` command) and exit 130. Ctrl-C on a
//!    receiver does the same there at once, even when its output has stopped taking data
//!    (the `-O` command runs in a process group of its own, which is killed whole). A
//!    receiver that hears nothing from the sender, or whose output takes no data, for `recv
//!    --timeout` seconds (30 by default) gives up with exit code 1 (the sender says it is
//!    alive every 250 ms, so a pause of its input is no silence). Output files are written under a fresh random temporary name
//!    (`.NAME.ethbcast-PID-RANDOM.part`, created exclusively, never through a symlink) in
//!    the target directory and renamed only after the digest matched (then the directory is
//!    synced), so a file with the final name is always complete.
//!
//! # Exit codes
//!
//! | code | meaning |
//! | ---- | ------- |
//! | 0 | every receiver completed (on a receiver: this receiver completed) |
//! | 1 | some receiver failed or was evicted (on a receiver: the transfer failed here) |
//! | 2 | usage error |
//! | 3 | join timeout: the expected receivers did not all join within `--wait` |
//! | 4 | I/O or permission error (interface, CAP_NET_RAW, input file, disk full) |
//! | 130 | interrupted (Ctrl-C, SIGTERM, or the sender aborted) |

mod direct;
mod extract;
pub mod recv;
pub mod send;

use std::time::Duration;

use ethbcast::GroupError;
use ethbcast::{JoinSeen, Role, Stream, StreamOptions};
use ethbcast::{Link, LinkError};

/// Exit code: everything completed.
pub const EXIT_OK: u8 = 0;
/// Exit code: some receiver failed (or, on a receiver, the transfer failed).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: usage error (clap uses it too).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the receivers did not all join in time.
pub const EXIT_JOIN_TIMEOUT: u8 = 3;
/// Exit code: I/O or permission error.
pub const EXIT_IO: u8 = 4;
/// Exit code: interrupted.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Default group id of distribute sessions (distinct from the library's default, so MPI-style
/// groups and transfers on one segment ignore each other).
pub const DEFAULT_GROUP_ID: u32 = 0xEBD1_5700;

/// Frames in flight by default: the shared retransmission buffer's slots on the sender and
/// the receive window (and receive queue) of each receiver. A bulk transfer needs a window
/// that covers the bandwidth-delay product including the scheduling delays of busy hosts,
/// and no more: whatever the window allows in flight beyond that waits in the receivers'
/// queues, and every repair waits behind it (on the 2-core test-bed a frame took as long as
/// the window lasts to be acknowledged by all, 12 ms at 1024 frames, 50 ms at 4096). 2048
/// frames of 1500 bytes are 3 MiB, 25 ms at 1 Gbit/s; at 1% loss they moved 920-945 Mbit/s to
/// 8 receivers where 4096 moved 860-910.
pub const DEFAULT_WINDOW: usize = 2048;

/// Received frames a receiver writing from the link's frames keeps in its ring after each
/// batch (see `direct`): the default window's worth, so that the frames that come behind a
/// gap wait there until it is filled instead of being copied (a gap lasts the quarter window
/// that NACKs are gathered for, and the repair's round trip). The ring is that much larger.
pub const RETAINED: usize = DEFAULT_WINDOW;

/// Acknowledge every this many frames by default: a quarter of the default window, so the
/// shared buffer frees in four steps per window and the sender never waits for an
/// acknowledgement while the link is busy. Each acknowledgement is a system call that runs the
/// switch and lands in the sender's ring: on the 8-receiver test-bed, unshaped, 256 MiB, going
/// from 64 to 512 cut each receiver's `sendto`s from 1685 to 365 and the receivers' CPU from
/// 0.94-1.06 s to 0.80-0.93 s (same goodput; at 1% loss the sender repaired 140-154 frames
/// instead of 75-99, fellow receivers the rest). Earlier, from 8 to 64: 2.56 to 2.24 s.
pub const DEFAULT_ACK_EVERY: usize = 512;

/// An error that ends a command, with its exit code.
#[derive(Debug, Clone)]
pub struct Fatal {
    /// Exit code.
    pub code: u8,
    /// What to tell the user.
    pub msg: String,
}

impl Fatal {
    /// A fatal error with `code`.
    pub fn new(code: u8, msg: impl Into<String>) -> Fatal {
        Fatal {
            code,
            msg: msg.into(),
        }
    }
    /// An I/O error (exit 4).
    pub fn io(msg: impl Into<String>) -> Fatal {
        Fatal::new(EXIT_IO, msg)
    }
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<LinkError> for Fatal {
    fn from(e: LinkError) -> Fatal {
        Fatal::io(e.to_string())
    }
}

impl From<ethbcast::MemberError> for Fatal {
    fn from(e: ethbcast::MemberError) -> Fatal {
        Fatal::new(EXIT_FAILED, e.to_string())
    }
}

/// A link error from opening `iface`, naming the interface and, where there is one, the fix.
pub fn link_error(iface: &str, e: LinkError) -> Fatal {
    match e {
        // Names the interface already.
        LinkError::NoSuchInterface(_) => Fatal::from(e),
        LinkError::MtuTooSmall { mtu, need } => Fatal::io(format!(
            "interface {iface} has an MTU of {mtu} bytes, ethbcast needs at least {need}: ip link set {iface} mtu 1500"
        )),
        LinkError::Closed => Fatal::io(format!(
            "interface {iface}: link closed (is it up? ip link set {iface} up)"
        )),
        e => Fatal::io(format!("interface {iface}: {e}")),
    }
}

/// The interface and the stream's settings, shared by both sides.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// Interface.
    pub iface: String,
    /// Group id, backend, window, key, group address of the transfer.
    pub stream: StreamOptions,
}

impl LinkOptions {
    /// An interface that is set down hears nobody: said at once, with the fix (exit 4).
    pub fn check_up(&self) -> Result<(), Fatal> {
        match crate::doctor::admin_down(&self.iface) {
            Some((what, fix)) => Err(Fatal::io(format!("{what}: {fix}"))),
            None => Ok(()),
        }
    }

    /// Opens the interface for the transfer ([`StreamOptions::open_link`]).
    pub fn open(&self) -> Result<Box<dyn Link + Send>, LinkError> {
        self.stream.open_link(&self.iface)
    }

    /// Opens the interface for a receiver; one that is `retaining` (writing from the link's
    /// frames, see `recv::run`) gets room for [`RETAINED`] frames more than
    /// [`LinkOptions::open`], which it keeps there. Others get none: the kernel allocates and
    /// clears a ring's pages when it opens.
    pub fn open_receiving(&self, retaining: bool) -> Result<Box<dyn Link + Send>, LinkError> {
        let extra = if retaining { RETAINED } else { 0 };
        self.stream
            .open_link_sized(&self.iface, extra + self.stream.window)
    }

    /// Joins the transfer on `link` ([`Stream::join_watching`]): the sender coordinates and
    /// takes the receivers `role` names, a receiver answers the first sender whose roster
    /// names it. Gives up after `wait` (exit 3) or when `stop` is set (exit 130). Meanwhile
    /// `seen` holds what the join knows (see [`JoinSeen`]), and what points at a problem is
    /// said once as it is heard ([`Overheard`]): join frames that fail authentication, another
    /// sender on the group.
    pub fn join(
        &self,
        link: Box<dyn Link + Send>,
        role: Role,
        wait: Duration,
        stop: &std::sync::atomic::AtomicBool,
        seen: &mut JoinSeen,
    ) -> Result<Stream, Fatal> {
        let sender = role != Role::Receiver;
        // Every byte of a transfer is checked against the trailer's digest before it counts
        // (a file is renamed into place only then), so frames need no CRC over their payload.
        let opts = StreamOptions {
            end_to_end: true,
            ..self.stream.clone()
        };
        let mut told = Overheard::default();
        let joined = Stream::join_watching(
            link,
            role,
            &opts,
            wait,
            || stop.load(std::sync::atomic::Ordering::SeqCst),
            |now| {
                told.tell(now, sender);
                *seen = now.clone();
            },
        );
        joined.map_err(|e| self.join_error(e, sender))
    }

    /// What a failed join says, counting only what it knows.
    fn join_error(&self, e: GroupError, sender: bool) -> Fatal {
        let hint = if self.stream.key.is_some() {
            "the same --group-id and --key-file"
        } else {
            "the same --group-id and no key"
        };
        match e {
            GroupError::Interrupted => Fatal::new(EXIT_INTERRUPTED, "interrupted"),
            GroupError::JoinTimeout {
                expected,
                waiting,
                seen,
                ..
            } if sender => {
                let expected = expected.saturating_sub(1);
                let counted = match seen.confirmed {
                    // A roster was decided: only those that confirmed it joined.
                    Some((confirmed, of)) => format!(
                        "{} of {expected} receivers joined: {} answered, {} confirmed this sender's roster",
                        confirmed.saturating_sub(1),
                        of.saturating_sub(1),
                        confirmed.saturating_sub(1)
                    ),
                    None => format!("{} of {expected} receivers joined", seen.heard.len()),
                };
                Fatal::new(
                    EXIT_JOIN_TIMEOUT,
                    format!(
                        "join timeout: {counted} ({waiting}); is `ethbcast recv` running on every receiver, on this segment, with {hint}?"
                    ),
                )
            }
            GroupError::JoinTimeout { seen, .. } => {
                let why = seen.explain(false);
                let senders = if seen.coordinators.is_empty() || !seen.unauthenticated.is_empty() {
                    String::new()
                } else {
                    let s: Vec<String> = seen.coordinators.iter().map(|m| m.to_string()).collect();
                    format!(
                        "; heard senders {} whose rosters did not name this host",
                        s.join(", ")
                    )
                };
                Fatal::new(
                    EXIT_JOIN_TIMEOUT,
                    format!(
                        "join timeout: no sender published a roster that names this host{}{senders} (is `ethbcast send` running on this segment with {hint}, and waiting for this host?)",
                        if why.is_empty() { String::new() } else { format!("; {why}") }
                    ),
                )
            }
            GroupError::Link(l) => Fatal::from(l),
            GroupError::Member(m) => Fatal::from(m),
            GroupError::Membership(m) => Fatal::new(EXIT_USAGE, m),
            other => Fatal::new(EXIT_FAILED, format!("join: {other}")),
        }
    }
}

/// What a join has said so far (see [`LinkOptions::join`]): each source once.
#[derive(Default)]
struct Overheard {
    unauthenticated: Vec<ethbcast::MacAddr>,
    rivals: Vec<ethbcast::MacAddr>,
}

impl Overheard {
    /// Says what `seen` holds that was not said yet: on stderr, as a warning (also with
    /// `--quiet`).
    fn tell(&mut self, seen: &JoinSeen, sender: bool) {
        for (mac, n) in &seen.unauthenticated {
            if !self.unauthenticated.contains(mac) {
                self.unauthenticated.push(*mac);
                eprintln!(
                    "ethbcast: warning: {n} join frame(s) from {mac} failed authentication with this host's key: that host runs with another key (--key-file) or none"
                );
            }
        }
        if !sender {
            return;
        }
        for mac in seen.others.iter().chain(&seen.coordinators) {
            if !self.rivals.contains(mac) {
                self.rivals.push(*mac);
                eprintln!(
                    "ethbcast: warning: {mac} is sending on this group (another `ethbcast send` with this --group-id on the segment?): receivers answer the first sender that names them"
                );
            }
        }
    }
}

/// Drops every capability of the process ([`ethbcast_sys::caps::drop_all`]) once its link is
/// open: nothing after that needs one, and the code that runs afterwards parses what arrives
/// from the network and feeds files and `-O` commands. Call it before any thread starts
/// (capabilities belong to threads; later ones inherit the empty sets).
pub fn drop_capabilities() -> Result<(), Fatal> {
    let d = ethbcast_sys::caps::drop_all()
        .map_err(|e| Fatal::io(format!("after opening the link: {e}")))?;
    tracing::debug!(bounding = d.bounding, "capabilities dropped");
    Ok(())
}

/// Runs the process as `name` from now on (`recv --user`): its supplementary groups, its
/// group, its user, real, effective and saved alike, so that nothing afterwards (the output,
/// the `-O` command) can return to the user that started it. First it empties the bounding
/// set and sets `no_new_privs`, while it still may (`setresuid` clears the capability that
/// empties the set): a setuid or file-capability program that the command runs then gives
/// it nothing back. Call it once the link is open and before any thread starts; it needs
/// root (or CAP_SETPCAP, CAP_SETUID and CAP_SETGID).
pub fn become_user(name: &str) -> Result<(), Fatal> {
    use nix::unistd::{self, User};
    let user = User::from_name(name)
        .map_err(|e| Fatal::io(format!("--user {name}: cannot look the user up: {e}")))?
        .ok_or_else(|| Fatal::new(EXIT_USAGE, format!("--user {name}: no such user")))?;
    let cname = std::ffi::CString::new(name)
        .map_err(|_| Fatal::new(EXIT_USAGE, format!("--user {name:?}: not a user name")))?;
    let fail = |what: &str, e: nix::Error| {
        Fatal::io(format!(
            "--user {name}: {what}: {e} (switching users needs root, or CAP_SETUID and CAP_SETGID)"
        ))
    };
    let seal = |e: ethbcast_sys::caps::DropError| {
        Fatal::io(format!(
            "--user {name}: {e} (emptying the bounding set needs root or CAP_SETPCAP)"
        ))
    };
    ethbcast_sys::caps::empty_bounding_set().map_err(seal)?;
    ethbcast_sys::caps::set_no_new_privs().map_err(seal)?;
    unistd::initgroups(&cname, user.gid).map_err(|e| fail("initgroups", e))?;
    unistd::setresgid(user.gid, user.gid, user.gid).map_err(|e| fail("setresgid", e))?;
    unistd::setresuid(user.uid, user.uid, user.uid).map_err(|e| fail("setresuid", e))?;
    // Checked, not assumed: the process must not be able to return.
    let ids = unistd::getresuid().map_err(|e| fail("getresuid", e))?;
    let back = !user.uid.is_root() && unistd::setuid(unistd::Uid::from_raw(0)).is_ok();
    if ids.real != user.uid || ids.effective != user.uid || ids.saved != user.uid || back {
        return Err(Fatal::io(format!(
            "--user {name}: the user did not change for good"
        )));
    }
    tracing::debug!(
        uid = user.uid.as_raw(),
        gid = user.gid.as_raw(),
        "now running as {name}"
    );
    Ok(())
}

/// How often `--status-file` is written while a transfer runs.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);

/// `--status-file PATH`: the counters of a running transfer as JSON, written every
/// [`STATUS_EVERY`] and at the end, each time whole: into a fresh temporary file next to PATH,
/// renamed over it, so a reader never sees half of one.
///
/// Why a fresh random name each time, created exclusively and never through a link: the
/// directory may be writable by others (`/tmp`, a shared monitoring directory). A name they
/// can predict lets them plant a FIFO there, whose `open` blocks the sender's protocol loop
/// (every receiver then times out), or a file of their own that the rename makes the status
/// file. Whatever exists under a drawn name is skipped, never opened.
pub struct StatusFile {
    path: std::path::PathBuf,
    last: Option<std::time::Instant>,
    warned: bool,
}

/// Fresh temporary names tried per write at most.
const STATUS_TRIES: usize = 16;

impl StatusFile {
    /// Writes `first` to `path` at once: a path that cannot be written is an error before the
    /// transfer begins.
    pub fn create(
        path: &std::path::Path,
        first: &impl serde::Serialize,
    ) -> Result<StatusFile, Fatal> {
        if path.file_name().is_none() {
            return Err(Fatal::new(
                EXIT_USAGE,
                format!("--status-file {}: not a file name", path.display()),
            ));
        }
        let mut f = StatusFile {
            path: path.to_path_buf(),
            last: None,
            warned: false,
        };
        f.write_now(first)
            .map_err(|e| Fatal::io(format!("--status-file {}: {e}", path.display())))?;
        Ok(f)
    }

    /// A temporary file next to the status file, under a fresh random name (`.NAME.RANDOM.tmp`,
    /// from the bytes of NAME), created exclusively and not through a symbolic link.
    fn fresh_temp(&self) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
        use std::os::unix::fs::OpenOptionsExt;
        let name = self.path.file_name().unwrap_or_default();
        for _ in 0..STATUS_TRIES {
            let mut tmp = std::ffi::OsString::from(".");
            tmp.push(name);
            tmp.push(format!(".{:016x}.tmp", rand::random::<u64>()));
            let tmp = self.path.with_file_name(tmp);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&tmp)
            {
                Ok(f) => return Ok((tmp, f)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "{STATUS_TRIES} fresh temporary names were taken"
        )))
    }

    fn write_now(&mut self, v: &impl serde::Serialize) -> std::io::Result<()> {
        use std::io::Write;
        self.last = Some(std::time::Instant::now());
        let mut text = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
        text.push(b'\n');
        let (tmp, mut f) = self.fresh_temp()?;
        let r = f.write_all(&text).and_then(|()| {
            drop(f);
            std::fs::rename(&tmp, &self.path)
        });
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    /// Writes `v` if [`STATUS_EVERY`] passed since the last time (`force`: now). A failure is
    /// a warning, once: the transfer goes on.
    pub fn update(&mut self, v: &impl serde::Serialize, force: bool) {
        if !force && self.last.is_some_and(|t| t.elapsed() < STATUS_EVERY) {
            return;
        }
        if let Err(e) = self.write_now(v) {
            if !self.warned {
                tracing::warn!("--status-file {}: {e}", self.path.display());
                self.warned = true;
            }
        }
    }
}

/// The warning `send` and `recv` print once when run without a key (`--insecure`).
pub const INSECURE_WARNING: &str = "ethbcast: warning: no group key (--insecure): every byte crosses the segment in the clear, and any host of this segment can join, inject or abort the transfer, and answer a receiver as its sender with data and a digest of its own";

/// Why `send` or `recv` refuse to start without a key (a usage error, before any link is
/// opened).
pub fn no_key_error() -> Fatal {
    Fatal::new(
        EXIT_USAGE,
        "no group key: create one with `ethbcast keygen FILE`, copy FILE to every host (mode 0600) \
         and pass `--key-file FILE` (or set ETHBCAST_KEY_FILE). Without a key any host of the \
         segment can take part or act as the sender: `--insecure` runs so anyway",
    )
}

/// Reads a group key file ([`ethbcast::read_key_file`], the one reading the C ABI
/// and the MPI interposer share; see there for its forms). A file that is not well formed,
/// an empty passphrase or a file others may read is a usage error; an unreadable file is an
/// I/O error.
pub fn read_key_file(path: &std::path::Path, group_id: u32) -> Result<ethbcast::Key, Fatal> {
    use ethbcast::KeyFileError;
    ethbcast::read_key_file(path, group_id).map_err(|e| match e {
        KeyFileError::Io { .. } => Fatal::io(e.to_string()),
        _ => Fatal::new(EXIT_USAGE, e.to_string()),
    })
}

pub use crate::testbed::units::NO_LIMIT;

/// The progress bar on stderr (hidden when stderr is not a terminal, or `quiet`).
fn progress_bar(total: Option<u64>, quiet: bool) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    if quiet {
        return ProgressBar::hidden();
    }
    let (pb, tpl) = match total {
        Some(t) => (
            ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
            "{spinner} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        ),
        None => (
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            "{spinner} [{elapsed_precise}] {bytes} {binary_bytes_per_sec} {msg}",
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(tpl) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// `d` for messages: seconds, or "no limit".
pub fn render_seconds(d: Duration) -> String {
    if d >= NO_LIMIT {
        "no limit".into()
    } else {
        format!("{:.0} s", d.as_secs_f64())
    }
}

/// Formats bytes per second as Mbit/s.
pub fn mbit(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / d.as_secs_f64().max(1e-9) / 1e6
}

/// An interruption flag set by Ctrl-C / SIGTERM (installed once per process).
pub fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        let g = f.clone();
        // If a handler is already installed (tests in one process), polling the flag
        // simply never fires.
        let _ = ctrlc::set_handler(move || g.store(true, Ordering::SeqCst));
        f
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_errors_carry_their_exit_codes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ethbcast-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8], mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let raw = format!("ethbcast-key-v1 {}\n", "a5".repeat(32));
        assert_eq!(
            read_key_file(&write("raw", raw.as_bytes(), 0o600), 7).unwrap(),
            [0xA5; 32].into()
        );
        let phrase =
            read_key_file(&write("phrase", b"  correct horse\nignored\n", 0o600), 7).unwrap();
        assert_eq!(
            phrase,
            ethbcast::key_from_passphrase("correct horse", 7).unwrap()
        );
        let empty = read_key_file(&write("empty", b"\n  \n", 0o600), 7).unwrap_err();
        assert_eq!(empty.code, EXIT_USAGE);
        assert!(empty.msg.contains("empty"), "{}", empty.msg);
        let open = read_key_file(&write("open", raw.as_bytes(), 0o644), 7).unwrap_err();
        assert_eq!(open.code, EXIT_USAGE);
        assert!(open.msg.contains("chmod 600"), "{}", open.msg);
        let missing = read_key_file(&dir.join("missing"), 7).unwrap_err();
        assert_eq!(missing.code, EXIT_IO);
        let none = no_key_error();
        assert_eq!(none.code, EXIT_USAGE);
        for word in ["ethbcast keygen", "--key-file", "--insecure"] {
            assert!(none.msg.contains(word), "{}", none.msg);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Options are logged and printed in errors: their `Debug` says whether there is a key,
    /// never the key.
    #[test]
    fn no_debug_output_of_the_options_holds_the_key() {
        let key = [0xAB; 32];
        let link = LinkOptions {
            iface: "eth0".into(),
            stream: StreamOptions {
                key: Some(key.into()),
                ..StreamOptions::default()
            },
        };
        let group = ethbcast::GroupOptions {
            key: Some(key.into()),
            ..ethbcast::GroupOptions::default()
        };
        for shown in [
            format!("{link:?}"),
            format!("{link:#?}"),
            format!("{group:?}"),
        ] {
            assert!(!shown.contains("171") && !shown.contains("0xab"), "{shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
    }

    /// A sender whose roster its receivers did not confirm (they joined another sender) says
    /// how many answered and how many confirmed, never that all joined.
    #[test]
    fn a_join_timeout_counts_only_the_receivers_that_confirmed() {
        let link = LinkOptions {
            iface: "eth0".into(),
            stream: StreamOptions::default(),
        };
        let mac = |i| ethbcast::MacAddr([2, 0, 0, 0, 0, i]);
        let seen = JoinSeen {
            heard: vec![mac(1), mac(2)],
            confirmed: Some((1, 3)),
            coordinators: vec![mac(9)],
            ..JoinSeen::default()
        };
        let e = GroupError::JoinTimeout {
            joined: 3,
            expected: 3,
            timeout: Duration::from_secs(2),
            waiting: seen.explain(true),
            seen: Box::new(seen),
        };
        let f = link.join_error(e, true);
        assert_eq!(f.code, EXIT_JOIN_TIMEOUT);
        assert!(
            f.msg
                .contains("0 of 2 receivers joined: 2 answered, 0 confirmed"),
            "{}",
            f.msg
        );
        assert!(f.msg.contains("02:00:00:00:00:09"), "{}", f.msg);
        assert!(!f.msg.contains("2 of 2"), "{}", f.msg);
    }

    /// An empty scratch directory of its own for the test that names it `tag` (the tests of
    /// `recv/` too).
    pub(super) fn scratch(tag: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("ethbcast-distribute-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A FIFO planted where the status file's temporary file is predictable (or drawn)
    /// neither blocks the writer (every receiver would time out) nor receives the status.
    #[test]
    fn a_fifo_planted_at_the_temporary_name_does_not_block_the_status_file() {
        let dir = scratch("fifo");
        let path = dir.join("status.json");
        let guessed = dir.join(format!(".status.json.{}.tmp", std::process::id()));
        nix::unistd::mkfifo(&guessed, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let r = StatusFile::create(&p, &serde_json::json!({"state": "joining"}));
            let _ = tx.send(r.map(|mut f| f.update(&serde_json::json!({"state": "done"}), true)));
        });
        let r = rx.recv_timeout(Duration::from_secs(3));
        if r.is_err() {
            // Unblock the writer before failing.
            let _ = std::fs::File::open(&guessed);
        }
        assert!(
            r.is_ok(),
            "writing the status file blocked on a FIFO planted in its directory"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("done"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file another user planted at the temporary name is never written and renamed into
    /// place: the status file stays this user's.
    #[test]
    fn a_file_planted_at_the_temporary_name_never_becomes_the_status_file() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: needs root to plant another user's file");
            return;
        }
        let dir = scratch("planted");
        let path = dir.join("status.json");
        let guessed = dir.join(format!(".status.json.{}.tmp", std::process::id()));
        std::fs::write(&guessed, b"theirs").unwrap();
        nix::unistd::chown(&guessed, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let mut f = StatusFile::create(&path, &serde_json::json!({"state": "joining"})).unwrap();
        f.update(&serde_json::json!({"state": "done"}), true);
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(
            m.uid(),
            nix::unistd::geteuid().as_raw(),
            "the status file changed owner"
        );
        assert_eq!(std::fs::read(&guessed).unwrap(), b"theirs");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_limit_renders_as_such() {
        assert_eq!(render_seconds(NO_LIMIT), "no limit");
        assert_eq!(render_seconds(Duration::from_secs(3)), "3 s");
    }
}
