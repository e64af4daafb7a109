//! The MPI interposer with Open MPI and MPICH on an 8-host test-bed (one rank per namespace,
//! mpirun entering namespaces through a launch agent).
//!
//! `capi/mpi/mpi_check.c` checks every byte of MPI_Bcast on MPI_COMM_WORLD, on a duplicate
//! of it, on halves from MPI_Comm_split, with MPI_Type_vector (also mixed with plain ints at
//! the receivers), and barriers. With `ETHBCAST_MPI_VERBOSE=1` the interposer reports per
//! rank how many calls went over ethbcast and how many over PMPI: the test asserts they are
//! exactly the calls on communicators congruent to MPI_COMM_WORLD and on the others. Without
//! `ETHBCAST_IFACE` the whole job falls back to PMPI with exactly one warning and the same
//! correct results. With 2 and 4 ranks per namespace (Open MPI), ranks behind one MAC share
//! its network member through shared memory and every congruent call still goes over
//! ethbcast. Last, with 3% of ethbcast frames dropped at the switch, the results stay
//! byte-exact. No job is run twice: a job that hangs fails the test.
//!
//! Needs root and both MPIs (`.ci/run` installs them): with `ETHBCAST_REQUIRE_NETNS=1`
//! anything missing fails the test instead of skipping it.

use std::path::Path;

use ethbcast_testbed::mpi::{self, JobOutput, MpiBed, MpiImpl};
use ethbcast_testbed::{netns_available, TestbedConfig};

mod mpi_common;
use mpi_common::{build, job, mpis_available, reports, routed, Built};

/// Every rank printed its "ok" line; returns (congruent, other) calls of each rank.
fn results(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    assert!(out.success(), "job failed: {out}");
    let mut per_rank = vec![None; ranks];
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["ok", "rank", r, "world", n, "congruent", c, "other", o] = w[..] {
            assert_eq!(n.parse::<usize>().ok(), Some(ranks), "{line}");
            let r: usize = r.parse().expect("rank");
            per_rank[r] = Some((c.parse().expect("count"), o.parse().expect("count")));
        }
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.unwrap_or_else(|| panic!("rank {r} did not finish: {out}")))
        .collect()
}

/// What [`routed`] says of each rank when every one of its calls went to PMPI.
fn all_over_pmpi(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    results(out, ranks)
        .iter()
        .map(|&(c, o)| (0, c + o))
        .collect()
}

fn warnings(out: &JobOutput) -> Vec<&str> {
    out.stderr
        .lines()
        .filter(|l| l.contains("hardware broadcast is off for this job"))
        .collect()
}

#[test]
fn mpi_programs_get_correct_results_with_and_without_hardware_broadcast() {
    let test = "mpi_programs_get_correct_results_with_and_without_hardware_broadcast";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-interposer");
    std::fs::create_dir_all(&dir).expect("build directory");
    let built: Vec<(MpiImpl, Built)> = MpiImpl::ALL
        .iter()
        .map(|&m| (m, build(m, &dir, "mpi_check.c")))
        .collect();
    let prefix = format!("cm{:x}", std::process::id() & 0xfff);
    let mut bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    for (m, b) in &built {
        // With the interposer: world and its duplicate over ethbcast, the halves over PMPI.
        let out = bed
            .run(&job(*m, b, 8, 1, &[("ETHBCAST_IFACE", mpi::IFACE)], &[]))
            .expect("job");
        let expected = results(&out, 8);
        assert_eq!(
            routed(&out, 8),
            expected,
            "{m}: calls went elsewhere: {out}"
        );
        assert!(expected.iter().all(|&(c, o)| c > 0 && o > 0));
        assert!(warnings(&out).is_empty(), "{m}: {out}");

        // Without ETHBCAST_IFACE: everything over PMPI, one warning for the job.
        let out = bed.run(&job(*m, b, 8, 1, &[], &["--quick"])).expect("job");
        assert_eq!(routed(&out, 8), all_over_pmpi(&out, 8), "{m}: {out}");
        let w = warnings(&out);
        assert_eq!(w.len(), 1, "{m}: one warning per job: {out}");
        assert!(w[0].contains("ETHBCAST_IFACE is not set"), "{}", w[0]);
    }
    // Several ranks per host (2 on 4 hosts, 4 on 2 hosts): ranks behind one MAC share its
    // network member through shared memory; every congruent call still goes over ethbcast,
    // byte-exact, with no warning.
    let (m, b) = &built[0];
    for (hosts, k) in [(4, 2), (2, 4)] {
        let out = bed
            .run(&job(
                *m,
                b,
                hosts,
                k,
                &[("ETHBCAST_IFACE", mpi::IFACE)],
                &["--quick"],
            ))
            .expect("job");
        let expected = results(&out, hosts * k);
        assert_eq!(routed(&out, hosts * k), expected, "{k} per host: {out}");
        assert!(expected.iter().all(|&(c, o)| c > 0 && o > 0), "{out}");
        assert!(warnings(&out).is_empty(), "{k} per host: {out}");
    }
    // 3% of ethbcast frames lost at the switch (MPI's own TCP traffic untouched): repairs are
    // needed while ranks sit in PMPI calls on the halves right after a broadcast, which only
    // the progress thread can serve; results stay byte-exact.
    bed.testbed_mut().set_loss(3.0).expect("loss rule");
    let out = bed
        .run(&job(*m, b, 8, 1, &[("ETHBCAST_IFACE", mpi::IFACE)], &[]))
        .expect("job");
    let expected = results(&out, 8);
    assert_eq!(routed(&out, 8), expected, "with loss: {out}");
    let lost = bed.testbed().loss_counter().expect("nft counter");
    assert!(lost > 0, "the loss rule dropped nothing");
    bed.down().expect("tear down");
}

fn key_warnings(out: &JobOutput) -> Vec<&str> {
    out.stderr
        .lines()
        .filter(|l| l.contains("no group key"))
        .collect()
}

/// Keys for MPI jobs (Open MPI, 4 hosts): without a key the job runs over ethbcast with
/// exactly one warning for the job; with `ETHBCAST_KEY_FILE` it runs keyed without one; with
/// `ETHBCAST_REQUIRE_KEY=1` and no key the interposer refuses hardware broadcast and the whole
/// job falls back to PMPI, with one warning naming the reason, and the same correct results.
#[test]
fn keyless_mpi_jobs_warn_once_and_require_key_falls_back_to_pmpi() {
    let test = "keyless_mpi_jobs_warn_once_and_require_key_falls_back_to_pmpi";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let m = MpiImpl::OpenMpi;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-interposer-key");
    std::fs::create_dir_all(&dir).expect("build directory");
    let b = build(m, &dir, "mpi_check.c");
    let key_file = dir.join("job.key");
    std::fs::write(&key_file, "the job's passphrase\n").expect("key file");
    // Key files must be readable by their owner only.
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&key_file, owner_only).expect("chmod 600");
    let key = key_file.to_str().expect("UTF-8 path");
    let prefix = format!("ck{:x}", std::process::id() & 0xfff);
    let bed = MpiBed::up(&TestbedConfig::new(4).prefix(prefix), &dir).expect("test-bed");
    let iface = ("ETHBCAST_IFACE", mpi::IFACE);
    // The quick program on the 4 hosts, one rank each, with `env`.
    let run = |env: &[(&str, &str)]| bed.run(&job(m, &b, 4, 1, env, &["--quick"])).expect("job");

    // No key: over ethbcast, one warning for the whole job.
    let out = run(&[iface]);
    let expected = results(&out, 4);
    assert_eq!(routed(&out, 4), expected, "keyless: {out}");
    assert!(expected.iter().all(|&(c, _)| c > 0), "{out}");
    let w = key_warnings(&out);
    assert_eq!(w.len(), 1, "one keyless warning per job: {out}");
    assert!(w[0].contains("ETHBCAST_KEY_FILE"), "{}", w[0]);
    assert!(warnings(&out).is_empty(), "{out}");

    // Broadcasts longer than ETHBCAST_MPI_MAX_BYTES go to the MPI's own MPI_Bcast on every
    // rank (the quick program broadcasts 8 and 4096 bytes): the 8-byte ones and the barriers
    // over ethbcast, the 4096-byte ones over PMPI, every byte still checked.
    let out = run(&[iface, ("ETHBCAST_MPI_MAX_BYTES", "1000")]);
    let calls = results(&out, 4);
    let routes = routed(&out, 4);
    for (r, (&(c, o), &(hw, pmpi))) in calls.iter().zip(&routes).enumerate() {
        assert_eq!(hw + pmpi, c + o, "rank {r}: {out}");
        assert!(
            hw > 0 && hw < c,
            "rank {r}: {hw} of {c} congruent calls over ethbcast: {out}"
        );
        assert!(pmpi > o, "rank {r}: no long broadcast went to PMPI: {out}");
    }

    // A key file: over ethbcast, keyed, no warning.
    let out = run(&[iface, ("ETHBCAST_KEY_FILE", key)]);
    let expected = results(&out, 4);
    assert_eq!(routed(&out, 4), expected, "keyed: {out}");
    assert!(expected.iter().all(|&(c, _)| c > 0), "{out}");
    assert!(
        key_warnings(&out).is_empty() && warnings(&out).is_empty(),
        "keyed: {out}"
    );

    // ETHBCAST_REQUIRE_KEY=1 without a key: refused, everything over PMPI, one warning.
    let out = run(&[iface, ("ETHBCAST_REQUIRE_KEY", "1")]);
    assert_eq!(
        routed(&out, 4),
        all_over_pmpi(&out, 4),
        "required key: {out}"
    );
    let w = warnings(&out);
    assert_eq!(w.len(), 1, "one warning per job: {out}");
    assert!(w[0].contains("ETHBCAST_REQUIRE_KEY=1"), "{}", w[0]);

    // ETHBCAST_REQUIRE_KEY=1 with an unreadable key file: refused too, naming the file.
    let missing = dir.join("no-such.key");
    let out = run(&[
        iface,
        ("ETHBCAST_REQUIRE_KEY", "1"),
        ("ETHBCAST_KEY_FILE", missing.to_str().expect("UTF-8 path")),
    ]);
    assert_eq!(
        routed(&out, 4),
        all_over_pmpi(&out, 4),
        "unreadable key file: {out}"
    );
    let w = warnings(&out);
    assert_eq!(w.len(), 1, "one warning per job: {out}");
    assert!(w[0].contains("no-such.key"), "{}", w[0]);

    // Settings the whole job must share, set differently on one rank (rank 2 asks for
    // push-pull, a 1 ms timeout and a 1-byte size limit): every rank uses rank 0's, rank 0 names
    // each setting and the rank in one warning, and every call still goes over ethbcast,
    // byte-exact.
    let mut odd = job(m, &b, 4, 1, &[iface], &[]);
    odd.args = vec![
        "-c".into(),
        format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then export ETHBCAST_ALGO=pushpull \
             ETHBCAST_TIMEOUT_MS=1 ETHBCAST_MPI_MAX_BYTES=1; fi; exec '{}' --quick",
            b.program.display()
        ),
    ];
    odd.program = "/bin/sh".into();
    let out = bed.run(&odd).expect("job");
    let expected = results(&out, 4);
    assert_eq!(routed(&out, 4), expected, "settings differ: {out}");
    for setting in [
        "ETHBCAST_ALGO",
        "ETHBCAST_TIMEOUT_MS",
        "ETHBCAST_MPI_MAX_BYTES",
    ] {
        let said: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains(&format!("{setting} differs from rank 0's")))
            .collect();
        assert_eq!(said.len(), 1, "{setting}: one warning: {out}");
        assert!(said[0].contains("on 1 rank (2)"), "{}", said[0]);
    }

    // A job whose rank 0 fails at once is a failure the caller sees: it is not started a
    // second time (which would hide a rank that fails now and then). Rank 0 leaves a line and
    // exits 3; the others wait, so that none fails first and rank 0 surely runs.
    let ran = dir.join("rank-0-ran");
    let _ = std::fs::remove_file(&ran);
    let mut failing = job(m, &b, 4, 1, &[iface], &["--quick"]);
    failing.program = "/bin/sh".into();
    failing.args = vec![
        "-c".into(),
        format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then echo ran >> '{}'; exit 3; fi; sleep 20",
            ran.display()
        ),
    ];
    let out = bed.run(&failing).expect("job");
    assert!(!out.success(), "{out}");
    let lines = std::fs::read_to_string(&ran).expect("rank 0's line");
    assert_eq!(lines.lines().count(), 1, "started more than once: {out}");
    bed.down().expect("tear down");
}

/// Each rank's (size limit, link rate) from its ETHBCAST_MPI_VERBOSE line.
fn limits(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    reports(out, ranks)
        .iter()
        .map(|r| (r.limit, r.rate))
        .collect()
}

/// Each rank's total limit of MPI_Allreduce over ethbcast.
/// Each rank's total limits: (allreduce, allgather).
fn collective_limits(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    reports(out, ranks)
        .iter()
        .map(|r| (r.allreduce_limit, r.allgather_limit))
        .collect()
}

/// The size limit is the link's when no one sets it: on ports shaped to 1 Gbit/s (a root tbf
/// on every host, as on a switch port of that speed) every size goes over ethbcast, which
/// wins there at every size (docs/mpi.md); when one rank's link is faster or reports no rate
/// (an unshaped veth), every rank keeps 4096, where TCP's offloads win above it; a limit set in the
/// environment is kept whatever the link. The allreduce's total limit is 32 KiB at 1 Gbit/s
/// and faster, the allgather's 512 KiB, and both scale with a slower job's rate (a tenth at
/// 100 Mbit/s), unless set. Results are byte-exact in every case.
#[test]
fn the_size_limit_follows_the_links_of_the_job() {
    let test = "the_size_limit_follows_the_links_of_the_job";
    if !netns_available(test, true) || !mpis_available(test) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-limit");
    std::fs::create_dir_all(&dir).expect("build directory");
    let (m, b) = (
        MpiImpl::OpenMpi,
        build(MpiImpl::OpenMpi, &dir, "mpi_check.c"),
    );
    let prefix = format!("cr{:x}", std::process::id() & 0xfff);
    let mut cfg = TestbedConfig::new(4).prefix(prefix);
    cfg.rate = Some("1gbit".parse().expect("rate"));
    let bed = MpiBed::up(&cfg, &dir).expect("test-bed");
    let run_with = |max: &str, collective_max: &str| {
        let env = [
            ("ETHBCAST_IFACE", mpi::IFACE),
            // Empty is unset: the interposer chooses.
            ("ETHBCAST_MPI_MAX_BYTES", max),
            ("ETHBCAST_MPI_ALLREDUCE_MAX_BYTES", collective_max),
            ("ETHBCAST_MPI_ALLGATHER_MAX_BYTES", collective_max),
        ];
        let out = bed.run(&job(m, &b, 4, 1, &env, &["--quick"])).expect("job");
        let expected = results(&out, 4);
        assert_eq!(routed(&out, 4), expected, "{out}");
        (limits(&out, 4), collective_limits(&out, 4))
    };
    let run = |max: &str| run_with(max, "").0;
    let all = |l: u64, r: u64| vec![(l, r); 4];
    let (shaped, collectives) = run_with("", "");
    assert_eq!(shaped, all(1 << 30, 1_000_000_000), "shaped to 1 Gbit/s");
    assert_eq!(
        collectives,
        vec![(32768, 524288); 4],
        "collectives at 1 Gbit/s"
    );
    assert_eq!(run("4096"), all(4096, 1_000_000_000), "set by the user");
    // Every port shaped to 100 Mbit/s: every size still goes over ethbcast, the allreduce's
    // and the allgather's total limits are a tenth, unless the user sets them.
    for h in bed.testbed().hosts() {
        let st = std::process::Command::new("ip")
            .args([
                "netns", "exec", &h.netns, "tc", "qdisc", "replace", "dev", "eth0", "root",
            ])
            .args(["tbf", "rate", "100mbit", "burst", "3028", "limit", "262144"])
            .status()
            .expect("tc");
        assert!(st.success(), "tc qdisc replace in {}", h.netns);
    }
    let (slow, collectives) = run_with("", "");
    assert_eq!(slow, all(1 << 30, 100_000_000), "shaped to 100 Mbit/s");
    assert_eq!(
        collectives,
        vec![(3276, 52428); 4],
        "collectives at 100 Mbit/s"
    );
    assert_eq!(
        run_with("", "65536").1,
        vec![(65536, 65536); 4],
        "collective limits set by the user"
    );
    // One host's port unshaped: a veth reports 10 Gbit/s (or nothing, on older kernels),
    // and the job keeps the small limit.
    let ns = bed.testbed().hosts()[2].netns.clone();
    let st = std::process::Command::new("ip")
        .args([
            "netns", "exec", &ns, "tc", "qdisc", "del", "dev", "eth0", "root",
        ])
        .status()
        .expect("tc");
    assert!(st.success(), "tc qdisc del in {ns}");
    let unshaped = run("");
    assert!(
        unshaped
            .iter()
            .all(|&(l, r)| l == 4096 && (r == 0 || r > 1_000_000_000) && r == unshaped[0].1),
        "one unshaped link: {unshaped:?}"
    );
    bed.down().expect("tear down");
}
