//! `ethbcast-bench mpi`: MPI_Bcast and MPI_Barrier latency of real MPI programs, Open MPI
//! and MPICH, with and without the ethbcast interposer, on the test-bed.
//!
//! The measuring program is C (`tools/mpi/mpi_bench.c`, compiled with each mpicc): the MPI
//! program a user would run, under the user's launcher. All ranks share one machine's
//! monotonic clock, so the latency of one broadcast runs from the root's call until the LAST
//! rank returned with the whole message; of one barrier, from the last rank entering to the
//! last leaving. Iterations are separated out of band (a futex barrier on a shared-memory
//! file), so the separation costs the same under every MPI. Every rank checks every byte.
//!
//! With `--ranks-per-host K` (K > 1) the interposer runs twice: ranks of a host sharing one
//! network member through shared memory (path `shm`, K ranks in each of the test-bed's first
//! H namespaces), and every rank with its own socket and MAC (path `nic`, one rank in each of
//! H·K namespaces: the same ranks and group size as K sockets per host would give). `--also
//! KEY=VALUE,...` adds interposer runs with more environment (e.g. `ETHBCAST_HOST_SPIN_US=forever`
//! to compare how ranks of a host wait, in one run); its rows carry the setting in `env`.
//! `--control` runs the MPI alone a second time (path `control`): where both sides make the
//! same call (a size the interposer passes to PMPI), its ratio to the first says how far two
//! runs of the same code differ in that run, and so what a ratio near 1 can tell.
//!
//! A job that does not finish (MPICH's busy-polling ranks on an over-subscribed host) is
//! killed at `--job-timeout`; the rows it printed before count, and a note says what is
//! missing. An interposer run in which the interposer fell back to PMPI gives no rows but a
//! note with the interposer's warning.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ethbcast::WaitMode;
use serde::Serialize;

use super::bed::{fmt_us, summarize};
use super::cli::{parse_limit, Limit};
use crate::harness::report::{code, fail, print};
use crate::harness::table::Table;
use crate::mpi::{self, Job, JobOutput, MpiBed, MpiError, MpiImpl};
use crate::testbed::{Rate, TestbedConfig};

/// The method, as printed with every report: how the ranks run, how a call is timed (out of
/// band, or `--osu`), and how the runs share the machine.
macro_rules! method {
    ($timing:literal) => {
        concat!(
            "C program under mpirun/mpiexec, one process per rank in the test-bed's namespaces, \
             each rank's thread on a core of its own where the job has no more ranks than the \
             machine has cores; ",
            $timing,
            "; warm-up not counted; each run's iterations split over rounds in which the runs \
             take turns, each round starting one run later; mean80 = mean of the middle 80%; per \
             round = the ratio of each round's mean80 alone; every rank checks every byte"
        )
    };
}

/// The method of a report, calls timed as `ethbcast-bench mpi` does by default.
pub const METHOD: &str = method!(
    "bcast latency = root's call until the LAST rank returned (one machine, one \
     CLOCK_MONOTONIC), barrier = last rank entering to last rank leaving; iterations separated \
     out of band (futex barrier on a shared-memory file)"
);

/// The method of a report with `--osu`.
pub const OSU_METHOD: &str = method!(
    "iterations separated by MPI_Barrier (the interposer's where it is loaded), as the OSU \
     micro-benchmarks do; latency = every rank's own time in the call, averaged over the ranks \
     (OSU's average latency); entry skew = median over iterations of the last rank's entry \
     less the first's"
);

/// Options of an MPI run.
#[derive(Debug, Clone)]
pub struct MpiBenchOptions {
    /// Hosts of the test-bed.
    pub hosts: usize,
    /// MPI implementations.
    pub impls: Vec<MpiImpl>,
    /// Ranks per host.
    pub ranks_per_host: usize,
    /// Broadcast sizes in bytes.
    pub sizes: Vec<usize>,
    /// Measured iterations per size (and of the barrier).
    pub iters: usize,
    /// Unmeasured iterations before them (in every job).
    pub warmup: usize,
    /// Jobs each run's iterations are split over, the runs taking turns (A B A B ...): a
    /// machine that slows down or speeds up during the benchmark then weighs on every run
    /// alike, instead of on whichever ran at that time.
    pub rounds: usize,
    /// The interposer's wait mode (`ETHBCAST_WAIT`); `None`: the interposer's default.
    pub wait: Option<String>,
    /// Test-bed prefix.
    pub prefix: String,
    /// MTU of the test-bed's interfaces (`None`: 1500).
    pub mtu: Option<u32>,
    /// Every port's rate limit (tbf, as a switch port; `None`: unshaped veths).
    pub rate: Option<Rate>,
    /// A job still running after this long is killed.
    pub job_timeout: Duration,
    /// More interposer runs, each with this environment added.
    pub also: Vec<Vec<(String, String)>>,
    /// One more run of the MPI alone, as a control.
    pub control: bool,
    /// `libethbcast_capi.a` to build the interposer with (`None`: a release build).
    pub capi_lib: Option<PathBuf>,
    /// The operations: `bcast`, `allgather`, `allreduce`, `reduce`, `alltoall` (each at every
    /// size, bytes per rank), `barrier`, and `latency` (ranks 0 and 1 in a ping-pong, as
    /// osu_latency: half the round trip).
    pub ops: Vec<String>,
    /// Iterations separated by `MPI_Barrier` (the OSU micro-benchmarks' loop, average latency
    /// over ranks) instead of out of band.
    pub osu: bool,
}

impl MpiBenchOptions {
    /// The run: 8 hosts, both MPIs, 8 B to 64 KiB, 500 iterations after 50.
    pub fn new(hosts: usize) -> MpiBenchOptions {
        MpiBenchOptions {
            hosts,
            impls: MpiImpl::ALL.to_vec(),
            ranks_per_host: 1,
            sizes: vec![8, 64, 256, 1024, 4096, 16384, 65536],
            iters: 500,
            warmup: 50,
            rounds: 4,
            wait: None,
            prefix: "ebmpi".into(),
            mtu: None,
            rate: None,
            job_timeout: Duration::from_secs(240),
            also: Vec::new(),
            control: false,
            capi_lib: None,
            ops: ["bcast", "allgather", "allreduce", "reduce", "barrier"]
                .map(String::from)
                .to_vec(),
            osu: false,
        }
    }
}

/// One (implementation, interposer, operation, size).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// openmpi or mpich.
    #[serde(rename = "impl")]
    pub mpi: String,
    /// bcast or barrier.
    pub op: String,
    /// Bytes (0 for the barrier).
    pub size: usize,
    /// Ranks in the job.
    pub ranks: usize,
    /// Whether MPI_Bcast/MPI_Barrier went over ethbcast.
    pub interposer: bool,
    /// Ranks per host.
    pub ranks_per_host: usize,
    /// `mpi` (the MPI's own), `nic` (ethbcast, every rank its own network member), `shm`
    /// (ethbcast, one network member per host and shared memory among its ranks) or `control`
    /// (the MPI's own again, `--control`: its ratio to `mpi` is the measurement's own spread).
    pub path: String,
    /// Environment added to the interposer's run (`--also`), empty for the default.
    pub env: String,
    /// Mean of the middle 80%, µs.
    pub mean80_us: f64,
    /// Mean of the middle 80% of each round's samples alone, µs, in round order; `None` for a
    /// round whose job failed. The runs take turns round by round, so round k of two runs was
    /// measured at nearly the same time.
    pub round_mean80_us: Vec<Option<f64>>,
    /// Median, µs.
    pub median_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// With `--osu`: the median over iterations of how far apart the ranks entered the call
    /// (the separating MPI_Barrier's release skew), µs; `None` otherwise.
    pub entry_skew_median_us: Option<f64>,
    /// With `--osu`: each rank's mean entry into the call behind the first rank's, µs, in rank
    /// order (the mean of the rounds'): which ranks the separating barrier releases late.
    pub entry_lag_us: Option<Vec<f64>>,
    /// CPU µs of all ranks per measured iteration (every thread, user and system; the
    /// separation and the checks included): the work the loop costs the machine. `None` for
    /// the point-to-point latency.
    pub cpu_us_per_iter: Option<f64>,
    /// Context switches of all ranks per measured iteration (voluntary and involuntary).
    pub context_switches_per_iter: Option<f64>,
    /// µs per measured iteration of the whole loop (the separation, the call and the checks;
    /// the slowest rank's): what a program that calls it in a loop sees. `None` for the
    /// point-to-point latency.
    pub period_us: Option<f64>,
    /// Every rank found every byte right.
    pub verified: bool,
}

/// The rows and what went wrong on the way.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Measured rows.
    pub rows: Vec<Row>,
    /// Jobs that did not finish, fell back, or printed nothing.
    pub notes: Vec<String>,
    /// How it was measured.
    pub method: String,
    /// Every port's rate limit (`None`: unshaped veths).
    pub rate: Option<String>,
}

/// One line of mpi_bench's output.
#[derive(Debug, Clone, serde::Deserialize)]
struct Line {
    op: String,
    size: usize,
    ranks: usize,
    verified: bool,
    samples_us: Vec<f64>,
    /// With `--osu`: per iteration, the last rank's entry into the call less the first's.
    #[serde(default)]
    entry_skew_us: Option<Vec<f64>>,
    /// With `--osu`: each rank's mean entry behind the first rank's.
    #[serde(default)]
    entry_lag_us: Option<Vec<f64>>,
    /// A collective's: CPU µs of all ranks over the measured iterations.
    #[serde(default)]
    cpu_us: Option<f64>,
    /// A collective's: context switches of all ranks over the measured iterations.
    #[serde(default)]
    context_switches: Option<f64>,
    /// A collective's: µs the slowest rank took for all measured iterations, separation and
    /// checks included.
    #[serde(default)]
    loop_us: Option<f64>,
}

/// Runs the benchmark.
pub fn run(o: &MpiBenchOptions) -> Result<Report, MpiError> {
    if o.iters == 0 || o.sizes.is_empty() || o.impls.is_empty() {
        return Err(MpiError::Testbed(
            crate::testbed::TestbedError::InvalidConfig(
                "need at least one iteration, size and MPI implementation".into(),
            ),
        ));
    }
    if !sources_present(&mpi::repo_root()) {
        return Err(MpiError::Testbed(
            crate::testbed::TestbedError::InvalidConfig(format!(
                "the C sources are not at {}: run ethbcast-bench mpi from the ethbcast checkout it was built in",
                mpi::repo_root().display()
            )),
        ));
    }
    let dir = std::env::temp_dir().join(format!("ethbcast-bench-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| MpiError::Io {
        context: format!("cannot create {}", dir.display()),
        source,
    })?;
    let source = mpi::repo_root().join("tools/mpi/mpi_bench.c");
    let mut programs = Vec::new();
    for &m in &o.impls {
        let exe = dir.join(format!("mpi_bench-{m}"));
        mpi::compile(m, &source, &exe)?;
        let so = mpi::build_interposer(m, o.capi_lib.as_deref(), &dir)?;
        programs.push((m, exe, so));
    }
    let k = o.ranks_per_host.max(1);
    let namespaces = if k > 1 { o.hosts * k } else { o.hosts };
    let mut cfg = TestbedConfig::new(namespaces).prefix(&o.prefix);
    cfg.mtu = o.mtu;
    cfg.rate = o.rate;
    let bed = MpiBed::up(&cfg, &dir)?;
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
        method: if o.osu { OSU_METHOD } else { METHOD }.into(),
        rate: o.rate.map(|r| r.to_string()),
    };
    let rounds = o.rounds.clamp(1, o.iters);
    for (m, exe, so) in &programs {
        let runs = runs(o);
        let mut pooled: Vec<Vec<(usize, Line)>> = vec![Vec::new(); runs.len()];
        for round in 0..rounds {
            // This round's share of the iterations (the first rounds take the remainder).
            let iters = o.iters / rounds + usize::from(round < o.iters % rounds);
            // Each round starts one run later, so that every run takes every place in the
            // order equally often: a job runs slower or faster after some jobs than after
            // others (the previous job's teardown overlaps its start).
            for i in 0..runs.len() {
                let k = (round + i) % runs.len();
                let (run, pool) = (&runs[k], &mut pooled[k]);
                let out = job(&bed, o, (*m, exe, so), run, iters);
                if let Ok(JobOutput {
                    restarted: Some(why),
                    ..
                }) = &out
                {
                    report.notes.push(format!(
                        "{m} {}: started again after its launcher failed ({why})",
                        run.label()
                    ));
                }
                let expected: usize = o
                    .ops
                    .iter()
                    .map(|op| if op == "barrier" { 1 } else { o.sizes.len() })
                    .sum();
                match out.and_then(|out| lines(run, &out, expected)) {
                    Ok(lines) => pool.extend(lines.into_iter().map(|l| (round, l))),
                    Err(e) => report.notes.push(format!("{m} {}: {e}", run.label())),
                }
            }
        }
        for (run, pool) in runs.iter().zip(pooled) {
            rows(&mut report, *m, run, o, rounds, pool);
        }
    }
    bed.down()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// One job of the benchmark per MPI implementation.
#[derive(Debug, Clone)]
struct Run {
    /// `mpi`, `nic`, `shm` or `control` (see [`Row::path`]).
    path: &'static str,
    hosts: usize,
    ranks_per_host: usize,
    env: Vec<(String, String)>,
}

impl Run {
    /// Whether the job runs under the interposer.
    fn interposed(&self) -> bool {
        !matches!(self.path, "mpi" | "control")
    }

    fn label(&self) -> String {
        let mut s = match self.path {
            "mpi" => "without the interposer".to_string(),
            "control" => "without the interposer, again (control)".to_string(),
            "shm" => "with the interposer, shared memory on each host".to_string(),
            _ => "with the interposer, a socket per rank".to_string(),
        };
        if !self.env.is_empty() {
            s.push_str(&format!(" ({})", env_text(&self.env)));
        }
        s
    }
}

fn env_text(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The jobs of one MPI implementation: its own collectives, the interposer (shared memory when
/// ranks share hosts), the `--also` variants, and with K > 1 a socket per rank on H·K hosts.
fn runs(o: &MpiBenchOptions) -> Vec<Run> {
    let k = o.ranks_per_host.max(1);
    let hw = if k > 1 { "shm" } else { "nic" };
    let mut runs = vec![Run {
        path: "mpi",
        hosts: o.hosts,
        ranks_per_host: k,
        env: Vec::new(),
    }];
    for env in std::iter::once(Vec::new()).chain(o.also.iter().cloned()) {
        runs.push(Run {
            path: hw,
            hosts: o.hosts,
            ranks_per_host: k,
            env,
        });
    }
    if o.control {
        runs.push(Run {
            path: "control",
            hosts: o.hosts,
            ranks_per_host: k,
            env: Vec::new(),
        });
    }
    if k > 1 {
        runs.push(Run {
            path: "nic",
            hosts: o.hosts * k,
            ranks_per_host: 1,
            env: Vec::new(),
        });
    }
    runs
}

/// Runs one job of `run` with `iters` measured iterations per size.
fn job(
    bed: &MpiBed,
    o: &MpiBenchOptions,
    (m, exe, so): (MpiImpl, &Path, &Path),
    run: &Run,
    iters: usize,
) -> Result<JobOutput, String> {
    let sync = format!("/dev/shm/ethbcast-mpi-bench-{}-{m}", o.prefix);
    let mut args = vec![sync.clone(), iters.to_string(), o.warmup.to_string()];
    args.extend(o.sizes.iter().map(|s| s.to_string()));
    let mut env = vec![("MPI_BENCH_OPS".to_string(), o.ops.join(","))];
    if o.osu {
        env.push(("MPI_BENCH_SEPARATE".into(), "mpi".into()));
    }
    if run.interposed() {
        env.push(("LD_PRELOAD".to_string(), so.display().to_string()));
        env.push(("ETHBCAST_IFACE".into(), mpi::IFACE.into()));
        if let Some(w) = &o.wait {
            env.push(("ETHBCAST_WAIT".into(), w.clone()));
        }
        env.push(("ETHBCAST_MPI_VERBOSE".into(), "1".into()));
        env.extend(run.env.iter().cloned());
    }
    let job = Job {
        mpi: m,
        hosts: run.hosts,
        ranks_per_host: run.ranks_per_host,
        program: exe.to_path_buf(),
        args,
        env,
        timeout: o.job_timeout,
    };
    let out = bed.run(&job);
    let _ = std::fs::remove_file(&sync);
    out.map_err(|e| e.to_string())
}

/// The result lines of one job of `run` (`expected`: one per size and the barrier's); a job
/// that fell back to PMPI, failed or printed fewer is an error that says why.
fn lines(run: &Run, out: &JobOutput, expected: usize) -> Result<Vec<Line>, String> {
    if run.interposed() {
        if let Some(w) = out
            .stderr
            .lines()
            .find(|l| l.contains("hardware broadcast is off"))
        {
            return Err(format!("fell back to PMPI: {w}"));
        }
    }
    let mut lines = Vec::new();
    for line in out.stdout.lines().filter(|l| l.starts_with('{')) {
        match serde_json::from_str::<Line>(line) {
            Ok(l) => lines.push(l),
            Err(_) => return Err(format!("unreadable line {line:?}")),
        }
    }
    if !out.success() || lines.len() < expected {
        let tail: Vec<&str> = out.stderr.lines().rev().take(3).collect();
        return Err(format!(
            "{} after {:.0?}, {} of {expected} rows{}",
            match out.status {
                Some(s) => format!("exit {s}"),
                None => "killed at the job timeout".into(),
            },
            out.elapsed,
            lines.len(),
            if tail.is_empty() {
                String::new()
            } else {
                format!(
                    " (stderr ends: {})",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            }
        ));
    }
    Ok(lines)
}

/// One row per (operation, size) of `run`, over the samples of all its rounds (each line of
/// `pool` tagged with its round); verified when every round was and every iteration is there.
fn rows(
    report: &mut Report,
    m: MpiImpl,
    run: &Run,
    o: &MpiBenchOptions,
    rounds: usize,
    pool: Vec<(usize, Line)>,
) {
    // Each (operation, size): its pooled line (entry lags summed over its rounds) and its
    // rounds' mean80.
    let mut by_key: Vec<(Line, Vec<Option<f64>>)> = Vec::new();
    for (round, l) in pool {
        let mean80 = summarize(&l.samples_us).mean80_us;
        let i = match by_key
            .iter()
            .position(|(acc, _)| acc.op == l.op && acc.size == l.size)
        {
            Some(i) => {
                let acc = &mut by_key[i].0;
                acc.verified &= l.verified;
                acc.samples_us.extend(l.samples_us);
                match (&mut acc.entry_skew_us, l.entry_skew_us) {
                    (Some(a), Some(b)) => a.extend(b),
                    (a, _) => *a = None,
                }
                match (&mut acc.entry_lag_us, l.entry_lag_us) {
                    (Some(a), Some(b)) if a.len() == b.len() => {
                        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                    }
                    (a, _) => *a = None,
                }
                for (a, b) in [
                    (&mut acc.cpu_us, l.cpu_us),
                    (&mut acc.context_switches, l.context_switches),
                    (&mut acc.loop_us, l.loop_us),
                ] {
                    *a = a.zip(b).map(|(a, b)| a + b);
                }
                i
            }
            None => {
                by_key.push((l, vec![None; rounds]));
                by_key.len() - 1
            }
        };
        if let Some(slot) = by_key[i].1.get_mut(round) {
            *slot = Some(mean80);
        }
    }
    for (l, round_mean80_us) in by_key {
        let s = summarize(&l.samples_us);
        // Summed over the rounds pooled, one line each.
        let pooled = round_mean80_us.iter().flatten().count().max(1) as f64;
        let entry_lag_us = l
            .entry_lag_us
            .map(|v| v.iter().map(|x| x / pooled).collect());
        // Summed over the rounds' iterations, all of them.
        let per_iter = |total: Option<f64>| {
            total
                .filter(|_| !l.samples_us.is_empty())
                .map(|t| t / l.samples_us.len() as f64)
        };
        report.rows.push(Row {
            mpi: m.name().into(),
            op: l.op,
            size: l.size,
            ranks: l.ranks,
            interposer: run.interposed(),
            ranks_per_host: run.ranks_per_host,
            path: run.path.into(),
            env: env_text(&run.env),
            mean80_us: s.mean80_us,
            round_mean80_us,
            median_us: s.median_us,
            p99_us: s.p99_us,
            entry_skew_median_us: l.entry_skew_us.as_deref().map(|k| summarize(k).median_us),
            entry_lag_us,
            cpu_us_per_iter: per_iter(l.cpu_us),
            context_switches_per_iter: per_iter(l.context_switches),
            period_us: per_iter(l.loop_us),
            verified: l.verified && l.samples_us.len() == o.iters,
        });
    }
}

/// A table: one line per measured (implementation, path, operation, size), with the ratio to
/// the same MPI's own collective (same ranks per host).
pub fn render(r: &Report) -> String {
    let mut t = Table::new(&[
        "impl",
        "op",
        "size",
        "ranks",
        "per host",
        "path",
        "env",
        "mean80",
        "median",
        "p99",
        "entry skew",
        "ratio (mean80)",
        "per round",
        "period",
        "CPU/iter",
        "csw/iter",
        "verified",
    ]);
    let base = |x: &Row| {
        r.rows.iter().find(|b| {
            b.path == "mpi"
                && b.mpi == x.mpi
                && b.op == x.op
                && b.size == x.size
                && b.ranks == x.ranks
        })
    };
    let mut rows: Vec<&Row> = r.rows.iter().collect();
    rows.sort_by_key(|x| {
        (
            &x.mpi,
            &x.op != "bcast",
            &x.op,
            x.size,
            x.interposer,
            x.path != "mpi",
            &x.path,
            &x.env,
        )
    });
    for x in rows {
        // Every run but the MPI's own is set against it.
        let against = base(x).filter(|_| x.path != "mpi");
        t.row(vec![
            x.mpi.clone(),
            x.op.clone(),
            x.size.to_string(),
            x.ranks.to_string(),
            x.ranks_per_host.to_string(),
            x.path.clone(),
            if x.env.is_empty() {
                "-".into()
            } else {
                x.env.clone()
            },
            fmt_us(x.mean80_us),
            fmt_us(x.median_us),
            fmt_us(x.p99_us),
            x.entry_skew_median_us.map_or_else(|| "-".into(), fmt_us),
            match against {
                Some(b) if b.mean80_us > 0.0 => format!("{:.2}", x.mean80_us / b.mean80_us),
                _ => "-".into(),
            },
            against.map_or_else(|| "-".into(), |b| round_ratios(x, b)),
            x.period_us.map_or_else(|| "-".into(), fmt_us),
            x.cpu_us_per_iter.map_or_else(|| "-".into(), fmt_us),
            x.context_switches_per_iter
                .map_or_else(|| "-".into(), |c| format!("{c:.1}")),
            x.verified.to_string(),
        ]);
    }
    let mut s = t.render();
    let ports = r.rate.as_deref().unwrap_or("unshaped veths");
    let _ = writeln!(
        s,
        "ports: {ports}; latencies in µs; period: µs per iteration of the whole loop, CPU/iter: µs of CPU of all ranks per iteration, csw/iter: their context switches (separation and checks included); method: {}",
        r.method
    );
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// The ratio of `x` to `base` round by round (`-` for a round either lacks), so that one slow
/// round shows apart from a run that is slower throughout.
fn round_ratios(x: &Row, base: &Row) -> String {
    x.round_mean80_us
        .iter()
        .zip(&base.round_mean80_us)
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the checkout at `root` has the benchmark's C sources and the interposer's build
/// script (the binary finds them through the path it was built from).
pub fn sources_present(root: &Path) -> bool {
    root.join("tools/mpi/mpi_bench.c").is_file() && root.join("capi/mpi/build.sh").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_per_host_measure_shared_memory_against_a_socket_per_rank() {
        let mut o = MpiBenchOptions::new(8);
        let one: Vec<_> = runs(&o)
            .iter()
            .map(|r| (r.path, r.hosts, r.ranks_per_host))
            .collect();
        assert_eq!(one, [("mpi", 8, 1), ("nic", 8, 1)]);
        o.ranks_per_host = 4;
        o.also = vec![vec![("ETHBCAST_HOST_SPIN_US".into(), "forever".into())]];
        let four = runs(&o);
        let shape: Vec<_> = four
            .iter()
            .map(|r| (r.path, r.hosts, r.ranks_per_host, r.env.len()))
            .collect();
        // The same 32 ranks every time: the MPI's own, shared memory (twice: default and
        // --also), and one socket per rank in 32 namespaces.
        assert_eq!(
            shape,
            [
                ("mpi", 8, 4, 0),
                ("shm", 8, 4, 0),
                ("shm", 8, 4, 1),
                ("nic", 32, 1, 0)
            ]
        );
        assert!(four[2].label().contains("ETHBCAST_HOST_SPIN_US=forever"));
    }

    #[test]
    fn a_control_run_is_the_mpi_alone_again_and_gets_a_ratio() {
        let mut o = MpiBenchOptions::new(8);
        o.control = true;
        o.iters = 2;
        let runs = runs(&o);
        let paths: Vec<_> = runs.iter().map(|r| (r.path, r.interposed())).collect();
        assert_eq!(paths, [("mpi", false), ("nic", true), ("control", false)]);
        let mut report = empty(METHOD);
        for (run, us) in runs.iter().zip([100.0, 50.0, 110.0]) {
            rows(
                &mut report,
                MpiImpl::OpenMpi,
                run,
                &o,
                1,
                vec![(0, line("bcast", 8, &[us, us]))],
            );
        }
        let control = report.rows.iter().find(|r| r.path == "control").unwrap();
        assert!(!control.interposer);
        // The control's ratio is to the first run of the MPI alone, not to itself.
        let table = render(&report);
        let line = table.lines().find(|l| l.contains("control")).unwrap();
        assert!(line.contains("1.10"), "{table}");
    }

    /// A report with no rows yet.
    fn empty(method: &str) -> Report {
        Report {
            rows: Vec::new(),
            notes: Vec::new(),
            method: method.into(),
            rate: None,
        }
    }

    fn line(op: &str, size: usize, samples_us: &[f64]) -> Line {
        Line {
            op: op.into(),
            size,
            ranks: 8,
            verified: true,
            samples_us: samples_us.to_vec(),
            entry_skew_us: None,
            entry_lag_us: None,
            cpu_us: None,
            context_switches: None,
            loop_us: None,
        }
    }

    #[test]
    fn each_round_keeps_its_own_mean_and_a_failed_round_shows_as_missing() {
        let mut o = MpiBenchOptions::new(8);
        o.iters = 4;
        let runs = runs(&o);
        let mut report = empty(METHOD);
        // Open MPI alone: rounds 0 and 1 at 100 and 200 µs. The interposer: round 0 at 50 µs,
        // round 1's job failed.
        let alone = vec![
            (0, line("bcast", 8, &[100.0, 100.0])),
            (1, line("bcast", 8, &[200.0, 200.0])),
        ];
        let with = vec![(0, line("bcast", 8, &[50.0, 50.0]))];
        rows(&mut report, MpiImpl::OpenMpi, &runs[0], &o, 2, alone);
        rows(&mut report, MpiImpl::OpenMpi, &runs[1], &o, 2, with);
        assert_eq!(report.rows[0].round_mean80_us, [Some(100.0), Some(200.0)]);
        assert_eq!(report.rows[1].round_mean80_us, [Some(50.0), None]);
        // Pooled, the interposer's row lacks iterations, so it is not verified.
        assert!(report.rows[0].verified && !report.rows[1].verified);
        assert_eq!(round_ratios(&report.rows[1], &report.rows[0]), "0.50 -");
        let table = render(&report);
        assert!(table.contains("0.50 -"), "{table}");
    }

    /// mpi_bench's lines as `--osu` makes them: every rank's entry lag behind the first rank
    /// is the mean over the rounds, the entry skew the median over all iterations of all
    /// rounds; a round that lacks them leaves the row without.
    #[test]
    fn osu_rounds_pool_entry_skew_and_average_each_ranks_lag() {
        let mut o = MpiBenchOptions::new(2);
        o.iters = 4;
        let runs = runs(&o);
        let mut report = empty(OSU_METHOD);
        let osu = |skew: [f64; 2], lag: [f64; 2]| {
            serde_json::from_str::<Line>(&format!(
                "{{\"op\":\"alltoall\",\"size\":4,\"ranks\":2,\"verified\":true,\
                 \"samples_us\":[9,9],\"entry_skew_us\":[{},{}],\"entry_lag_us\":[{},{}]}}",
                skew[0], skew[1], lag[0], lag[1]
            ))
            .unwrap()
        };
        let pool = vec![
            (0, osu([1.0, 2.0], [0.0, 10.0])),
            (1, osu([3.0, 40.0], [4.0, 30.0])),
        ];
        rows(&mut report, MpiImpl::OpenMpi, &runs[0], &o, 2, pool);
        let r = &report.rows[0];
        assert_eq!(r.entry_lag_us.as_deref(), Some(&[2.0, 20.0][..]));
        assert!(r
            .entry_skew_median_us
            .is_some_and(|m| (2.0..=3.0).contains(&m)));
        let without = vec![
            (0, osu([1.0, 2.0], [0.0, 10.0])),
            (1, line("alltoall", 4, &[9.0, 9.0])),
        ];
        rows(&mut report, MpiImpl::OpenMpi, &runs[1], &o, 2, without);
        let r = &report.rows[1];
        assert!(r.entry_lag_us.is_none() && r.entry_skew_median_us.is_none());
    }

    /// The work counters and the loop's time of a collective's lines: summed over the rounds
    /// and divided by all their iterations; a round without them (an older program) leaves
    /// the row without.
    #[test]
    fn rounds_pool_the_cpu_context_switches_and_period_per_iteration() {
        let mut o = MpiBenchOptions::new(2);
        o.iters = 4;
        let runs = runs(&o);
        let mut report = empty(OSU_METHOD);
        let worked = |cpu: f64, csw: f64| {
            serde_json::from_str::<Line>(&format!(
                "{{\"op\":\"allgather\",\"size\":4,\"ranks\":2,\"verified\":true,\
                 \"samples_us\":[9,9],\"cpu_us\":{cpu},\"context_switches\":{csw},\
                 \"loop_us\":{}}}",
                cpu * 3.0
            ))
            .unwrap()
        };
        // Two rounds of two iterations: 100 and 300 µs of CPU, 4 and 8 switches, loops of 300
        // and 900 µs.
        let pool = vec![(0, worked(100.0, 4.0)), (1, worked(300.0, 8.0))];
        rows(&mut report, MpiImpl::OpenMpi, &runs[0], &o, 2, pool);
        assert_eq!(report.rows[0].cpu_us_per_iter, Some(100.0));
        assert_eq!(report.rows[0].context_switches_per_iter, Some(3.0));
        assert_eq!(report.rows[0].period_us, Some(300.0));
        let table = render(&report);
        assert!(table.contains("100.0") && table.contains("3.0"), "{table}");
        let without = vec![
            (0, worked(100.0, 4.0)),
            (1, line("allgather", 4, &[9.0, 9.0])),
        ];
        rows(&mut report, MpiImpl::OpenMpi, &runs[1], &o, 2, without);
        assert_eq!(report.rows[1].cpu_us_per_iter, None);
        assert_eq!(report.rows[1].context_switches_per_iter, None);
        assert_eq!(report.rows[1].period_us, None);
    }
}

/// MPI collective latency (MPI_Bcast, MPI_Allgather, MPI_Allreduce, MPI_Alltoall,
/// MPI_Barrier) of a C MPI program under Open MPI and MPICH, with and without the ethbcast
/// interposer (LD_PRELOAD), one rank per test-bed host (or K).
///
/// Builds the benchmark with each mpicc and the interposer with capi/mpi/build.sh (run it
/// from the checkout). Latency of one broadcast = root's call until the LAST rank returned;
/// of a barrier = last rank entering to last rank leaving; every rank checks every byte.
///
/// Example: ethbcast-bench mpi --testbed 8 --impl openmpi,mpich --json
#[derive(clap::Args)]
pub struct Args {
    /// Hosts on the test-bed.
    #[arg(long, default_value_t = 8)]
    testbed: usize,
    /// MPI implementations: openmpi, mpich.
    #[arg(long = "impl", default_value = "openmpi,mpich", value_delimiter = ',')]
    impls: Vec<MpiImpl>,
    /// Ranks per host.
    #[arg(long, default_value_t = 1)]
    ranks_per_host: usize,
    /// Broadcast sizes in bytes.
    #[arg(
        long,
        default_value = "8,64,256,1024,4096,16384,65536",
        value_delimiter = ','
    )]
    sizes: Vec<usize>,
    /// Measured iterations per size and of the barrier.
    #[arg(long, default_value_t = 500)]
    iters: usize,
    /// Unmeasured iterations before them, in every job.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Jobs each run's iterations are split over, the runs (Open MPI alone, the interposer,
    /// every --also) taking turns, so that a machine whose speed drifts during the benchmark
    /// weighs on all of them alike.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// The interposer's wait mode: patient, adaptive, block, spin, doze (default: the
    /// interposer's own, patient).
    #[arg(long)]
    wait: Option<WaitMode>,
    /// Test-bed name prefix.
    #[arg(long, default_value = "ebmpi")]
    prefix: String,
    /// MTU of the test-bed's interfaces (e.g. 9000 for jumbo frames; default 1500).
    #[arg(long)]
    mtu: Option<u32>,
    /// Every port's rate limit (tbf, as a switch port), e.g. 100mbit or 1gbit; none (the
    /// default) for unshaped veths.
    #[arg(long, value_parser = parse_limit)]
    rate: Option<Limit>,
    /// Seconds after which a job that has not finished is killed (its rows so far count).
    #[arg(long, default_value_t = 240)]
    job_timeout: u64,
    /// One more interposer run with this environment added, as KEY=VALUE[,KEY=VALUE...]
    /// (repeatable), e.g. --also ETHBCAST_HOST_SPIN_US=forever.
    #[arg(long, value_parser = parse_env_list)]
    also: Vec<EnvList>,
    /// One more run of the MPI alone (path `control`), taking turns with the others: its
    /// ratio to the first is how far two runs of the same code differ in this run.
    #[arg(long)]
    control: bool,
    /// Operations: bcast, allgather, allreduce, reduce, alltoall (at every size, bytes per
    /// rank; allreduce and reduce, to rank 0, sum ints), barrier, and latency
    /// (MPI_Send/MPI_Recv between ranks 0 and 1, half the round trip, back to back with --osu
    /// as osu_latency runs them).
    #[arg(long, default_value = "bcast,allgather,allreduce,reduce,barrier", value_delimiter = ',', value_parser = ["bcast", "allgather", "allreduce", "reduce", "alltoall", "barrier", "latency"])]
    ops: Vec<String>,
    /// Separate iterations with MPI_Barrier, as the OSU micro-benchmarks do, and report their
    /// average latency (each rank's own time in the call, averaged over the ranks), instead of
    /// the out-of-band barrier and the last rank's return.
    #[arg(long)]
    osu: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the MPI benchmark; exits 1 unless every row was verified.
    pub fn run(self) -> ExitCode {
        let mut o = MpiBenchOptions::new(self.testbed);
        o.also = self.also.into_iter().map(|e| e.0).collect();
        o.control = self.control;
        o.impls = self.impls;
        o.ranks_per_host = self.ranks_per_host;
        o.sizes = self.sizes;
        o.iters = self.iters;
        o.warmup = self.warmup;
        o.rounds = self.rounds;
        o.wait = self.wait.map(|w| w.to_string());
        o.prefix = self.prefix;
        o.mtu = self.mtu;
        o.rate = self.rate.and_then(|l| l.0);
        o.job_timeout = Duration::from_secs(self.job_timeout);
        o.ops = self.ops;
        o.osu = self.osu;
        match run(&o) {
            Ok(r) => {
                print(self.json, &r, render);
                code(r.rows.iter().all(|x| x.verified))
            }
            Err(e) => fail(e),
        }
    }
}

/// Environment variables given as `KEY=VALUE[,KEY=VALUE...]`.
#[derive(Debug, Clone)]
struct EnvList(Vec<(String, String)>);

fn parse_env_list(s: &str) -> Result<EnvList, String> {
    s.split(',')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(format!("{kv:?} is not KEY=VALUE")),
        })
        .collect::<Result<Vec<_>, String>>()
        .map(EnvList)
}
