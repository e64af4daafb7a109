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
//! A segment's file is created with `O_EXCL` and mode 0600, sized once, and never truncated by
//! this code. (A process that shrank the file would make the others fault on access; the
//! processes of one job do not.) Its name can be removed as soon as every process has mapped it
//! ([`Segment::unlink`]): the memory lives until the last mapping goes, and nothing stale is
//! left behind by a crash after that point.
//!
//! Waiting uses shared futexes on 32-bit words of the segment (the kernel keys them by file and
//! offset, so they work across processes that mapped the file at different addresses).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use thiserror::Error;

/// Where POSIX shared memory lives on Linux (`shm_open` names map to files here).
pub const SHM_DIR: &str = "/dev/shm";

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
    /// Creates the segment file at `path` (it must not exist; mode 0600) with `len` zero bytes
    /// and maps it.
    pub fn create(path: &Path, len: usize) -> Result<Segment> {
        if len == 0 || isize::try_from(len).is_err() {
            return Err(ShmError::BadSize(len as u64));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => ShmError::Exists(path.to_path_buf()),
                _ => io_error(path, "create", source),
            })?;
        file.set_len(len as u64).map_err(|source| {
            let _ = std::fs::remove_file(path);
            io_error(path, "size", source)
        })?;
        Self::map(file, path, len)
    }

    /// Opens and maps the existing segment at `path`, all of it.
    pub fn open(path: &Path) -> Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => ShmError::NotFound(path.to_path_buf()),
                _ => io_error(path, "open", source),
            })?;
        let len = file
            .metadata()
            .map_err(|source| io_error(path, "stat", source))?
            .len();
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
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
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
