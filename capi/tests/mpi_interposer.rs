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

use std::path::{Path, PathBuf};
use std::time::Duration;

use ethbcast_testbed::mpi::{self, Job, JobOutput, MpiBed, MpiImpl};
use ethbcast_testbed::{netns_available, TestbedConfig};

fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    [
        deps.join("libethbcast_capi.a"),
        deps.join("../libethbcast_capi.a"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libethbcast_capi.a next to the test binary (crate-type staticlib)")
}

/// Whether both MPIs are installed; panics in CI when not.
fn mpis_available(test: &str) -> bool {
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

struct Built {
    check: PathBuf,
    interposer: PathBuf,
}

fn build(m: MpiImpl, dir: &Path) -> Built {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/mpi_check.c");
    let check = dir.join(format!("mpi_check-{m}"));
    mpi::compile(m, &src, &check).unwrap_or_else(|e| panic!("{e}"));
    let interposer =
        mpi::build_interposer(m, Some(&staticlib()), dir).unwrap_or_else(|e| panic!("{e}"));
    Built { check, interposer }
}

fn job(m: MpiImpl, b: &Built, hosts: usize, k: usize, env: &[(&str, &str)], quick: bool) -> Job {
    let mut env: Vec<(String, String)> = env
        .iter()
        .map(|(a, v)| (a.to_string(), v.to_string()))
        .collect();
    env.push(("LD_PRELOAD".into(), b.interposer.display().to_string()));
    env.push(("ETHBCAST_MPI_VERBOSE".into(), "1".into()));
    // Every size over ethbcast, so that the byte checks cover its long messages too, unless
    // the test sets its own limit.
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
        program: b.check.clone(),
        args: if quick {
            vec!["--quick".into()]
        } else {
            vec![]
        },
        env,
        timeout: Duration::from_secs(90),
    }
}

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

/// The interposer's per-rank "H calls over ethbcast, P over PMPI" lines.
fn routed(out: &JobOutput, ranks: usize) -> Vec<(u64, u64)> {
    let mut per_rank = vec![None; ranks];
    for line in out.stderr.lines() {
        let Some(rest) = line.strip_prefix("ethbcast-mpi: rank ") else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        if let [r, hw, "calls", "over", "ethbcast,", pmpi, "over", "PMPI,", _, "looks", ..] = w[..]
        {
            let r: usize = r.trim_end_matches(':').parse().expect("rank");
            per_rank[r] = Some((hw.parse().expect("count"), pmpi.parse().expect("count")));
        }
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.unwrap_or_else(|| panic!("rank {r}: no interposer report: {out}")))
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
    let built: Vec<(MpiImpl, Built)> = MpiImpl::ALL.iter().map(|&m| (m, build(m, &dir))).collect();
    let prefix = format!("cm{:x}", std::process::id() & 0xfff);
    let mut bed = MpiBed::up(&TestbedConfig::new(8).prefix(prefix), &dir).expect("test-bed");
    for (m, b) in &built {
        // With the interposer: world and its duplicate over ethbcast, the halves over PMPI.
        let out = bed
            .run(&job(*m, b, 8, 1, &[("ETHBCAST_IFACE", mpi::IFACE)], false))
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
        let out = bed.run(&job(*m, b, 8, 1, &[], true)).expect("job");
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
                true,
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
        .run(&job(*m, b, 8, 1, &[("ETHBCAST_IFACE", mpi::IFACE)], false))
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
    let b = build(m, &dir);
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
    let run = |env: &[(&str, &str)]| bed.run(&job(m, &b, 4, 1, env, true)).expect("job");

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

    // A job whose rank 0 fails at once is a failure the caller sees: it is not started a
    // second time (which would hide a rank that fails now and then). Rank 0 leaves a line and
    // exits 3; the others wait, so that none fails first and rank 0 surely runs.
    let ran = dir.join("rank-0-ran");
    let _ = std::fs::remove_file(&ran);
    let mut failing = job(m, &b, 4, 1, &[iface], true);
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
