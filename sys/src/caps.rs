//! Capabilities: which ones this process holds, which ones its program file carries, and what
//! to tell a user whom the kernel refused.
//!
//! Why: raw packet sockets need `CAP_NET_RAW`, and the usual way to run `ethbcast` without
//! root is a file capability (`setcap cap_net_raw,cap_net_admin+ep`). When that does not work
//! the kernel only says `EPERM`, and the reasons differ: the file has no capabilities; it has
//! them but sits on a `nosuid` mount; the process runs with `no_new_privs` (containers,
//! systemd's `NoNewPrivileges=`), with which the kernel documents that file capabilities are
//! not granted (Linux 6.18 on the test machine granted them anyway); or the process holds the
//! capability and a security module refused anyway. [`Advice`] finds out which and says what
//! to do, with the exact `setcap` command for this program. (A bounding set without the
//! capability needs no advice of ours: the kernel then refuses to execute a `+ep` program at
//! all.)
//!
//! What needs which capability (checked against the kernel and on the test-bed):
//! - [`Capability::NetRaw`]: creating an `AF_PACKET` socket. Everything else ethbcast asks of
//!   a packet socket (binding, rings, `PACKET_QDISC_BYPASS`, filters) needs nothing more.
//! - [`Capability::NetAdmin`]: only `SO_RCVBUFFORCE`, a receive buffer above
//!   `net.core.rmem_max` for the `socket` and `pnet` backends. Without it the buffer is capped
//!   and a busy receiver drops (and then repairs) more; the default `ring` backend sizes its
//!   ring without it.

use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The capabilities ethbcast uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `CAP_NET_RAW`: open raw packet sockets.
    NetRaw,
    /// `CAP_NET_ADMIN`: force socket buffers above the system limit.
    NetAdmin,
}

impl Capability {
    /// The capability's bit number (`linux/capability.h`).
    pub const fn bit(self) -> u32 {
        match self {
            Capability::NetAdmin => 12,
            Capability::NetRaw => 13,
        }
    }

    /// `CAP_NET_RAW` or `CAP_NET_ADMIN`.
    pub const fn name(self) -> &'static str {
        match self {
            Capability::NetRaw => "CAP_NET_RAW",
            Capability::NetAdmin => "CAP_NET_ADMIN",
        }
    }

    fn mask(self) -> u64 {
        1 << self.bit()
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The capability sets of this process (from `/proc/self/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessCaps {
    /// Effective set.
    pub effective: u64,
    /// Bounding set: what an `execve` can ever gain.
    pub bounding: u64,
    /// `no_new_privs`: `execve` grants no file capabilities.
    pub no_new_privs: bool,
}

impl ProcessCaps {
    /// Reads this process's sets; `None` if `/proc` is not mounted or unreadable.
    pub fn current() -> Option<ProcessCaps> {
        Self::parse(&std::fs::read_to_string("/proc/self/status").ok()?)
    }

    /// Parses the text of `/proc/PID/status`.
    pub fn parse(status: &str) -> Option<ProcessCaps> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let hex = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
        Some(ProcessCaps {
            effective: hex("CapEff")?,
            bounding: hex("CapBnd")?,
            // Absent before Linux 4.10: then we cannot tell, and assume it is off.
            no_new_privs: field("NoNewPrivs") == Some("1"),
        })
    }

    /// Whether `cap` is in the effective set.
    pub fn has(&self, cap: Capability) -> bool {
        self.effective & cap.mask() != 0
    }
}

/// The file capabilities of a program (its `security.capability` extended attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileCaps {
    /// Permitted set granted at `execve`.
    pub permitted: u64,
    /// Whether the granted capabilities are also made effective (`+e`).
    pub effective: bool,
}

/// `VFS_CAP_*` of `linux/capability.h`.
const VFS_CAP_REVISION_MASK: u32 = 0xFF00_0000;
const VFS_CAP_REVISION_1: u32 = 0x0100_0000;
const VFS_CAP_FLAGS_EFFECTIVE: u32 = 0x0000_0001;

impl FileCaps {
    /// Reads the file capabilities of `path`: `Ok(None)` if it has none.
    pub fn of(path: &Path) -> std::io::Result<Option<FileCaps>> {
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut buf = [0u8; 32];
        // SAFETY: both strings are NUL-terminated and live across the call; the kernel writes
        // at most `buf.len()` bytes into `buf`, which we own.
        let n = unsafe {
            libc::getxattr(
                cpath.as_ptr(),
                c"security.capability".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Self::parse(&buf[..n as usize]))
    }

    /// Parses a `vfs_cap_data` value (revision 1, 2 or 3, little-endian).
    pub fn parse(data: &[u8]) -> Option<FileCaps> {
        let word = |i: usize| {
            data.get(4 * i..4 * i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let magic = word(0)?;
        let low = u64::from(word(1)?);
        let high = if magic & VFS_CAP_REVISION_MASK == VFS_CAP_REVISION_1 {
            0
        } else {
            u64::from(word(3)?)
        };
        Some(FileCaps {
            permitted: low | high << 32,
            effective: magic & VFS_CAP_FLAGS_EFFECTIVE != 0,
        })
    }

    /// Whether an `execve` of this file grants `cap` (permitted and effective).
    pub fn grants(&self, cap: Capability) -> bool {
        self.effective && self.permitted & cap.mask() != 0
    }
}

/// Whether the file system holding `path` is mounted `nosuid` (the kernel then ignores file
/// capabilities as well as set-user-ID bits).
pub fn mounted_nosuid(path: &Path) -> Option<bool> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    statvfs(path)
        .ok()
        .map(|s| s.flags().contains(FsFlags::ST_NOSUID))
}

/// The `setcap` command that gives `program` what ethbcast uses.
pub fn setcap_command(program: &Path) -> String {
    format!(
        "sudo setcap cap_net_raw,cap_net_admin+ep {}",
        program.display()
    )
}

/// Why this process lacks (or was refused despite holding) a capability, and what to do.
///
/// Its `Display` is one paragraph for an error message. It is built when the error is
/// reported, from the state of this process and of its program file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// The capability the refused operation needs.
    pub cap: Capability,
    /// The running program (`/proc/self/exe`), if known.
    pub program: Option<PathBuf>,
    /// Why, and what to do.
    pub reason: Reason,
}

/// Why a capability is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The process holds the capability: something else refused (a security module,
    /// seccomp).
    HeldButRefused,
    /// The program file does not carry the capability (or carries it without `+e`).
    NotGranted,
    /// The file carries it, but its file system is mounted `nosuid`.
    NosuidMount,
    /// The file carries it, but the process runs with `no_new_privs`.
    NoNewPrivs,
    /// The file carries it and nothing explains why the process lacks it.
    Unknown,
}

impl Advice {
    /// Finds out why this process lacks `cap`.
    pub fn for_missing(cap: Capability) -> Advice {
        let program = std::env::current_exe().ok();
        let proc_caps = ProcessCaps::current();
        let file = program
            .as_deref()
            .and_then(|p| FileCaps::of(p).ok().flatten());
        let reason = match (proc_caps, file) {
            (Some(p), _) if p.has(cap) => Reason::HeldButRefused,
            (_, f) if !f.is_some_and(|f| f.grants(cap)) => Reason::NotGranted,
            _ if program.as_deref().and_then(mounted_nosuid) == Some(true) => Reason::NosuidMount,
            (Some(p), _) if p.no_new_privs => Reason::NoNewPrivs,
            _ => Reason::Unknown,
        };
        Advice {
            cap,
            program,
            reason,
        }
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cap = self.cap;
        let program = self
            .program
            .as_deref()
            .unwrap_or(Path::new("/path/to/program"));
        let setcap = setcap_command(program);
        let prog = program.display();
        match self.reason {
            Reason::HeldButRefused => write!(
                f,
                "this process holds {cap}, yet the kernel refused: a security module (AppArmor, \
                 SELinux) or a seccomp filter forbids it here"
            ),
            Reason::NotGranted => write!(
                f,
                "this needs {cap}, which this process lacks: run as root, or grant the program \
                 its capabilities once with `{setcap}`"
            ),
            Reason::NosuidMount => write!(
                f,
                "this needs {cap}: {prog} carries it as a file capability, but its file system \
                 is mounted nosuid, so the kernel ignores it; install the program elsewhere (e.g. \
                 /usr/local/bin) and run `sudo setcap cap_net_raw,cap_net_admin+ep` on that copy"
            ),
            Reason::NoNewPrivs => write!(
                f,
                "this needs {cap}: {prog} carries it as a file capability, but this process runs \
                 with no_new_privs (a container, systemd's NoNewPrivileges= or DynamicUser=, \
                 `setpriv --no-new-privs`), so the kernel ignores it; grant it as an ambient \
                 capability instead (systemd: AmbientCapabilities={cap}) or run as root"
            ),
            Reason::Unknown => write!(
                f,
                "this needs {cap}, which this process lacks although {prog} carries it as a \
                 file capability; run as root, or check `getcap {prog}` and `grep Cap \
                 /proc/self/status`"
            ),
        }
    }
}

/// What [`drop_all`] left the calling thread with (from `/proc/thread-self/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The bounding set afterwards: 0 if the thread could drop it (it held `CAP_SETPCAP`, as
    /// root does); otherwise what it was, which without `CAP_SETPCAP` an unprivileged
    /// process cannot use to gain anything (its permitted set is empty).
    pub bounding: u64,
}

/// Errors of [`drop_all`], [`empty_bounding_set`] and [`set_no_new_privs`].
#[derive(Debug, thiserror::Error)]
pub enum DropError {
    /// A system call failed.
    #[error("cannot drop capabilities: {op}: {source}")]
    Call {
        /// Which call.
        op: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The kernel says the thread still holds some.
    #[error(
        "capabilities still held after dropping them: effective {effective:#x}, permitted \
         {permitted:#x}, inheritable {inheritable:#x}, ambient {ambient:#x}"
    )]
    StillHeld {
        /// Effective set.
        effective: u64,
        /// Permitted set.
        permitted: u64,
        /// Inheritable set.
        inheritable: u64,
        /// Ambient set.
        ambient: u64,
    },
}

/// `_LINUX_CAPABILITY_VERSION_3` of `linux/capability.h`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability of the calling thread for good: the ambient set, the bounding set
/// (when the thread may, i.e. holds `CAP_SETPCAP`; then not even a program it executes as
/// root regains any), then the effective, permitted and inheritable sets. Checks the result
/// in `/proc/thread-self/status`.
///
/// Why: ethbcast needs `CAP_NET_RAW` (and `CAP_NET_ADMIN`) only to open its link. What runs
/// afterwards parses frames from the network and writes files or feeds a `-O` command: a
/// flaw there must not come with the capabilities of the process (all of them, when started
/// as root).
///
/// Capabilities belong to threads: call it while the calling thread is the only one (threads
/// started afterwards inherit the empty sets).
pub fn drop_all() -> Result<Dropped, DropError> {
    let call = |op: &'static str, rc: libc::c_int| {
        if rc < 0 {
            Err(DropError::Call {
                op,
                source: std::io::Error::last_os_error(),
            })
        } else {
            Ok(())
        }
    };
    // SAFETY: prctl with integer arguments only; the kernel reads no memory of ours.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    // EINVAL: a kernel before 4.3, which has no ambient set.
    if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        call("PR_CAP_AMBIENT_CLEAR_ALL", rc)?;
    }
    let held = thread_caps();
    if held.is_some_and(|t| t.effective & (1 << CAP_SETPCAP) != 0) {
        empty_bounding_set()?;
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: `header` and `data` are the kernel's `__user_cap_header_struct` and, for
    // version 3, an array of two `__user_cap_data_struct`; both live across the call, which
    // reads `data` and may write `header.version`. pid 0 is the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    call("capset", if rc < 0 { -1 } else { 0 })?;
    let after = thread_caps().ok_or_else(|| DropError::Call {
        op: "reading /proc/thread-self/status",
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    if after.effective | after.permitted | after.inheritable | after.ambient != 0 {
        return Err(DropError::StillHeld {
            effective: after.effective,
            permitted: after.permitted,
            inheritable: after.inheritable,
            ambient: after.ambient,
        });
    }
    Ok(Dropped {
        bounding: after.bounding,
    })
}

/// This process's effective user id: the owner of the files it creates, and the user whose
/// rights the kernel checks.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail (POSIX).
    unsafe { libc::geteuid() }
}

/// Empties the calling thread's bounding set: no program it (or a process it starts) executes
/// afterwards gains a capability, from a file capability or a setuid-root file alike (the
/// kernel refuses to execute a `+ep` program whose capabilities the set no longer holds).
/// Needs `CAP_SETPCAP` (root has it): without it the first drop fails with `EPERM`.
///
/// Why a call of its own: a process that changes to another user (`recv --user`) must empty
/// the set before `setresuid`, which clears the effective set and `CAP_SETPCAP` with it;
/// [`drop_all`] afterwards could no longer.
pub fn empty_bounding_set() -> Result<(), DropError> {
    // Every capability the kernel knows; PR_CAPBSET_READ fails (EINVAL) past the last.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only; the kernel reads no memory of ours.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            break;
        }
        // SAFETY: as above, integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc < 0 {
            return Err(DropError::Call {
                op: "PR_CAPBSET_DROP",
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Sets `no_new_privs` for the calling thread and every process it starts, for good:
/// `execve` then grants nothing a setuid, setgid or file-capability program would give
/// (`PR_SET_NO_NEW_PRIVS`, Documentation/userspace-api/no_new_privs.rst). Needs no privilege.
pub fn set_no_new_privs() -> Result<(), DropError> {
    let one: libc::c_ulong = 1;
    // SAFETY: prctl with integer arguments only; the kernel reads no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, 0, 0, 0) };
    if rc < 0 {
        return Err(DropError::Call {
            op: "PR_SET_NO_NEW_PRIVS",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `CAP_SETPCAP`: may drop from the bounding set.
const CAP_SETPCAP: u32 = 8;

/// All capability sets of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ThreadCaps {
    effective: u64,
    permitted: u64,
    inheritable: u64,
    ambient: u64,
    bounding: u64,
}

/// The calling thread's sets (`/proc/thread-self/status`; `/proc/self` shows the main
/// thread's).
fn thread_caps() -> Option<ThreadCaps> {
    parse_thread_caps(&std::fs::read_to_string("/proc/thread-self/status").ok()?)
}

fn parse_thread_caps(status: &str) -> Option<ThreadCaps> {
    let hex = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    Some(ThreadCaps {
        effective: hex("CapEff")?,
        permitted: hex("CapPrm")?,
        inheritable: hex("CapInh")?,
        // Absent before Linux 4.3, which has no ambient set.
        ambient: hex("CapAmb").unwrap_or(0),
        bounding: hex("CapBnd")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a thread of its own (capabilities belong to threads; the test harness's others keep
    /// theirs): afterwards the thread, and a thread it starts, hold nothing, and a raw socket,
    /// which the test process (root on the test machine) could open before, is refused.
    #[test]
    fn drop_all_leaves_the_thread_and_its_children_without_capabilities() {
        std::thread::spawn(|| {
            let raw = || {
                // SAFETY: socket(2) with integer arguments; a descriptor returned is closed.
                let fd = unsafe {
                    libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0x88B5u16.to_be() as i32)
                };
                if fd >= 0 {
                    // SAFETY: `fd` is ours and used nowhere else.
                    unsafe { libc::close(fd) };
                }
                fd >= 0
            };
            let before = thread_caps().unwrap();
            let could = raw();
            assert_eq!(could, before.effective & (1 << 13) != 0, "{before:?}");
            let d = drop_all().unwrap();
            let after = thread_caps().unwrap();
            assert_eq!(
                (
                    after.effective,
                    after.permitted,
                    after.inheritable,
                    after.ambient
                ),
                (0, 0, 0, 0)
            );
            if before.effective & (1 << CAP_SETPCAP) != 0 {
                assert_eq!(d.bounding, 0, "root drops the bounding set too");
            }
            assert_eq!(after.bounding, d.bounding);
            assert!(!raw(), "a raw socket opened after dropping");
            let child = std::thread::spawn(|| thread_caps().unwrap())
                .join()
                .unwrap();
            assert_eq!(child, after);
            // Dropping again (nothing left) succeeds.
            drop_all().unwrap();
        })
        .join()
        .unwrap();
    }

    /// In a thread of its own: after the two calls the thread's bounding set is empty (the
    /// test process is root on the test machine; without CAP_SETPCAP the first drop is refused)
    /// and `no_new_privs` is set, for it and for a thread it starts.
    #[test]
    fn the_bounding_set_empties_and_no_new_privs_holds_for_children() {
        std::thread::spawn(|| {
            let nnp = || {
                std::fs::read_to_string("/proc/thread-self/status")
                    .unwrap()
                    .lines()
                    .find_map(|l| l.strip_prefix("NoNewPrivs:").map(|v| v.trim() == "1"))
                    .unwrap()
            };
            let before = thread_caps().unwrap();
            match empty_bounding_set() {
                Ok(()) => assert_eq!(thread_caps().unwrap().bounding, 0),
                Err(e) => assert_eq!(
                    before.effective & (1 << CAP_SETPCAP),
                    0,
                    "refused with CAP_SETPCAP held: {e}"
                ),
            }
            set_no_new_privs().unwrap();
            assert!(nnp());
            let child = std::thread::spawn(move || (thread_caps().unwrap().bounding, nnp()))
                .join()
                .unwrap();
            assert_eq!(child, (thread_caps().unwrap().bounding, true));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn thread_status_is_parsed() {
        let s = "CapInh:\t0000000000000000\nCapPrm:\t0000000000003000\n\
                 CapEff:\t0000000000002000\nCapBnd:\t000001ffffffffff\n";
        let t = parse_thread_caps(s).unwrap();
        assert_eq!((t.permitted, t.effective, t.ambient), (0x3000, 0x2000, 0));
        assert!(parse_thread_caps("CapEff:\tzz\n").is_none());
    }

    #[test]
    fn process_status_is_parsed() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000000003000\n\
                 CapEff:\t0000000000002000\nCapBnd:\t000001ffffffffff\nNoNewPrivs:\t1\n";
        let p = ProcessCaps::parse(s).unwrap();
        assert!(p.has(Capability::NetRaw));
        assert!(!p.has(Capability::NetAdmin));
        assert!(p.no_new_privs);
        assert_eq!(p.bounding, 0x1ff_ffff_ffff);
        assert!(ProcessCaps::parse("Name:\tx\n").is_none());
    }

    #[test]
    fn vfs_cap_data_is_parsed() {
        // What `setcap cap_net_raw,cap_net_admin+ep` writes (revision 2).
        let mut v2 = Vec::new();
        for w in [0x0200_0001u32, 0x3000, 0, 0, 0] {
            v2.extend_from_slice(&w.to_le_bytes());
        }
        let f = FileCaps::parse(&v2).unwrap();
        assert!(f.grants(Capability::NetRaw) && f.grants(Capability::NetAdmin));
        // `+p` only: permitted but not effective, so nothing is granted to a plain program.
        v2[0] = 0;
        assert!(!FileCaps::parse(&v2).unwrap().grants(Capability::NetRaw));
        assert!(FileCaps::parse(&v2[..8]).is_none());
    }

    #[test]
    fn advice_names_the_capability_and_the_setcap_command() {
        let a = Advice {
            cap: Capability::NetRaw,
            program: Some("/usr/bin/ethbcast".into()),
            reason: Reason::NotGranted,
        };
        let s = a.to_string();
        assert!(s.contains("CAP_NET_RAW"), "{s}");
        assert!(
            s.contains("`sudo setcap cap_net_raw,cap_net_admin+ep /usr/bin/ethbcast`"),
            "{s}"
        );
        let nosuid = Advice {
            reason: Reason::NosuidMount,
            ..a.clone()
        };
        assert!(nosuid.to_string().contains("nosuid"));
        let nnp = Advice {
            reason: Reason::NoNewPrivs,
            ..a
        };
        assert!(nnp.to_string().contains("AmbientCapabilities=CAP_NET_RAW"));
    }

    #[test]
    fn this_process_is_diagnosed_consistently() {
        let a = Advice::for_missing(Capability::NetRaw);
        let held = ProcessCaps::current().is_some_and(|p| p.has(Capability::NetRaw));
        assert_eq!(a.reason == Reason::HeldButRefused, held, "{a:?}");
    }
}
