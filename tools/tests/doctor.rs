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

/// A test-bed of `n` hosts for the checks across hosts (host 0 checks, the others listen), and
/// the hostfile naming hosts 1.. `nodeN`.
struct Hosts {
    tb: Testbed,
    hostfile: std::path::PathBuf,
    listeners: Vec<std::process::Child>,
}

impl Hosts {
    /// `None` (skipped) without root or `ip netns`.
    fn up(n: usize, tag: &str) -> Option<Hosts> {
        if !netns_available(tag, false) {
            return None;
        }
        let tb = Testbed::up(
            &TestbedConfig::new(n).prefix(format!("dh{tag}{:x}", std::process::id() & 0xfff)),
        )
        .expect("test-bed");
        let hostfile = std::env::temp_dir().join(format!(
            "ethbcast-doctor-{tag}-{}.hosts",
            std::process::id()
        ));
        let mut text = String::new();
        for h in &tb.hosts()[1..] {
            text.push_str(&format!(
                "node{} {}\n",
                h.index,
                ethbcast_tools::testbed::format_mac(&h.mac)
            ));
        }
        std::fs::write(&hostfile, text).unwrap();
        Some(Hosts {
            tb,
            hostfile,
            listeners: Vec::new(),
        })
    }

    fn ns(&self, host: usize) -> String {
        self.tb.hosts()[host].netns.clone()
    }

    /// `ethbcast doctor --iface eth0 --listen` on `host`, after `wrapper`: its output so far
    /// once it answers probes, or all of it if it ended (a check failed there).
    fn listen(&mut self, host: usize, wrapper: &[&str]) -> (bool, String) {
        use std::io::BufRead;
        let mut c = Command::new("ip")
            .args(["netns", "exec", &self.ns(host)])
            .args(wrapper)
            .arg(BIN)
            .args(["doctor", "--iface", "eth0", "--listen"])
            .env_remove("ETHBCAST_BACKEND")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run ethbcast doctor --listen");
        let stdout = c.stdout.take().unwrap();
        let stderr = std::io::BufReader::new(c.stderr.take().unwrap());
        let mut seen = String::new();
        let mut answering = false;
        for line in stderr.lines() {
            let Ok(line) = line else { break };
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("answering probes") {
                answering = true;
                break;
            }
        }
        // The checks it printed first.
        if answering {
            self.listeners.push(c);
        } else {
            let mut out = String::new();
            let _ = std::io::Read::read_to_string(&mut { stdout }, &mut out);
            seen.push_str(&out);
            let _ = c.wait();
        }
        (answering, seen)
    }

    /// `ethbcast doctor --iface eth0 --hostfile FILE` on host 0: exit code and output.
    fn check(&self) -> (Option<i32>, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(0),
                BIN,
                "doctor",
                "--iface",
                "eth0",
            ])
            .arg("--hostfile")
            .arg(&self.hostfile)
            .env_remove("ETHBCAST_BACKEND")
            .output()
            .expect("run ethbcast doctor --hostfile");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), text)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.listeners {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.hostfile);
    }
}

#[test]
fn doctor_with_a_hostfile_passes_when_every_host_answers() {
    let Some(mut h) = Hosts::up(4, "ok") else {
        return;
    };
    for host in 1..4 {
        let (answering, text) = h.listen(host, &[]);
        assert!(answering, "{text}");
    }
    let (code, text) = h.check();
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("FAIL") && !text.contains("WARN"), "{text}");
    for n in 1..4 {
        let mac = ethbcast_tools::testbed::format_mac(&h.tb.hosts()[n].mac);
        let who = format!("ok    node{n} ({mac}): ");
        for what in [
            "a broadcast reaches it",
            "MTU 1500 bytes",
            "the group's address 03:eb",
        ] {
            assert!(
                text.contains(&format!("{who}{what}")),
                "{who}{what}: {text}"
            );
        }
    }
}

#[test]
fn doctor_with_a_hostfile_names_a_host_with_an_mtu_of_1200_and_the_fix() {
    let Some(mut h) = Hosts::up(3, "mtu") else {
        return;
    };
    ip(&["-n", &h.ns(2), "link", "set", "eth0", "mtu", "1200"]);
    for host in 1..3 {
        let (answering, text) = h.listen(host, &[]);
        assert!(answering, "{text}");
    }
    let (code, text) = h.check();
    // Transfers with it work, with smaller frames: a warning.
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("WARN  node2 (") && text.contains("an MTU of 1200 bytes, this host's 1500"),
        "{text}"
    );
    assert!(
        text.contains("fix: ip link set eth0 mtu 1500 on node2"),
        "{text}"
    );
    assert!(!text.contains("WARN  node1"), "{text}");
}

#[test]
fn doctor_with_a_hostfile_names_a_host_whose_interface_is_down_and_the_fix() {
    let Some(mut h) = Hosts::up(3, "down") else {
        return;
    };
    let (answering, text) = h.listen(1, &[]);
    assert!(answering, "{text}");
    ip(&["-n", &h.ns(2), "link", "set", "eth0", "down"]);
    // The listener there says why itself, and does not listen.
    let (answering, there) = h.listen(2, &[]);
    assert!(!answering, "{there}");
    assert!(
        there.contains("FAIL  interface eth0 is down; fix: ip link set eth0 up"),
        "{there}"
    );
    let (code, text) = h.check();
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("FAIL  node2 ("), "{text}");
    assert!(text.contains("no answer to a broadcast"), "{text}");
    assert!(text.contains("ip link set eth0 up"), "{text}");
    assert!(!text.contains("FAIL  node1"), "{text}");
    // This host's own interface down: that is the line, and no host is probed.
    ip(&["-n", &h.ns(0), "link", "set", "eth0", "down"]);
    let (code, text) = h.check();
    ip(&["-n", &h.ns(0), "link", "set", "eth0", "up"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL  interface eth0 is down; fix: ip link set eth0 up"),
        "{text}"
    );
    assert!(
        text.contains("2 host(s) of the hostfile were not probed"),
        "{text}"
    );
    assert!(!text.contains("node1"), "{text}");
}

#[test]
fn doctor_with_a_hostfile_names_a_host_without_cap_net_raw_and_the_fix() {
    let Some(setpriv) = find_tool("setpriv") else {
        eprintln!("SKIPPED: setpriv (util-linux) is missing");
        return;
    };
    let Some(mut h) = Hosts::up(3, "cap") else {
        return;
    };
    let (answering, text) = h.listen(1, &[]);
    assert!(answering, "{text}");
    let setpriv = setpriv.to_str().unwrap();
    let (answering, there) = h.listen(
        2,
        &[
            setpriv,
            "--bounding-set=-net_raw,-net_admin",
            "--inh-caps=-net_raw,-net_admin",
        ],
    );
    assert!(!answering, "{there}");
    assert!(
        there.contains("FAIL  CAP_NET_RAW is missing") && there.contains("setcap"),
        "{there}"
    );
    let (code, text) = h.check();
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("FAIL  node2 ("), "{text}");
    assert!(text.contains("a missing capability: setcap"), "{text}");
    assert!(!text.contains("FAIL  node1"), "{text}");
}

/// `doctor --json`: one object per check, each with its id, its host, its status and (for a
/// problem) its fix; `--key-file` checks the key file's mode, owner and form, each with its fix.
#[test]
fn doctor_json_carries_id_host_status_and_fix_and_checks_the_key_file() {
    if !netns_available(
        "doctor_json_carries_id_host_status_and_fix_and_checks_the_key_file",
        false,
    ) {
        return;
    }
    let tb =
        Testbed::up(&TestbedConfig::new(1).prefix(format!("dj{:x}", std::process::id() & 0xfff)))
            .expect("test-bed");
    let ns = tb.hosts()[0].netns.clone();
    let dir = std::env::temp_dir().join(format!("ethbcast-doctor-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |key: &std::path::Path| {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(BIN)
            .args(["doctor", "--iface", "eth0", "--json", "--key-file"])
            .arg(key)
            .env_remove("ETHBCAST_BACKEND")
            .output()
            .expect("run ethbcast doctor");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (
            out.status.code(),
            v.as_array().expect("a list of checks").clone(),
        )
    };
    let good = dir.join("good.key");
    std::fs::write(&good, format!("ethbcast-key-v1 {}\n", "5a".repeat(32))).unwrap();
    std::fs::set_permissions(&good, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (code, checks) = run(&good);
    assert_eq!(code, Some(0), "{checks:?}");
    for c in &checks {
        assert!(c["id"].as_str().is_some_and(|s| !s.is_empty()), "{c}");
        assert_eq!(c["host"], "local", "{c}");
        assert_eq!(c["status"], "ok", "{c}");
    }
    for id in [
        "interface.up",
        "cap.net_raw",
        "link.open",
        "key.mode",
        "key.owner",
        "key.read",
    ] {
        assert!(checks.iter().any(|c| c["id"] == id), "{id}: {checks:?}");
    }
    let by_id = |checks: &[serde_json::Value], id: &str| {
        checks
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {checks:?}"))
            .clone()
    };
    // Readable by others, and another user's.
    let open = dir.join("open.key");
    std::fs::copy(&good, &open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    nix::unistd::chown(&open, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let (code, checks) = run(&open);
    assert_eq!(code, Some(1), "{checks:?}");
    let mode = by_id(&checks, "key.mode");
    assert_eq!(mode["status"], "fail", "{mode}");
    assert!(
        mode["fix"].as_str().unwrap().contains("chmod 600"),
        "{mode}"
    );
    let owner = by_id(&checks, "key.owner");
    assert_eq!(owner["status"], "fail", "{owner}");
    assert!(owner["what"].as_str().unwrap().contains("65534"), "{owner}");
    assert!(owner["fix"].as_str().is_some(), "{owner}");
    let missing = run(&dir.join("missing.key")).1;
    let file = by_id(&missing, "key.file");
    assert_eq!(file["status"], "fail", "{file}");
    assert!(
        file["fix"].as_str().unwrap().contains("ethbcast keygen"),
        "{file}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    tb.down().unwrap();
}
