//! The shared library's soname carries the ABI version (`libethbcast_capi.so.1`): a program
//! linked against it records that name, and the dynamic loader refuses to pair it with a
//! library of another ABI. `ETHBCAST_ABI_VERSION` in `src/lib.rs` is the same number (a test
//! compares them).
//!
//! Cargo names the file it links `libethbcast_capi.so`, and a program linked with `-L
//! target/release -lethbcast_capi` looks for `libethbcast_capi.so.1` when it starts. So that
//! it finds it there, this script makes `libethbcast_capi.so.1` a symbolic link to
//! `libethbcast_capi.so` in the directories cargo puts the library in (`target/<profile>` and
//! its `deps/`, under `target/<triple>/` when cross-compiling). The script runs before the
//! library is linked, so the link points at the file cargo is about to write. It is the one
//! thing this script writes outside `OUT_DIR`. Those directories are found from `OUT_DIR`
//! (`<profile>/build/<package>-<hash>/out`); with a build directory of its own
//! (`build.build-dir`) the link lands there, not where cargo copies the library, and is left
//! to the user (docs/mpi.md, "Linking").

use std::path::{Path, PathBuf};

/// The ABI version of the C interface.
const ABI_VERSION: u32 = 1;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let soname = format!("libethbcast_capi.so.{ABI_VERSION}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    let Some(profile) = std::env::var_os("OUT_DIR").and_then(|d| profile_dir(Path::new(&d))) else {
        println!(
            "cargo:warning=OUT_DIR is not <profile>/build/<package>/out: make {soname} a link to libethbcast_capi.so yourself"
        );
        return;
    };
    for dir in [profile.clone(), profile.join("deps")] {
        if let Err(e) = link(&dir, &soname, "libethbcast_capi.so") {
            println!(
                "cargo:warning=cannot link {soname} to libethbcast_capi.so in {}: {e}",
                dir.display()
            );
        }
    }
}

/// The profile directory of `out_dir` = `<profile>/build/<package>-<hash>/out`.
fn profile_dir(out_dir: &Path) -> Option<PathBuf> {
    let package = out_dir
        .file_name()
        .is_some_and(|n| n == "out")
        .then(|| out_dir.parent())??;
    let build = package.parent()?;
    if build.file_name()? != "build" {
        return None;
    }
    build.parent().map(Path::to_path_buf)
}

/// Makes `dir/name` a relative symbolic link to `target` (replacing whatever is there, in one
/// rename), unless it already is one.
#[cfg(unix)]
fn link(dir: &Path, name: &str, target: &str) -> std::io::Result<()> {
    let path = dir.join(name);
    if std::fs::read_link(&path).is_ok_and(|t| t == Path::new(target)) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, &path)
}

#[cfg(not(unix))]
fn link(_dir: &Path, _name: &str, _target: &str) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "symbolic links need a Unix build host",
    ))
}
