//! `ethbcast-bench attack` on a test-bed of 4 hosts (3 members, 1 hostile): every attack of
//! a host without the key fails against the keyed group and the keyed transfer.
//!
//! Needs root (or skips with a SKIPPED line; with ETHBCAST_REQUIRE_NETNS=1, as in CI, it
//! fails instead). The prefix is derived from the pid, so parallel runs do not collide; every
//! scenario tears its test-bed down.

use std::process::Command;

use serde_json::Value;

const BENCH: &str = env!("CARGO_BIN_EXE_ethbcast-bench");

#[test]
fn every_attack_of_a_host_without_the_key_fails_against_a_keyed_group_and_transfer() {
    if !ethbcast_tools::testbed::netns_available("attack", false) {
        return;
    }
    let prefix = format!("at{:x}", std::process::id() & 0xfff);
    let out = Command::new(BENCH)
        .args([
            "attack",
            "--testbed",
            "4",
            "--json",
            "--prefix",
            &prefix,
            "--ethbcast",
            env!("CARGO_BIN_EXE_ethbcast"),
        ])
        .output()
        .expect("ethbcast-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let scenarios = v["scenarios"].as_array().expect("a list of scenarios");
    let names: Vec<&str> = scenarios
        .iter()
        .map(|s| s["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        names,
        [
            "spoofed-liveness-forged",
            "spoofed-liveness-replayed",
            "replay-earlier-session",
            "replay-control-in-session",
            "forged-join",
            "forged-barrier-epoch",
            "flood-random-and-mutated",
            "send-recv-replay-earlier-transfer",
            "send-recv-forged-abort-evict-report",
        ]
    );
    let failed: Vec<&Value> = scenarios
        .iter()
        .filter(|s| s["passed"] != Value::Bool(true))
        .collect();
    assert!(failed.is_empty(), "failed scenarios: {failed:#?}");
    for s in scenarios {
        assert!(!s["detail"].as_str().unwrap_or_default().is_empty(), "{s}");
    }
    assert!(
        out.status.success(),
        "exit {} with every scenario passed",
        out.status
    );
}

#[test]
fn an_unknown_scenario_is_refused_with_the_list_of_scenarios() {
    let out = Command::new(BENCH)
        .args(["attack", "--only", "spoofed-liveness-forged,teleport"])
        .output()
        .expect("ethbcast-bench runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no scenario teleport") && err.contains("forged-barrier-epoch"),
        "{err}"
    );
}
