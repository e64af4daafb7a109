//! Keys for C callers: a C-ABI group whose key comes from `ETHBCAST_KEY_FILE` (as an MPI job's
//! does through the interposer) refuses what a host on the segment without the key forges.
//!
//! `capi/c/key_check.c` runs on 3 hosts of a 4-host test-bed; the 4th is hostile
//! ([`ethbcast_tools::hostile`]): it sees every frame (MAC learning off on every port, as a hub
//! floods) and, from the live session's frames, forges the root's next broadcast message,
//! barrier releases from the coordinator and evictions of rank 1. The root enters every
//! barrier and every broadcast 300 ms late, so that forgeries arrive first.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};
use ethbcast_tools::hostile::Hostile;
use ethbcast_tools::suite::attack::{forge_session, Forged};

mod common;
use common::compile;

/// The hostile host on the last host of `bed`: the attack suite's forgeries of the members'
/// live session (the root's next message, barrier releases, evictions of rank 1).
fn attack(bed: &Testbed, members: usize) -> Hostile<Forged> {
    forge_session(bed, members).expect("hostile host")
}

/// Runs `exe` on the first `members` hosts, with `env`, while the hostile host attacks;
/// returns each rank's output and what was forged.
fn attacked(
    bed: &Testbed,
    exe: &Path,
    members: usize,
    env: &[(&str, &str)],
) -> (Vec<Output>, Forged) {
    let attacker = attack(bed, members);
    let children: Vec<_> = (0..members)
        .map(|rank| {
            let h = &bed.hosts()[rank];
            let mut cmd = netns::command_in(&h.netns, exe.to_str().expect("UTF-8 path"))
                .expect("command in namespace");
            cmd.arg(&h.iface)
                .env("ETHBCAST_RANK", rank.to_string())
                .env("ETHBCAST_SIZE", members.to_string())
                .env_remove("ETHBCAST_KEY_FILE")
                .env_remove("ETHBCAST_REQUIRE_KEY")
                .envs(env.iter().copied())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("spawn in namespace")
        })
        .collect();
    let outputs = common::outputs_within(children, Duration::from_secs(120));
    let forged = attacker.stop().expect("hostile host ran");
    (outputs, forged)
}

/// Each rank's (keyed, early barriers, corrupt broadcasts, errors), or the reason it has none.
fn verdicts(outputs: &[Output]) -> Vec<Result<(u32, u32, u32, u32), String>> {
    outputs
        .iter()
        .enumerate()
        .map(|(i, out)| {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let w: Vec<&str> = stdout.split_whitespace().collect();
            match w[..] {
                ["rank", r, "size", _, "keyed", k, "early", e, "corrupt", c, "errors", x]
                    if r == i.to_string() && out.status.success() =>
                {
                    Ok((
                        k.parse().expect("0 or 1"),
                        e.parse().expect("count"),
                        c.parse().expect("count"),
                        x.parse().expect("count"),
                    ))
                }
                _ => Err(format!(
                    "rank {i}: {}: {stdout}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )),
            }
        })
        .collect()
}

fn prefix(tag: &str) -> String {
    format!("k{tag}{:x}", std::process::id() & 0xfff)
}

/// With `ETHBCAST_KEY_FILE` naming a passphrase file, the hostile host's forged broadcast
/// data, barrier releases and evictions are all refused: every barrier waits for the late
/// root, every buffer holds the root's bytes, no call fails.
#[test]
fn a_c_abi_group_keyed_by_ethbcast_key_file_refuses_forged_data_releases_and_evictions() {
    let test =
        "a_c_abi_group_keyed_by_ethbcast_key_file_refuses_forged_data_releases_and_evictions";
    if !netns_available(test, false) {
        return;
    }
    let exe = compile("c/key_check.c", "key_check");
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let key_file = dir.join("group.key");
    std::fs::write(&key_file, "a passphrase the hostile host does not know\n").expect("key file");
    // Key files must be readable by their owner only.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let bed = Testbed::up(&TestbedConfig::new(4).prefix(prefix("a"))).expect("test-bed");
    for h in 0..4 {
        bed.set_learning(h, false).expect("learning off");
    }
    let key = key_file.to_str().expect("UTF-8 path");
    let (outputs, forged) = attacked(&bed, &exe, 3, &[("ETHBCAST_KEY_FILE", key)]);
    bed.down().expect("tear down");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        forged.data > 0 && forged.releases > 0 && forged.evictions > 0,
        "the attack did not happen: {forged:?}"
    );
    // What the hostile host saw of the members: every frame encrypted (a C-ABI group keyed
    // from ETHBCAST_KEY_FILE encrypts, as every keyed group does).
    assert!(
        forged.encrypted > 0 && forged.clear == 0,
        "frames of a keyed C-ABI group seen in the clear: {forged:?}"
    );
    let v = verdicts(&outputs);
    assert!(
        v.iter().all(|r| r == &Ok((1, 0, 0, 0))),
        "forgeries accepted ({forged:?}); per rank (keyed, early barriers, corrupt broadcasts, failed calls): {v:#?}"
    );
}
