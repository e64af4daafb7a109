//! MPI programs we did not write: the broadcast, barrier, gather and reduction tests of MPICH's
//! own test suite
//! (`test/mpi/` of MPICH 4.0.2, the release of Debian 12's `mpich`), built with their `mtest`
//! harness and DTPools by each MPI's mpicc and run under the interposer on the test-bed.
//!
//! The tests are not in this repository: `.ci/fetch-suites` fetches the upstream tarball of
//! Debian's source package `mpich` 4.0.2-3 from the Debian archive, checks its digest, and
//! `.ci/run` points `ETHBCAST_MPICH_TESTS` at its `test/mpi/`. Two headers that MPICH's
//! configure would generate are written by this test instead ([`MPITESTCONF_H`],
//! [`DTPOOLSCONF_H`]).
//!
//! Each program checks its own results and rank 0 prints " No Errors" (or "Found N errors");
//! the test asserts that line, a zero exit, and where the calls went: the interposer's report
//! (`ETHBCAST_MPI_VERBOSE=1`) must count exactly the calls the program makes on communicators
//! congruent to MPI_COMM_WORLD as calls over ethbcast, and the others (intercommunicators,
//! reordered and smaller communicators) as calls over PMPI. The programs:
//! - `coll/bcasttest`: MPI_INT from rank 0 on MPI_COMM_WORLD, 100 to 1 Mi elements;
//! - `coll/bcastzerotype`: a non-zero count of a zero-size datatype leaves every buffer as it is;
//! - `coll/bcast`: every root of every communicator `MTestGetIntracommGeneral` makes (the world,
//!   its duplicate, reordered, merged and smaller ones), with random derived datatypes from
//!   DTPools that differ per rank (each rank's pool has its own seed) with one type signature;
//!   also built with `-DBCAST_COMM_WORLD_ONLY` (MPI_COMM_WORLD only) as upstream does;
//! - `coll/icbcast`, `coll/icbarrier`: intercommunicators (never over ethbcast);
//! - `comm/dup_with_info`: MPI_Barrier on communicators from MPI_Comm_dup_with_info;
//! - `threads/comm/ctxdup`: with MPI_THREAD_MULTIPLE, two threads of each rank in barriers on
//!   two congruent communicators at once (both must go over PMPI);
//! - `errors/coll/bcastlength`: counts that differ from the root's are errors at the receivers;
//! - `rma/linked_list`, `linked_list_fop`, `linked_list_lockall` (MPICH only: Open MPI 4.1 over
//!   TCP has no dynamic windows): MPI_Bcast of the list's head, then passive-target RMA on the
//!   other ranks' windows while the ranks that are done wait in MPI_Barrier, which must let
//!   MPI progress meanwhile (MPI 3.1, 11.7.3);
//! - `coll/allredmany`, `allred2` to `allred6`, `reduce`, `red3`, `red4`, the `op*` programs,
//!   `uoplong`, `allgather2`, `allgather3`, `allgatherv2`, `allgatherv3`, `allgather_struct`:
//!   MPI_Allreduce, MPI_Reduce and MPI_Allgather(v) on every communicator
//!   `MTestGetIntracomm` makes, every root, in place, predefined ops on every type they apply
//!   to, non-commutative user ops whose result shows the order, derived types; every rank must
//!   take at least one of them over ethbcast (`oplxor` with MPICH only: Open MPI refuses its
//!   logical ops on MPI_CHAR; upstream's `allred` and `allgatherv4` are left out: the first
//!   fails with Open MPI alone at 8 ranks, the second takes more than a minute with MPICH's
//!   busy-polling ranks on 2 cores).
//!
//! Open MPI with 8 hosts and with 4 hosts of 2 ranks (a host's second rank through shared
//! memory), MPICH with 4 hosts. A job that fails under the interposer is run again without it,
//! and the failure says whether the MPI alone passes.
//!
//! Needs root, both MPIs (`.ci/run` installs them) and the tests: with
//! `ETHBCAST_REQUIRE_NETNS=1` anything missing fails the test instead of skipping it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ethbcast_testbed::mpi::{self, JobOutput, MpiBed, MpiImpl};
use ethbcast_testbed::{netns_available, TestbedConfig};

mod mpi_common;
use mpi_common::{interposer, job, mpis_available, routed, routed_coll, Built};

/// Where the calls of one rank go, given the job's number of ranks.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Exactly this many over ethbcast and this many over PMPI.
    Exactly(fn(u64) -> (u64, u64)),
    /// This many over ethbcast (the calls on congruent communicators), at least one over PMPI.
    Congruent(fn(u64) -> u64),
    /// None over ethbcast, at least one over PMPI (intercommunicators).
    NoneOver,
    /// At least one MPI_Allgather(v), MPI_Allreduce or MPI_Reduce over ethbcast (the programs
    /// of `coll/` that reduce and gather, on communicators of every kind).
    Collectives,
}

/// One MPICH test program.
struct Program {
    /// Its name in the test (upstream's, as in its `testlist`).
    name: &'static str,
    /// Its source, under MPICH's `test/mpi/`.
    source: &'static str,
    /// What it links besides `util/mtest.c` and `util/mtest_common.c` (upstream's makefiles).
    harness: &'static [&'static str],
    /// Extra flags (upstream's per-program CPPFLAGS).
    flags: &'static [&'static str],
    /// Its arguments.
    args: &'static [&'static str],
    /// Where one rank's calls go.
    route: Route,
    /// Whether Open MPI runs it too (Open MPI 4.1 over TCP has no one-sided component for
    /// dynamic windows: MPI_Win_create_dynamic fails with MPI_ERR_WIN).
    open_mpi: bool,
}

/// A single-threaded program.
const SINGLE: &[&str] = &["util/mtest_single.c"];
/// A threaded program.
const THREADS: &[&str] = &["util/mtest_thread.c"];
/// A single-threaded program with DTPools.
const DTPOOLS: &[&str] = &[
    "util/mtest_single.c",
    "dtpools/src/dtpools.c",
    "dtpools/src/dtpools_attr.c",
    "dtpools/src/dtpools_custom.c",
    "dtpools/src/dtpools_desc.c",
    "dtpools/src/dtpools_init_verify.c",
    "dtpools/src/dtpools_misc.c",
];

/// `coll/bcast`'s datatypes (DTPools' base types: plain, the MAXLOC pair with a hole, a
/// struct), counts and number of random types per root; `-testsizes=2` fixes the number at 2
/// whatever the count.
const DTP_ARGS: [&str; 4] = [
    "-typelist=MPI_INT,MPI_DOUBLE_INT,MPI_INT:4+MPI_DOUBLE:8",
    "-counts=1,17,512",
    "-seed=100",
    "-testsizes=2",
];
/// Base types times counts of [`DTP_ARGS`].
const DTP_CONFIGS: u64 = 3 * 3;
/// Random types per root of [`DTP_ARGS`].
const DTP_TESTSIZE: u64 = 2;

/// A program of `coll/` that gathers or reduces, with the mtest harness: its calls on
/// communicators congruent to MPI_COMM_WORLD go over ethbcast.
const fn collective(
    name: &'static str,
    source: &'static str,
    args: &'static [&'static str],
) -> Program {
    Program {
        name,
        source,
        harness: SINGLE,
        flags: &[],
        args,
        route: Route::Collectives,
        open_mpi: true,
    }
}

/// [`collective`], MPICH only: Open MPI 4.1 refuses what the program asks (the logical ops on
/// MPI_CHAR, which MPI 3.1's 5.9.2 leaves out of the C integer types) and fails it alone.
const fn mpich_collective(name: &'static str, source: &'static str) -> Program {
    Program {
        open_mpi: false,
        ..collective(name, source, &[])
    }
}

const PROGRAMS: [Program; 39] = [
    Program {
        name: "bcasttest",
        source: "coll/bcasttest.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // 4 sizes, 5 times each.
        route: Route::Exactly(|_| (20, 0)),
        open_mpi: true,
    },
    Program {
        name: "bcastzerotype",
        source: "coll/bcastzerotype.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        route: Route::Exactly(|_| (1, 0)),
        open_mpi: true,
    },
    Program {
        name: "bcast",
        source: "coll/bcast.c",
        harness: DTPOOLS,
        flags: &[],
        args: &DTP_ARGS,
        // Every root of MPI_COMM_WORLD and of its duplicate; the other communicators over PMPI.
        route: Route::Congruent(|ranks| DTP_CONFIGS * 2 * ranks * DTP_TESTSIZE),
        open_mpi: true,
    },
    Program {
        name: "bcast_comm_world_only",
        source: "coll/bcast.c",
        harness: DTPOOLS,
        flags: &["-DBCAST_COMM_WORLD_ONLY"],
        args: &DTP_ARGS,
        route: Route::Exactly(|ranks| (DTP_CONFIGS * ranks * DTP_TESTSIZE, 0)),
        open_mpi: true,
    },
    Program {
        name: "icbcast",
        source: "coll/icbcast.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        route: Route::NoneOver,
        open_mpi: true,
    },
    Program {
        name: "icbarrier",
        source: "coll/icbarrier.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        route: Route::NoneOver,
        open_mpi: true,
    },
    Program {
        name: "dup_with_info",
        source: "comm/dup_with_info.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // Three duplicates, two barriers on each.
        route: Route::Exactly(|_| (6, 0)),
        open_mpi: true,
    },
    Program {
        name: "ctxdup",
        source: "threads/comm/ctxdup.c",
        harness: THREADS,
        flags: &[],
        args: &[],
        // MPI_THREAD_MULTIPLE: two threads of a rank in barriers on two congruent
        // communicators at once, in an order that differs between ranks, both over PMPI.
        route: Route::Exactly(|_| (0, 2)),
        open_mpi: true,
    },
    Program {
        name: "bcastlength",
        source: "errors/coll/bcastlength.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // Two broadcasts whose counts differ from the root's: every other rank must get an
        // error from both.
        route: Route::Exactly(|_| (2, 0)),
        open_mpi: true,
    },
    // MPI-3 RMA from MPICH's rma/: every rank appends to a linked list in the other ranks'
    // windows (passive target: locks, compare-and-swap, puts) while ranks that are done wait
    // in MPI_Barrier, which must let MPI progress so that the others' RMA on their windows
    // completes.
    Program {
        name: "linked_list",
        source: "rma/linked_list.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // One broadcast, one barrier, both on MPI_COMM_WORLD.
        route: Route::Exactly(|_| (2, 0)),
        open_mpi: false,
    },
    Program {
        name: "linked_list_fop",
        source: "rma/linked_list_fop.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // One broadcast, one barrier, both on MPI_COMM_WORLD.
        route: Route::Exactly(|_| (2, 0)),
        open_mpi: false,
    },
    Program {
        name: "linked_list_lockall",
        source: "rma/linked_list_lockall.c",
        harness: SINGLE,
        flags: &[],
        args: &[],
        // One broadcast, one barrier, both on MPI_COMM_WORLD.
        route: Route::Exactly(|_| (2, 0)),
        open_mpi: false,
    },
    // MPI_Allreduce: many calls (`allredmany`), in place (`allred2`), a non-commutative user op whose result shows the order (`allred3`,
    // matrix products; `allred4`, on a derived type), counts from 1 to large (`allred5`),
    // zero counts and MPI_IN_PLACE (`allred6`).
    collective("allredmany", "coll/allredmany.c", &[]),
    collective("allred2", "coll/allred2.c", &[]),
    collective("allred3", "coll/allred3.c", &[]),
    collective("allred4", "coll/allred4.c", &[]),
    collective("allred5", "coll/allred5.c", &[]),
    collective("allred6", "coll/allred6.c", &[]),
    // MPI_Reduce: to every root (`reduce`), non-commutative user ops (`red3`, `red4`), each
    // predefined op on each type it applies to (`op*`), a user op on long vectors (`uoplong`).
    collective("reduce", "coll/reduce.c", &[]),
    collective("red3", "coll/red3.c", &[]),
    collective("red4", "coll/red4.c", &[]),
    collective("opland", "coll/opland.c", &[]),
    collective("oplor", "coll/oplor.c", &[]),
    mpich_collective("oplxor", "coll/oplxor.c"),
    collective("opband", "coll/opband.c", &[]),
    collective("opbor", "coll/opbor.c", &[]),
    collective("opbxor", "coll/opbxor.c", &[]),
    collective("opprod", "coll/opprod.c", &[]),
    collective("opsum", "coll/opsum.c", &[]),
    collective("opmin", "coll/opmin.c", &[]),
    collective("opminloc", "coll/opminloc.c", &[]),
    collective("opmax", "coll/opmax.c", &[]),
    collective("opmaxloc", "coll/opmaxloc.c", &[]),
    collective("uoplong", "coll/uoplong.c", &[]),
    // MPI_Allgather(v): in place and not, counts per rank that differ, derived types.
    collective("allgather2", "coll/allgather2.c", &[]),
    collective("allgather3", "coll/allgather3.c", &[]),
    collective("allgatherv2", "coll/allgatherv2.c", &[]),
    collective("allgatherv3", "coll/allgatherv3.c", &[]),
    collective("allgather_struct", "coll/allgather_struct.c", &[]),
];

/// The defines of `include/mpitestconf.h` (which MPICH's configure generates) that the
/// programs above and their harness test, for Linux with Open MPI 4.1 or MPICH 4.0.
const MPITESTCONF_H: &str = "\
#ifndef MPITESTCONF_H_INCLUDED
#define MPITESTCONF_H_INCLUDED
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#define HAVE_PTHREAD_BARRIER_INIT 1
#define HAVE_STDINT_H 1
#define HAVE_LONG_LONG 1
#define HAVE_LONG_DOUBLE 1
#endif
";

/// `dtpools/dtpoolsconf.h` (which DTPools' configure generates): DTPools tests none of its
/// defines on Linux.
const DTPOOLSCONF_H: &str = "/* no defines needed on Linux */\n";

/// MPICH's `test/mpi/`, from `ETHBCAST_MPICH_TESTS`, or why not.
fn suite_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("ETHBCAST_MPICH_TESTS").map(PathBuf::from).ok_or(
        "ETHBCAST_MPICH_TESTS is not set: `eval \"$(bash .ci/fetch-suites)\"` fetches MPICH's tests and sets it to their test/mpi/ folder",
    )?;
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .map(|p| p.source)
        .chain(["util/mtest.c", "dtpools/src/dtpools.c", "include/mpitest.h"])
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "ETHBCAST_MPICH_TESTS={} is not MPICH 4.0.2's test/mpi/ folder (no {})",
            dir.display(),
            missing.join(", ")
        ));
    }
    Ok(dir)
}

/// Writes the configure-made headers into `dir`: `include/mpitestconf.h` and
/// `dtpoolsconf.h`, found through `-I dir/include` (DTPools includes its header as
/// `../dtpoolsconf.h`). Returns `dir/include`.
fn configure(dir: &Path) -> PathBuf {
    let include = dir.join("include");
    std::fs::create_dir_all(&include).expect("configure directory");
    std::fs::write(include.join("mpitestconf.h"), MPITESTCONF_H).expect("mpitestconf.h");
    std::fs::write(dir.join("dtpoolsconf.h"), DTPOOLSCONF_H).expect("dtpoolsconf.h");
    include
}

/// Builds `p` from MPICH's tests in `src` with `m`'s mpicc into `dir` as upstream's makefiles
/// do: the program with the mtest harness and what else it links, the headers of `conf`
/// ([`configure`]) first.
fn build_program(m: MpiImpl, p: &Program, src: &Path, conf: &Path, dir: &Path) -> PathBuf {
    let sources: Vec<PathBuf> = [p.source, "util/mtest.c", "util/mtest_common.c"]
        .iter()
        .chain(p.harness)
        .map(|f| src.join(f))
        .collect();
    let mut flags = vec![
        format!("-I{}", conf.display()),
        format!("-I{}", src.join("include").display()),
        format!("-I{}", src.join("dtpools/include").display()),
    ];
    if m == MpiImpl::OpenMpi {
        // DTPools calls MPI-1's MPI_Type_hvector and MPI_Type_hindexed, which Open MPI 4.1's
        // mpi.h hides from C11 programs unless asked; Debian's libmpi has them.
        flags.push("-DOMPI_OMIT_MPI1_COMPAT_DECLS=0".into());
    }
    flags.extend(p.flags.iter().map(|f| f.to_string()));
    let out = dir.join(format!("{}-{m}", p.name));
    mpi::compile_foreign(m, &flags, &sources, &out).unwrap_or_else(|e| panic!("{e}"));
    out
}

/// Whether rank 0 printed the harness's verdict of success (" No Errors" from MTest_Finalize)
/// and nothing printed an error count.
fn no_errors(out: &JobOutput) -> bool {
    let lines = || out.stdout.lines().map(str::trim);
    lines().filter(|l| *l == "No Errors").count() == 1
        && !lines().any(|l| l.starts_with("Found") && l.ends_with("errors"))
}

/// Runs `p` (built as `b`) on `hosts` hosts with `k` ranks each under the interposer, and
/// asserts its verdict and where its calls went. Returns the job's wall time in seconds.
fn run(bed: &MpiBed, m: MpiImpl, p: &Program, b: &Built, hosts: usize, k: usize) -> f64 {
    let ranks = hosts * k;
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    let args: Vec<&str> = p.args.to_vec();
    let mut j = job(m, b, hosts, k, &[iface], &args);
    j.timeout = std::time::Duration::from_secs(60);
    let out = bed.run(&j).expect("job");
    let what = format!("{m} {} on {hosts} hosts x {k}", p.name);
    if !out.success() || !no_errors(&out) {
        // Whether the MPI alone passes: then the failure is ethbcast's.
        let mut alone = j.clone();
        alone.env.retain(|(v, _)| v != "LD_PRELOAD");
        let plain = bed.run(&alone).expect("job");
        let verdict = if plain.success() && no_errors(&plain) {
            "passes without the interposer"
        } else {
            "fails without the interposer too"
        };
        panic!("{what} failed under the interposer and {verdict}: {out}\n=== alone: {plain}");
    }
    assert!(
        !out.stderr.contains("hardware broadcast is off"),
        "{what}: {out}"
    );
    for (r, &(hw, pmpi)) in routed(&out, ranks).iter().enumerate() {
        let n = ranks as u64;
        match p.route {
            Route::Exactly(calls) => assert_eq!((hw, pmpi), calls(n), "{what} rank {r}: {out}"),
            Route::Congruent(calls) => {
                assert_eq!(hw, calls(n), "{what} rank {r}: {out}");
                assert!(pmpi > 0, "{what} rank {r}: {out}");
            }
            Route::NoneOver => assert!(hw == 0 && pmpi > 0, "{what} rank {r}: {out}"),
            Route::Collectives => {}
        }
    }
    if let Route::Collectives = p.route {
        for (r, &(hw, _)) in routed_coll(&out, ranks).iter().enumerate() {
            assert!(
                hw > 0,
                "{what} rank {r}: no collective over ethbcast: {out}"
            );
        }
    }
    out.elapsed.as_secs_f64()
}

#[test]
fn mpich_collective_tests_pass_under_the_interposer() {
    let test = "mpich_collective_tests_pass_under_the_interposer";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let src = match suite_dir() {
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
    let t0 = Instant::now();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpich-suite");
    std::fs::create_dir_all(&dir).expect("build directory");
    let conf = configure(&dir.join("conf"));
    let built = |m: MpiImpl| -> Vec<Built> {
        let so = interposer(m, &dir);
        PROGRAMS
            .iter()
            .filter(|p| m == MpiImpl::Mpich || p.open_mpi)
            .map(|p| Built {
                program: build_program(m, p, &src, &conf, &dir),
                interposer: so.clone(),
            })
            .collect()
    };
    // One MPI's programs while the other's build.
    let (ompi, mpich) = std::thread::scope(|s| {
        let ompi = s.spawn(|| built(MpiImpl::OpenMpi));
        let mpich = built(MpiImpl::Mpich);
        (ompi.join().expect("Open MPI build"), mpich)
    });
    let built_in = t0.elapsed();
    let prefix = format!("ms{:x}", std::process::id() & 0xfff);
    let bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    let mut times = Vec::new();
    for (p, b) in PROGRAMS.iter().filter(|p| p.open_mpi).zip(&ompi) {
        times.push((
            p.name,
            "openmpi 8x1",
            run(&bed, MpiImpl::OpenMpi, p, b, 8, 1),
        ));
        times.push((
            p.name,
            "openmpi 4x2",
            run(&bed, MpiImpl::OpenMpi, p, b, 4, 2),
        ));
    }
    // MPICH busy-polls in its own calls, which on 2 cores makes 8 ranks crawl: 4 hosts.
    for (p, b) in PROGRAMS.iter().zip(&mpich) {
        times.push((p.name, "mpich 4x1", run(&bed, MpiImpl::Mpich, p, b, 4, 1)));
    }
    bed.down().expect("tear down");
    use std::io::Write;
    let mut err = std::io::stderr();
    let _ = writeln!(err, "{test}: built in {:.1?}", built_in);
    for (name, setup, secs) in times {
        let _ = writeln!(err, "  {name:<22} {setup:<12} {secs:5.1} s");
    }
    let _ = writeln!(err, "  total {:.1?}", t0.elapsed());
}
