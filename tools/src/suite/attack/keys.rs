//! Scenarios of keyless transfers and of guessable keys, through the `ethbcast` command:
//! a stranger that answers a keyless receiver as its sender, and a dictionary tried against
//! a short passphrase with one challenge captured.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};

use super::process::{private, Proc};
use super::{io, AttackError, Scenario};
use crate::harness::group::bed;
use crate::hostile::{self, pdu};
use crate::netns;
use crate::testbed::Testbed;

/// `ethbcast ARGS` on host `host` of `bed`, without a key in its environment.
pub(super) fn run_on(
    bed: &Testbed,
    bin: &Path,
    host: usize,
    args: &[&str],
) -> Result<Proc, AttackError> {
    let mut c =
        netns::command_in(&bed.hosts()[host].netns, &bin.to_string_lossy()).map_err(io("netns"))?;
    c.args(args)
        .env_remove(ethbcast::KEY_FILE_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Ok(Proc(Some(c.spawn().map_err(io("spawn ethbcast"))?)))
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

pub(super) fn scratch_dir(prefix: &str) -> Result<PathBuf, AttackError> {
    let dir = std::env::temp_dir().join(format!("ethbcast-attack-{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    Ok(dir)
}

pub(super) fn random_input(path: &Path, len: usize, seed: u64) -> Result<Vec<u8>, AttackError> {
    let mut data = vec![0u8; len];
    rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
    std::fs::write(path, &data).map_err(io("write an input"))?;
    Ok(data)
}

/// A stranger answers a keyless receiver's hello with its own roster and data (an `ethbcast
/// send` of its own, which is all it takes). By default `recv` without a key refuses to start
/// (exit 2, naming `ethbcast keygen`). With `--insecure` and no `--from` the receiver takes
/// the stranger's bytes, digest and all: the control, which shows the attack is real. With
/// `--insecure --from` the sender's MAC, the receiver ignores the stranger (whose send finds
/// no receiver) and writes the real sender's bytes.
pub(super) fn keyless_stranger_sender(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    if !bin.is_file() {
        return Err(AttackError::NoBinary(bin.to_path_buf()));
    }
    let bed = bed(prefix, hosts, 0.0)?;
    let stranger = hosts - 1;
    let dir = scratch_dir(prefix)?;
    let real_in = dir.join("real.bin");
    let fake_in = dir.join("stranger.bin");
    let real = random_input(&real_in, 300_000, 1)?;
    let fake = random_input(&fake_in, 300_000, 2)?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let mut problems = Vec::new();

    // 1. The default: no key, no start.
    let started = Instant::now();
    let (code, err) = run_on(
        &bed,
        bin,
        1,
        &["recv", "--iface", "eth0", "-o", &path(&dir.join("o0"))],
    )?
    .wait(Duration::from_secs(20));
    let refused = code == Some(2) && err.contains("ethbcast keygen");
    if !refused {
        problems.push(format!(
            "recv without a key: exit {code:?} after {:.1} s, not a refusal naming keygen: {}",
            started.elapsed().as_secs_f64(),
            err.trim()
        ));
    }

    // 2. Control: keyless, unpinned, only the stranger sends.
    let recv_args = |out: &str, from: Option<&str>| {
        let mut a = vec![
            "recv",
            "--insecure",
            "--iface",
            "eth0",
            "--quiet",
            "--wait",
            "20",
            "--timeout",
            "10",
            "-o",
        ];
        a.push(out);
        a.extend(from.map(|m| ["--from", m]).into_iter().flatten());
        a.into_iter().map(String::from).collect::<Vec<String>>()
    };
    let send_args = |input: &str, wait: &str| {
        [
            "send",
            "--insecure",
            "--iface",
            "eth0",
            "--quiet",
            "--receivers",
            "1",
            "--wait",
            wait,
            "-i",
            input,
        ]
        .map(String::from)
    };
    let control_out = dir.join("control.bin");
    let mut r = run_on(&bed, bin, 1, &strs(&recv_args(&path(&control_out), None)))?;
    let mut s = run_on(
        &bed,
        bin,
        stranger,
        &strs(&send_args(&path(&fake_in), "10")),
    )?;
    let (s_code, _) = s.wait(Duration::from_secs(30));
    let (r_code, _) = r.wait(Duration::from_secs(15));
    let taken = std::fs::read(&control_out).is_ok_and(|d| d == fake);
    if !taken {
        problems.push(format!(
            "control (keyless, no --from): the stranger's bytes did not land (stranger exit {s_code:?}, receiver exit {r_code:?}), so the attack was not shown"
        ));
    }

    // 3. Pinned: the stranger offers first, the real sender comes later.
    let pinned_out = dir.join("pinned.bin");
    let from = ethbcast::MacAddr(bed.hosts()[0].mac).to_string();
    let mut r = run_on(
        &bed,
        bin,
        1,
        &strs(&recv_args(&path(&pinned_out), Some(&from))),
    )?;
    let mut s = run_on(&bed, bin, stranger, &strs(&send_args(&path(&fake_in), "4")))?;
    std::thread::sleep(Duration::from_millis(1500));
    let mut g = run_on(&bed, bin, 0, &strs(&send_args(&path(&real_in), "20")))?;
    let (g_code, g_err) = g.wait(Duration::from_secs(40));
    let (s_code, _) = s.wait(Duration::from_secs(20));
    let (r_code, r_err) = r.wait(Duration::from_secs(15));
    let got = std::fs::read(&pinned_out).unwrap_or_default();
    if got == fake {
        problems.push("pinned (--from): the receiver wrote the stranger's bytes".into());
    } else if got != real || r_code != Some(0) || g_code != Some(0) {
        problems.push(format!(
            "pinned (--from): receiver exit {r_code:?} ({}), sender exit {g_code:?} ({}), {} of {} bytes right",
            r_err.trim(),
            g_err.trim(),
            got.iter().zip(&real).take_while(|(a, b)| a == b).count(),
            real.len()
        ));
    }
    if s_code != Some(3) {
        problems.push(format!(
            "pinned (--from): the stranger's send ended with exit {s_code:?}, not a join timeout (3): a receiver joined it"
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Scenario {
        name: "keyless-stranger-sender".into(),
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "recv without a key refused at once (exit 2, names keygen); keyless and unpinned it took the stranger's {} bytes (the attack); with --insecure --from {from} it ignored the stranger (join timeout there) and wrote the real sender's {} bytes",
                fake.len(),
                real.len()
            )
        } else {
            problems.join("; ")
        },
        ..Scenario::default()
    })
}

/// The context of the key that seals join challenges (`ethbcast_proto::Join`), which an
/// attacker reads in the source.
const CHALLENGE_CONTEXT: &str = "ethbcast 2026-11 join challenge";

/// The `i`-th word of the attacker's dictionary: 31 characters, so that a key file of one
/// of them and a new line is 32 bytes long.
fn guess(i: usize) -> String {
    format!("ethbcast bench guess word {i:05}")
}

/// Guesses in the dictionary, and the one the group uses.
const GUESSES: usize = 4096;
const SECRET: usize = 2718;

/// The first join challenge `bin send --key-file key` broadcasts from host 0, recorded on
/// host `m`.
fn captured_challenge(
    bed: &Testbed,
    bin: &Path,
    m: usize,
    key: &Path,
    input: &Path,
) -> Result<Vec<u8>, AttackError> {
    let rec = hostile::record(&bed.hosts()[m].netns, 10_000)?;
    let key = key.to_string_lossy();
    let input = input.to_string_lossy();
    let (code, err) = run_on(
        bed,
        bin,
        0,
        &[
            "send",
            "--iface",
            "eth0",
            "--quiet",
            "--key-file",
            &key,
            "--receivers",
            "1",
            "--wait",
            "1",
            "-i",
            &input,
        ],
    )?
    .wait(Duration::from_secs(30));
    let frames = rec.stop()?;
    let mac = bed.hosts()[0].mac;
    frames
        .into_iter()
        .find(|f| f.len() > 12 && f[6..12] == mac && super::join::join_type(f) == Some(1))
        .ok_or_else(|| AttackError::Io {
            context: format!("no challenge captured (send exit {code:?}: {})", err.trim()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
}

/// Whether `frame` (a captured challenge) is sealed under group key `key`.
fn seals(frame: &[u8], key: &[u8; 32]) -> bool {
    pdu(frame).is_some_and(|p| p.verify(&blake3::derive_key(CHALLENGE_CONTEXT, key)))
}

/// A dictionary tried against a short passphrase, with one challenge captured. The key file
/// holds a 31-character passphrase and a new line, 32 bytes; the attacker tries each word as
/// the key itself (the file's bytes) and as its BLAKE3 hash, at one hash per guess. None may
/// open the challenge: the passphrase goes through Argon2id, which the scenario checks by
/// opening it with Argon2id of the right word (so the capture is sound), and reports what one
/// guess costs either way. A key file of `ethbcast keygen --passphrase` (the same word, a
/// random salt) is captured too: Argon2id of the word under the salt every command-line
/// deployment would share (that of the default group id) must not open it, so no table
/// computed once for that salt serves it.
pub(super) fn passphrase_dictionary(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    if !bin.is_file() {
        return Err(AttackError::NoBinary(bin.to_path_buf()));
    }
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    let dir = scratch_dir(prefix)?;
    let input = dir.join("in.bin");
    random_input(&input, 1000, 3)?;
    let word = guess(SECRET);
    let bare = dir.join("bare.key");
    std::fs::write(&bare, format!("{word}\n")).map_err(io("write the key file"))?;
    private(&bare)?;
    let salted = dir.join("salted.key");
    let mut kg = std::process::Command::new(bin)
        .args(["keygen", "--passphrase", &salted.to_string_lossy()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("spawn ethbcast keygen"))?;
    if let Some(mut stdin) = kg.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(format!("{word}\n").as_bytes())
            .map_err(io("write the passphrase"))?;
    }
    let kg = kg.wait_with_output().map_err(io("ethbcast keygen"))?;
    let mut problems = Vec::new();
    if !kg.status.success() {
        problems.push(format!(
            "ethbcast keygen --passphrase failed: {}",
            String::from_utf8_lossy(&kg.stderr).trim()
        ));
    }
    let bare_frame = captured_challenge(&bed, bin, m, &bare, &input)?;
    let salted_frame = if kg.status.success() {
        Some(captured_challenge(&bed, bin, m, &salted, &input)?)
    } else {
        None
    };

    // The cheap attack: one hash per guess.
    let t = Instant::now();
    let mut cheap_hits = Vec::new();
    for i in 0..GUESSES {
        let g = guess(i);
        let line = format!("{g}\n");
        let mut candidates = vec![*blake3::hash(g.as_bytes()).as_bytes()];
        if let Ok(raw) = <[u8; 32]>::try_from(line.as_bytes()) {
            candidates.push(raw);
        }
        for frame in std::iter::once(&bare_frame).chain(salted_frame.as_ref()) {
            if candidates.iter().any(|k| seals(frame, k)) {
                cheap_hits.push(i);
            }
        }
    }
    let cheap_each = t.elapsed().as_secs_f64() / GUESSES as f64;
    if !cheap_hits.is_empty() {
        problems.push(format!(
            "the captured challenge opened at one hash per guess (guess {cheap_hits:?} of {GUESSES}): the passphrase was the key"
        ));
    }
    // The attack that works: Argon2id of the right word, under the group id's salt.
    let group_id = crate::distribute::DEFAULT_GROUP_ID;
    let t = Instant::now();
    let stretched = ethbcast::key_from_passphrase(&word, group_id).ok();
    let argon_each = t.elapsed().as_secs_f64();
    if !stretched.as_ref().is_some_and(|k| seals(&bare_frame, k)) {
        problems.push(
            "Argon2id of the right word did not open the bare passphrase's challenge: the capture proves nothing"
                .into(),
        );
    }
    if let Some(frame) = &salted_frame {
        if stretched.as_ref().is_some_and(|k| seals(frame, k)) {
            problems.push(
                "the keygen --passphrase file's key is Argon2id under the group id's salt, the same for every deployment"
                    .into(),
            );
        }
        let own = ethbcast::read_key_file(&salted, group_id);
        if !own.as_ref().is_ok_and(|k| seals(frame, k)) {
            problems.push(format!(
                "the keygen --passphrase file's own key did not open its challenge ({:?})",
                own.err().map(|e| e.to_string())
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Scenario {
        name: "passphrase-dictionary".into(),
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "{GUESSES} guesses at one hash each ({:.1} us a guess) opened no captured challenge of a 32-byte passphrase file; Argon2id of the right word did ({:.0} ms a guess, {:.0}x the cost); a keygen --passphrase file (random salt) did not open under the shared group-id salt",
                cheap_each * 1e6,
                argon_each * 1e3,
                argon_each / cheap_each.max(1e-12)
            )
        } else {
            problems.join("; ")
        },
        ..Scenario::default()
    })
}
