//! MPI_Bcast as the MPI standard defines it, under the interposer and without it, with Open MPI
//! (8 hosts) and MPICH (4 hosts), one rank per namespace.
//!
//! `capi/mpi/mpi_conform.c` (its comment says what it checks and why) broadcasts every
//! predefined datatype of MPI 3.1, the MAXLOC/MINLOC pair types with their holes among them,
//! and derived types with holes and negative lower bounds, from every root, and checks every
//! byte of every receiver's buffer: the root's data where the type map says, the receiver's
//! own bytes everywhere else. The same program must pass with the MPI alone (so the test is
//! about MPI, not about the interposer) and with the interposer, where the calls on
//! communicators congruent to MPI_COMM_WORLD, and only those, go over ethbcast.
//!
//! Then, with the interposer, counts that disagree with the root's: the ranks whose count
//! differs get MPI_ERR_TRUNCATE for that call and every later broadcast is right. Also with
//! two ranks per host, where a host's second rank receives through shared memory.
//!
//! Needs root and both MPIs (`.ci/run` installs them): with `ETHBCAST_REQUIRE_NETNS=1`
//! anything missing fails the test instead of skipping it.

use std::path::Path;

use ethbcast_testbed::mpi::{self, JobOutput, MpiBed, MpiImpl};
use ethbcast_testbed::{netns_available, TestbedConfig};

mod mpi_common;
use mpi_common::{build, job, mpis_available, reports, routed, routed_coll, Built};

/// Each rank's `<tag> rank R world W broadcasts B congruent C ...` line: (B, C) per rank.
fn counts(out: &JobOutput, tag: &str, ranks: usize) -> Vec<(u64, u64)> {
    assert!(out.success(), "job failed: {out}");
    let mut per_rank = vec![None; ranks];
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [t, "rank", r, "world", n, "broadcasts", b, "congruent", c, ..] = w[..] {
            if t != tag {
                continue;
            }
            assert_eq!(n.parse::<usize>().ok(), Some(ranks), "{line}");
            let r: usize = r.parse().expect("rank");
            per_rank[r] = Some((b.parse().expect("count"), c.parse().expect("count")));
        }
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.unwrap_or_else(|| panic!("rank {r} did not finish: {out}")))
        .collect()
}

/// What rank 0 listed as missing from this MPI.
fn unavailable(out: &JobOutput) -> String {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("unavailable:"))
        .unwrap_or_else(|| panic!("no list of unavailable types: {out}"))
        .trim()
        .to_string()
}

/// The conformance program on `hosts` hosts (`k` ranks each), without and with the
/// interposer: the same broadcasts pass byte for byte, and with the interposer exactly the
/// congruent ones went over ethbcast.
fn conform(bed: &MpiBed, m: MpiImpl, b: &Built, hosts: usize, k: usize) {
    let ranks = hosts * k;
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    let mut alone = job(m, b, hosts, k, &[], &[]);
    alone.env.retain(|(v, _)| v != "LD_PRELOAD");
    let out = bed.run(&alone).expect("job");
    let plain = counts(&out, "conform", ranks);
    let missing = unavailable(&out);
    for pair in [
        "MPI_DOUBLE_INT",
        "MPI_LONG_INT",
        "MPI_SHORT_INT",
        "MPI_LONG_DOUBLE_INT",
    ] {
        assert!(!missing.contains(pair), "{m} lacks {pair}: {out}");
    }
    assert!(
        !out.stderr.contains("ethbcast-mpi"),
        "{m}: the interposer ran: {out}"
    );

    let out = bed.run(&job(m, b, hosts, k, &[iface], &[])).expect("job");
    let with = counts(&out, "conform", ranks);
    assert_eq!(
        with, plain,
        "{m}: other broadcasts with the interposer: {out}"
    );
    assert_eq!(unavailable(&out), missing, "{m}: {out}");
    for (r, (&(all, congruent), &(hw, pmpi))) in with.iter().zip(&routed(&out, ranks)).enumerate() {
        assert!(congruent > 0 && congruent < all, "rank {r}: {out}");
        // Every congruent broadcast over ethbcast, every other one over PMPI.
        assert_eq!(hw, congruent, "{m} rank {r}: {out}");
        assert_eq!(pmpi, all - congruent, "{m} rank {r}: {out}");
    }
    assert!(
        !out.stderr.contains("hardware broadcast is off"),
        "{m}: {out}"
    );
}

/// Counts that disagree with the root's, under the interposer: MPI_ERR_TRUNCATE at the ranks
/// whose count differs, and every later broadcast right (the program checks both).
fn mismatch(bed: &MpiBed, m: MpiImpl, b: &Built, hosts: usize, k: usize) {
    let ranks = hosts * k;
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    let out = bed
        .run(&job(m, b, hosts, k, &[iface], &["--mismatch"]))
        .expect("job");
    let done = counts(&out, "mismatch", ranks);
    for (r, (&(all, congruent), &(hw, _))) in done.iter().zip(&routed(&out, ranks)).enumerate() {
        assert_eq!(all, congruent, "rank {r}: {out}");
        assert_eq!(hw, congruent, "{m} rank {r}: not over ethbcast: {out}");
    }
}

#[test]
fn every_datatype_arrives_byte_exact_with_its_holes_untouched_and_mismatches_are_errors() {
    let test =
        "every_datatype_arrives_byte_exact_with_its_holes_untouched_and_mismatches_are_errors";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-conformance");
    std::fs::create_dir_all(&dir).expect("build directory");
    let ompi = build(MpiImpl::OpenMpi, &dir, "mpi_conform.c");
    let mpich = build(MpiImpl::Mpich, &dir, "mpi_conform.c");
    let prefix = format!("cf{:x}", std::process::id() & 0xfff);
    let bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    conform(&bed, MpiImpl::OpenMpi, &ompi, 8, 1);
    mismatch(&bed, MpiImpl::OpenMpi, &ompi, 8, 1);
    // Two ranks per host: the second rank of each host receives through shared memory.
    mismatch(&bed, MpiImpl::OpenMpi, &ompi, 4, 2);
    // MPICH busy-polls in its own calls, which on 2 cores makes 8 ranks crawl: 4 hosts.
    conform(&bed, MpiImpl::Mpich, &mpich, 4, 1);
    mismatch(&bed, MpiImpl::Mpich, &mpich, 4, 1);
    bed.down().expect("tear down");
}

/// MPI 3.1, 3.5 ("Progress"): a send whose receive is posted completes while the receiving
/// rank waits in another MPI call. `capi/mpi/mpi_progress.c` makes ranks wait in
/// `MPI_Barrier` and `MPI_Bcast`, both over ethbcast, while a peer's `MPI_Ssend` to them can
/// complete only through their MPI's progress: under the interposer every such call lets the
/// MPI progress (it probes while the call waits), or the job never ends.
#[test]
fn a_rank_waiting_in_a_collective_lets_its_other_communication_progress() {
    let test = "a_rank_waiting_in_a_collective_lets_its_other_communication_progress";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-progress");
    std::fs::create_dir_all(&dir).expect("build directory");
    let prefix = format!("pg{:x}", std::process::id() & 0xfff);
    let bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    // MPICH busy-polls in its own calls, which on 2 cores makes 8 ranks crawl: 4 hosts.
    for (m, hosts) in [(MpiImpl::OpenMpi, 8), (MpiImpl::Mpich, 4)] {
        let b = build(m, &dir, "mpi_progress.c");
        let out = bed.run(&job(m, &b, hosts, 1, &[iface], &[])).expect("job");
        assert!(out.success(), "{m}: {out}");
        for r in 0..hosts {
            assert!(
                out.stdout.contains(&format!("progress rank {r} ok")),
                "{m}: rank {r} did not finish: {out}"
            );
        }
        // Three barriers and three broadcasts, all over ethbcast.
        assert_eq!(routed(&out, hosts), vec![(6, 0); hosts], "{m}: {out}");
        // Every rank waited for a peer's MPI progress at least once: rank 0 in the barriers,
        // the others in the broadcasts.
        for (r, p) in reports(&out, hosts).iter().enumerate() {
            assert!(p.probes > 0, "{m}: rank {r} never let MPI progress: {out}");
        }
    }
    bed.down().expect("tear down");
}

/// Each rank's `coll rank R world W calls C congruent K` line: (C, K) per rank.
fn coll_counts(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    assert!(out.success(), "job failed: {out}");
    let mut per_rank = vec![None; ranks];
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["coll", "rank", r, "world", n, "calls", c, "congruent", k] = w[..] {
            assert_eq!(n.parse::<usize>().ok(), Some(ranks), "{line}");
            let r: usize = r.parse().expect("rank");
            per_rank[r] = Some((c.parse().expect("count"), k.parse().expect("count")));
        }
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.unwrap_or_else(|| panic!("rank {r} did not finish: {out}")))
        .collect()
}

/// Rank 0's verdict of `mpi_coll --identity`: `identity identical` or `identity differs on N
/// rank-rounds` (found anywhere in the output: the launcher may interleave other ranks' lines
/// with it).
fn identity(out: &JobOutput) -> String {
    assert!(out.success(), "job failed: {out}");
    let at = out
        .stdout
        .find("identity identical")
        .or_else(|| out.stdout.find("identity differs"))
        .unwrap_or_else(|| panic!("no identity verdict: {out}"));
    let verdict = &out.stdout[at..];
    let end = verdict
        .find("rank-rounds")
        .map_or("identity identical".len(), |e| e + "rank-rounds".len());
    verdict[..end].to_string()
}

/// The calls `mpi_coll.c` makes on world-congruent communicators that the MPI must refuse,
/// which the interposer leaves to the MPI: MPI_SUM on a pair type and MPI_MAXLOC on MPI_INT
/// (on the world, and without `--light` on a duplicate too), a predefined op on a derived
/// type (on the world); each on the world once more as MPI_Reduce.
fn refused(mode: &str) -> u64 {
    if mode == "--light" {
        3 + 3
    } else {
        5 + 3
    }
}

/// MPI_Allgather, MPI_Allgatherv, MPI_Allreduce and MPI_Reduce as MPI 3.1 chapter 5 defines
/// them (`capi/mpi/mpi_coll.c` says what it checks), with Open MPI on 8 hosts and MPICH on 4:
/// the same results without the interposer and with it, where every call on a communicator
/// congruent to MPI_COMM_WORLD that the MPI accepts goes over ethbcast; with it, MPI_SUM of
/// doubles of mixed magnitude is bitwise the same on every rank; counts that disagree are
/// MPI_ERR_TRUNCATE everywhere (MPI_Reduce's at the root) and the next calls are right (also
/// with 2 ranks per host); a stream of them while the switch drops 3% of ethbcast frames is
/// right to the last element.
#[test]
fn allgather_and_allreduce_follow_the_standard_and_reduce_alike_on_every_rank() {
    let test = "allgather_and_allreduce_follow_the_standard_and_reduce_alike_on_every_rank";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-coll");
    std::fs::create_dir_all(&dir).expect("build directory");
    let prefix = format!("co{:x}", std::process::id() & 0xfff);
    let mut bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    let every_size = [
        iface,
        ("ETHBCAST_MPI_ALLGATHER_MAX_BYTES", "unlimited"),
        ("ETHBCAST_MPI_ALLREDUCE_MAX_BYTES", "unlimited"),
    ];
    // MPICH busy-polls in its own calls, which on 2 cores makes 8 ranks crawl: 4 hosts, and
    // every type and op once.
    for (m, hosts, mode) in [
        (MpiImpl::OpenMpi, 8, "--all"),
        (MpiImpl::Mpich, 4, "--light"),
    ] {
        let b = build(m, &dir, "mpi_coll.c");
        let mut alone = job(m, &b, hosts, 1, &[], &[mode]);
        alone.env.retain(|(v, _)| v != "LD_PRELOAD");
        alone.timeout = std::time::Duration::from_secs(150);
        let out = bed.run(&alone).expect("job");
        let plain = coll_counts(&out, hosts);
        assert!(
            !out.stderr.contains("ethbcast-mpi"),
            "{m}: the interposer ran: {out}"
        );
        let mut with = job(m, &b, hosts, 1, &every_size, &[mode]);
        with.timeout = std::time::Duration::from_secs(150);
        let out = bed.run(&with).expect("job");
        assert_eq!(coll_counts(&out, hosts), plain, "{m}: {out}");
        for (r, (&(all, congruent), &(hw, pmpi))) in
            plain.iter().zip(&routed_coll(&out, hosts)).enumerate()
        {
            assert!(
                congruent > refused(mode) && congruent < all,
                "rank {r}: {out}"
            );
            assert_eq!(hw, congruent - refused(mode), "{m} rank {r}: {out}");
            assert_eq!(pmpi, all - hw, "{m} rank {r}: {out}");
        }
        // Bitwise the same sum on every rank with the interposer; what the MPI alone gives
        // is reported.
        let out = bed
            .run(&job(m, &b, hosts, 1, &every_size, &["--identity"]))
            .expect("job");
        assert_eq!(identity(&out), "identity identical", "{m}: {out}");
        let mut alone = job(m, &b, hosts, 1, &[], &["--identity"]);
        alone.env.retain(|(v, _)| v != "LD_PRELOAD");
        let out = bed.run(&alone).expect("job");
        eprintln!("{m} alone, {hosts} ranks: {}", identity(&out));
        let out = bed
            .run(&job(m, &b, hosts, 1, &every_size, &["--mismatch"]))
            .expect("job");
        let done = coll_counts(&out, hosts);
        for (r, (&(_, congruent), &(hw, _))) in
            done.iter().zip(&routed_coll(&out, hosts)).enumerate()
        {
            assert_eq!(hw, congruent, "{m} rank {r}: not over ethbcast: {out}");
        }
    }
    // Two ranks per host: the host's second rank takes every part through shared memory.
    let b = build(MpiImpl::OpenMpi, &dir, "mpi_coll.c");
    for mode in ["--light", "--mismatch"] {
        let out = bed
            .run(&job(MpiImpl::OpenMpi, &b, 4, 2, &every_size, &[mode]))
            .expect("job");
        let done = coll_counts(&out, 8);
        let refused = if mode == "--light" { refused(mode) } else { 0 };
        for (r, (&(_, congruent), &(hw, _))) in done.iter().zip(&routed_coll(&out, 8)).enumerate() {
            assert_eq!(hw, congruent - refused, "rank {r}: {out}");
        }
    }
    // 3% of ethbcast frames dropped at the switch during a stream of allgathers, allreduces
    // and reduces: every part's stream is repaired on its own, every element right.
    bed.testbed_mut().set_loss(3.0).expect("loss rule");
    let out = bed
        .run(&job(MpiImpl::OpenMpi, &b, 8, 1, &every_size, &["--stream"]))
        .expect("job");
    let done = coll_counts(&out, 8);
    assert_eq!(routed_coll(&out, 8), vec![(900, 0); 8], "with loss: {out}");
    assert!(done.iter().all(|&(c, _)| c == 900), "{out}");
    let lost = bed.testbed().loss_counter().expect("nft counter");
    assert!(lost > 0, "the loss rule dropped nothing");
    bed.down().expect("tear down");
}
