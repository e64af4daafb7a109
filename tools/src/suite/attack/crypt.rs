//! What a host that sees the segment reads of a keyed session, and what it can change: an
//! eavesdropper records every frame of a keyed transfer whose file holds a known marker, a
//! host alters one byte of the ciphertext or tag of the group's frames, and a host speaking
//! an older version of the wire format tries to take a receiver.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// The wire format: frames of the session are read and altered as an attacker would.
use ethbcast_proto::{
    pdu_crc, Flags, Frame, Kind, BROADCAST_MAC, CRC_LEN, ETH_HEADER_LEN, HEADER_LEN,
};
use rand::{RngCore, SeedableRng};

use super::harness::{check_all, hub, keyed, verdict, workload, Seen};
use super::keys::run_on;
use super::process::{scratch, Transfer};
use super::{AttackError, Scenario};
use crate::harness::group::{bed, join_all, spawn_members};
use crate::hostile::{self, pdu};

/// The marker the eavesdropper looks for: 64 bytes no random data holds.
const MARKER: &[u8; 64] = b"ethbcast attack suite: a 64-byte marker no frame may carry (!!).";

/// Whether any frame of `frames` carries 16 consecutive bytes of [`MARKER`].
fn carries_marker(frames: &[Vec<u8>]) -> usize {
    frames
        .iter()
        .filter(|f| f.windows(16).any(|w| MARKER.windows(16).any(|m| m == w)))
        .count()
}

/// A file of 4096 markers, each followed by 0 to 2 bytes of its index, so that frames cut the
/// marker at every place.
fn marked_file() -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..4096u32 {
        v.extend_from_slice(MARKER);
        v.extend_from_slice(&i.to_be_bytes()[..(i % 3) as usize]);
    }
    v
}

/// An eavesdropper on a keyed transfer: the bridge floods every frame (a hub) and the hostile
/// host records all it sees of a keyed `ethbcast send` of a file holding a 64-byte marker 4096
/// times. No frame may carry 16 bytes of the marker, and the receivers' copies must be the
/// file. The control, which shows the recording is real: the same transfer with
/// `--no-encrypt` carries the marker in its frames.
pub(super) fn eavesdrop_keyed_transfer(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let (dir, key) = scratch(prefix)?;
    let t = Transfer {
        bed: &bed,
        bin,
        dir: dir.clone(),
        key,
        receivers: m - 1,
    };
    let data = marked_file();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for (name, extra) in [("encrypted", &[][..]), ("plain", &["--no-encrypt"][..])] {
        let rec = hostile::record(&bed.hosts()[m].netns, 200_000)?;
        let run = t.run_with(&data, name, extra);
        let frames = rec.stop()?;
        problems.extend(run?.into_iter().map(|p| format!("{name}: {p}")));
        let encrypted = frames
            .iter()
            .filter(|f| pdu(f).is_some_and(|p| p.flags().contains(Flags::ENCRYPTED)))
            .count();
        seen.push((frames.len(), carries_marker(&frames), encrypted));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ((n, marked, encrypted), (pn, pmarked, _)) = (seen[0], seen[1]);
    if marked > 0 {
        problems.push(format!(
            "{marked} of the {n} frames of the keyed transfer carry the marker"
        ));
    }
    if n < 100 || encrypted == 0 || pmarked == 0 {
        problems.push(format!(
            "the attack did not happen: {n} frames recorded ({encrypted} encrypted); with --no-encrypt {pmarked} of {pn} carried the marker"
        ));
    }
    Ok(verdict(
        "eavesdrop-keyed-transfer",
        problems,
        format!(
            "the hostile host recorded {n} frames ({encrypted} encrypted) of a keyed transfer of {} bytes holding a 64-byte marker 4096 times: none carries 16 bytes of it, and {} receivers got the file byte for byte; with --no-encrypt {pmarked} of {pn} frames carried it (the control)",
            data.len(),
            m - 1
        ),
    ))
}

/// One byte of ciphertext or tag altered: while the keyed members broadcast and synchronise,
/// the hostile host sends again every encrypted frame it sees with one byte of its payload or
/// tag changed (its CRC made right again), from the sender's MAC, as broadcasts. The members
/// must refuse every one (their tag fails) and get their 60 messages intact.
pub(super) fn altered_ciphertext(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(300),
        |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
            let (mut altered, mut data) = (0usize, 0usize);
            while !stop.load(Ordering::SeqCst) {
                let Some(f) = port.next_frame() else { continue };
                let Some(p) = pdu(&f).filter(|p| p.flags().contains(Flags::ENCRYPTED)) else {
                    continue;
                };
                let total = p.total_len();
                let body = total - CRC_LEN;
                let start = ETH_HEADER_LEN + HEADER_LEN;
                let end = ETH_HEADER_LEN + body;
                if end <= start {
                    continue;
                }
                data += usize::from(p.kind().is_data());
                let mut g = f.clone();
                g[..6].copy_from_slice(&BROADCAST_MAC.0);
                let at = start + rng.next_u32() as usize % (end - start);
                g[at] ^= 1 << (rng.next_u32() % 8);
                let e = ETH_HEADER_LEN;
                let crc = pdu_crc(&g[e..], body);
                g[e + body..e + total].copy_from_slice(&crc.to_be_bytes());
                port.send(&g);
                altered += 1;
            }
            (altered, data)
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| {
            let seen = workload(&mut g, 60, 11, 10, None)?;
            Ok((seen, g.stats().drops.bad_mac))
        },
        keyed(false),
    )?);
    let (altered, data) = attacker.stop()?;
    let seen: Vec<Result<Seen, String>> = results
        .iter()
        .map(|r| r.as_ref().map(|(s, _)| s.clone()).map_err(Clone::clone))
        .collect();
    let (mut problems, _) = check_all(&seen, 60, 6, None);
    let refused: u64 = results.iter().flatten().map(|(_, b)| b).sum();
    // Every altered frame reaches every member but its sender, who does not look at its own.
    if altered < 100 || data == 0 || refused < altered as u64 {
        problems.push(format!(
            "{altered} altered frames sent ({data} of them data), {refused} refused for their tag: the attack did not happen, or some altered frame was taken"
        ));
    }
    Ok(verdict(
        "altered-ciphertext",
        problems,
        format!("the hostile host sent again {altered} encrypted frames of a keyed group ({data} data frames) with one bit of ciphertext or tag flipped and the CRC made right; the members refused {refused} of them for their tag and got 60/60 messages intact and 6 barriers"),
    ))
}

/// A sender of an older release: the hostile host answers as a coordinator would, with
/// challenges of wire version 1 (a live challenge of a keyed `ethbcast send`, its version byte
/// set to 1 and its CRC made right, from its own MAC), while a keyed receiver waits 3 s for a
/// sender. The receiver must not join it, and must say which host speaks which version.
pub(super) fn old_version_sender(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    let (dir, key) = scratch(prefix)?;
    let hostile_mac = ethbcast::MacAddr(bed.hosts()[m].mac);
    let template = {
        // A challenge of a real keyed sender, recorded on the hostile host.
        let rec = hostile::record(&bed.hosts()[m].netns, 1000)?;
        let input = dir.join("one.bin");
        std::fs::write(&input, b"x").map_err(super::io("write the input"))?;
        let key_s = key.to_string_lossy().into_owned();
        let input_s = input.to_string_lossy().into_owned();
        let args = [
            "send",
            "--iface",
            "eth0",
            "--quiet",
            "--key-file",
            &key_s,
            "--receivers",
            "1",
            "--wait",
            "1",
            "-i",
            &input_s,
        ];
        let _ = run_on(&bed, bin, 0, &args)?.wait(Duration::from_secs(20));
        rec.stop()?
            .into_iter()
            .find(|f| pdu(f).is_some_and(|p| p.kind() == Kind::Join))
    };
    let Some(template) = template else {
        return Err(AttackError::Io {
            context: "no challenge of a keyed sender recorded".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    };
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_millis(1),
        move |port, stop: &AtomicBool| {
            let mut old = template;
            old[6..12].copy_from_slice(&hostile_mac.0);
            let e = ETH_HEADER_LEN;
            let total = Frame::new_unchecked(&old[e..]).total_len();
            old[e] = 1;
            let body = total - CRC_LEN;
            let crc = pdu_crc(&old[e..], body);
            old[e + body..e + total].copy_from_slice(&crc.to_be_bytes());
            let (mut sent, mut last) = (0usize, Instant::now());
            while !stop.load(Ordering::SeqCst) {
                if last.elapsed() >= Duration::from_millis(20) {
                    port.send(&old);
                    sent += 1;
                    last = Instant::now();
                }
                let _ = port.next_frame();
            }
            sent
        },
    )?;
    let out = dir.join("out.bin");
    let key_s = key.to_string_lossy().into_owned();
    let out_s = out.to_string_lossy().into_owned();
    let args = [
        "recv",
        "--iface",
        "eth0",
        "--key-file",
        &key_s,
        "--wait",
        "3",
        "-o",
        &out_s,
    ];
    let (code, err) = run_on(&bed, bin, 1, &args)?.wait(Duration::from_secs(30));
    let sent = attacker.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    let mut problems = Vec::new();
    let named = format!("{hostile_mac} speaks wire version 1 and this build version 2");
    if code != Some(3) || !err.contains(&named) {
        problems.push(format!(
            "recv exited {code:?} without naming the host and the versions ({named:?}): {}",
            err.trim()
        ));
    }
    if sent < 10 {
        problems.push(format!("the attack did not happen: {sent} challenges sent"));
    }
    Ok(verdict(
        "old-version-sender",
        problems,
        format!("the hostile host sent {sent} challenges of wire version 1 (a live keyed challenge, version byte set to 1, CRC made right); the keyed receiver joined nothing and said at its join timeout (exit 3) that {named}"),
    ))
}
