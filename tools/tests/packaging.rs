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
            "ethbcast-doctor.1",
            "ethbcast-keygen.1",
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

/// The settings of `ethbcast-recv@.service` that ExecStart= and Environment= give, one
/// string each (continuation lines are not used in the unit).
fn unit_setting<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// The packaged receiver takes its key as a systemd credential (no key file: the unit does not
/// start, it never runs keyless), passes `--max-bytes`, and writes to a path of its own
/// instance unless that instance's settings say otherwise.
/// `systemd-analyze verify` accepts the unit without a warning (where systemd is installed).
#[test]
fn the_receiver_unit_takes_a_key_credential_a_size_limit_and_a_per_instance_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging");
    let unit = std::fs::read_to_string(dir.join("ethbcast-recv@.service")).unwrap();
    let defaults = std::fs::read_to_string(dir.join("ethbcast-recv.default")).unwrap();
    let exec = unit_setting(&unit, "ExecStart").concat();
    let env = unit_setting(&unit, "Environment").join(" ");

    // The key: a credential of the instance, read through %d (the credentials directory),
    // on the command line, so that an empty ETHBCAST_KEY_FILE in a settings file cannot turn
    // it off (it fails to read instead).
    assert_eq!(
        unit_setting(&unit, "LoadCredential"),
        ["key:/etc/ethbcast/%i.key"],
        "{unit}"
    );
    assert!(env.contains("ETHBCAST_KEY_FILE=%d/key"), "{env}");
    assert!(exec.contains("--key-file ${ETHBCAST_KEY_FILE}"), "{exec}");

    // A size limit, with a default.
    assert!(exec.contains("--max-bytes ${ETHBCAST_MAX_BYTES}"), "{exec}");
    assert!(env.contains("ETHBCAST_MAX_BYTES="), "{env}");

    // The output: by default in the instance's own state directory; settings per instance
    // come after the shared ones, which name no output.
    assert!(exec.contains("--output ${ETHBCAST_OUTPUT}"), "{exec}");
    assert!(
        env.contains("ETHBCAST_OUTPUT=%S/ethbcast/%i/image"),
        "{env}"
    );
    assert_eq!(
        unit_setting(&unit, "EnvironmentFile"),
        [
            "-/etc/default/ethbcast-recv",
            "-/etc/default/ethbcast-recv@%i"
        ]
    );
    assert!(
        !defaults.contains("ETHBCAST_OUTPUT="),
        "the shared settings offer one output for every instance: {defaults}"
    );

    let Ok(analyze) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze not installed: the unit is not verified here");
        return;
    };
    assert!(analyze.status.success());
    let tmp = std::env::temp_dir().join(format!("ethbcast-unit-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let local = unit.replace("/usr/bin/ethbcast", env!("CARGO_BIN_EXE_ethbcast"));
    let path = tmp.join("ethbcast-recv@eth0.service");
    std::fs::write(&path, local).unwrap();
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&tmp).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.trim().is_empty(), "{err}");
}

/// Each subcommand's man page's SYNOPSIS shows the options with their values, the required
/// ones first: `--iface <IFACE>`, not `<--iface>`.
#[test]
fn man_page_synopses_show_each_option_with_its_value() {
    let dir = committed_dir();
    for (page, want) in [
        (
            "ethbcast-send.1",
            [
                "\\-\\-iface <IFACE>",
                "[\\-\\-receivers <RECEIVERS>]",
                "[\\-\\-json]",
            ],
        ),
        (
            "ethbcast-recv.1",
            [
                "\\-\\-iface <IFACE>",
                "[\\-o|\\-\\-output <OUTPUT>]",
                "[\\-\\-resume]",
            ],
        ),
        (
            "ethbcast-doctor.1",
            [
                "\\-\\-iface <IFACE>",
                "[\\-\\-hostfile <HOSTFILE>]",
                "[\\-\\-json]",
            ],
        ),
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        let synopsis = text
            .split(".SH SYNOPSIS")
            .nth(1)
            .and_then(|s| s.split(".SH").next())
            .unwrap_or_else(|| panic!("{page}: no SYNOPSIS"));
        assert!(
            !synopsis.contains("<\\fB"),
            "{page}: an option without its value: {synopsis}"
        );
        for w in want {
            assert!(synopsis.contains(w), "{page}: {w} in {synopsis}");
        }
    }
}
