//! The log of `ethbcast`: the library's warnings reach stderr by default, `-v`/`-vv` show more,
//! `RUST_LOG` takes precedence, and output to a pipe carries no terminal colours.
//!
//! The warning used is the one a receiver raises when the kernel caps its packet socket's
//! receive buffer: the process runs as root without CAP_NET_ADMIN (`setpriv`), so the kernel
//! holds the buffer to `net.core.rmem_max`, and asks for more than that (a large `--window`).
//! Needs root and `setpriv`; with `ETHBCAST_REQUIRE_NETNS=1` (CI) a missing piece fails.

use std::process::Command;

use ethbcast_tools::testbed::{find_tool, netns_available, Testbed, TestbedConfig};

const BIN: &str = env!("CARGO_BIN_EXE_ethbcast");

/// Runs `ethbcast recv` on the test-bed's host without CAP_NET_ADMIN, `before` ahead of the
/// subcommand, `env` in its environment; returns its stderr (it waits 1 s for a sender that
/// never comes and exits 3).
fn recv_without_net_admin(
    tb: &Testbed,
    key: &std::path::Path,
    before: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &tb.hosts()[0].netns])
        .arg(find_tool("setpriv").expect("setpriv"))
        .args(["--bounding-set=-net_admin", "--inh-caps=-net_admin", "env"])
        .args(env.iter().map(|(k, v)| format!("{k}={v}")))
        .arg(BIN)
        .args(before)
        .args(["recv", "--iface", "eth0", "--backend", "socket"])
        .args(["--window", "8192", "--wait", "1", "-o", "/dev/null"])
        .arg("--key-file")
        .arg(key);
    let out = cmd.output().expect("run ethbcast");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{err}");
    err
}

#[test]
fn library_warnings_show_by_default_and_v_and_rust_log_choose_the_level() {
    if !netns_available(
        "library_warnings_show_by_default_and_v_and_rust_log_choose_the_level",
        false,
    ) {
        return;
    }
    if find_tool("setpriv").is_none() {
        assert!(
            std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
            "setpriv (util-linux) is missing"
        );
        eprintln!("SKIPPED: setpriv (util-linux) is missing");
        return;
    }
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The receiver asks for 2 KiB per frame of its window and retained frames.
    assert!(
        rmem_max < 8192 * 2048,
        "net.core.rmem_max ({rmem_max}) is too large for the warning to show"
    );
    let tb =
        Testbed::up(&TestbedConfig::new(1).prefix(format!("lg{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let dir = std::env::temp_dir().join(format!("ethbcast-logging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    std::fs::write(&key, "a passphrase every host shares\n").unwrap();
    // Key files are the owner's alone, or refused.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    let plain = recv_without_net_admin(&tb, &key, &[], &[]);
    assert!(
        plain.contains("WARN") && plain.contains("receive buffer") && plain.contains("rmem_max"),
        "{plain}"
    );
    assert!(!plain.contains("DEBUG"), "{plain}");
    // stderr is a pipe here: no terminal colours.
    assert!(!plain.contains('\x1b'), "{plain:?}");

    let verbose = recv_without_net_admin(&tb, &key, &["-vv"], &[]);
    assert!(
        verbose.contains("receive buffer") && verbose.contains("DEBUG"),
        "{verbose}"
    );

    let errors_only = recv_without_net_admin(&tb, &key, &["-vv"], &[("RUST_LOG", "error")]);
    assert!(!errors_only.contains("receive buffer"), "{errors_only}");
    assert!(!errors_only.contains("DEBUG"), "{errors_only}");

    let _ = std::fs::remove_dir_all(&dir);
    tb.down().unwrap();
}
