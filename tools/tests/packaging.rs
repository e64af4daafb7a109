//! The man pages and shell completions the Debian package installs are the ones the `ethbcast`
//! binary generates from its clap definitions (`ethbcast generate-assets`), so that they can
//! never disagree with `--help`.
//!
//! They are committed under `tools/packaging/generated/` because `cargo deb` packages files
//! that exist before it builds. When an option changes, refresh them with
//!
//!     ETHBCAST_UPDATE_GENERATED=1 cargo test -p ethbcast-tools --test packaging

use std::path::{Path, PathBuf};
use std::process::Command;

fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/generated")
}

fn generate(out: &Path) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_ethbcast"))
        .args(["generate-assets", "--out"])
        .arg(out)
        .output()
        .expect("run ethbcast generate-assets");
    assert!(
        o.status.success(),
        "generate-assets failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut names: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            Path::new(l)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn committed_man_pages_and_completions_match_the_binary() {
    let tmp = std::env::temp_dir().join(format!("ethbcast-gen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let names = generate(&tmp);
    assert_eq!(
        names,
        [
            "_ethbcast",
            "ethbcast-recv.1",
            "ethbcast-send.1",
            "ethbcast.1",
            "ethbcast.bash",
            "ethbcast.fish"
        ]
    );
    let update = std::env::var_os("ETHBCAST_UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for name in &names {
        let fresh = std::fs::read(tmp.join(name)).unwrap();
        let path = committed_dir().join(name);
        if std::fs::read(&path).ok().as_deref() != Some(&fresh[..]) {
            if update {
                std::fs::write(&path, &fresh).unwrap();
            } else {
                stale.push(name.as_str());
            }
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(
        stale.is_empty(),
        "tools/packaging/generated/ is stale for {stale:?} (the CLI changed): refresh it with \
         `ETHBCAST_UPDATE_GENERATED=1 cargo test -p ethbcast-tools --test packaging` and commit"
    );
}

#[test]
fn pages_and_completions_cover_both_subcommands_and_hide_the_generator() {
    let dir = committed_dir();
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let main = read("ethbcast.1");
    assert!(main.contains("ethbcast\\-send(1)") && main.contains("ethbcast\\-recv(1)"));
    assert!(
        main.contains("Exit codes"),
        "the exit codes belong in the man page"
    );
    assert!(read("ethbcast-send.1").contains("\\-\\-receivers"));
    assert!(read("ethbcast-recv.1").contains("\\-\\-output"));
    for completion in ["ethbcast.bash", "_ethbcast", "ethbcast.fish"] {
        let text = read(completion);
        assert!(
            text.contains("recv") && text.contains("max-rate"),
            "{completion}"
        );
        assert!(
            !text.contains("generate-assets"),
            "{completion} offers the hidden generator"
        );
    }
}
