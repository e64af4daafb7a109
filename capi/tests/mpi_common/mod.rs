//! What the MPI tests share: the static library cargo built for the run, both MPIs (or a
//! failure in CI without them), a test program and the interposer built for one MPI, and a job
//! that runs the program under the interposer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ethbcast_testbed::mpi::{self, Job, JobOutput, MpiImpl};

#[path = "../common/staticlib.rs"]
mod staticlib;
pub use staticlib::staticlib;

/// Whether both MPIs are installed; panics in CI when not.
pub fn mpis_available(test: &str) -> bool {
    let missing: Vec<String> = MpiImpl::ALL
        .iter()
        .filter_map(|&m| mpi::require(m).err().map(|e| e.to_string()))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: {}", missing.join("; "));
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {}", missing.join("; "));
    false
}

/// A test program and the interposer, both built for one MPI.
pub struct Built {
    /// The test program.
    pub program: PathBuf,
    /// `libethbcast_mpi-<mpi>.so`.
    pub interposer: PathBuf,
}

/// Builds `capi/mpi/<source>` with `m`'s mpicc and the interposer for `m`, into `dir`.
// mpich_suite.rs builds programs of its own.
#[allow(dead_code)]
pub fn build(m: MpiImpl, dir: &Path, source: &str) -> Built {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mpi")
        .join(source);
    let stem = source.trim_end_matches(".c");
    let program = dir.join(format!("{stem}-{m}"));
    mpi::compile(m, &src, &program).unwrap_or_else(|e| panic!("{e}"));
    Built {
        program,
        interposer: interposer(m, dir),
    }
}

/// Builds the interposer for `m` into `dir` (`libethbcast_mpi-<mpi>.so`).
pub fn interposer(m: MpiImpl, dir: &Path) -> PathBuf {
    mpi::build_interposer(m, Some(&staticlib()), dir).unwrap_or_else(|e| panic!("{e}"))
}

/// A job of `b`'s program with `args` on `hosts` hosts, `k` ranks each, under the interposer
/// (which reports where each rank's calls went), with `env` added. Every size goes over
/// ethbcast, so that the byte checks cover its long messages too, unless `env` sets
/// `ETHBCAST_MPI_MAX_BYTES`.
pub fn job(
    m: MpiImpl,
    b: &Built,
    hosts: usize,
    k: usize,
    env: &[(&str, &str)],
    args: &[&str],
) -> Job {
    let mut env: Vec<(String, String)> = env
        .iter()
        .map(|(a, v)| (a.to_string(), v.to_string()))
        .collect();
    env.push(("LD_PRELOAD".into(), b.interposer.display().to_string()));
    env.push(("ETHBCAST_MPI_VERBOSE".into(), "1".into()));
    if !env.iter().any(|(a, _)| a == "ETHBCAST_MPI_MAX_BYTES") {
        env.push(("ETHBCAST_MPI_MAX_BYTES".into(), "unlimited".into()));
    }
    env.push(("ETHBCAST_TIMEOUT_MS".into(), "20000".into()));
    if m == MpiImpl::Mpich {
        // MPICH's own messages (the halves, its PMPI calls) over UCX shared memory: the
        // namespaces share one kernel. Over UCX's TCP transport MPICH 4.0 (Debian 12) hangs
        // in its own MPI_Finalize now and then, with or without the interposer
        // (docs/mpi.md, "On the test-bed", says why).
        env.push(("UCX_TLS".into(), "self,sm".into()));
    }
    Job {
        mpi: m,
        hosts,
        ranks_per_host: k,
        program: b.program.clone(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env,
        timeout: Duration::from_secs(90),
    }
}

/// One rank's line of the interposer's report (`ETHBCAST_MPI_VERBOSE`).
// Each test binary reads the fields it checks.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Calls over ethbcast.
    pub hw: u64,
    /// Calls passed to PMPI.
    pub pmpi: u64,
    /// The size limit, bytes.
    pub limit: u64,
    /// The link rate it saw, bit/s.
    pub rate: u64,
    /// MPI progress probes while its calls waited on ethbcast.
    pub probes: u64,
    /// MPI_Allgather(v) and MPI_Allreduce calls over ethbcast.
    pub coll_hw: u64,
    /// MPI_Allgather(v) and MPI_Allreduce calls passed to PMPI.
    pub coll_pmpi: u64,
    /// The total size limit of MPI_Allreduce over ethbcast, bytes.
    pub allreduce_limit: u64,
    /// The total size limit of MPI_Allgather(v) over ethbcast, bytes.
    pub allgather_limit: u64,
}

/// Each rank's report line; panics naming a rank that printed none.
pub fn reports(out: &JobOutput, ranks: usize) -> Vec<Report> {
    let mut per_rank = vec![None; ranks];
    for line in out.stderr.lines() {
        let Some(rest) = line.strip_prefix("ethbcast-mpi: rank ") else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        if let [r, hw, "calls", "over", "ethbcast,", pmpi, "over", "PMPI,", _, "looks", "of", "the", "progress", "thread;", "size", "limit", limit, "bytes,", "link", rate, "bit/s;", probes, "MPI", "progress", "probes", "while", "waiting;", coll_hw, "allgathers", "and", "reductions", "over", "ethbcast,", coll_pmpi, "over", "PMPI;", "allreduce", "limit", allreduce_limit, "bytes,", "allgather", "limit", allgather_limit, "bytes"] =
            w[..]
        {
            let r: usize = r.trim_end_matches(':').parse().expect("rank");
            let n = |v: &str| v.parse::<u64>().expect("count");
            per_rank[r] = Some(Report {
                hw: n(hw),
                pmpi: n(pmpi),
                limit: n(limit),
                rate: n(rate),
                probes: n(probes),
                coll_hw: n(coll_hw),
                coll_pmpi: n(coll_pmpi),
                allreduce_limit: n(allreduce_limit),
                allgather_limit: n(allgather_limit),
            });
        }
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.unwrap_or_else(|| panic!("rank {r}: no interposer report: {out}")))
        .collect()
}

/// Where each rank's MPI_Bcast and MPI_Barrier calls went: (over ethbcast, over PMPI) per rank.
pub fn routed(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    reports(out, ranks).iter().map(|r| (r.hw, r.pmpi)).collect()
}

/// Where each rank's MPI_Allgather(v) and MPI_Allreduce calls went: (over ethbcast, over PMPI)
/// per rank.
// mpi_conformance.rs and mpi4py_suite.rs count them, not every test binary that shares this.
#[allow(dead_code)]
pub fn routed_coll(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    reports(out, ranks)
        .iter()
        .map(|r| (r.coll_hw, r.coll_pmpi))
        .collect()
}
