//! Attacks on `ethbcast doctor`'s checks across hosts: probes in a victim's name or from a group
//! address, which make listeners answer whom the attacker chooses, and forged answers, which
//! tell a prober that a silent host is fine or that a host's MTU is smaller than it is.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ethbcast::MacAddr;

use super::harness::{hub, verdict};
use super::keys::scratch_dir;
use super::process::{private, Proc};
use super::{io, AttackError, Scenario};
use crate::doctor::hosts::ANSWERS_PER_SOURCE;
use crate::doctor::probe::{Answer, Ends, Kind, Probe, ProbeKey, CHALLENGE_LEN};
use crate::harness::group::bed;
use crate::hostile::{self, ATTACKER_KEY};
use crate::netns;
use crate::testbed::Testbed;

/// The EtherType doctor's frames go in.
const ETHERTYPE: [u8; 2] = [0x88, 0xB5];

/// How long the attacks of this family last.
const ATTACK: Duration = Duration::from_secs(2);

/// `ethbcast doctor --iface eth0 --listen` on `host`, with `key` if given, once it answers
/// probes (it checks its host first).
fn listen(bed: &Testbed, bin: &Path, host: usize, key: Option<&Path>) -> Result<Proc, AttackError> {
    let mut c =
        netns::command_in(&bed.hosts()[host].netns, &bin.to_string_lossy()).map_err(io("netns"))?;
    c.args(["doctor", "--iface", "eth0", "--listen"])
        .args(
            key.map(|k| ["--key-file".as_ref(), k.as_os_str()])
                .into_iter()
                .flatten(),
        )
        .env_remove(ethbcast::KEY_FILE_ENV)
        .env_remove(ethbcast::BACKEND_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(io("spawn ethbcast doctor --listen"))?;
    let stderr = child.stderr.take();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr?).lines() {
            let line = line.ok()?;
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("answering probes") {
                let _ = tx.send(Ok(()));
                return Some(());
            }
        }
        let _ = tx.send(Err(seen));
        Some(())
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(())) => Ok(Proc(Some(child))),
        Ok(Err(seen)) => Err(AttackError::Io {
            context: format!("doctor --listen on host {host}: {}", seen.trim()),
            source: std::io::Error::other("it did not start answering"),
        }),
        Err(_) => Err(AttackError::Io {
            context: format!("doctor --listen on host {host}"),
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        }),
    }
}

/// `ethbcast doctor --iface eth0 --hostfile FILE --probe-wait 2s` on host 0, with `key` if
/// given: its exit code and the lines it printed.
fn probe(
    bed: &Testbed,
    bin: &Path,
    hostfile: &Path,
    key: Option<&Path>,
) -> Result<(Option<i32>, String), AttackError> {
    let mut c =
        netns::command_in(&bed.hosts()[0].netns, &bin.to_string_lossy()).map_err(io("netns"))?;
    c.args([
        "doctor",
        "--iface",
        "eth0",
        "--probe-wait",
        "2s",
        "--hostfile",
    ])
    .arg(hostfile)
    .args(
        key.map(|k| ["--key-file".as_ref(), k.as_os_str()])
            .into_iter()
            .flatten(),
    )
    .env_remove(ethbcast::KEY_FILE_ENV)
    .env_remove(ethbcast::BACKEND_ENV);
    let out = c.output().map_err(io("run ethbcast doctor --hostfile"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok((
        out.status.code(),
        text + &String::from_utf8_lossy(&out.stderr),
    ))
}

/// A hostfile naming hosts `hosts` of `bed` `node1`, `node2`, ...
fn hostfile(
    bed: &Testbed,
    dir: &Path,
    hosts: std::ops::Range<usize>,
) -> Result<PathBuf, AttackError> {
    let text: String = hosts
        .map(|i| format!("node{i} {}\n", MacAddr(bed.hosts()[i].mac)))
        .collect();
    let path = dir.join("hosts");
    std::fs::write(&path, text).map_err(io("write the hostfile"))?;
    Ok(path)
}

/// The group key file of the scenarios, and the one of another deployment.
fn key_files(dir: &Path) -> Result<(PathBuf, PathBuf), AttackError> {
    let (ours, theirs) = (dir.join("group.key"), dir.join("other.key"));
    for (p, k) in [(&ours, 0x11u8), (&theirs, 0x22)] {
        let line = format!(
            "{} {}\n",
            ethbcast::RAW_KEY_TAG,
            format!("{k:02x}").repeat(32)
        );
        std::fs::write(p, line).map_err(io("write a key file"))?;
        private(p)?;
    }
    Ok((ours, theirs))
}

/// `pdu` in an Ethernet frame from `src` to `dst`.
fn frame(dst: MacAddr, src: MacAddr, pdu: &[u8]) -> Vec<u8> {
    let mut f = dst.0.to_vec();
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ETHERTYPE);
    f.extend_from_slice(pdu);
    f
}

/// The destination, source and PDU of a captured doctor frame.
fn split(f: &[u8]) -> Option<(MacAddr, MacAddr, &[u8])> {
    if f.len() < 14 || f[12..14] != ETHERTYPE {
        return None;
    }
    Some((
        MacAddr(f[..6].try_into().ok()?),
        MacAddr(f[6..12].try_into().ok()?),
        &f[14..],
    ))
}

/// What the reflection attack saw the listeners answer.
#[derive(Debug, Default)]
struct Reflected {
    /// Probes sent.
    sent: usize,
    /// Answers to a group address.
    to_groups: usize,
    /// Answers to the victim, per listener (host order), and those of them with an MTU.
    to_victim: Vec<(usize, usize)>,
}

/// Probes in a victim's name: keyless and keyed listeners run; for [`ATTACK`] the hostile
/// host sends probes, some 500 a second, from the broadcast address, from a multicast
/// address, and from the victim's MAC (host 0), unkeyed and keyed with a key of its own. It
/// sees every frame (the bridge floods, as a hub) and counts the answers. No listener may
/// answer a group address; a keyless one may answer the victim at most its rate per source
/// (the control: it does, so the path is real); a keyed one at most one answer a second, with
/// no MTU. (The test-bed's Linux bridge drops a frame whose source is a group address before
/// any listener sees it, as many switches do not; the listener's own check of that is
/// `doctor::hosts`' unit test `probes_from_group_addresses_are_never_answered`.)
pub(super) fn doctor_reflection(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let dir = scratch_dir(prefix)?;
    let (key, _) = key_files(&dir)?;
    let keyed: Vec<bool> = (1..m).map(|i| i % 2 == 0).collect();
    let mut listeners = Vec::new();
    for (i, &k) in keyed.iter().enumerate() {
        listeners.push(listen(&bed, bin, i + 1, k.then_some(key.as_path()))?);
    }
    let macs: Vec<MacAddr> = bed.hosts().iter().map(|h| MacAddr(h.mac)).collect();
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(200),
        move |port, stop: &AtomicBool| {
            let victim = macs[0];
            let theirs = ProbeKey::new(&ATTACKER_KEY.into());
            let sources = [
                ethbcast::BROADCAST_MAC,
                MacAddr([0x03, 0xeb, 0, 0, 0, 1]),
                victim,
            ];
            let mut seen = Reflected {
                to_victim: vec![(0, 0); macs.len()],
                ..Reflected::default()
            };
            let (begun, mut last) = (Instant::now(), Instant::now());
            let mut k = 0u64;
            while !stop.load(Ordering::SeqCst) {
                while let Some(f) = port.next_frame() {
                    let Some((dst, src, pdu)) = split(&f) else {
                        continue;
                    };
                    let (Some(a), Some(from)) =
                        (Answer::parse(pdu), macs.iter().position(|x| *x == src))
                    else {
                        continue;
                    };
                    if crate::doctor::probe::is_group(dst) {
                        seen.to_groups += 1;
                    } else if dst == victim {
                        seen.to_victim[from].0 += 1;
                        seen.to_victim[from].1 += usize::from(a.mtu != 0);
                    }
                }
                if begun.elapsed() > ATTACK || last.elapsed() < Duration::from_millis(2) {
                    continue;
                }
                last = Instant::now();
                k += 1;
                let src = sources[k as usize % sources.len()];
                let c = [k as u8; CHALLENGE_LEN];
                for keyed in [None, Some((&theirs, &c, src))] {
                    let p = Probe::encode(Kind::Broadcast, k, keyed, 0);
                    port.send(&frame(ethbcast::BROADCAST_MAC, src, &p));
                    seen.sent += 1;
                }
            }
            seen
        },
    )?;
    std::thread::sleep(ATTACK + Duration::from_millis(300));
    let seen = attacker.stop()?;
    drop(listeners);
    let _ = std::fs::remove_dir_all(&dir);
    let seconds = ATTACK.as_secs() as usize + 1;
    let mut problems = Vec::new();
    if seen.to_groups > 0 {
        problems.push(format!(
            "{} answers went to a group address",
            seen.to_groups
        ));
    }
    let mut control = 0;
    for (i, &k) in keyed.iter().enumerate() {
        let (n, with_mtu) = seen.to_victim[i + 1];
        let bound = if k {
            seconds
        } else {
            seconds * ANSWERS_PER_SOURCE as usize
        };
        if n > bound || (k && with_mtu > 0) {
            problems.push(format!(
                "the {} listener on host {} answered the victim {n} times ({with_mtu} with its MTU; bound {bound})",
                if k { "keyed" } else { "keyless" },
                i + 1
            ));
        }
        if !k {
            control += n;
        }
    }
    if seen.sent < 500 || control == 0 {
        problems.push(format!(
            "the attack did not happen: {} probes sent, {control} answers of keyless listeners to the victim",
            seen.sent
        ));
    }
    Ok(verdict(
        "doctor-probe-reflection",
        problems,
        format!(
            "{} probes in {:?} from the broadcast address, a multicast address and the victim's MAC (unkeyed, and keyed with another key) at {} listeners ({} keyed): no answer to a group address; the victim got {:?} answers from each (host order; keyless at most {} a second, keyed at most one a second with no MTU)",
            seen.sent,
            ATTACK,
            keyed.len(),
            keyed.iter().filter(|k| **k).count(),
            seen.to_victim[1..m].iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            ANSWERS_PER_SOURCE
        ),
    ))
}

/// What the answer forger sent.
#[derive(Debug, Default, Clone, Copy)]
struct ForgedAnswers {
    /// Probes seen.
    probes: usize,
    /// Answers forged.
    answers: usize,
}

/// Forges, for every probe of host 0 it sees, answers from every host of `hostfile` (`names`):
/// an MTU of 1200, unkeyed and keyed with a key of its own.
fn forge_answers(
    bed: &Testbed,
    m: usize,
    names: Vec<MacAddr>,
) -> Result<hostile::Hostile<ForgedAnswers>, AttackError> {
    let prober = MacAddr(bed.hosts()[0].mac);
    Ok(hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_millis(1),
        move |port, stop: &AtomicBool| {
            let theirs = ProbeKey::new(&ATTACKER_KEY.into());
            let mut out = ForgedAnswers::default();
            while !stop.load(Ordering::SeqCst) {
                let Some(f) = port.next_frame() else { continue };
                let Some((_, src, pdu)) = split(&f) else {
                    continue;
                };
                let Some(p) = Probe::parse(pdu).filter(|_| src == prober) else {
                    continue;
                };
                out.probes += 1;
                let c = p.keyed.map_or([0; CHALLENGE_LEN], |(c, _)| c);
                for &listener in &names {
                    let a = Answer {
                        kind: p.kind,
                        nonce: p.nonce,
                        mtu: 1200,
                        tag: None,
                    };
                    let ends = Ends { listener, prober };
                    for keyed in [None, Some((&theirs, &c, ends))] {
                        port.send(&frame(prober, listener, &a.encode(keyed)));
                        out.answers += 1;
                    }
                }
            }
            out
        },
    )?)
}

/// Forged answers: host 0 checks the hosts of a hostfile with a key; all but the last of them
/// run `doctor --listen` with the key, the last runs nothing. The hostile host answers every
/// probe as every host of the hostfile (from their MACs, an MTU of 1200, unkeyed and keyed with
/// a key of its own). The prober must report the silent host failed and each listening host
/// with its true MTU, and fail. The control, which shows the attack is real: the same without
/// keys, where the silent host passes for answering.
pub(super) fn doctor_forged_answers(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let dir = scratch_dir(prefix)?;
    let (key, _) = key_files(&dir)?;
    let hostfile = hostfile(&bed, &dir, 1..m)?;
    let names: Vec<MacAddr> = (1..m).map(|i| MacAddr(bed.hosts()[i].mac)).collect();
    let silent = m - 1;
    let mut problems = Vec::new();
    let mut runs = Vec::new();
    for keyed in [true, false] {
        let k = keyed.then_some(key.as_path());
        let listeners = (1..silent)
            .map(|i| listen(&bed, bin, i, k))
            .collect::<Result<Vec<_>, _>>()?;
        let forger = forge_answers(&bed, m, names.clone())?;
        let run = probe(&bed, bin, &hostfile, k);
        let forged = forger.stop()?;
        drop(listeners);
        runs.push((keyed, run?, forged));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let line_of = |text: &str, host: usize, what: &str| {
        text.lines()
            .any(|l| l.contains(&format!("node{host} (")) && l.contains(what))
    };
    for (keyed, (code, text), forged) in &runs {
        let ok_silent =
            line_of(text, silent, "ok    ") && line_of(text, silent, "a broadcast reaches it");
        let small = (1..silent)
            .filter(|&i| line_of(text, i, "MTU of 1200"))
            .count();
        if *keyed {
            if ok_silent || small > 0 || *code != Some(1) {
                problems.push(format!(
                    "with a key: exit {code:?}, the silent node{silent} {} and {small} listening hosts were told an MTU of 1200: {}",
                    if ok_silent { "passed" } else { "failed" },
                    text.trim()
                ));
            }
            if (1..silent).any(|i| !line_of(text, i, "MTU 1500 bytes")) {
                problems.push(format!(
                    "with a key: a listening host lacks its true MTU: {}",
                    text.trim()
                ));
            }
        } else if !ok_silent {
            problems.push(format!(
                "control (no key): the forged answers did not make the silent node{silent} pass, so the attack was not shown: {}",
                text.trim()
            ));
        }
        if forged.answers == 0 {
            problems.push(format!("the attack did not happen ({forged:?})"));
        }
    }
    let f = runs.first().map(|r| r.2).unwrap_or_default();
    Ok(verdict(
        "doctor-forged-answers",
        problems,
        format!(
            "the hostile host forged {} answers (an MTU of 1200, unkeyed and under its own key) to {} probes of a doctor --hostfile --key-file, as each of {} hosts; the silent node{silent} failed and every listening host showed its MTU of 1500; without keys the same forgeries made node{silent} pass (the attack)",
            f.answers,
            f.probes,
            names.len()
        ),
    ))
}
