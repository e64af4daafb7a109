//! What the C tests share: the static library cargo built for the run, compiling a C program
//! against it, and collecting the programs' outputs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

mod staticlib;
pub use staticlib::staticlib;

/// The shared library cargo built for this test run (next to the test binary).
#[allow(dead_code)] // Not every test binary that shares this module links dynamically.
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    [
        deps.join("libethbcast_capi.so"),
        deps.join("../libethbcast_capi.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libethbcast_capi.so next to the test binary (crate-type cdylib)")
}

/// The system C compiler (the `cc` crate finds it) with the flags of every C test and the
/// header's directory on the include path; sources, libraries and `-o` are the caller's.
pub fn c_compiler() -> Command {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .opt_level(2)
        .target(&target)
        .host(&target)
        .get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(dir);
    cmd
}

/// Compiles one C file against the static library; returns the executable.
#[allow(dead_code)] // c_abi_shared.rs links the shared library only.
pub fn compile(source: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{name}"));
    let status = c_compiler()
        .arg(dir.join(source))
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {source} failed");
    out
}

/// Each child's output, in order; children still running `limit` after the call are killed
/// (their output then says how far they got).
pub fn outputs_within(children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let deadline = Instant::now() + limit;
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
