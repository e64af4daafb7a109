//! `ethbcast-suite attack`: the attacks of a host on the segment without the key, against a
//! keyed library group and a keyed `ethbcast send/recv` transfer, on a test-bed of their own.
//!
//! The test-bed has N hosts; the last one is hostile ([`crate::hostile`]): it has no key, reads
//! what its port sees, replays it and forges frames from frames of the running session (each
//! session has its own wire group id and key, derived at join, so a forgery must start from a
//! live frame to reach the session's checks at all). The others are members: threads in
//! their namespaces for the library group, `ethbcast send/recv` processes for the transfer.
//! Where the attacker sends with other hosts' source MACs, MAC learning is off on the bridge
//! ports (switch port security; layer-2 MAC spoofing of unicast is outside the threat model).
//! Where it must see unicast between members, learning is off on every port: the bridge then
//! floods every frame, as a hub would, and the attacker sees everything.
//!
//! A scenario passes when the victims completed with the right bytes (or a dead member was
//! evicted within the detector's bound) and nothing forged was accepted.
//!
//! One module per family of scenarios: `liveness` (a dead member spoken for), `replay`,
//! `join`, `forge` (barrier epochs, floods, pre-tag allocation), `transfer` (a keyed
//! `send/recv`), `capi` (the C ABI's key), `keys` (keyless transfers, guessable keys),
//! `local` (another local user, a receiver's command), `doctor` (probes and answers of
//! `ethbcast doctor`), `crypt` (what an eavesdropper reads, altered ciphertext, an older
//! release). Their harnesses: `harness` for the
//! library group's members, `process` for the `ethbcast` command. This module holds the
//! registry of scenarios (`names`, `run_all`)
//! and the command line ([`Args`]).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::hostile::HostileError;
use crate::testbed::TestbedError;

mod capi;
mod crypt;
mod doctor;
mod forge;
mod harness;
mod join;
mod keys;
mod liveness;
mod local;
mod process;
mod replay;
mod transfer;

pub use capi::{forge_session, Forged};
pub use harness::DETECTION;

/// Outcome of one attack.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scenario {
    /// Scenario name.
    pub name: String,
    /// Whether the victims completed with the right bytes and nothing forged was accepted.
    pub passed: bool,
    /// What was done and what was seen.
    pub detail: String,
    /// Liveness scenarios: how long after the victim died the root evicted it (ms; absent if
    /// it never did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detection_ms: Option<f64>,
    /// Liveness scenarios: the detector's bound that `detection_ms` must meet (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_ms: Option<f64>,
}

/// Every scenario.
#[derive(Debug, Clone, Serialize)]
pub struct AttackReport {
    /// One entry per scenario.
    pub scenarios: Vec<Scenario>,
}

/// Why a scenario could not be run.
#[derive(Debug, thiserror::Error)]
pub enum AttackError {
    /// The test-bed failed.
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    /// The hostile host failed.
    #[error(transparent)]
    Hostile(#[from] HostileError),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The `ethbcast` binary was not found.
    #[error("no ethbcast binary at {0} (build it, or pass --ethbcast PATH)")]
    NoBinary(PathBuf),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AttackError {
    let context = context.into();
    move |source| AttackError::Io { context, source }
}

/// The `ethbcast` binary next to this one (both are built by `cargo build -p ethbcast-tools`).
pub fn default_ethbcast() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("ethbcast")))
        .unwrap_or_else(|| PathBuf::from("ethbcast"))
}

/// Where a scenario runs: the test-bed's name prefix (its own), the hosts of its test-bed (the
/// last one hostile) and the `ethbcast` binary of the scenarios that run the command.
#[derive(Debug, Clone, Copy)]
struct Setting<'a> {
    prefix: &'a str,
    hosts: usize,
    bin: &'a Path,
}

/// One scenario: its name, whether it runs the `ethbcast` binary, and how it runs.
struct Entry {
    name: &'static str,
    needs_bin: bool,
    run: fn(&Setting) -> Result<Scenario, AttackError>,
}

/// Every scenario, in the order they run (each family's in its module).
const REGISTRY: &[Entry] = &[
    Entry {
        name: "spoofed-liveness-forged",
        needs_bin: false,
        run: |s| liveness::spoofed_liveness(s.prefix, s.hosts, false),
    },
    Entry {
        name: "spoofed-liveness-replayed",
        needs_bin: false,
        run: |s| liveness::spoofed_liveness(s.prefix, s.hosts, true),
    },
    Entry {
        name: "replay-earlier-session",
        needs_bin: false,
        run: |s| replay::replay_earlier_session(s.prefix, s.hosts),
    },
    Entry {
        name: "replay-control-in-session",
        needs_bin: false,
        run: |s| replay::replay_control_in_session(s.prefix, s.hosts),
    },
    Entry {
        name: "forged-join",
        needs_bin: false,
        run: |s| join::forged_join(s.prefix, s.hosts),
    },
    Entry {
        name: "forged-barrier-epoch",
        needs_bin: false,
        run: |s| forge::forged_barrier_epoch(s.prefix, s.hosts),
    },
    Entry {
        name: "flood-random-and-mutated",
        needs_bin: false,
        run: |s| forge::flood(s.prefix, s.hosts),
    },
    Entry {
        name: "send-recv-replay-earlier-transfer",
        needs_bin: true,
        run: |s| transfer::send_recv_replay(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "send-recv-forged-abort-evict-report",
        needs_bin: true,
        run: |s| transfer::send_recv_forged_control(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "spoofed-liveness-in-window",
        needs_bin: false,
        run: |s| liveness::spoofed_liveness_in_window(s.prefix, s.hosts),
    },
    Entry {
        name: "join-challenge-flood",
        needs_bin: false,
        run: |s| join::join_challenge_flood(s.prefix, s.hosts),
    },
    Entry {
        name: "join-replayed-rosters",
        needs_bin: false,
        run: |s| join::join_replayed_rosters(s.prefix, s.hosts),
    },
    Entry {
        name: "join-resent-hellos",
        needs_bin: false,
        run: |s| join::join_resent_hellos(s.prefix, s.hosts),
    },
    Entry {
        name: "capi-keyed-forgery",
        needs_bin: false,
        run: |s| capi::capi_keyed_forgery(s.prefix, s.hosts),
    },
    Entry {
        name: "pre-tag-allocation",
        needs_bin: false,
        run: |s| forge::pre_tag_allocation(s.prefix, s.hosts),
    },
    Entry {
        name: "replay-across-counter-wrap",
        needs_bin: false,
        run: |_| replay::replay_across_counter_wrap(),
    },
    Entry {
        name: "keyless-stranger-sender",
        needs_bin: true,
        run: |s| keys::keyless_stranger_sender(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "passphrase-dictionary",
        needs_bin: true,
        run: |s| keys::passphrase_dictionary(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "key-file-planted-by-another-user",
        needs_bin: true,
        run: |s| local::planted_key_file(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "recv-user-command-regains-capabilities",
        needs_bin: true,
        run: |s| local::user_command_regains_capabilities(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "doctor-probe-reflection",
        needs_bin: true,
        run: |s| doctor::doctor_reflection(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "doctor-forged-answers",
        needs_bin: true,
        run: |s| doctor::doctor_forged_answers(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "eavesdrop-keyed-transfer",
        needs_bin: true,
        run: |s| crypt::eavesdrop_keyed_transfer(s.prefix, s.hosts, s.bin),
    },
    Entry {
        name: "altered-ciphertext",
        needs_bin: false,
        run: |s| crypt::altered_ciphertext(s.prefix, s.hosts),
    },
    Entry {
        name: "old-version-sender",
        needs_bin: true,
        run: |s| crypt::old_version_sender(s.prefix, s.hosts, s.bin),
    },
];

/// Names of the scenarios, in the order they run.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|e| e.name)
}

/// The test-bed prefix of the `i`-th scenario: `prefix` and one letter (two past the 26th),
/// so that every scenario has a test-bed of its own.
fn bed_prefix(prefix: &str, i: usize) -> String {
    let letter = |k: usize| char::from(b'a' + (k % 26) as u8);
    if i < 26 {
        format!("{prefix}{}", letter(i))
    } else {
        format!("{prefix}{}{}", letter(i / 26 - 1), letter(i))
    }
}

/// Runs the scenarios named in `only` (all if empty) on test-beds of `hosts` hosts (the last
/// one hostile; at least 4), with the `ethbcast` binary `bin` for those that run the command.
/// A scenario that cannot be run is reported failed with the reason.
pub fn run_all(
    prefix: &str,
    hosts: usize,
    bin: &Path,
    only: &[String],
) -> Result<AttackReport, AttackError> {
    let hosts = hosts.max(4);
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if REGISTRY.iter().any(|e| e.needs_bin && wanted(e.name)) && !bin.is_file() {
        return Err(AttackError::NoBinary(bin.to_path_buf()));
    }
    let mut scenarios = Vec::new();
    for (i, e) in REGISTRY.iter().enumerate() {
        if !wanted(e.name) {
            continue;
        }
        let prefix = bed_prefix(prefix, i);
        let setting = Setting {
            prefix: &prefix,
            hosts,
            bin,
        };
        scenarios.push((e.run)(&setting).unwrap_or_else(|err| Scenario {
            name: e.name.to_string(),
            passed: false,
            detail: format!("could not run: {err}"),
            ..Scenario::default()
        }));
    }
    Ok(AttackReport { scenarios })
}

/// Renders the report for a terminal.
pub fn render(r: &AttackReport) -> String {
    let mut t = crate::harness::table::Table::new(&["scenario", "result", "detail"]);
    for s in &r.scenarios {
        t.row(vec![
            s.name.clone(),
            if s.passed { "PASS" } else { "FAIL" }.into(),
            s.detail.clone(),
        ]);
    }
    t.render()
}

/// The attacks of a host without the key (spoofed liveness, replays from an earlier
/// session and in-session, forged join, forged barrier epochs, a flood of random and
/// mutated frames, forged abort/evict/report on a transfer; during keyed joins a challenge
/// flood from many MACs, replayed rosters from new MACs, hellos re-sent from foreign MACs;
/// forgeries against a group keyed as the C ABI keys it) against a keyed group and a keyed
/// `ethbcast send/recv` transfer, on a test-bed whose last host is hostile. Exits 1 if any
/// scenario failed.
///
/// Example: ethbcast-suite attack --testbed 6 --json
#[derive(clap::Args)]
pub struct Args {
    /// Hosts per scenario, the hostile one included (at least 4).
    #[arg(long, default_value_t = 6)]
    testbed: usize,
    /// Test-bed name prefix.
    #[arg(long, default_value = "ebatk")]
    prefix: String,
    /// The ethbcast binary for the transfers (default: next to this one).
    #[arg(long)]
    ethbcast: Option<PathBuf>,
    /// Run only these scenarios (repeat or comma-separate; default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the attacks; exits 1 unless every one failed to do harm, 2 on an unknown name.
    pub fn run(self) -> std::process::ExitCode {
        use crate::harness::report::{code, fail, print};
        if let Some(bad) = self.only.iter().find(|o| !names().any(|n| n == o.as_str())) {
            let all = names().collect::<Vec<_>>().join(", ");
            fail(format!("no scenario {bad}; the scenarios are {all}"));
            return std::process::ExitCode::from(2);
        }
        if let Err(e) = crate::testbed::can_create_netns() {
            return fail(format!("the attacks need a test-bed: {e}"));
        }
        let bin = self.ethbcast.unwrap_or_else(default_ethbcast);
        match run_all(&self.prefix, self.testbed, &bin, &self.only) {
            Ok(r) => {
                print(self.json, &r, render);
                code(r.scenarios.iter().all(|s| s.passed))
            }
            Err(e) => fail(e),
        }
    }
}
