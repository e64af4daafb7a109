//! The names of the hosts' shared-memory segments in `/dev/shm`: one per job, host and network
//! namespace, with a tag only the job can compute when it has a secret (the launcher's token
//! or the group's key), so that other local users cannot name a job's segment in advance.

use crate::host_ring::{self, Hosts};
use crate::Rank;

use super::HostError;

/// The environment variable in which a launcher gives every rank of a job the same random
/// token (at least [`JOB_TOKEN_MIN`] characters, e.g. `openssl rand -hex 16`), so that the
/// job's shared-memory segment names cannot be guessed by other local users.
pub const JOB_TOKEN_VAR: &str = "ETHBCAST_JOB_TOKEN";

/// Shortest token accepted in [`JOB_TOKEN_VAR`].
pub const JOB_TOKEN_MIN: usize = 16;

/// The part of a segment's name that only the job can compute: 128 bits of a BLAKE3 hash keyed
/// with the group's key (if any) over the launcher's token (if any), in hex. `Ok(None)`: the
/// job has neither (the name is guessable). Neither the token nor the key can be recovered
/// from the tag, which every local user can read in `/dev/shm`'s listing.
pub(super) fn segment_tag(
    token: Option<&str>,
    key: Option<&[u8; 32]>,
) -> Result<Option<String>, HostError> {
    let token = token.filter(|t| !t.is_empty());
    if let Some(t) = token {
        if t.len() < JOB_TOKEN_MIN {
            return Err(HostError::Placement(format!(
                "{JOB_TOKEN_VAR} has {} characters: give every rank of the job the same random token of at least {JOB_TOKEN_MIN} characters (e.g. `openssl rand -hex 16`), or unset it",
                t.len()
            )));
        }
    }
    if token.is_none() && key.is_none() {
        return Ok(None);
    }
    const CONTEXT: &str = "ethbcast shared-memory segment name v1";
    let mut h = match key {
        Some(k) => blake3::Hasher::new_keyed(k),
        None => blake3::Hasher::new_derive_key(CONTEXT),
    };
    h.update(CONTEXT.as_bytes());
    h.update(&[u8::from(token.is_some())]);
    h.update(token.unwrap_or("").as_bytes());
    let out = h.finalize();
    Ok(Some(
        out.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    ))
}

/// The file of host `h`'s segment: one per job (group id, size), host (its owner's rank) and
/// network namespace, with the job's secret tag ([`segment_tag`]) when it has one. `/dev/shm`
/// is shared by every namespace of a machine: jobs on different test-beds (or containers) of
/// one machine must not meet in one segment, whatever group id they chose.
pub(super) fn segment_path(
    group_id: u32,
    hosts: &Hosts,
    h: u16,
    tag: Option<&str>,
) -> std::path::PathBuf {
    let owner = hosts.ranks_on(h).first().copied().unwrap_or(Rank::new(0));
    let mut name = format!(
        "ethbcast-{group_id:08x}-{}-{owner}-{}",
        hosts.size(),
        net_namespace()
    );
    if let Some(tag) = tag {
        name.push('-');
        name.push_str(tag);
    }
    std::path::Path::new(host_ring::SHM_DIR).join(name)
}

/// The inode of this process's network namespace (`/proc/self/ns/net` reads `net:[N]`), or 0
/// where it cannot be read.
pub(super) fn net_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}
