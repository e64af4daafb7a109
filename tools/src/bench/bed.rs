//! What the test-bed benchmarks share: one member per host thread, a group over the first
//! `k` hosts, an out-of-band barrier that keeps the protocol moving, and summary statistics.
//!
//! All members are threads of one process on one machine, so `std::time::Instant` is one
//! clock for all of them: a benchmark records instants in each member and compares them
//! afterwards. Members synchronise between iterations out of band (shared atomics between the
//! threads, never the network), so iterations do not overlap and the synchronisation itself is
//! not measured.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{Backend, Group, GroupOptions, Key, Link, LinkError, WaitMode};
use serde::Serialize;

use super::probe;
use crate::netns;
use crate::testbed::{Rate, Testbed, TestbedConfig};

/// How members poll while they wait out of band.
pub const POLL: Duration = Duration::from_micros(50);

/// Options of a run on the test-bed.
#[derive(Debug, Clone)]
pub struct BedOptions {
    /// Hosts on the test-bed.
    pub hosts: usize,
    /// Test-bed name prefix.
    pub prefix: String,
    /// Link rate limit.
    pub rate: Option<Rate>,
    /// Random loss at the switch, percent.
    pub loss: f64,
    /// Link backend.
    pub backend: Backend,
    /// Wait mode.
    pub wait: WaitMode,
    /// How long any call or out-of-band wait may take before the run fails.
    pub timeout: Duration,
    /// Wrap every member's link in a [`ProbedLink`](super::probe::ProbedLink) (for the latency breakdown).
    pub probe: bool,
    /// GRO on every veth of the test-bed (NAPI receive; see [`TestbedConfig::gro`]).
    pub gro: bool,
    /// MTU of the test-bed's interfaces (`None`: 1500).
    pub mtu: Option<u32>,
    /// How the groups' frames are protected.
    pub frames: Frames,
}

/// How a bench group's frames are protected: no key (the protocol alone), a key with frames
/// authenticated only, or a key with frames encrypted (what a keyed group does by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Frames {
    /// No key: frames in the clear, unauthenticated.
    Plain,
    /// A key, frames authenticated only (keyed BLAKE3 tag).
    Auth,
    /// A key, frames encrypted and authenticated (AES-256-GCM).
    Enc,
}

impl Frames {
    /// The suffix of a row measured with these frames (`sbcast+enc`); none for plain frames.
    pub fn suffix(self) -> &'static str {
        match self {
            Frames::Plain => "",
            Frames::Auth => "+auth",
            Frames::Enc => "+enc",
        }
    }

    /// The group options of a bench group of id `group_id` (a fixed key: the bench measures
    /// on namespaces it created itself).
    pub fn options(self, group_id: u32, o: &BedOptions) -> GroupOptions {
        let base = GroupOptions {
            group_id,
            backend: o.backend,
            wait: o.wait,
            timeout: o.timeout,
            ..GroupOptions::default()
        };
        match self {
            Frames::Plain => GroupOptions {
                insecure: true,
                ..base
            },
            Frames::Auth | Frames::Enc => GroupOptions {
                key: Some(Key::from([0x5a; 32])),
                encrypt: self == Frames::Enc,
                ..base
            },
        }
    }
}

impl BedOptions {
    /// Defaults: `hosts` hosts, ring backend, block wait, no rate limit, no loss.
    pub fn new(hosts: usize, prefix: &str) -> BedOptions {
        BedOptions {
            hosts,
            prefix: prefix.into(),
            rate: None,
            loss: 0.0,
            backend: Backend::Ring,
            wait: WaitMode::Block,
            timeout: Duration::from_secs(60),
            probe: false,
            gro: false,
            mtu: None,
            frames: Frames::Plain,
        }
    }

    /// Builds the test-bed.
    pub fn up(&self) -> Result<Testbed, String> {
        let mut cfg = TestbedConfig::new(self.hosts);
        cfg.prefix = self.prefix.clone();
        cfg.rate = self.rate;
        cfg.gro = self.gro;
        cfg.mtu = self.mtu;
        if self.loss > 0.0 {
            cfg.loss_pct = Some(self.loss);
        }
        Testbed::up(&cfg).map_err(|e| format!("test-bed: {e}"))
    }
}

/// A barrier between the member threads that keeps polling the protocol while it waits (a
/// root must answer acknowledgements and pulls even between iterations). If one member fails,
/// every waiter fails instead of hanging.
#[derive(Debug)]
pub struct PollBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
    failed: AtomicBool,
    timeout: Duration,
}

impl PollBarrier {
    /// A barrier for `n` threads; a wait longer than `timeout` fails the run.
    pub fn new(n: usize, timeout: Duration) -> PollBarrier {
        PollBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            timeout,
        }
    }

    /// Marks the run failed: every waiter returns an error.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// True once a member failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits for all `n` threads, calling `poll` while waiting.
    pub fn wait(&self, mut poll: impl FnMut() -> Result<(), String>) -> Result<(), String> {
        let g = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Release);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        while self.generation.load(Ordering::Acquire) == g {
            if self.failed() {
                return Err("another member failed".into());
            }
            if Instant::now() > deadline {
                self.fail();
                return Err(format!(
                    "out-of-band barrier timed out after {:?}",
                    self.timeout
                ));
            }
            poll()?;
        }
        Ok(())
    }

    /// Waits until `counter` reaches `target`, calling `poll` meanwhile.
    pub fn wait_for(
        &self,
        counter: &AtomicUsize,
        target: usize,
        mut poll: impl FnMut() -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        while counter.load(Ordering::Acquire) < target {
            if self.failed() {
                return Err("another member failed".into());
            }
            if Instant::now() > deadline {
                self.fail();
                return Err(format!("members did not finish within {:?}", self.timeout));
            }
            poll()?;
        }
        Ok(())
    }
}

/// Polls `group` briefly (for [`PollBarrier`]).
pub fn poll(group: &mut Group) -> Result<(), String> {
    group.progress(POLL).map_err(|e| e.to_string())
}

/// One look of a root that waits out of band for its receivers between two broadcasts (for
/// [`PollBarrier::wait_for`]): yields the CPU, then gives `group` a turn that does not wait,
/// answering what arrived. A raw fan-out's root waits so (a `sched_yield` loop): the floor and
/// the protocol rows wait the same way, so that neither pays for a sleep and a wake-up between
/// iterations that the reference does not, and the root's core is as awake as it is there.
pub fn spin(group: &mut Group) -> Result<(), String> {
    std::thread::yield_now();
    group.progress(Duration::ZERO).map_err(|e| e.to_string())
}

/// Runs `body` in one thread per host `0..k` of `bed`, each with a [`Group`] of the first `k`
/// hosts (rank = host index, group id `group_id`). Everyone opens its socket and builds its
/// group before anyone starts; afterwards everyone flushes and waits for the others before
/// closing, so nobody leaves while a peer still needs repairs. Returns the members' results in
/// rank order, or the first error.
pub fn run_group<T, F>(
    bed: &Testbed,
    k: usize,
    group_id: u32,
    o: &BedOptions,
    body: F,
) -> Result<Vec<T>, String>
where
    T: Send + 'static,
    F: Fn(usize, &mut Group, &PollBarrier) -> Result<T, String> + Send + Sync + 'static,
{
    if k < 2 || k > bed.hosts().len() {
        return Err(format!(
            "group of {k} on a test-bed of {} hosts",
            bed.hosts().len()
        ));
    }
    let macs: Vec<[u8; 6]> = bed.hosts()[..k].iter().map(|h| h.mac).collect();
    let barrier = Arc::new(PollBarrier::new(k, o.timeout));
    let body = Arc::new(body);
    let mut handles = Vec::new();
    for h in &bed.hosts()[..k] {
        let (macs, barrier, body) = (macs.clone(), barrier.clone(), body.clone());
        let (rank, iface, o) = (h.index, h.iface.clone(), o.clone());
        let handle = netns::spawn_in(&h.netns, move || -> Result<T, String> {
            own_core(rank, k);
            let r = (|| {
                let link =
                    open_link(&o, &iface).map_err(|e| format!("rank {rank}: open {iface}: {e}"))?;
                let opts = o.frames.options(group_id, &o);
                let mut g = Group::from_link(link, macs, opts)
                    .map_err(|e| format!("rank {rank}: group: {e}"))?;
                barrier.wait(|| poll(&mut g))?;
                let out = body(rank, &mut g, &barrier).map_err(|e| format!("rank {rank}: {e}"))?;
                g.flush().map_err(|e| format!("rank {rank}: flush: {e}"))?;
                barrier.wait(|| poll(&mut g))?;
                Ok(out)
            })();
            if r.is_err() {
                barrier.fail();
            }
            r
        })
        .map_err(|e| format!("could not start a member in {}: {e}", h.netns))?;
        handles.push(handle);
    }
    join_hosts(handles, "a member thread panicked")
}

/// Gives host `rank` of a group of `k` a core of its own when the process may run on at least
/// `k` cores (the first `k` hosts of the test-bed then never share one). Called by every host
/// thread of the floor and of the protocol runs alike.
///
/// Why: hosts are threads here, and the kernel wakes a receiver on the core of the thread that
/// woke it (wake-affine), so two "hosts" end up taking turns on one core while the other idles.
/// Which of them then runs first after a send depends on the scheduler's history, not on the
/// protocol: measured at 2 hosts, the raw floor took 13 µs when the woken receiver preempted
/// the sending root and 25-27 µs when it did not, and a 50 µs or a 5 µs out-of-band poll of the
/// root flipped the floor and the protocol between the two (protocol/floor 1.62x or 1.21x). On a
/// cluster every host has its own CPU: one core per host is the faithful model where the
/// machine has the cores, and it makes the two comparable. Larger groups share the cores as
/// the scheduler likes.
pub fn own_core(rank: usize, k: usize) {
    let me = nix::unistd::Pid::from_raw(0);
    let Ok(allowed) = nix::sched::sched_getaffinity(me) else {
        return;
    };
    let cores: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if k > cores.len() {
        return;
    }
    let mut one = nix::sched::CpuSet::new();
    if one.set(cores[rank]).is_ok() {
        // Best effort: where the kernel refuses, the hosts share the cores as before.
        let _ = nix::sched::sched_setaffinity(me, &one);
    }
}

/// Joins the threads of the hosts: their results in rank order, or the error of the member
/// that failed first, not of the ones that gave up after it (`panicked` if one panicked).
pub fn join_hosts<T>(
    handles: Vec<std::thread::JoinHandle<Result<T, String>>>,
    panicked: &str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    let mut first_err: Option<String> = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                if first_err.is_none() || first_err.as_deref().is_some_and(is_secondary) {
                    first_err = Some(e);
                }
            }
            Err(_) => first_err = Some(panicked.into()),
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Opens the member's link as `o` says, wrapped in a [`probe::ProbedLink`] if `o.probe` (the
/// probe is then this thread's [`probe::probe`]).
pub fn open_link(o: &BedOptions, iface: &str) -> Result<Box<dyn Link + Send>, LinkError> {
    let l = ethbcast::open_link(o.backend, iface, o.wait)?;
    Ok(if o.probe { probe::install(l) } else { l })
}

fn is_secondary(e: &str) -> bool {
    e.ends_with("another member failed")
}

/// Summary of a sample of durations, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Mean of the middle 80% (the 10% smallest and 10% largest dropped; the EQA paper's
    /// method).
    pub mean80_us: f64,
    /// Median.
    pub median_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Summary {
    /// The column headers of the four statistics in a table, in the order of [`Summary::cells`].
    pub const HEADERS: [&'static str; 4] = ["mean80 µs", "median µs", "p99 µs", "max µs"];

    /// The four statistics formatted for a table ([`fmt_us`]), under [`Summary::HEADERS`].
    pub fn cells(&self) -> [String; 4] {
        [
            fmt_us(self.mean80_us),
            fmt_us(self.median_us),
            fmt_us(self.p99_us),
            fmt_us(self.max_us),
        ]
    }
}

/// Summarises samples given in microseconds.
pub fn summarize(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let cut = n / 10;
    let mid = &s[cut..n - cut];
    let mean80 = mid.iter().sum::<f64>() / mid.len() as f64;
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
    Summary {
        mean80_us: mean80,
        median_us: median,
        p99_us: s[rank - 1],
        max_us: s[n - 1],
    }
}

/// Microseconds from `a` to `b` (zero if `b` is earlier).
pub fn us(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1e6
}

/// Formats microseconds for a table (a missing value, NaN: `-`).
pub fn fmt_us(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A progress bar on the terminal, or a hidden one.
pub fn progress_bar(len: u64, visible: bool, what: &str) -> indicatif::ProgressBar {
    if !visible {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>12} [{elapsed_precise}] {wide_bar} {pos}/{len} ({eta})",
        )
        .expect("valid template"),
    );
    pb.set_message(what.to_string());
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_eighty_percent_drops_the_tails() {
        let mut v: Vec<f64> = (1..=10).map(f64::from).collect();
        v[9] = 1000.0; // an outlier
        let s = summarize(&v);
        assert_eq!(s.mean80_us, (2..=9).sum::<i32>() as f64 / 8.0);
        assert_eq!(s.median_us, 5.5);
        assert_eq!(s.max_us, 1000.0);
        assert_eq!(s.p99_us, 1000.0);
        assert_eq!(summarize(&[]).max_us, 0.0);
    }

    #[test]
    fn the_barrier_releases_everyone_and_fails_everyone() {
        let b = Arc::new(PollBarrier::new(3, Duration::from_secs(10)));
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        b.wait(|| {
                            std::thread::yield_now();
                            Ok(())
                        })?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
        let b = PollBarrier::new(2, Duration::from_secs(10));
        b.fail();
        assert!(b.wait(|| Ok(())).is_err());
    }
}
