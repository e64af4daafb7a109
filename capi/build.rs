//! The shared library's soname carries the ABI version (`libethbcast_capi.so.1`): a program
//! linked against it records that name, and the dynamic loader refuses to pair it with a
//! library of another ABI. `ETHBCAST_ABI_VERSION` in `src/lib.rs` is the same number (a test
//! compares them).

/// The ABI version of the C interface.
const ABI_VERSION: u32 = 1;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libethbcast_capi.so.{ABI_VERSION}");
    }
}
