//! The checked-in header `capi/ethbcast.h` is what cbindgen makes of `capi/src/lib.rs`.
//! `ETHBCAST_BLESS=1` rewrites it instead of comparing.

use std::path::Path;

#[test]
fn the_checked_in_header_matches_the_rust_source() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses capi/src/lib.rs");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("UTF-8 header");
    let path = dir.join("ethbcast.h");
    if std::env::var("ETHBCAST_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &fresh).expect("write ethbcast.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "capi/ethbcast.h is out of date: run `ETHBCAST_BLESS=1 cargo test -p ethbcast-capi --test header` and commit it"
    );
    for name in [
        "ethbcast_open",
        "ethbcast_bcast",
        "ethbcast_barrier",
        "ethbcast_close",
        "ethbcast_strerror",
        "ethbcast_counters",
        "ETHBCAST_ERR_TIMEOUT",
        "ETHBCAST_ERR_HANDLE",
        "ETHBCAST_ABI_VERSION",
        "ethbcast_options_init",
        // The options' size comes from the caller's struct.
        "uint32_t size;",
        "static inline int ethbcast_options_default(ethbcast_options_t *out) {\n  return ethbcast_options_init(out, sizeof *out);",
    ] {
        assert!(fresh.contains(name), "{name} missing from the header");
    }
}
