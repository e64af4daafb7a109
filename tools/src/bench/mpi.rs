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
//! A job that does not finish (MPICH's busy-polling ranks on an over-subscribed host) is
//! killed at `--job-timeout`; the rows it printed before count, and a note says what is
//! missing. An interposer run in which the interposer fell back to PMPI gives no rows but a
//! note with the interposer's warning.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::bed::{fmt_us, summarize};
use super::table::Table;
use crate::mpi::{self, Job, JobOutput, MpiBed, MpiError, MpiImpl};
use crate::testbed::TestbedConfig;

/// The method, as printed with every report.
pub const METHOD: &str = "C program under mpirun/mpiexec, one process per rank in the \
test-bed's namespaces; bcast latency = root's call until the LAST rank returned (one machine, \
one CLOCK_MONOTONIC), barrier = last rank entering to last rank leaving; iterations separated \
out of band (futex barrier on a shared-memory file); warm-up not counted; mean80 = mean of the \
middle 80%; every rank checks every byte";

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
    /// Unmeasured iterations before them.
    pub warmup: usize,
    /// The interposer's wait mode (`ETHBCAST_WAIT`).
    pub wait: String,
    /// Test-bed prefix.
    pub prefix: String,
    /// A job still running after this long is killed.
    pub job_timeout: Duration,
    /// `libethbcast_capi.a` to build the interposer with (`None`: a release build).
    pub capi_lib: Option<PathBuf>,
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
            wait: "adaptive".into(),
            prefix: "ebmpi".into(),
            job_timeout: Duration::from_secs(240),
            capi_lib: None,
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
    /// Mean of the middle 80%, µs.
    pub mean80_us: f64,
    /// Median, µs.
    pub median_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
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
}

/// One line of mpi_bench's output.
#[derive(Debug, serde::Deserialize)]
struct Line {
    op: String,
    size: usize,
    ranks: usize,
    verified: bool,
    samples_us: Vec<f64>,
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
    let bed = MpiBed::up(&TestbedConfig::new(o.hosts).prefix(&o.prefix), &dir)?;
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
        method: METHOD.into(),
    };
    for (m, exe, so) in &programs {
        for interposer in [false, true] {
            let sync = format!("/dev/shm/ethbcast-mpi-bench-{}-{m}", o.prefix);
            let mut args = vec![sync.clone(), o.iters.to_string(), o.warmup.to_string()];
            args.extend(o.sizes.iter().map(|s| s.to_string()));
            let env = if interposer {
                vec![
                    ("LD_PRELOAD".to_string(), so.display().to_string()),
                    ("ETHBCAST_IFACE".into(), mpi::IFACE.into()),
                    ("ETHBCAST_WAIT".into(), o.wait.clone()),
                    ("ETHBCAST_MPI_VERBOSE".into(), "1".into()),
                ]
            } else {
                Vec::new()
            };
            let job = Job {
                mpi: *m,
                hosts: o.hosts,
                ranks_per_host: o.ranks_per_host,
                program: exe.clone(),
                args,
                env,
                timeout: o.job_timeout,
            };
            let out = bed.run(&job);
            let _ = std::fs::remove_file(&sync);
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    report.notes.push(format!("{m} {}: {e}", label(interposer)));
                    continue;
                }
            };
            collect(&mut report, *m, interposer, o, &out);
        }
    }
    bed.down()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

fn label(interposer: bool) -> &'static str {
    if interposer {
        "with the interposer"
    } else {
        "without the interposer"
    }
}

fn collect(
    report: &mut Report,
    m: MpiImpl,
    interposer: bool,
    o: &MpiBenchOptions,
    out: &JobOutput,
) {
    let what = format!("{m} {}", label(interposer));
    if interposer {
        if let Some(w) = out
            .stderr
            .lines()
            .find(|l| l.contains("hardware broadcast is off"))
        {
            report.notes.push(format!("{what}: fell back to PMPI: {w}"));
            return;
        }
    }
    let mut seen = 0;
    for line in out.stdout.lines().filter(|l| l.starts_with('{')) {
        let Ok(l) = serde_json::from_str::<Line>(line) else {
            report
                .notes
                .push(format!("{what}: unreadable line {line:?}"));
            continue;
        };
        let s = summarize(&l.samples_us);
        report.rows.push(Row {
            mpi: m.name().into(),
            op: l.op,
            size: l.size,
            ranks: l.ranks,
            interposer,
            mean80_us: s.mean80_us,
            median_us: s.median_us,
            p99_us: s.p99_us,
            verified: l.verified && l.samples_us.len() == o.iters,
        });
        seen += 1;
    }
    let expected = o.sizes.len() + 1;
    if !out.success() || seen < expected {
        let tail: Vec<&str> = out.stderr.lines().rev().take(3).collect();
        report.notes.push(format!(
            "{what}: {} after {:.0?}, {seen} of {expected} rows{}",
            match out.status {
                Some(s) => format!("exit {s}"),
                None => "killed at the job timeout".into(),
            },
            out.elapsed,
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
}

/// A table: each MPI's own latency beside the interposer's, and their ratio.
pub fn render(r: &Report) -> String {
    let mut t = Table::new(&[
        "impl",
        "op",
        "size",
        "ranks",
        "MPI mean80",
        "MPI median",
        "+ethbcast mean80",
        "+ethbcast median",
        "ratio (mean80)",
        "verified",
    ]);
    let find = |m: &str, op: &str, size: usize, i: bool| {
        r.rows
            .iter()
            .find(|x| x.mpi == m && x.op == op && x.size == size && x.interposer == i)
    };
    let mut keys: Vec<(String, String, usize)> = Vec::new();
    for x in &r.rows {
        let k = (x.mpi.clone(), x.op.clone(), x.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (m, op, size) in keys {
        let base = find(&m, &op, size, false);
        let hw = find(&m, &op, size, true);
        let cell = |x: Option<&Row>, f: fn(&Row) -> f64| x.map_or("-".into(), |x| fmt_us(f(x)));
        t.row(vec![
            m.clone(),
            op.clone(),
            size.to_string(),
            base.or(hw).map_or(0, |x| x.ranks).to_string(),
            cell(base, |x| x.mean80_us),
            cell(base, |x| x.median_us),
            cell(hw, |x| x.mean80_us),
            cell(hw, |x| x.median_us),
            match (base, hw) {
                (Some(b), Some(h)) if b.mean80_us > 0.0 => {
                    format!("{:.2}", h.mean80_us / b.mean80_us)
                }
                _ => "-".into(),
            },
            [base, hw].iter().flatten().all(|x| x.verified).to_string(),
        ]);
    }
    let mut s = t.render();
    let _ = writeln!(s, "latencies in µs; method: {}", r.method);
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// Whether the checkout at `root` has the benchmark's C sources and the interposer's build
/// script (the binary finds them through the path it was built from).
pub fn sources_present(root: &Path) -> bool {
    root.join("tools/mpi/mpi_bench.c").is_file() && root.join("capi/mpi/build.sh").is_file()
}
