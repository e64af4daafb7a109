//! CPU time of the benchmarks' members, for the cost of bulk transfers in CPU seconds per GiB,
//! and the exact work per operation (system calls, sends, context switches, CPU time) from
//! per-thread perf counters, for `latency --cost` ([`Meter`]).
//!
//! Why per thread and per child rather than the machine's `/proc/stat`: the machine is shared,
//! so only the time of our own members counts. Members that are threads of the benchmark
//! (throughput, the raw blaster) read `getrusage(RUSAGE_THREAD)` at their start and end;
//! members that are processes (`ethbcast send`/`recv`, UDPCast) are measured with
//! `getrusage(RUSAGE_CHILDREN)` around waiting for them (the kernel adds a child's time when
//! it is reaped; `ip netns exec` execs the program, so the child is the program itself).
//! Kernel work done on behalf of a member in its own context (a veth send delivers the frame
//! in the sender's system call) counts; work the kernel defers to its own threads does not,
//! so [`ksoftirqd_seconds`] reports the machine's softirq threads beside it (machine-wide: on
//! a shared machine it includes other users' traffic, so it is shown, not added).

pub use ethbcast_sys::perf::{Counts, ThreadCounters};
use nix::sys::resource::{getrusage, UsageWho};
use serde::Serialize;

/// User plus system seconds of `who` so far.
fn seconds(who: UsageWho) -> f64 {
    getrusage(who).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// CPU seconds the calling thread has used so far.
pub fn thread_seconds() -> f64 {
    seconds(UsageWho::RUSAGE_THREAD)
}

/// CPU seconds of the whole process so far (every thread).
pub fn process_seconds() -> f64 {
    seconds(UsageWho::RUSAGE_SELF)
}

/// The process's peak resident memory so far, in bytes (0 if unknown).
pub fn peak_rss_bytes() -> u64 {
    // Linux reports ru_maxrss in KiB.
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| u64::try_from(u.max_rss()).unwrap_or(0) * 1024)
}

/// CPU seconds of every child reaped so far (and of their reaped descendants).
pub fn children_seconds() -> f64 {
    seconds(UsageWho::RUSAGE_CHILDREN)
}

/// CPU seconds of the kernel's softirq threads (`ksoftirqd/N`) so far, from `/proc` (0 if
/// unreadable).
pub fn ksoftirqd_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as f64;
    let mut ticks = 0u64;
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        ticks += ksoftirqd_ticks(&stat).unwrap_or(0);
    }
    ticks as f64 / tick
}

/// utime + stime (clock ticks) from a `/proc/PID/stat` line, if the task is a ksoftirqd.
fn ksoftirqd_ticks(stat: &str) -> Option<u64> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    if !stat[open + 1..close].starts_with("ksoftirqd/") {
        return None;
    }
    // Fields after the name: state (3), ppid, ... utime is field 14, stime 15.
    let mut f = stat[close + 1..].split_whitespace().skip(11);
    Some(f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?)
}

/// CPU cost of moving `bytes` to every receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuCost {
    /// The sender's CPU seconds.
    pub sender_s: f64,
    /// All receivers' CPU seconds together.
    pub receivers_s: f64,
    /// (sender + receivers) seconds per GiB of payload delivered to each receiver.
    pub per_gib_s: f64,
    /// The machine's softirq threads' seconds meanwhile (not in the sum: machine-wide).
    pub ksoftirqd_s: f64,
}

impl CpuCost {
    /// The cost of `bytes` of payload given to every receiver.
    pub fn new(sender_s: f64, receivers_s: f64, bytes: u64) -> CpuCost {
        let gib = bytes as f64 / (1u64 << 30) as f64;
        CpuCost {
            sender_s,
            receivers_s,
            per_gib_s: if gib > 0.0 {
                (sender_s + receivers_s) / gib
            } else {
                0.0
            },
            ksoftirqd_s: 0.0,
        }
    }

    /// With the softirq threads' seconds of the same interval.
    pub fn with_ksoftirqd(mut self, s: f64) -> CpuCost {
        self.ksoftirqd_s = s;
        self
    }
}

/// The work of one member thread per entry of a run (an (algorithm, size) or a floor size),
/// counted by the kernel's per-thread perf counters ([`ThreadCounters`]) over the measured
/// iterations only: a member calls [`Meter::start`] before its first measured iteration of an
/// entry and [`Meter::stop`] before the first iteration of the next entry (and at its end), so
/// that the root's out-of-band waits, where it answers the protocol, are in the window. Off
/// (`None` counters) it does nothing.
#[derive(Debug)]
pub struct Meter {
    counters: Option<ThreadCounters>,
    at: Option<(usize, Counts)>,
    per: Vec<Counts>,
}

impl Meter {
    /// A meter of `entries` entries for the calling thread; counting only if `on`.
    pub fn new(on: bool, entries: usize) -> Result<Meter, String> {
        let counters = if on {
            Some(ThreadCounters::open().map_err(|e| {
                format!("--cost needs the kernel's perf events (root, tracefs): {e}")
            })?)
        } else {
            None
        };
        Ok(Meter {
            counters,
            at: None,
            per: vec![Counts::default(); entries],
        })
    }

    /// Starts counting for `entry`.
    pub fn start(&mut self, entry: usize) -> Result<(), String> {
        if let Some(c) = self.counters.as_mut() {
            self.at = Some((entry, c.read().map_err(|e| e.to_string())?));
        }
        Ok(())
    }

    /// Ends the window started last (if any), adding it to its entry.
    pub fn stop(&mut self) -> Result<(), String> {
        if let (Some(c), Some((e, a))) = (self.counters.as_mut(), self.at.take()) {
            let now = c.read().map_err(|e| e.to_string())?;
            self.per[e].add(&ThreadCounters::between(&now, &a));
        }
        Ok(())
    }

    /// What was counted, per entry (all zero when off).
    pub fn into_counts(self) -> Vec<Counts> {
        self.per
    }
}

/// Adds every member's per-entry counts into `acc[entry]`.
pub fn sum_counts(acc: &mut [Counts], members: &[Vec<Counts>]) {
    for m in members {
        for (a, c) in acc.iter_mut().zip(m) {
            a.add(c);
        }
    }
}

/// The work of all members per broadcast of one row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PerOp {
    /// System calls per broadcast (every member thread together).
    pub syscalls: f64,
    /// `sendto` (and `sendmsg`, `sendmmsg`) calls per broadcast.
    pub sendto: f64,
    /// Context switches per broadcast.
    pub ctx_switches: f64,
    /// Timers armed per broadcast (a wait with a timeout arms one).
    pub timers: f64,
    /// CPU time per broadcast (task-clock of every member thread), µs.
    pub cpu_us: f64,
}

impl PerOp {
    /// `c` over `ops` operations.
    pub fn new(c: &Counts, ops: u64) -> PerOp {
        let n = ops.max(1) as f64;
        PerOp {
            syscalls: c.syscalls as f64 / n,
            sendto: c.sends as f64 / n,
            ctx_switches: c.context_switches as f64 / n,
            timers: c.timers as f64 / n,
            cpu_us: c.cpu_ns as f64 / 1e3 / n,
        }
    }

    /// Field by field `self / base` (0 where the base is 0).
    pub fn over(&self, base: &PerOp) -> PerOp {
        let r = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        PerOp {
            syscalls: r(self.syscalls, base.syscalls),
            sendto: r(self.sendto, base.sendto),
            ctx_switches: r(self.ctx_switches, base.ctx_switches),
            timers: r(self.timers, base.timers),
            cpu_us: r(self.cpu_us, base.cpu_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_uses_cpu_time_and_the_cost_scales_per_gib() {
        let t0 = thread_seconds();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        assert!(thread_seconds() - t0 > 0.005);
        let c = CpuCost::new(1.0, 3.0, 2 << 30);
        assert_eq!(c.per_gib_s, 2.0);
        assert_eq!(CpuCost::new(1.0, 1.0, 0).per_gib_s, 0.0);
    }

    #[test]
    fn a_meter_counts_only_its_windows_per_entry() {
        let mut m = Meter::new(false, 2).unwrap();
        m.start(0).unwrap();
        m.stop().unwrap();
        assert_eq!(m.into_counts(), vec![Counts::default(); 2]);
        let Ok(mut m) = Meter::new(true, 2) else {
            return; // no perf events here (not root)
        };
        m.start(1).unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(b"x", s.local_addr().unwrap()).unwrap();
        s.send_to(b"x", s.local_addr().unwrap()).unwrap();
        m.stop().unwrap();
        s.send_to(b"x", s.local_addr().unwrap()).unwrap();
        m.stop().unwrap();
        let c = m.into_counts();
        assert_eq!(c[0], Counts::default());
        assert_eq!(c[1].sends, 2);
        let p = PerOp::new(&c[1], 2);
        assert_eq!(p.sendto, 1.0);
        assert_eq!(p.over(&p).sendto, 1.0);
        assert_eq!(p.over(&PerOp::default()).syscalls, 0.0);
    }

    #[test]
    fn softirq_threads_are_found_by_name_in_proc_stat() {
        let line = "12 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 17 42 0 0 20 0 1 0 3 0 0";
        assert_eq!(ksoftirqd_ticks(line), Some(59));
        let other = "13 (kworker/0:1) S 2 0 0 0 -1 69238848 0 0 0 0 17 42 0 0 20 0 1 0 3 0 0";
        assert_eq!(ksoftirqd_ticks(other), None);
        assert!(ksoftirqd_seconds() >= 0.0);
    }
}
