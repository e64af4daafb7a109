//! Exact per-thread counts of the work a thread does, from the kernel's perf events: CPU time
//! (`task-clock`), context switches, system calls, send system calls and high-resolution timers
//! armed, for the benchmarks'
//! cost per operation on a shared, noisy machine (counts do not depend on what else runs).
//!
//! Why `perf_event_open(2)` rather than `/proc`: `/proc/<pid>/task/<tid>/schedstat` and
//! `status` give CPU time and context switches, but no count of system calls (`/proc/.../io`
//! counts only read- and write-family calls, not `sendto` or `ppoll`). The tracepoints
//! `raw_syscalls:sys_enter` and `syscalls:sys_enter_sendto` (and `sendmsg`, `sendmmsg`) count
//! every entry exactly; `timer:hrtimer_start` and `timer:timer_start` count every timer the
//! thread arms (a `ppoll` with a timeout arms one per wait, and on a virtual machine programming
//! the timer device traps to the host). The counters are separate events (the kernel counts nothing in a
//! tracepoint that is a member of a group led by a software counter), one `read(2)` each, and
//! count only the calling thread (no `inherit`), user and kernel mode alike (a veth send delivers the frame
//! in the sender's system call; that work is the sender's). Tracepoints need root (or
//! `perf_event_paranoid` <= -1) and tracefs (`/sys/kernel/tracing`).

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{Error, Result};

/// `PERF_TYPE_SOFTWARE`.
const TYPE_SOFTWARE: u32 = 1;
/// `PERF_TYPE_TRACEPOINT`.
const TYPE_TRACEPOINT: u32 = 2;
/// `PERF_COUNT_SW_TASK_CLOCK` (nanoseconds on the CPU).
const SW_TASK_CLOCK: u64 = 1;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
const SW_CONTEXT_SWITCHES: u64 = 3;
/// `PERF_FLAG_FD_CLOEXEC`.
const FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_ATTR_SIZE_VER0`: the fields up to `config1`, all this module sets.
const ATTR_SIZE: u32 = 64;

/// The first 64 bytes of `struct perf_event_attr` (`PERF_ATTR_SIZE_VER0`).
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// The bit field (`disabled`, `inherit`, `exclude_*`, ...): all zero, so the counter runs
    /// from its opening, in user and kernel mode.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// What a thread did between two [`ThreadCounters::read`]s (or since it opened them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nanoseconds on a CPU (`task-clock`).
    pub cpu_ns: u64,
    /// Context switches, voluntary and not.
    pub context_switches: u64,
    /// System calls entered.
    pub syscalls: u64,
    /// `sendto`, `sendmsg` and `sendmmsg` calls entered.
    pub sends: u64,
    /// Timers armed (started or restarted) by the thread, high-resolution or not.
    pub timers: u64,
}

impl Counts {
    /// `self - earlier`, field by field (counters only grow).
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            context_switches: self
                .context_switches
                .saturating_sub(earlier.context_switches),
            syscalls: self.syscalls.saturating_sub(earlier.syscalls),
            sends: self.sends.saturating_sub(earlier.sends),
            timers: self.timers.saturating_sub(earlier.timers),
        }
    }

    /// Field-by-field sum.
    pub fn add(&mut self, o: &Counts) {
        self.cpu_ns += o.cpu_ns;
        self.context_switches += o.context_switches;
        self.syscalls += o.syscalls;
        self.sends += o.sends;
        self.timers += o.timers;
    }
}

/// The tracepoints counted after the two software counters, in this order.
const TRACEPOINTS: [&str; 6] = [
    "raw_syscalls/sys_enter",
    "syscalls/sys_enter_sendto",
    "syscalls/sys_enter_sendmsg",
    "syscalls/sys_enter_sendmmsg",
    "timer/hrtimer_start",
    "timer/timer_start",
];

/// The id of a tracepoint (`category/name`) from tracefs.
fn tracepoint_id(name: &str) -> Result<u64> {
    let mut last = None;
    for root in [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ] {
        match std::fs::read_to_string(format!("{root}/{name}/id")) {
            Ok(s) => {
                return s.trim().parse().map_err(|_| {
                    Error::from_io(
                        "tracepoint id",
                        std::io::Error::new(std::io::ErrorKind::InvalidData, s.trim().to_string()),
                    )
                })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::from_io(
        "tracefs (is /sys/kernel/tracing mounted?)",
        last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)),
    ))
}

/// Opens one counter of the calling thread.
fn open(kind: u32, config: u64) -> Result<File> {
    let attr = Attr {
        kind,
        size: ATTR_SIZE,
        config,
        ..Attr::default()
    };
    // SAFETY: `attr` is a valid, initialised `perf_event_attr` prefix of `attr.size` bytes that
    // lives across the call; pid 0 / cpu -1 = the calling thread on any CPU, group -1 = none;
    // the kernel only reads the struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Error::from_io(
            "perf_event_open (needs root or kernel.perf_event_paranoid <= -1)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the kernel just returned this fd to us, so it is open and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    Ok(File::from(fd))
}

/// The counters of the calling thread (see the module documentation). Read them from the
/// thread that opened them; they count that thread only.
#[derive(Debug)]
pub struct ThreadCounters {
    /// task-clock, context switches, then the tracepoints (system calls first).
    fds: Vec<File>,
}

impl ThreadCounters {
    /// Opens the counters of the calling thread; they start at zero.
    pub fn open() -> Result<ThreadCounters> {
        let mut fds = vec![
            open(TYPE_SOFTWARE, SW_TASK_CLOCK)?,
            open(TYPE_SOFTWARE, SW_CONTEXT_SWITCHES)?,
        ];
        for t in TRACEPOINTS {
            fds.push(open(TYPE_TRACEPOINT, tracepoint_id(t)?)?);
        }
        Ok(ThreadCounters { fds })
    }

    /// The counts so far: one `read(2)` per counter, the system-call counter first, so that the
    /// system calls between two reads include exactly [`ThreadCounters::OVERHEAD`] of the reads
    /// themselves, which [`ThreadCounters::between`] subtracts.
    pub fn read(&mut self) -> Result<Counts> {
        let mut v = [0u64; 2 + TRACEPOINTS.len()];
        // The system-call counter first (see above), then the others in order.
        let order = [2usize, 0, 1, 3, 4, 5, 6, 7];
        for i in order {
            let mut b = [0u8; 8];
            self.fds[i]
                .read_exact(&mut b)
                .map_err(|e| Error::from_io("read(perf counter)", e))?;
            v[i] = u64::from_ne_bytes(b);
        }
        Ok(Counts {
            cpu_ns: v[0],
            context_switches: v[1],
            syscalls: v[2],
            sends: v[3] + v[4] + v[5],
            timers: v[6] + v[7],
        })
    }

    /// System calls of one [`ThreadCounters::read`] that the next read counts: the rest of
    /// this read, and the next read's own first call.
    pub const OVERHEAD: u64 = (2 + TRACEPOINTS.len()) as u64;

    /// The work between two reads, without the reads' own system calls.
    pub fn between(later: &Counts, earlier: &Counts) -> Counts {
        let mut d = later.since(earlier);
        d.syscalls = d.syscalls.saturating_sub(Self::OVERHEAD);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_threads_system_calls_and_sends() {
        let Ok(mut c) = ThreadCounters::open() else {
            eprintln!("perf events unavailable (not root?): skipped");
            return;
        };
        let a = c.read().unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = s.local_addr().unwrap();
        for _ in 0..5 {
            s.send_to(b"x", to).unwrap();
        }
        let d = ThreadCounters::between(&c.read().unwrap(), &a);
        assert_eq!(d.sends, 5, "{d:?}");
        // socket, bind, getsockname, five sends (and perhaps a setsockopt or two).
        assert!((8..=12).contains(&d.syscalls), "{d:?}");
        let e = c.read().unwrap();
        let f = c.read().unwrap();
        assert_eq!(ThreadCounters::between(&f, &e).syscalls, 0);
        assert!(d.cpu_ns > 0);
        // A wait with a timeout arms a timer; one without, or with none left, does not.
        use crate::wait::{poll_fd, Interest};
        use std::os::fd::AsFd;
        use std::time::Duration;
        let r = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = c.read().unwrap();
        for _ in 0..3 {
            assert!(!poll_fd(r.as_fd(), Interest::Read, Some(Duration::from_micros(200))).unwrap());
        }
        let d = ThreadCounters::between(&c.read().unwrap(), &before);
        assert!(d.timers >= 3, "{d:?}");
        s.send_to(b"x", r.local_addr().unwrap()).unwrap();
        let before = c.read().unwrap();
        assert!(poll_fd(r.as_fd(), Interest::Read, None).unwrap());
        let d = ThreadCounters::between(&c.read().unwrap(), &before);
        assert_eq!(d.timers, 0, "{d:?}");
    }
}
