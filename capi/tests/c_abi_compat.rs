//! The C ABI can grow without breaking programs silently: the shared library's soname carries
//! the ABI version, the options carry their size, an old program fails with a clear error
//! instead of an overwritten stack, and group handles are checked rather than trusted.
//!
//! - `capi/c/abi_check.c options`, linked against `libethbcast_capi.so` and run with only
//!   `libethbcast_capi.so.1` on its library path: the options checks of that program (sizes
//!   too small, from a newer header, without a size field; key NULL with a length; handles
//!   that were never returned by `ethbcast_open`).
//! - `capi/c/old_options.c`, a program as built against the header whose options had no size
//!   (linked against a stand-in of the library it was built with, `capi/c/old_library.c`),
//!   run against the current library: the loader refuses it before it can call into the
//!   library; linking it against the current static library fails.
//! - `capi/c/abi_check.c handles` on a 2-host test-bed: a close during another thread's call,
//!   a second close and calls on a closed handle are refused with error codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ethbcast_capi::ETHBCAST_ABI_VERSION;
use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

mod common;
use common::{c_compiler, cdylib, compile, staticlib};

/// A fresh scratch directory of this test run.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("capi-compat-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// `dir` holding a copy of the current shared library under `name`.
fn library_dir(dir: PathBuf, name: &str) -> PathBuf {
    std::fs::create_dir_all(&dir).expect("library directory");
    std::fs::copy(cdylib(), dir.join(name)).expect("copy libethbcast_capi.so");
    dir
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `exe args` with nothing in the environment but the library path `lib_dir`.
fn run_with_library(exe: &Path, args: &[&str], lib_dir: &Path) -> Output {
    Command::new(exe)
        .args(args)
        .env_clear()
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .expect("run the program")
}

/// The soname is `libethbcast_capi.so.<ETHBCAST_ABI_VERSION>`: a program linked with
/// `-lethbcast_capi` records that name and runs where only that file is installed. Through
/// the shared library, the options carry their size and every check of
/// `abi_check options` holds.
#[test]
fn a_program_linked_with_the_shared_library_needs_its_abi_version_and_gets_sized_options() {
    let dir = scratch("soname");
    let link = library_dir(dir.join("link"), "libethbcast_capi.so");
    let exe = dir.join("abi_check");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/abi_check.c");
    let out = c_compiler()
        .arg(&source)
        .arg("-L")
        .arg(&link)
        .args(["-lethbcast_capi", "-lpthread", "-o"])
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling abi_check.c: {}",
        text(&out)
    );
    let soname = format!("libethbcast_capi.so.{ETHBCAST_ABI_VERSION}");
    let run = library_dir(dir.join("run"), &soname);
    let out = run_with_library(&exe, &["options"], &run);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok options",
        "abi_check options with only {soname} on the library path: {}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program built against the header whose options had no size calls
/// `ethbcast_options_default` with its 36-byte struct. The current library has no such
/// symbol (the header's `ethbcast_options_default` is an inline function that passes the
/// struct's size): the dynamic loader refuses the program before the call can write, and
/// linking it against the static library fails. With only the versioned file installed, the
/// old program does not find a library at all.
#[test]
fn a_program_built_against_options_without_a_size_fails_to_load_instead_of_overwriting_its_stack() {
    let dir = scratch("old");
    let capi = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The library the old program was linked against (no soname, the old symbols).
    let old_lib = dir.join("old-lib");
    std::fs::create_dir_all(&old_lib).expect("old library directory");
    let out = c_compiler()
        .args(["-shared", "-fPIC"])
        .arg(capi.join("c/old_library.c"))
        .arg("-o")
        .arg(old_lib.join("libethbcast_capi.so"))
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling old_library.c: {}",
        text(&out)
    );
    let exe = dir.join("old_options");
    let out = c_compiler()
        .arg(capi.join("c/old_options.c"))
        .arg("-L")
        .arg(&old_lib)
        .args(["-lethbcast_capi", "-o"])
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling old_options.c: {}",
        text(&out)
    );

    // The current library where the old program looks for its library.
    let current = library_dir(dir.join("current"), "libethbcast_capi.so");
    let out = run_with_library(&exe, &[], &current);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && !stdout.contains("returned")
            && stderr.contains("undefined symbol: ethbcast_options_default"),
        "the old program against the current library: {}",
        text(&out)
    );

    // Only the versioned file installed: the old program finds no library.
    let soname = format!("libethbcast_capi.so.{ETHBCAST_ABI_VERSION}");
    let versioned = library_dir(dir.join("versioned"), &soname);
    let out = run_with_library(&exe, &[], &versioned);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("libethbcast_capi.so:"),
        "the old program with only {soname}: {}",
        text(&out)
    );

    // Linked against the current static library: refused at link time.
    let out = c_compiler()
        .arg(capi.join("c/old_options.c"))
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(dir.join("old_options_static"))
        .output()
        .expect("run the C compiler");
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("ethbcast_options_default"),
        "linking the old program against libethbcast_capi.a: {}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// On two hosts: rank 1 closes its group while another of its threads waits in a broadcast
/// (refused with `ETHBCAST_ERR_BUSY`, the broadcast completes); then, on both, a second close
/// and every call on the closed handle are refused with `ETHBCAST_ERR_HANDLE`, also after a
/// new group is opened.
#[test]
fn a_closed_handle_and_a_close_during_a_call_are_refused_with_error_codes() {
    let test = "a_closed_handle_and_a_close_during_a_call_are_refused_with_error_codes";
    if !netns_available(test, false) {
        return;
    }
    let exe = compile("c/abi_check.c", "abi_check");
    let prefix = format!("cv{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix)).expect("test-bed");
    let children: Vec<_> = (0..2)
        .map(|rank| {
            let h = &bed.hosts()[rank];
            netns::command_in(&h.netns, exe.to_str().expect("UTF-8 path"))
                .expect("command in namespace")
                .args(["handles", &h.iface])
                .env("ETHBCAST_RANK", rank.to_string())
                .env("ETHBCAST_SIZE", "2")
                .env_remove("ETHBCAST_KEY_FILE")
                .env_remove("ETHBCAST_REQUIRE_KEY")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn in namespace")
        })
        .collect();
    let outs = common::outputs_within(children, Duration::from_secs(90));
    bed.down().expect("tear down");
    let every: String = outs
        .iter()
        .enumerate()
        .map(|(rank, out)| format!("rank {rank}: {}\n", text(out)))
        .collect();
    for (rank, out) in outs.iter().enumerate() {
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).trim() == format!("ok handles rank {rank}"),
            "abi_check handles, rank {rank} failed; every rank:\n{every}"
        );
    }
}
