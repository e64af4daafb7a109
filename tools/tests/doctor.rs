//! `ethbcast doctor` on the test-bed: it passes on a healthy host, and names an interface that
//! is down, a missing capability, an MTU too small and a backend override, each with its fix;
//! `recv` on an interface that is down or whose MTU is too small names it and the fix.
//! Needs root and `setpriv`; with `ETHBCAST_REQUIRE_NETNS=1` (CI) a missing piece fails.

use std::process::{Command, Output};

use ethbcast_tools::testbed::{find_tool, netns_available, Testbed, TestbedConfig};

const BIN: &str = env!("CARGO_BIN_EXE_ethbcast");

/// `ethbcast doctor --iface eth0` in `ns`, after `wrapper` (e.g. setpriv), with `env`.
fn doctor(ns: &str, wrapper: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .args(wrapper)
        .arg(BIN)
        .args(["doctor", "--iface", "eth0"])
        .env_remove("ETHBCAST_BACKEND")
        .envs(env.iter().copied());
    let out = cmd.output().expect("run ethbcast doctor");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

/// `ethbcast recv --iface eth0` in `ns` with a key, waiting up to 5 s for a sender.
fn recv_on(ns: &str) -> Output {
    let key = std::env::temp_dir().join(format!("ethbcast-doctor-{}.key", std::process::id()));
    std::fs::write(&key, "a passphrase every host shares\n").unwrap();
    // Key files are the owner's alone, or refused.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, BIN, "recv", "--iface", "eth0", "--wait", "5",
        ])
        .arg("--key-file")
        .arg(&key)
        .output()
        .expect("run ethbcast recv");
    let _ = std::fs::remove_file(&key);
    out
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {args:?}");
}

#[test]
fn doctor_passes_a_healthy_host_and_names_each_problem_with_its_fix() {
    if !netns_available(
        "doctor_passes_a_healthy_host_and_names_each_problem_with_its_fix",
        false,
    ) {
        return;
    }
    let setpriv = find_tool("setpriv");
    if setpriv.is_none() {
        assert!(
            std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
            "setpriv (util-linux) is missing"
        );
        eprintln!("SKIPPED: setpriv (util-linux) is missing");
        return;
    }
    let setpriv = setpriv.unwrap();
    let tb =
        Testbed::up(&TestbedConfig::new(1).prefix(format!("dr{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let ns = tb.hosts()[0].netns.clone();

    let (out, text) = doctor(&ns, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("FAIL") && !text.contains("WARN"), "{text}");
    assert!(text.contains("ok    interface eth0 is up"), "{text}");
    assert!(text.contains("opened eth0"), "{text}");

    ip(&["-n", &ns, "link", "set", "eth0", "down"]);
    let (out, text) = doctor(&ns, &[], &[]);
    // A receiver on it fails at once, naming the interface and the fix, instead of waiting.
    let recv = recv_on(&ns);
    ip(&["-n", &ns, "link", "set", "eth0", "up"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  interface eth0 is down; fix: ip link set eth0 up"),
        "{text}"
    );
    let e = String::from_utf8_lossy(&recv.stderr);
    assert_eq!(recv.status.code(), Some(4), "{e}");
    assert!(
        e.contains("interface eth0 is down: ip link set eth0 up"),
        "{e}"
    );

    ip(&["-n", &ns, "link", "set", "eth0", "mtu", "500"]);
    let (out, text) = doctor(&ns, &[], &[]);
    let recv = recv_on(&ns);
    ip(&["-n", &ns, "link", "set", "eth0", "mtu", "1500"]);
    let e = String::from_utf8_lossy(&recv.stderr);
    assert_eq!(recv.status.code(), Some(4), "{e}");
    assert!(
        e.contains("interface eth0 has an MTU of 500 bytes")
            && e.contains("ip link set eth0 mtu 1500"),
        "{e}"
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  interface eth0 has an MTU of 500 bytes")
            && text.contains("fix: ip link set eth0 mtu 1500"),
        "{text}"
    );

    let setpriv = setpriv.to_str().unwrap();
    let (out, text) = doctor(
        &ns,
        &[
            setpriv,
            "--bounding-set=-net_raw,-net_admin",
            "--inh-caps=-net_raw,-net_admin",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  CAP_NET_RAW is missing") && text.contains("setcap"),
        "{text}"
    );
    // Without CAP_NET_ADMIN the buffer a receiver asks for (2 KiB per frame of its window and
    // retained frames) is capped at net.core.rmem_max.
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if rmem_max < 4096 * 2048 {
        assert!(
            text.contains("WARN  without CAP_NET_ADMIN") && text.contains("net.core.rmem_max="),
            "{text}"
        );
    }

    let (out, text) = doctor(&ns, &[], &[("ETHBCAST_BACKEND", "socket")]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "WARN  ETHBCAST_BACKEND=socket overrides --backend ring; fix: unset ETHBCAST_BACKEND"
        ),
        "{text}"
    );

    tb.down().unwrap();
}
