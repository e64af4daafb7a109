//! A test suite nobody here wrote: mpi4py's own (Debian's `python3-mpi4py` with the tests of
//! the same release), 8 ranks of Open MPI on the 8-host test-bed, once with the MPI alone and
//! once under the interposer. Every rank must report the same tests run, failed, in error and
//! skipped both times, and under the interposer every rank must have sent calls over ethbcast.
//!
//! The tests come from mpi4py's source release: `.ci/run` fetches it (checking its digest) and
//! sets `ETHBCAST_MPI4PY_TESTS` to its `test/` folder. The modules run are the ones whose tests
//! call `MPI_Bcast`, `MPI_Barrier`, `MPI_Allgather` or `MPI_Allreduce` on communicators the
//! interposer takes, with the communicator tests (duplicates, splits, attributes,
//! intercommunicators): buffer and object collectives, pickle-5 collectives, communicators and
//! zero-length messages; and, apart, the Allgatherv tests of the vector collectives. The whole
//! suite (1358 tests) gives the same results too, but takes over ten minutes a run over the
//! test-bed's TCP on 2 cores, most of it in the rest of the vector collectives
//! (`test_cco_vec`: gathers, scatters, all-to-alls), which the interposer passes through.
//!
//! Needs root, Open MPI, `python3-mpi4py` and the tests: with `ETHBCAST_REQUIRE_NETNS=1`
//! anything missing fails the test instead of skipping it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ethbcast_testbed::mpi::{self, JobOutput, MpiBed, MpiImpl};
use ethbcast_testbed::{netns_available, TestbedConfig};

mod mpi_common;
use mpi_common::{build, job, mpis_available, routed, routed_coll};

const PYTHON: &str = "/usr/bin/python3";

/// The vector collectives' tests that the interposer takes (`MPI_Allgatherv`), run apart:
/// the rest of their module calls nothing the interposer takes and is most of the suite's time.
const VECTOR_TESTS: &str = "Allgatherv";

/// The modules of mpi4py's suite that are run (see the module docs).
const MODULES: [&str; 6] = [
    "test_cco_buf",
    "test_cco_obj",
    "test_cco_obj_inter",
    "test_util_pkl5",
    "test_comm",
    "test_msgzero",
];

/// The folder of mpi4py's tests and a Python that imports mpi4py, or why not.
fn mpi4py_tests() -> Result<PathBuf, String> {
    let dir = std::env::var_os("ETHBCAST_MPI4PY_TESTS")
        .map(PathBuf::from)
        .ok_or("ETHBCAST_MPI4PY_TESTS is not set (.ci/run sets it to mpi4py's test/ folder)")?;
    if !dir.join("runtests.py").is_file() {
        return Err(format!("no runtests.py in {}", dir.display()));
    }
    let import = std::process::Command::new(PYTHON)
        .args(["-c", "import mpi4py.MPI"])
        .output()
        .map_err(|e| format!("{PYTHON}: {e}"))?;
    if !import.status.success() {
        return Err(format!(
            "{PYTHON} cannot import mpi4py (apt-get install python3-mpi4py): {}",
            String::from_utf8_lossy(&import.stderr)
        ));
    }
    Ok(dir)
}

/// Each rank's summary: (tests run, failures, errors, skipped), in the order the ranks
/// printed them (unittest's "Ran N tests" and "OK (skipped=K)" / "FAILED (...)").
fn summaries(out: &JobOutput) -> Vec<(u64, u64, u64, u64)> {
    summaries_of(&format!("{}\n{}", out.stdout, out.stderr))
}

fn summaries_of(text: &str) -> Vec<(u64, u64, u64, u64)> {
    let mut found = Vec::new();
    // Eight ranks write to one stderr: two "Ran" lines can come before either rank's verdict,
    // so each verdict takes the oldest count still waiting for one.
    let mut ran = std::collections::VecDeque::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Ran ") {
            if let Some(n) = rest.split_whitespace().next().and_then(|n| n.parse().ok()) {
                ran.push_back(n);
            }
            continue;
        }
        if !(line.starts_with("OK") || line.starts_with("FAILED")) {
            continue;
        }
        let Some(n) = ran.pop_front() else { continue };
        let field = |name: &str| {
            line.split(['(', ')', ','])
                .filter_map(|f| f.trim().strip_prefix(name))
                .find_map(|v| v.strip_prefix('=').and_then(|v| v.parse().ok()))
                .unwrap_or(0)
        };
        found.push((n, field("failures"), field("errors"), field("skipped")));
    }
    found.sort_unstable();
    found
}

/// Two ranks' summaries interleaved on the job's stderr (as one run wrote them) still count
/// as two.
#[test]
fn interleaved_summaries_are_each_counted() {
    let text = "Ran 301 tests in 6.6s\n\nOK (skipped=8)\n---\nRan 301 tests in 6.6s\n\n---\n\
                Ran 300 tests in 6.6s\n\nOK (skipped=8)\nFAILED (failures=1, skipped=8)\n";
    assert_eq!(
        summaries_of(text),
        [(300, 1, 0, 8), (301, 0, 0, 8), (301, 0, 0, 8)]
    );
}

#[test]
fn mpi4py_gives_the_same_results_with_the_interposer_as_without() {
    let test = "mpi4py_gives_the_same_results_with_the_interposer_as_without";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let tests = match mpi4py_tests() {
        Ok(dir) => dir,
        Err(why) if std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() == Ok("1") => {
            panic!("{test}: {why}")
        }
        Err(why) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
            return;
        }
    };
    let m = MpiImpl::OpenMpi;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi4py");
    std::fs::create_dir_all(&dir).expect("build directory");
    // The interposer; the program built beside it is not used.
    let built = build(m, &dir, "mpi_check.c");
    let prefix = format!("py{:x}", std::process::id() & 0xfff);
    let bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    let runtests = tests.join("runtests.py");
    let suite = |env: &[(&str, &str)], interposed: bool, selection: &[String]| {
        let mut j = job(m, &built, 8, 1, env, &[]);
        if !interposed {
            j.env.retain(|(v, _)| v != "LD_PRELOAD");
        }
        j.program = PYTHON.into();
        j.args = vec![
            runtests.display().to_string(),
            "--no-builddir".into(),
            "-q".into(),
        ];
        j.args.extend_from_slice(selection);
        // Python's own files stay out of the source tree.
        j.env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        j.timeout = Duration::from_secs(400);
        bed.run(&j).expect("job")
    };

    let modules: Vec<String> = MODULES
        .iter()
        .flat_map(|m| ["-i".to_string(), format!("^{m}$")])
        .collect();
    let vector: Vec<String> = ["-i", "^test_cco_vec$", "-k", VECTOR_TESTS]
        .map(String::from)
        .to_vec();
    let interposer = [("ETHBCAST_IFACE", mpi::IFACE)];

    // `selection` alone and with the interposer: every rank ran at least `least` tests, and
    // every rank's results are the same both times. Returns the run with the interposer.
    let same_both_ways = |selection: &[String], least: u64, what: &str| {
        let alone = suite(&[], false, selection);
        let expected = summaries(&alone);
        assert_eq!(expected.len(), 8, "every rank's summary: {alone}");
        assert!(
            expected.iter().all(|&(ran, ..)| ran >= least),
            "mpi4py ran too few {what}tests: {alone}"
        );
        let with = suite(&interposer, true, selection);
        assert_eq!(
            summaries(&with),
            expected,
            "other {what}results with the interposer: {with}\n=== alone: {alone}"
        );
        with
    };

    // The vector collectives' Allgatherv tests first (a few dozen, on every communicator kind).
    let with = same_both_ways(&vector, 10, "Allgatherv ");
    // Every rank's MPI_Allgatherv calls on the world went over ethbcast.
    let reports = routed_coll(&with, 8);
    assert!(reports.iter().all(|&(hw, _)| hw > 0), "{reports:?}: {with}");

    let with = same_both_ways(&modules, 301, "");
    // Every rank reported calls over ethbcast at MPI_Finalize (the suite's MPI_COMM_WORLD
    // broadcasts and barriers).
    let reports = routed(&with, 8);
    assert!(reports.iter().all(|&(hw, _)| hw > 0), "{reports:?}: {with}");
    assert!(!with.stderr.contains("hardware broadcast is off"), "{with}");
    bed.down().expect("tear down");
}
