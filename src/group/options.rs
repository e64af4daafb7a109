//! The options of a group: where its member list comes from ([`Membership`]), and how it
//! runs ([`GroupOptions`]: link, waiting, algorithm, key, failure detection).

use std::time::Duration;

use crate::link::{Backend, MacAddr, WaitMode};
use crate::Key;
use crate::Rank;
use ethbcast_proto::{Algorithm, DetectorConfig, EngineConfig, Gossip, BARRIER_ARITY};

use super::GroupError;

/// Where the member list comes from.
#[derive(Debug, Clone)]
pub enum Membership {
    /// MAC addresses in rank order.
    Explicit(Vec<MacAddr>),
    /// A file with one MAC address per line (rank = line order; `#` comments, blank lines
    /// ignored; a line may hold a host name before the MAC).
    Hostfile(std::path::PathBuf),
    /// Rank and size from the launcher's environment; MACs found by discovery.
    Env,
    /// Wait for `expected` members to announce themselves; ranks by sorted MAC.
    Discover {
        /// Members expected, this one included.
        expected: u16,
    },
}

/// Options of a group. Its `Debug` shows whether there is a key, never the key.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Group id (frames of other ids on the segment are ignored).
    pub group_id: u32,
    /// Link backend.
    pub backend: Backend,
    /// Wait mode.
    pub wait: WaitMode,
    /// Default broadcast algorithm: simple broadcast (see [`Algorithm`]).
    pub algorithm: Algorithm,
    /// How long a call may wait (join, bcast, barrier) before failing.
    pub timeout: Duration,
    /// Adjusts the engine configuration.
    pub tweak: Option<fn(&mut EngineConfig)>,
    /// Arity of the barrier's combining tree (at least the group size - 1: one coordinator);
    /// by default the member's ([`BARRIER_ARITY`]: flat up to 17 members).
    pub barrier_arity: u16,
    /// Shared group key (see [`key_from_passphrase`](crate::key_from_passphrase) and
    /// [`read_key_file`](crate::read_key_file)): the join and every frame are authenticated.
    /// Without one, joining fails unless `insecure` is set.
    pub key: Option<Key>,
    /// With a key: encrypt every frame this member sends (AES-256-GCM under a key of the
    /// session; see `docs/security.md`), so nobody who sees the segment reads the data. On
    /// by default; off, frames are authenticated only (a keyed BLAKE3 tag). A member takes
    /// both, so each member decides for its own frames. Without a key frames go in the
    /// clear whatever this says.
    pub encrypt: bool,
    /// Join without a key: any host of the segment can then join the group, send frames as
    /// any member, and broadcast data the members deliver, and every byte goes in the clear.
    /// Off by default.
    pub insecure: bool,
    /// Failure detection (gossip heartbeats, confirmation ping, eviction of the dead). Off by
    /// default: heartbeats only flow while a member is inside a call (or calls `progress`),
    /// so turn it on when members call into the library at least every `T_cleanup`.
    pub detector: Option<Detection>,
}

/// Failure-detection settings of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    /// Gossip schedule (the P2P-MPI paper's RR, BRR or DBRR).
    pub protocol: Gossip,
    /// Gossip period.
    pub t_gossip: Duration,
}

impl Detection {
    /// Detection bound: `T_cleanup` of the protocol plus the confirmation time and one period.
    pub fn bound(&self, size: u16) -> Duration {
        let cfg = DetectorConfig {
            protocol: self.protocol,
            ..DetectorConfig::new(Rank::new(0), size, self.t_gossip)
        };
        cfg.cleanup() + cfg.confirm_timeout + self.t_gossip
    }
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            group_id: 0xEB_CA57,
            backend: Backend::Ring,
            wait: WaitMode::Adaptive,
            algorithm: Algorithm::Simple,
            timeout: Duration::from_secs(30),
            tweak: None,
            barrier_arity: BARRIER_ARITY,
            key: None,
            encrypt: true,
            insecure: false,
            detector: None,
        }
    }
}

impl GroupOptions {
    /// The default options without a key, chosen explicitly: any host of the segment can
    /// join and inject frames ([`GroupOptions::insecure`]).
    pub fn insecure() -> Self {
        GroupOptions {
            insecure: true,
            ..GroupOptions::default()
        }
    }

    /// Refuses a group without a key unless `insecure` says so. Every way to open a group
    /// asks before it joins (no frame of a refused group is sent); [`Group::joined`](crate::Group::joined), which
    /// every way ends in, asks again of a keyless session.
    pub(crate) fn check_key(&self) -> Result<(), GroupError> {
        match (&self.key, self.insecure) {
            (None, false) => Err(GroupError::NoKey),
            _ => Ok(()),
        }
    }
}
