//! The C ABI with a key: ranks open their group as `ethbcast_open` does while the hostile
//! host forges the root's data, barrier releases and evictions ([`forge_session`], which
//! capi/tests/c_abi_key.rs shares); without a key the same forgeries land.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{GroupOptions, Membership, Rank};
// The wire format: the hostile host forges and reads frames, which the library does not
// export.
use ethbcast_proto::{BarrierMsg, BarrierOp, Control, Flags, Kind};

use super::harness::{hub, verdict};
use super::process::{private, scratch};
use super::{io, AttackError, Scenario};
use crate::harness::group::bed;
use crate::hostile::{self, pdu, Counter, Spoof};
use crate::netns;
use crate::testbed::Testbed;

/// What the forger of the C-ABI scenario (and of capi/tests/c_abi_key.rs) forged.
#[derive(Debug, Default, Clone, Copy)]
pub struct Forged {
    /// Data frames of the root's next message, ahead of the root.
    pub data: usize,
    /// Barrier releases of the current and the next epoch.
    pub releases: usize,
    /// Evictions of rank 1.
    pub evictions: usize,
    /// Frames of the session seen encrypted ([`ethbcast_proto::Flags::ENCRYPTED`]), and
    /// those seen in the clear (join frames not counted).
    pub encrypted: usize,
    /// Frames of the session seen in the clear.
    pub clear: usize,
}

/// The forgeries the C ABI's key test and this scenario share, from the hostile host `hostile` of `bed` against
/// a group whose rank 0 is host 0: the root's next broadcast message ahead of the root, barrier
/// releases of the current and next epoch, and an eviction of rank 1 every 50 ms, all from
/// the root's MAC and rank (with the attacker's tag if the session is keyed).
pub fn forge_session(
    bed: &Testbed,
    hostile: usize,
) -> Result<hostile::Hostile<Forged>, AttackError> {
    let root_mac = bed.hosts()[0].mac;
    Ok(hostile::Hostile::spawn(
        &bed.hosts()[hostile].netns,
        Duration::from_micros(500),
        move |port, stop: &AtomicBool| {
            let mut ctr = Counter::default();
            let mut forged = Forged::default();
            let mut last_evict = Instant::now();
            let mut template: Option<Vec<u8>> = None;
            let mut barriers = 0u32;
            let from_root = Spoof::from_root(root_mac, true);
            while !stop.load(Ordering::SeqCst) {
                if let (Some(t), true) =
                    (&template, last_evict.elapsed() > Duration::from_millis(50))
                {
                    let evict = Control::Evict { rank: Rank::new(1) };
                    if let Some(x) = hostile::forge_control(t, &evict, from_root, &mut ctr) {
                        port.send(&x);
                        forged.evictions += 1;
                    }
                    last_evict = Instant::now();
                }
                let Some(f) = port.next_frame() else { continue };
                let Some(p) = pdu(&f) else { continue };
                if p.kind() == Kind::Join {
                    continue;
                }
                if p.flags().contains(Flags::ENCRYPTED) {
                    forged.encrypted += 1;
                } else {
                    forged.clear += 1;
                }
                template.get_or_insert_with(|| f.clone());
                if p.kind().is_data() && p.src() == Rank::new(0) {
                    let junk = vec![0x66; p.msg_len() as usize];
                    for (dseq, dmsg) in [(1, 1), (1, 0), (2, 1)] {
                        if let Some(x) = hostile::forge_data(
                            &f,
                            p.group(),
                            from_root,
                            p.seq().wrapping_add(dseq),
                            p.msg_id().wrapping_add(dmsg),
                            &junk,
                        ) {
                            port.send(&x);
                            forged.data += 1;
                        }
                    }
                }
                if p.kind() == Kind::Barrier {
                    barriers += 1;
                }
                // Encrypted, the epoch is guessed: a barrier frame or two per rank and epoch.
                if let Some(b) = hostile::barrier_of(&p, barriers / 4) {
                    for epoch in [b.epoch, b.epoch + 1] {
                        let release = Control::Barrier(BarrierMsg {
                            op: BarrierOp::Release,
                            epoch,
                            ..b.clone()
                        });
                        if let Some(x) = hostile::forge_control(&f, &release, from_root, &mut ctr) {
                            port.send(&x);
                            forged.releases += 1;
                        }
                    }
                }
            }
            forged
        },
    )?)
}

/// Rounds of the C-ABI scenario (capi/c/key_check.c has 6).
pub(super) const C_ROUNDS: usize = 4;

/// One rank of the C-ABI scenario, as capi/c/key_check.c: each round rank 0 enters a barrier
/// 300 ms late, then broadcasts 64 bytes after another 300 ms. (barriers left early, broadcasts
/// with wrong bytes, failed calls); stops at the first failed call.
pub(super) fn c_abi_rank(g: &mut ethbcast::HostGroup) -> (u32, u32, Vec<String>) {
    let pattern = |round: usize, i: usize| (round * 37 + i * 11 + 1) as u8;
    let me = g.rank();
    let (mut early, mut corrupt) = (0, 0);
    for round in 0..C_ROUNDS {
        if me == Rank::new(0) {
            std::thread::sleep(Duration::from_millis(300));
        }
        let t = Instant::now();
        if let Err(e) = g.barrier() {
            return (early, corrupt, vec![format!("barrier {round}: {e}")]);
        }
        if me != Rank::new(0) && t.elapsed() < Duration::from_millis(150) {
            early += 1;
        }
        if me == Rank::new(0) {
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut buf: Vec<u8> = (0..64)
            .map(|i| {
                if me == Rank::new(0) {
                    pattern(round, i)
                } else {
                    0
                }
            })
            .collect();
        if let Err(e) = g.bcast(Rank::new(0), &mut buf) {
            return (early, corrupt, vec![format!("bcast {round}: {e}")]);
        }
        if buf.iter().enumerate().any(|(i, b)| *b != pattern(round, i)) {
            corrupt += 1;
        }
    }
    match g.barrier() {
        Ok(()) => (early, corrupt, Vec::new()),
        Err(e) => (early, corrupt, vec![format!("last barrier: {e}")]),
    }
}

/// Per rank: whether its group had a key, (barriers left early, corrupt broadcasts, errors).
pub(super) type CRun = Vec<Result<(bool, u32, u32, Vec<String>), String>>;

/// Ranks 0..m on hosts 0..m open a [`ethbcast::HostGroup`] the way the C ABI opens
/// one: the key from `ETHBCAST_KEY_FILE` of `env` (read by [`ethbcast::key_from_env`],
/// as `ethbcast_open` does), waiting in blocking mode, then run [`c_abi_rank`] while the
/// hostile host forges. The members are threads of one process, so the membership is the list
/// of the hosts rather than the launcher's rank variables.
pub(super) fn c_abi_run(
    bed: &Testbed,
    m: usize,
    env: &[(&'static str, std::ffi::OsString)],
    timeout: Duration,
) -> Result<(CRun, Forged), AttackError> {
    use ethbcast::{HostGroup, HostOptions};
    let macs: Vec<ethbcast::MacAddr> = bed.hosts()[..m]
        .iter()
        .map(|h| ethbcast::MacAddr(h.mac))
        .collect();
    let forger = forge_session(bed, m)?;
    let handles: Vec<_> = (0..m)
        .map(|i| {
            let (macs, env) = (macs.clone(), env.to_vec());
            netns::spawn_in(&bed.hosts()[i].netns, move || -> Result<_, String> {
                let group_id = GroupOptions::default().group_id;
                let get = |v: &str| env.iter().find(|(k, _)| *k == v).map(|(_, x)| x.clone());
                let key = ethbcast::key_from_env(get, group_id).map_err(|e| e.to_string())?;
                let keyed = key.is_some();
                let opts = HostOptions {
                    group: GroupOptions {
                        insecure: !keyed,
                        key,
                        wait: ethbcast::WaitMode::Block,
                        timeout,
                        ..GroupOptions::default()
                    },
                    membership: Membership::Explicit(macs),
                    ..HostOptions::default()
                };
                let mut g = HostGroup::open("eth0", opts).map_err(|e| e.to_string())?;
                let (early, corrupt, errors) = c_abi_rank(&mut g);
                Ok((keyed, early, corrupt, errors))
            })
            .map_err(io("spawn a rank"))
        })
        .collect::<Result<_, _>>()?;
    let results = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
        .collect();
    Ok((results, forger.stop()?))
}

/// The C ABI and MPI interposer with a key (issue item 1): ranks open their group as
/// `ethbcast_open` does, the key from `ETHBCAST_KEY_FILE` naming a passphrase file, and
/// broadcast and synchronise while the hostile host forges the root's next message ahead of
/// it, barrier releases and evictions of rank 1 (the forgeries of capi/tests/c_abi_key.rs;
/// the root enters every call 300 ms late, so forgeries come first). Keyed, every rank's
/// buffers hold the root's bytes, no barrier returns early, no call fails. Then the same
/// without `ETHBCAST_KEY_FILE` (and without `ETHBCAST_REQUIRE_KEY`, so `ethbcast_open` opens
/// a group without a key): there the forgeries must land, which shows the attack is real.
pub(super) fn capi_keyed_forgery(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let (dir, _) = scratch(prefix)?;
    let key_file = dir.join("group.key");
    std::fs::write(&key_file, "a passphrase the hostile host does not know\n")
        .map_err(io("write the key file"))?;
    private(&key_file)?;
    let keyed_env = [(ethbcast::KEY_FILE_ENV, key_file.clone().into_os_string())];
    let keyed_run = c_abi_run(&bed, m, &keyed_env, Duration::from_secs(20));
    let keyless_run = c_abi_run(&bed, m, &[], Duration::from_secs(3));
    let _ = std::fs::remove_dir_all(&dir);
    let (keyed_ranks, keyed_forged) = keyed_run?;
    let (keyless_ranks, keyless_forged) = keyless_run?;
    let mut problems = Vec::new();
    for (i, r) in keyed_ranks.iter().enumerate() {
        match r {
            Ok((true, 0, 0, e)) if e.is_empty() => {}
            Ok((keyed, early, corrupt, errors)) => problems.push(format!(
                "keyed: rank {i} (key {keyed}) left {early} barriers early, got {corrupt} corrupt broadcasts, failed {errors:?}"
            )),
            Err(e) => problems.push(format!("keyed: rank {i}: {e}")),
        }
    }
    let f = keyed_forged;
    if f.data == 0 || f.releases == 0 || f.evictions == 0 {
        problems.push(format!("keyed: the attack did not happen: {f:?}"));
    }
    // Its own frames are seen only if the hostile host speaks: the members' are encrypted.
    if f.encrypted == 0 || f.clear > 0 {
        problems.push(format!(
            "keyed: {} frames of the members seen in the clear, {} encrypted",
            f.clear, f.encrypted
        ));
    }
    if keyless_forged.encrypted > 0 {
        problems.push(format!(
            "keyless: {} frames seen encrypted without a key",
            keyless_forged.encrypted
        ));
    }
    let (mut landed, mut keyless_keyed) = (Vec::new(), false);
    for (i, r) in keyless_ranks.iter().enumerate() {
        match r {
            Ok((keyed, early, corrupt, errors)) => {
                keyless_keyed |= *keyed;
                if *early > 0 || *corrupt > 0 || !errors.is_empty() {
                    landed.push(format!(
                        "rank {i}: {early} early barriers, {corrupt} corrupt broadcasts{}",
                        errors.first().map(|e| format!(", {e}")).unwrap_or_default()
                    ));
                }
            }
            Err(e) => landed.push(format!("rank {i}: {e}")),
        }
    }
    if keyless_keyed {
        problems.push("keyless: a group had a key without ETHBCAST_KEY_FILE".into());
    }
    if landed.is_empty() {
        problems.push(format!(
            "keyless: no forgery landed ({keyless_forged:?}): the attack shows nothing"
        ));
    }
    Ok(verdict(
        "capi-keyed-forgery",
        problems,
        format!(
            "{m} ranks opened their group as ethbcast_open does; with ETHBCAST_KEY_FILE (a passphrase) the hostile host saw {} frames of theirs, all encrypted, and forged {} broadcast data frames ahead of the root, {} barrier releases and {} evictions of rank 1, and every rank got {C_ROUNDS}/{C_ROUNDS} broadcasts intact, no barrier returned before the late root, no call failed; without a key ({} data, {} releases, {} evictions forged) they landed: {}",
            f.encrypted,
            f.data,
            f.releases,
            f.evictions,
            keyless_forged.data,
            keyless_forged.releases,
            keyless_forged.evictions,
            landed.join("; ")
        ),
    ))
}
