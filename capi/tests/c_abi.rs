//! The C ABI from C: `capi/c/bcast_check.c` and `capi/examples/hello.c` are compiled with the
//! system C compiler (the `cc` crate finds it) against `libethbcast_capi.a` and the checked-in
//! `ethbcast.h`, then run one process per host of a 4-host test-bed (each in its network
//! namespace, ranks from `ETHBCAST_RANK`/`ETHBCAST_SIZE`). `bcast_check` checks every byte of
//! every root's broadcasts (0 B to 64 KiB), 200 back-to-back broadcasts of one root, a barrier, length and rank errors and the counters;
//! with `--errors` it checks the codes and sentences of calls that fail before joining.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use ethbcast_tools::netns;
use ethbcast_tools::testbed::{netns_available, Testbed, TestbedConfig};

/// The static library cargo built for this test run (next to the test binary).
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

/// Compiles one C file against the static library; returns the executable.
fn compile(source: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{name}"));
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .opt_level(2)
        .target(&target)
        .host(&target)
        .get_compiler();
    let status = compiler
        .to_command()
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(dir)
        .arg(dir.join(source))
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {source} failed");
    out
}

fn prefix(tag: &str) -> String {
    format!("c{tag}{:x}", std::process::id() & 0xfff)
}

/// Runs `exe eth0` once per host, rank = host index, and waits (bounded) for all.
fn run_on_hosts(bed: &Testbed, exe: &Path) -> Vec<Output> {
    let n = bed.hosts().len();
    let children: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            netns::command_in(&h.netns, exe.to_str().expect("UTF-8 path"))
                .expect("command in namespace")
                .arg(&h.iface)
                .env("ETHBCAST_RANK", h.index.to_string())
                .env("ETHBCAST_SIZE", n.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn in namespace")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut outputs = Vec::new();
    for mut child in children {
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        outputs.push(child.wait_with_output().expect("output"));
    }
    outputs
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
    for (i, out) in run_on_hosts(&bed, &check).iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "bcast_check rank {i}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // 4 roots x 8 lengths, 200 back-to-back, and the mismatched one at rank 0.
        let bcasts = if i == 0 { 233 } else { 232 };
        assert_eq!(stdout.trim(), format!("ok rank {i} size 4 bcasts {bcasts}"));
    }
    for (i, out) in run_on_hosts(&bed, &hello).iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "hello rank {i}: {}", out.status);
        for root in 0..4 {
            let line = format!("rank {i}: from {root}: hello from rank {root}");
            assert!(stdout.contains(&line), "rank {i} lacks {line:?}:\n{stdout}");
        }
    }
    bed.down().expect("tear down");
}
