//! The static library cargo built for the test run, which the C and MPI tests link.

use std::path::PathBuf;

/// The static library cargo built for this test run (next to the test binary).
pub fn staticlib() -> PathBuf {
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
