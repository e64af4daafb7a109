//! Shared-memory segments: a file in `/dev/shm` mapped by several processes of one host, seen
//! only through bounds-checked atomics, bounds-checked copies and futexes.
//!
//! Why this shape: the processes that share a segment trust each other's code but not each
//! other's state. A process that crashed halfway through an update, or one with a bug, may leave
//! any bytes anywhere in the segment. Nothing here hands out a slice or a reference to plain
//! data: every access names an offset, which is checked against the mapping's length before the
//! pointer is formed, so an index read from the segment can at worst be refused, never lead a
//! reader outside the mapping. Every byte is read and written through atomics (`Relaxed`
//! 8-byte words, single bytes at the tail), so that two processes touching the same bytes is
//! never a data race in the language's sense, whatever the other process does; ordering comes
//! from the `Acquire`/`Release` operations the caller makes on the words it publishes with.
//!
//! A segment's file is made without a name, given mode 0600 (whatever the umask) and its size,
//! and only then linked at its name, which must not exist (no link there is followed); it is
//! never truncated by this code. (A process that shrank the file would make the others fault
//! on access; the processes of one job do not.) Its name can be removed as soon as every
//! process has mapped it ([`Segment::unlink`]): the memory lives until the last mapping goes,
//! and nothing stale is left behind by a crash after that point.
//!
//! Other local users: `/dev/shm` is writable by every user of the machine, and segment names
//! are often guessable, so another user may create a file at a job's name before the job does,
//! or plant a symbolic link there, to feed the job's ranks its own ring (or have them write
//! into a file of its choice). [`Segment::open`] therefore opens with `O_NOFOLLOW` (a link is
//! [`ShmError::Symlink`]) and accepts, after `fstat` on the opened file, only a regular file
//! owned by this process's effective user with mode exactly 0600 ([`ShmError::Foreign`],
//! [`ShmError::BadMode`]); [`Segment::remove_stale`] never removes another user's file. A
//! file of ours with mode 0600 can be opened by no other user except root, who can open
//! anything anyway. What is left to another user is denial of service: a file at a job's
//! name makes the job fail with a clear error; an unguessable name (the caller's concern, see
//! the C ABI's `ETHBCAST_JOB_TOKEN`) takes that away as well.
//!
//! Waiting uses shared futexes on 32-bit words of the segment (the kernel keys them by file and
//! offset, so they work across processes that mapped the file at different addresses).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use thiserror::Error;

use crate::caps::effective_uid;

/// Where POSIX shared memory lives on Linux (`shm_open` names map to files here).
pub const SHM_DIR: &str = "/dev/shm";

/// Permissions of every segment: its user's only.
const SEGMENT_MODE: u32 = 0o600;

/// Errors of shared-memory segments, each saying what to do.
#[derive(Debug, Error)]
pub enum ShmError {
    /// Creating, opening, sizing or mapping the file failed.
    #[error("shared-memory segment {path}: {op} failed: {source} (check that /dev/shm is mounted and writable, and its free space)")]
    Io {
        /// The segment's file.
        path: PathBuf,
        /// The failed step.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The segment does not exist (yet).
    #[error("no shared-memory segment {0}")]
    NotFound(PathBuf),
    /// A segment of that name exists already.
    #[error("shared-memory segment {0} exists already (left by a crashed job? remove it)")]
    Exists(PathBuf),
    /// A segment of zero bytes, or one larger than the address space, was asked for.
    #[error("a shared-memory segment of {0} bytes cannot be mapped")]
    BadSize(u64),
    /// An access outside the segment: a corrupt index or length in it.
    #[error("access of {len} bytes at offset {offset} lies outside the {size}-byte segment")]
    OutOfBounds {
        /// First byte accessed.
        offset: usize,
        /// Bytes accessed.
        len: usize,
        /// Size of the segment.
        size: usize,
    },
    /// An access that is not aligned as the word it reads needs.
    #[error("offset {offset} is not a multiple of {align}")]
    Misaligned {
        /// The offset.
        offset: usize,
        /// The alignment needed.
        align: usize,
    },
    /// The segment's name is a symbolic link (never followed).
    #[error("shared-memory segment {0} is a symbolic link, which is never followed: another local user may be trying to take over this job's ring; remove the link, and give jobs a random token (ETHBCAST_JOB_TOKEN) so that their segment names cannot be guessed")]
    Symlink(PathBuf),
    /// The file at the segment's name belongs to another user.
    #[error("shared-memory segment {path} belongs to uid {owner}, not to this process's user (uid {me}): another local user may have made it to take over this job's ring; it is neither used nor removed. Remove it as its owner or root, and give jobs a random token (ETHBCAST_JOB_TOKEN) so that their segment names cannot be guessed")]
    Foreign {
        /// The segment's file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective user id.
        me: u32,
    },
    /// The segment's file has other permissions than 0600 (this code makes none such).
    #[error("shared-memory segment {path} has mode {mode:o}, not 600: other users could read or write it, so it is not used; remove it (jobs make their segments with mode 600)")]
    BadMode {
        /// The segment's file.
        path: PathBuf,
        /// Its permission bits (with set-id and sticky bits).
        mode: u32,
    },
    /// The segment's name is not a regular file (a directory, a FIFO, a socket...).
    #[error("shared-memory segment {0} is not a regular file; remove it")]
    NotAFile(PathBuf),
    /// The futex system call failed.
    #[error("futex on a shared-memory segment failed: {0}")]
    Futex(#[source] io::Error),
}

/// Result of this module.
pub type Result<T, E = ShmError> = std::result::Result<T, E>;

/// How a futex wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Woken, interrupted, or the word no longer held the expected value: look again.
    Changed,
    /// The timeout passed.
    TimedOut,
}

/// A shared-memory segment mapped into this process.
#[derive(Debug)]
pub struct Segment {
    map: MmapRaw,
    path: PathBuf,
}

impl Segment {
    /// Creates the segment file at `path` (it must not exist, not even as a symbolic link)
    /// with mode 0600, whatever the umask, and `len` zero bytes, and maps it.
    ///
    /// The name appears only once the file is whole: the file is made without a name
    /// (`O_TMPFILE` in `path`'s directory), given its mode and size, and then linked at `path`
    /// (`linkat`, which fails on any existing name and follows no link there). A process that
    /// opens `path` meanwhile finds nothing ([`ShmError::NotFound`]) or the whole file, never
    /// an empty one or one of another mode; and a crash before the link leaves nothing behind.
    pub fn create(path: &Path, len: usize) -> Result<Segment> {
        if len == 0 || isize::try_from(len).is_err() {
            return Err(ShmError::BadSize(len as u64));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(SEGMENT_MODE)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|source| io_error(path, "create", source))?;
        // The umask may have taken bits away (0400 would lock out the other ranks); it
        // cannot have added any.
        file.set_permissions(std::fs::Permissions::from_mode(SEGMENT_MODE))
            .map_err(|source| io_error(path, "chmod", source))?;
        file.set_len(len as u64)
            .map_err(|source| io_error(path, "size", source))?;
        link_at(&file, path)?;
        Self::map(file, path, len)
    }

    /// Opens and maps the existing segment at `path`, all of it, if it is a regular file of
    /// this process's user with mode 0600, as [`Segment::create`] makes them: a symbolic link
    /// is not followed ([`ShmError::Symlink`]), a file of another user ([`ShmError::Foreign`])
    /// or with other permissions ([`ShmError::BadMode`]) is refused. The checks are made on
    /// the opened file (`fstat`), so the name cannot be swapped between check and use.
    pub fn open(path: &Path) -> Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            // O_NONBLOCK: a FIFO planted at the name does not hold the open up.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| match source.raw_os_error() {
                Some(libc::ENOENT) => ShmError::NotFound(path.to_path_buf()),
                Some(libc::ELOOP) => ShmError::Symlink(path.to_path_buf()),
                // A file of another user, of mode 0600, opened by a user other than root.
                Some(libc::EACCES) => match std::fs::symlink_metadata(path) {
                    Ok(m) if m.uid() != effective_uid() => ShmError::Foreign {
                        path: path.to_path_buf(),
                        owner: m.uid(),
                        me: effective_uid(),
                    },
                    _ => io_error(path, "open", source),
                },
                _ => io_error(path, "open", source),
            })?;
        let meta = file
            .metadata()
            .map_err(|source| io_error(path, "stat", source))?;
        check_owner(path, &meta)?;
        if !meta.file_type().is_file() {
            return Err(ShmError::NotAFile(path.to_path_buf()));
        }
        let mode = meta.mode() & 0o7777;
        if mode != SEGMENT_MODE {
            return Err(ShmError::BadMode {
                path: path.to_path_buf(),
                mode,
            });
        }
        let len = meta.len();
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0 && isize::try_from(l).is_ok())
            .ok_or(ShmError::BadSize(len))?;
        Self::map(file, path, len)
    }

    fn map(file: File, path: &Path, len: usize) -> Result<Segment> {
        // `map_raw` hands out a raw mapping (no slice of it ever exists), so it is not `unsafe`.
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|source| io_error(path, "mmap", source))?;
        Ok(Segment {
            map,
            path: path.to_path_buf(),
        })
    }

    /// Removes the segment's name; the mappings stay valid until each process drops its own.
    /// A name already gone is not an error.
    pub fn unlink(path: &Path) -> Result<()> {
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(io_error(path, "unlink", source)),
        }
    }

    /// Removes what a crashed job of this user left at `path`, before [`Segment::create`]
    /// makes a new segment there. A name that does not exist is not an error; a file (or
    /// link) of another user is neither removed nor used ([`ShmError::Foreign`]): in the
    /// sticky `/dev/shm`, only its owner (or root) could have put it there, and only its owner
    /// should take it away.
    pub fn remove_stale(path: &Path) -> Result<()> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(io_error(path, "lstat", source)),
        };
        check_owner(path, &meta)?;
        Self::unlink(path)
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty (never: segments have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Checks that `len` bytes at `offset` lie inside the mapping and that `offset` is a
    /// multiple of `align`.
    fn check(&self, offset: usize, len: usize, align: usize) -> Result<()> {
        let size = self.map.len();
        match offset.checked_add(len) {
            Some(end) if end <= size => {}
            _ => return Err(ShmError::OutOfBounds { offset, len, size }),
        }
        if !offset.is_multiple_of(align) {
            return Err(ShmError::Misaligned { offset, align });
        }
        Ok(())
    }

    /// The 64-bit word at `offset` (a multiple of 8).
    pub fn u64_at(&self, offset: usize) -> Result<&AtomicU64> {
        self.check(offset, 8, 8)?;
        // SAFETY: `check` put the 8 bytes at `offset` inside the mapping, and the mapping
        // starts on a page boundary, so the pointer is in bounds and 8-byte aligned. Other
        // processes touch these bytes only through atomics too. The reference cannot outlive
        // `&self`, and the mapping lives as long as `self`.
        Ok(unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u64>()) })
    }

    /// The 32-bit word at `offset` (a multiple of 4).
    pub fn u32_at(&self, offset: usize) -> Result<&AtomicU32> {
        self.check(offset, 4, 4)?;
        // SAFETY: as in `u64_at`, for 4 bytes at a 4-byte aligned offset inside the mapping.
        Ok(unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u32>()) })
    }

    /// The byte at `offset` (no bounds check: callers checked the whole range).
    fn byte_at(&self, offset: usize) -> &AtomicU8 {
        debug_assert!(offset < self.map.len());
        // SAFETY: every caller checked a range containing `offset` against the mapping's
        // length first; a byte needs no alignment. Lifetime as in `u64_at`.
        unsafe { AtomicU8::from_ptr(self.map.as_mut_ptr().add(offset)) }
    }

    /// The 8-byte word at `offset` (no bounds check: callers checked the whole range and the
    /// alignment of its start).
    fn word_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= self.map.len() && offset.is_multiple_of(8));
        // SAFETY: every caller checked a range containing these 8 bytes against the mapping's
        // length, and that the range starts at a multiple of 8 (words follow at multiples of
        // 8 from there); the mapping is page aligned. Lifetime as in `u64_at`.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u64>()) }
    }

    /// Copies `dst.len()` bytes from the segment at `offset` (a multiple of 8) into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len(), 8)?;
        let mut words = dst.chunks_exact_mut(8);
        let mut at = offset;
        for chunk in &mut words {
            let w = self.word_at(at).load(Ordering::Relaxed);
            chunk.copy_from_slice(&w.to_ne_bytes());
            at += 8;
        }
        for b in words.into_remainder() {
            *b = self.byte_at(at).load(Ordering::Relaxed);
            at += 1;
        }
        Ok(())
    }

    /// Copies `src` into the segment at `offset` (a multiple of 8).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len(), 8)?;
        let mut words = src.chunks_exact(8);
        let mut at = offset;
        for chunk in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            self.word_at(at)
                .store(u64::from_ne_bytes(w), Ordering::Relaxed);
            at += 8;
        }
        for &b in words.remainder() {
            self.byte_at(at).store(b, Ordering::Relaxed);
            at += 1;
        }
        Ok(())
    }

    /// Sleeps while the 32-bit word at `offset` holds `expected`, at most `timeout` (`None`:
    /// until woken). Returns at once if the word holds another value.
    pub fn futex_wait(
        &self,
        offset: usize,
        expected: u32,
        timeout: Option<Duration>,
    ) -> Result<Wake> {
        let word = self.u32_at(offset)?;
        let ts = timeout.map(crate::wait::timespec);
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `word` is a live, aligned 32-bit word of our mapping (checked by `u32_at`);
        // FUTEX_WAIT only reads it. `ts_ptr` is NULL or points to `ts`, alive for the call; the
        // remaining arguments are unused by FUTEX_WAIT. No FUTEX_PRIVATE_FLAG: the word is
        // shared with other processes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                ts_ptr,
                std::ptr::null::<u32>(),
                0u32,
            )
        };
        if rc == 0 {
            return Ok(Wake::Changed);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Wake::Changed),
            Some(libc::ETIMEDOUT) => Ok(Wake::TimedOut),
            _ => Err(ShmError::Futex(e)),
        }
    }

    /// Wakes up to `n` processes sleeping on the 32-bit word at `offset`; returns how many.
    pub fn futex_wake(&self, offset: usize, n: u32) -> Result<usize> {
        let word = self.u32_at(offset)?;
        let n = n.min(i32::MAX as u32);
        // SAFETY: `word` is a live, aligned 32-bit word of our mapping; FUTEX_WAKE does not
        // access memory through the other (unused) arguments.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE,
                n,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            )
        };
        if rc < 0 {
            return Err(ShmError::Futex(io::Error::last_os_error()));
        }
        Ok(rc as usize)
    }
}

/// Gives the unnamed file `file` the name `path`, which must not exist, through its entry in
/// `/proc/self/fd` (which any user may link; `AT_EMPTY_PATH` would need
/// `CAP_DAC_READ_SEARCH`).
fn link_at(file: &File, path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    nix::unistd::linkat(
        None,
        fd.as_path(),
        None,
        path,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    )
    .map_err(|e| match e {
        nix::errno::Errno::EEXIST => ShmError::Exists(path.to_path_buf()),
        e => io_error(
            path,
            "link (from /proc/self/fd: is /proc mounted?)",
            e.into(),
        ),
    })
}

fn io_error(path: &Path, op: &'static str, source: io::Error) -> ShmError {
    ShmError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Whether process `pid` exists (in this PID namespace): `kill(pid, 0)`. A process of another
/// user counts as existing.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    }
}

/// A file this process did not make as its own user is another user's: refused.
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    let me = effective_uid();
    if meta.uid() != me {
        return Err(ShmError::Foreign {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn temp(name: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("ethbcast-shm-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn two_mappings_see_each_others_words_and_bytes() {
        let p = temp("words");
        let a = Segment::create(&p, 4096).unwrap();
        let b = Segment::open(&p).unwrap();
        Segment::unlink(&p).unwrap();
        assert_eq!(b.len(), 4096);
        a.u64_at(64)
            .unwrap()
            .store(0xdead_beef_1234, Ordering::Release);
        assert_eq!(
            b.u64_at(64).unwrap().load(Ordering::Acquire),
            0xdead_beef_1234
        );
        let msg: Vec<u8> = (0..=250u8).collect();
        a.write(128, &msg).unwrap();
        let mut got = vec![0u8; msg.len()];
        b.read(128, &mut got).unwrap();
        assert_eq!(got, msg);
        // The name is gone, the memory is not.
        assert!(matches!(Segment::open(&p), Err(ShmError::NotFound(_))));
    }

    #[test]
    fn accesses_outside_the_segment_are_errors_not_faults() {
        let p = temp("bounds");
        let s = Segment::create(&p, 1000).unwrap();
        Segment::unlink(&p).unwrap();
        assert!(matches!(s.u64_at(1000), Err(ShmError::OutOfBounds { .. })));
        assert!(matches!(s.u64_at(996), Err(ShmError::OutOfBounds { .. })));
        assert!(matches!(
            s.u64_at(usize::MAX - 3),
            Err(ShmError::OutOfBounds { .. })
        ));
        assert!(matches!(s.u64_at(4), Err(ShmError::Misaligned { .. })));
        assert!(s.u32_at(996).is_ok());
        let mut buf = [0u8; 16];
        assert!(matches!(
            s.read(992, &mut buf),
            Err(ShmError::OutOfBounds { .. })
        ));
        assert!(matches!(
            s.write(usize::MAX - 7, &buf),
            Err(ShmError::OutOfBounds { .. })
        ));
        assert!(s.read(984, &mut buf).is_ok());
        assert!(matches!(
            s.futex_wait(1000, 0, None),
            Err(ShmError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn create_refuses_an_existing_name_and_open_a_missing_one() {
        let p = temp("excl");
        let _s = Segment::create(&p, 64).unwrap();
        assert!(matches!(Segment::create(&p, 64), Err(ShmError::Exists(_))));
        Segment::unlink(&p).unwrap();
        Segment::unlink(&p).unwrap();
        assert!(matches!(Segment::open(&p), Err(ShmError::NotFound(_))));
        assert!(matches!(Segment::create(&p, 0), Err(ShmError::BadSize(0))));
    }

    #[test]
    fn open_follows_no_link_and_takes_only_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let p = temp("mode");
        let link = temp("mode-link");
        let _s = Segment::create(&p, 64).unwrap();
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(Segment::open(&link), Err(ShmError::Symlink(_))));
        assert!(matches!(
            Segment::create(&link, 64),
            Err(ShmError::Exists(_))
        ));
        // Our own link, stale: removed, not followed (the target stays).
        Segment::remove_stale(&link).unwrap();
        assert!(p.exists());
        for mode in [0o644, 0o606, 0o700, 0o2600] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(
                matches!(Segment::open(&p), Err(ShmError::BadMode { mode: m, .. }) if m == mode),
                "mode {mode:o}"
            );
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Segment::open(&p).is_ok());
        Segment::unlink(&p).unwrap();
        // A directory at the name.
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = Segment::open(&p);
        std::fs::remove_dir(&p).unwrap();
        assert!(r.is_err(), "{r:?}");
    }

    /// A process that opens the name while another creates the segment finds either nothing
    /// or the whole segment, never a file still being made. The ranks of a host attach while
    /// their owner creates: a rank that met the file before it was sized failed the job's open
    /// ("a shared-memory segment of 0 bytes cannot be mapped"), 2 runs in 60 on the test-bed.
    #[test]
    fn a_segment_appears_at_its_name_whole() {
        use std::sync::atomic::AtomicBool;
        let p = Arc::new(temp("whole"));
        let done = Arc::new(AtomicBool::new(false));
        let opener = {
            let (p, done) = (Arc::clone(&p), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut seen = 0u32;
                while !done.load(Ordering::Acquire) {
                    match Segment::open(&p) {
                        Ok(s) => {
                            assert_eq!(s.len(), 8192);
                            seen += 1;
                        }
                        Err(ShmError::NotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(seen)
            })
        };
        let mut made = 0;
        for _ in 0..3000 {
            if opener.is_finished() {
                break;
            }
            let s = Segment::create(&p, 8192).unwrap();
            Segment::unlink(&p).unwrap();
            drop(s);
            made += 1;
        }
        done.store(true, Ordering::Release);
        let seen = opener.join().unwrap();
        assert!(
            seen.is_ok(),
            "after {made} segments the opener met {seen:?}"
        );
    }

    #[test]
    fn a_futex_wait_ends_when_another_mapping_wakes_it() {
        let p = temp("futex");
        let a = Arc::new(Segment::create(&p, 64).unwrap());
        let b = Segment::open(&p).unwrap();
        Segment::unlink(&p).unwrap();
        // A value other than the expected one returns at once; a timeout times out.
        assert_eq!(a.futex_wait(0, 1, None).unwrap(), Wake::Changed);
        assert_eq!(
            a.futex_wait(0, 0, Some(Duration::from_millis(5))).unwrap(),
            Wake::TimedOut
        );
        let waiter = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                while a.u32_at(0).unwrap().load(Ordering::Acquire) == 0 {
                    a.futex_wait(0, 0, Some(Duration::from_secs(10))).unwrap();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        b.u32_at(0).unwrap().store(1, Ordering::Release);
        b.futex_wake(0, u32::MAX).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
        assert!(!process_alive(0));
        assert!(!process_alive(u32::MAX));
    }
}
