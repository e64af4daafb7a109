//! The shared library as a C programmer uses it from the build tree: a program compiled with
//! `-L DIR -lethbcast_capi`, where DIR is the directory cargo built `libethbcast_capi.so`
//! into (`target/<profile>` after `cargo build -p ethbcast-capi`, its `deps/` under `cargo
//! test`), runs with `LD_LIBRARY_PATH=DIR` and nothing else: the program records the soname
//! `libethbcast_capi.so.<ETHBCAST_ABI_VERSION>`, and the build leaves that name beside the
//! file.
//!
//! A keyless group says so at open: rank 0 prints one warning on stderr (not through a log
//! that a C program never sets up, so also with `RUST_LOG=warn`); a keyed group prints none.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ethbcast_capi::ETHBCAST_ABI_VERSION;
use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

mod common;
use common::{c_compiler, cdylib};

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The directory cargo built the shared library into for this run.
fn library_dir() -> PathBuf {
    cdylib()
        .parent()
        .expect("the library's directory")
        .to_path_buf()
}

/// Compiles `source` (under `capi/`) against the shared library in `lib_dir`, as
/// `cc -Icapi SOURCE -L DIR -lethbcast_capi`.
fn compile_shared(source: &str, name: &str, lib_dir: &Path) -> PathBuf {
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-shared-{name}"));
    let out = c_compiler()
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(source))
        .arg("-L")
        .arg(lib_dir)
        .args(["-lethbcast_capi", "-o"])
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(out.status.success(), "compiling {source}: {}", text(&out));
    exe
}

/// The build leaves `libethbcast_capi.so.<ABI>` beside the `libethbcast_capi.so` it made (the
/// same file), and a program linked with `-L DIR -lethbcast_capi` runs with only
/// `LD_LIBRARY_PATH=DIR`.
#[test]
fn a_program_linked_against_the_build_directory_runs_from_it() {
    let dir = library_dir();
    let soname = format!("libethbcast_capi.so.{ETHBCAST_ABI_VERSION}");
    let versioned = dir.join(&soname);
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (std::fs::metadata(a), std::fs::metadata(b));
        matches!((a, b), (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino())
    };
    assert!(
        same(&versioned, &cdylib()),
        "{} is not the library cargo built ({})",
        versioned.display(),
        cdylib().display()
    );
    // After `cargo build -p ethbcast-capi` the profile directory holds the library too: the
    // versioned name must be there as well.
    let profile = dir.parent().filter(|_| dir.ends_with("deps"));
    if let Some(profile) = profile.filter(|p| p.join("libethbcast_capi.so").is_file()) {
        assert!(
            same(&profile.join(&soname), &profile.join("libethbcast_capi.so")),
            "{} has libethbcast_capi.so but not {soname}",
            profile.display()
        );
    }
    let exe = compile_shared("c/abi_check.c", "abi_check", &dir);
    let out = Command::new(&exe)
        .arg("options")
        .env_clear()
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("run abi_check");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok options",
        "abi_check options linked with -L {0} -lethbcast_capi, run with LD_LIBRARY_PATH={0}: {1}",
        dir.display(),
        text(&out)
    );
}

/// Lines of `out`'s stderr that warn of a group without a key.
fn keyless_warnings(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("no group key"))
        .map(str::to_string)
        .collect()
}

/// `capi/examples/hello.c` linked against the shared library, on 2 hosts: keyless, rank 0
/// warns once at open (also with `RUST_LOG=warn`) and rank 1 does not; keyed by
/// `ETHBCAST_KEY_FILE`, nobody warns. Every run greets every rank.
#[test]
fn a_keyless_c_group_warns_once_at_open_and_a_keyed_one_does_not() {
    let test = "a_keyless_c_group_warns_once_at_open_and_a_keyed_one_does_not";
    if !netns_available(test, false) {
        return;
    }
    let dir = library_dir();
    let hello = compile_shared("examples/hello.c", "hello", &dir);
    let scratch =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-shared-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let key_file = scratch.join("group.key");
    std::fs::write(&key_file, "the group's passphrase\n").expect("key file");
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&key_file, owner_only).expect("chmod 600");
    let key = key_file.to_str().expect("UTF-8 path");

    let prefix = format!("cw{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix)).expect("test-bed");
    let run = |env: &[(&str, &str)]| -> Vec<Output> {
        let children: Vec<_> = (0..2)
            .map(|rank| {
                let h = &bed.hosts()[rank];
                netns::command_in(&h.netns, hello.to_str().expect("UTF-8 path"))
                    .expect("command in namespace")
                    .arg(&h.iface)
                    .env("LD_LIBRARY_PATH", &dir)
                    .env("ETHBCAST_RANK", rank.to_string())
                    .env("ETHBCAST_SIZE", "2")
                    .env_remove("ETHBCAST_KEY_FILE")
                    .env_remove("ETHBCAST_REQUIRE_KEY")
                    .env_remove("RUST_LOG")
                    .envs(env.iter().copied())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn in namespace")
            })
            .collect();
        let outs = common::outputs_within(children, Duration::from_secs(60));
        let every: String = outs
            .iter()
            .enumerate()
            .map(|(rank, out)| format!("rank {rank}: {}\n", text(out)))
            .collect();
        for (rank, out) in outs.iter().enumerate() {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "hello rank {rank} with {env:?}; every rank:\n{every}"
            );
            for root in 0..2 {
                let line = format!("rank {rank}: from {root}: hello from rank {root}");
                assert!(
                    stdout.contains(&line),
                    "rank {rank} lacks {line:?}:\n{every}"
                );
            }
        }
        outs
    };

    for env in [&[][..], &[("RUST_LOG", "warn")][..]] {
        let outs = run(env);
        let w0 = keyless_warnings(&outs[0]);
        assert_eq!(w0.len(), 1, "rank 0, keyless, {env:?}: {}", text(&outs[0]));
        for what in ["ETHBCAST_KEY_FILE", "ETHBCAST_REQUIRE_KEY=1", "any host"] {
            assert!(
                w0[0].contains(what),
                "the warning lacks {what:?}: {}",
                w0[0]
            );
        }
        assert!(
            keyless_warnings(&outs[1]).is_empty(),
            "rank 1, keyless, {env:?}: {}",
            text(&outs[1])
        );
    }
    let outs = run(&[("ETHBCAST_KEY_FILE", key)]);
    for (rank, out) in outs.iter().enumerate() {
        assert!(
            keyless_warnings(out).is_empty(),
            "rank {rank}, keyed: {}",
            text(out)
        );
    }
    bed.down().expect("tear down");
    let _ = std::fs::remove_dir_all(&scratch);
}
