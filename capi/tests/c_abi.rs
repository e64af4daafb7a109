//! The C ABI from C: `capi/c/bcast_check.c` and `capi/examples/hello.c` are compiled with the
//! system C compiler (the `cc` crate finds it) against `libethbcast_capi.a` and the checked-in
//! `ethbcast.h`, then run one process per host of a 4-host test-bed (each in its network
//! namespace, ranks from `ETHBCAST_RANK`/`ETHBCAST_SIZE`). `bcast_check` checks every byte of
//! every root's broadcasts (0 B to 64 KiB), 200 back-to-back broadcasts of one root, a barrier, length and rank errors and the counters,
//! also with 2 and 4 processes per namespace sharing the host's member through shared memory;
//! with `--errors` it checks the codes and sentences of calls that fail before joining.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

mod common;
use common::compile;

/// Every rank's exit status and output, for the message of a failed check: the first rank
/// to fail is often not the cause (a root times out because a rank of another host never
/// opened).
fn every_rank(outputs: &[Output]) -> String {
    outputs
        .iter()
        .enumerate()
        .map(|(rank, out)| {
            format!(
                "rank {rank}: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .collect()
}

fn prefix(tag: &str) -> String {
    format!("c{tag}{:x}", std::process::id() & 0xfff)
}

/// Runs `exe eth0` once per host, rank = host index, and waits (bounded) for all.
fn run_on_hosts(bed: &Testbed, exe: &Path) -> Vec<Output> {
    run_per_host(bed, exe, 1, None)
}

/// Runs `exe eth0` `k` times per host: ranks in blocks of `k` per host, with the local rank and
/// size in `ETHBCAST_LOCAL_RANK`/`_SIZE` as launchers give them, and the job's `token` (if any)
/// in `ETHBCAST_JOB_TOKEN`. Waits (bounded) for all; outputs in rank order.
fn run_per_host(bed: &Testbed, exe: &Path, k: usize, token: Option<&str>) -> Vec<Output> {
    let n = bed.hosts().len() * k;
    let children: Vec<_> = (0..n)
        .map(|rank| {
            let h = &bed.hosts()[rank / k];
            let mut cmd = netns::command_in(&h.netns, exe.to_str().expect("UTF-8 path"))
                .expect("command in namespace");
            cmd.arg(&h.iface)
                .env("ETHBCAST_RANK", rank.to_string())
                .env("ETHBCAST_SIZE", n.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if k > 1 {
                cmd.env("ETHBCAST_LOCAL_RANK", (rank % k).to_string())
                    .env("ETHBCAST_LOCAL_SIZE", k.to_string());
            }
            match token {
                Some(t) => cmd.env("ETHBCAST_JOB_TOKEN", t),
                None => cmd.env_remove("ETHBCAST_JOB_TOKEN"),
            };
            cmd.spawn().expect("spawn in namespace")
        })
        .collect();
    common::outputs_within(children, Duration::from_secs(90))
}

#[test]
fn c_programs_broadcast_byte_exact_across_four_hosts() {
    if !netns_available("c_programs_broadcast_byte_exact_across_four_hosts", false) {
        return;
    }
    let check = compile("c/bcast_check.c", "bcast_check");
    let hello = compile("examples/hello.c", "hello");
    let bed = Testbed::up(&TestbedConfig::new(4).prefix(prefix("a"))).expect("test-bed");
    // Errors that need no group, on a real Ethernet interface with no rank/size in the
    // environment.
    let h0 = &bed.hosts()[0];
    let out = netns::command_in(&h0.netns, check.to_str().expect("UTF-8 path"))
        .expect("command in namespace")
        .args(["--errors", &h0.iface])
        .env_clear()
        .output()
        .expect("run bcast_check --errors");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok errors");
    let outs = run_on_hosts(&bed, &check);
    for (i, out) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "bcast_check rank {i} failed; every rank:\n{}",
            every_rank(&outs)
        );
        // 4 roots x 8 lengths, 200 back-to-back, and the mismatched one at rank 0.
        let bcasts = if i == 0 { 233 } else { 232 };
        assert_eq!(stdout.trim(), format!("ok rank {i} size 4 bcasts {bcasts}"));
    }
    let outs = run_on_hosts(&bed, &hello);
    for (i, out) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "hello rank {i} failed; every rank:\n{}",
            every_rank(&outs)
        );
        for root in 0..4 {
            let line = format!("rank {i}: from {root}: hello from rank {root}");
            assert!(stdout.contains(&line), "rank {i} lacks {line:?}:\n{stdout}");
        }
    }
    bed.down().expect("tear down");
}

/// Several ranks per namespace (2, then 4, on a 2-host test-bed): the lowest rank of each
/// host is the network member, the others go through the host's shared-memory ring. The same
/// checks as with one rank per host: every root (local roots hand their message to the owner),
/// every length up to 64 KiB (8 slots of the ring), 200 back-to-back broadcasts, barriers,
/// length and rank errors, counters. No segment is left in /dev/shm.
#[test]
fn c_programs_broadcast_byte_exact_with_two_and_four_ranks_per_host() {
    let test = "c_programs_broadcast_byte_exact_with_two_and_four_ranks_per_host";
    if !netns_available(test, false) {
        return;
    }
    // Its own executable: the other test may be compiling and running its copy meanwhile.
    let check = compile("c/bcast_check.c", "bcast_check_shared");
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix("s"))).expect("test-bed");
    // Segments of this test-bed's namespaces (their names end in the namespace's inode, or
    // carry it before the job's tag).
    let inodes: Vec<String> = bed
        .hosts()
        .iter()
        .map(|h| {
            use std::os::unix::fs::MetadataExt;
            let ino = std::fs::metadata(Path::new("/run/netns").join(&h.netns))
                .expect("namespace file")
                .ino();
            format!("-{ino}")
        })
        .collect();
    let segments = || -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        n.starts_with("ethbcast-")
                            && inodes
                                .iter()
                                .any(|i| n.ends_with(i) || n.contains(&format!("{i}-")))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = segments();
    // Four per host with a launcher's job token (every rank must derive the same segment
    // name from it), two per host without.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!("{nanos:032x}{:08x}", std::process::id());
    for k in [2, 4] {
        let n = 2 * k;
        let token = (k == 4).then_some(token.as_str());
        let outs = run_per_host(&bed, &check, k, token);
        for (i, out) in outs.iter().enumerate() {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "bcast_check {k} per host, rank {i} failed; every rank:\n{}",
                every_rank(&outs)
            );
            let bcasts = n * 8 + 200 + usize::from(i == 0);
            assert_eq!(
                stdout.trim(),
                format!("ok rank {i} size {n} bcasts {bcasts}"),
                "{k} per host"
            );
        }
    }
    let left: Vec<String> = segments()
        .into_iter()
        .filter(|s| !before.contains(s))
        .collect();
    assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
    bed.down().expect("tear down");
}
