//! The `ethbcast-bench` binary as users and scripts see it: its JSON output, its exit codes
//! and its error messages.

use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ethbcast-bench"))
        .args(args)
        .output()
        .expect("ethbcast-bench runs")
}

fn stdout_json(args: &[&str]) -> Value {
    let out = bench(args);
    assert!(
        out.status.success(),
        "ethbcast-bench {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ethbcast-bench {args:?} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key)
        .unwrap_or_else(|| panic!("field {key:?} missing in {v}"))
        .as_u64()
        .unwrap_or_else(|| panic!("field {key:?} is not an unsigned integer: {}", v[key]))
}

/// `sim --json` at 48 members, 1% loss, with the given extra arguments.
fn sim48(extra: &[&str]) -> Value {
    let mut args = vec![
        "sim",
        "--nodes",
        "48",
        "--messages",
        "40",
        "--sizes",
        "8,20000",
        "--loss",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    let v = stdout_json(&args);
    assert_eq!(u(&v, "delivered"), u(&v, "expected"), "{v}");
    for key in ["corrupt", "duplicated", "out_of_order", "missing"] {
        assert_eq!(u(&v, key), 0, "{key} in {v}");
    }
    v
}

#[test]
fn sim_json_counts_the_control_frames_into_the_roots_and_the_goodput() {
    // Defaults at 48 members: the acknowledgement tree and peer repair.
    let tree = sim48(&[]);
    let flat = sim48(&["--ack-tree", "0", "--peer-repair", "off"]);
    for v in [&tree, &flat] {
        let g = v["goodput_mbps"].as_f64().expect("goodput_mbps");
        assert!(
            g > 0.0 && g < 1000.0,
            "goodput within the 1 Gbit/s links: {v}"
        );
    }
    assert!(u(&tree, "tree_ack_frames") > 0, "{tree}");
    assert_eq!(u(&flat, "tree_ack_frames"), 0, "{flat}");
    assert!(
        u(&tree, "root_control_frames") <= u(&tree, "data_frames"),
        "tree: at most one control frame into the roots per data frame: {tree}"
    );
    assert!(
        u(&flat, "root_control_frames") > 3 * u(&flat, "data_frames"),
        "flat: 47 receivers acknowledge every 8 frames each: {flat}"
    );
}

#[test]
fn sim_json_reports_every_delivery_and_no_violation() {
    let v = stdout_json(&[
        "sim",
        "--nodes",
        "4",
        "--messages",
        "100",
        "--loss",
        "5",
        "--json",
    ]);
    for key in [
        "expected",
        "delivered",
        "corrupt",
        "duplicated",
        "out_of_order",
        "missing",
        "data_frames",
        "repair_frames",
        "lost_frames",
        "ack_frames",
        "nack_frames",
        "virtual_time_us",
    ] {
        u(&v, key);
    }
    let expected = u(&v, "expected");
    // 100 messages from the roots in turn, each to the 3 other members.
    assert_eq!(expected, 100 * 3, "{v}");
    assert_eq!(u(&v, "delivered"), expected, "{v}");
    for key in ["corrupt", "duplicated", "out_of_order", "missing"] {
        assert_eq!(u(&v, key), 0, "{key} in {v}");
    }
    assert!(u(&v, "data_frames") >= 100, "at least one frame a message");
    // 5 % loss over hundreds of frames: something is lost and everything lost is repaired.
    assert!(u(&v, "lost_frames") > 0, "{v}");
    assert!(u(&v, "repair_frames") > 0, "{v}");
    assert!(u(&v, "ack_frames") > 0, "{v}");
    assert!(u(&v, "virtual_time_us") > 0, "{v}");
    assert_eq!(v["completed"], Value::Bool(true), "{v}");
}

#[test]
fn memory_json_rows_follow_the_papers_formulas() {
    let v = stdout_json(&["memory", "--profile", "paper", "--json"]);
    assert_eq!(v["profile"], "paper");
    let (sdp, rdp, ldp) = (u(&v, "s_sdp"), u(&v, "s_rdp"), u(&v, "s_ldp"));
    assert!(sdp > ldp && ldp > 0 && rdp > 0, "{v}");
    let rows = v["rows"].as_array().expect("rows is an array");
    let ns: Vec<u64> = rows.iter().map(|r| u(r, "n")).collect();
    assert_eq!(ns, [2, 4, 8, 16, 32, 64, 128], "default group sizes");
    for r in rows {
        let n = u(r, "n");
        let p2p = (sdp + rdp) * n;
        let hb = sdp + (n - 1) * ldp + n * rdp;
        assert_eq!(
            u(r, "p2p_bytes"),
            p2p,
            "P2P(n) = (s_SDP + s_RDP)n at n = {n}"
        );
        assert_eq!(
            u(r, "hb_bytes"),
            hb,
            "HB(n) = s_SDP + (n-1)s_LDP + n s_RDP at n = {n}"
        );
        let m_save = r["m_save"].as_f64().expect("m_save is a number");
        let want = (p2p - hb) as f64 / p2p as f64;
        // JSON printing and parsing of a float may move it by one ulp; nothing more.
        assert!(
            (m_save - want).abs() <= 1e-12,
            "M_save({n}) = {m_save}, formula gives {want}"
        );
        let closed = (sdp - ldp) as f64 / (sdp + rdp) as f64 * (1.0 - 1.0 / n as f64);
        assert!((m_save - closed).abs() <= 1e-12, "closed form at n = {n}");
    }
}

/// Bad arguments: a non-zero exit, an error message that names the problem, and no panic.
fn rejects(args: &[&str], mentions: &[&str]) {
    let out = bench(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ethbcast-bench {args:?} accepted bad input:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.status.code().is_some(),
        "ethbcast-bench {args:?} was killed by a signal"
    );
    assert!(
        !stderr.contains("panicked") && out.status.code() != Some(101),
        "ethbcast-bench {args:?} panicked:\n{stderr}"
    );
    assert!(
        stderr.contains("error"),
        "no error message for {args:?}:\n{stderr}"
    );
    for m in mentions {
        assert!(
            stderr.contains(m),
            "error for {args:?} does not mention {m:?}:\n{stderr}"
        );
    }
    assert!(out.stdout.is_empty(), "no report on bad input {args:?}");
}

#[test]
fn a_loss_that_is_not_a_number_is_rejected() {
    rejects(&["sim", "--loss", "abc", "--json"], &["--loss", "abc"]);
}

#[test]
fn a_malformed_rate_is_rejected() {
    rejects(&["sim", "--rate", "0x", "--json"], &["rate", "0x"]);
    rejects(&["sim", "--rate", "fastgbit"], &["rate", "fastgbit"]);
}

#[test]
fn a_loss_above_100_percent_is_rejected() {
    rejects(&["sim", "--loss", "150", "--messages", "1"], &["loss"]);
}

#[test]
fn unknown_algorithms_profiles_and_subcommands_are_rejected() {
    rejects(&["sim", "--algo", "flood"], &["flood"]);
    rejects(&["memory", "--profile", "huge"], &["huge"]);
    rejects(&["memory", "--nodes", "two"], &["two"]);
    rejects(&["frobnicate"], &["frobnicate"]);
}

#[test]
fn a_zero_window_is_rejected() {
    rejects(&["sim", "--window", "0", "--messages", "1"], &["window"]);
}

// Gaps in argument checking found while writing these tests (now fixed).

#[test]
fn an_empty_group_is_rejected() {
    rejects(&["sim", "--nodes", "0", "--messages", "10"], &["nodes"]);
}

#[test]
fn a_root_outside_the_group_is_rejected() {
    rejects(
        &["sim", "--nodes", "4", "--roots", "9", "--messages", "5"],
        &["9"],
    );
}

#[test]
fn a_rate_that_is_not_a_number_is_rejected_with_a_clear_message() {
    rejects(&["sim", "--rate", "nan", "--messages", "1"], &["bad rate"]);
}

#[test]
fn scale_reports_every_size_rate_and_loss_exactly_with_memory_by_the_formulas() {
    let dir = std::env::temp_dir().join(format!("ethbcast-scale-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ethbcast-bench"))
        .args([
            "scale",
            "--nodes",
            "4,16",
            "--rates",
            "100mbit,1gbit",
            "--loss",
            "0,1",
            "--messages",
            "20",
            "--json",
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("run ethbcast-bench scale");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2);
    for r in rows {
        assert_eq!(r["exact"], true, "{r}");
        assert!(r["goodput_mbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(
            r["goodput_mbps"].as_f64().unwrap() <= r["rate_mbps"].as_f64().unwrap(),
            "{r}"
        );
    }
    // The root's memory grows by one s_LDP per member; a member's does not grow.
    let mem = |n: u64| {
        rows.iter()
            .find(|r| r["nodes"] == n)
            .map(|r| {
                (
                    r["root_memory_bytes"].as_u64().unwrap(),
                    r["member_memory_bytes"].as_u64().unwrap(),
                )
            })
            .unwrap()
    };
    let ((r4, m4), (r16, m16)) = (mem(4), mem(16));
    assert_eq!(m4, m16);
    assert!(r16 > r4 && (r16 - r4) % 12 == 0, "{r4} {r16}");
    for f in [
        "scale.json",
        "scale.csv",
        "scale-goodput.png",
        "scale-root-control.svg",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
