//! How a member is configured: its engine's configuration, its peers, its failure detector.

use std::sync::Arc;

use crate::detect::DetectorConfig;
use crate::engine::EngineConfig;
use crate::join::LateRoster;
use crate::wire::ethernet::{MacAddr, BROADCAST_MAC};
use crate::Rank;

/// Everything a member is built from.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The group engine's configuration (group id, rank, size, key, window, ...).
    pub engine: EngineConfig,
    /// MAC address of every rank, in rank order (shared: the members of a simulated group
    /// hold one table, not one each).
    pub peers: Arc<[MacAddr]>,
    /// Where frames for every member go: the broadcast address, or the group's multicast
    /// address.
    pub group_mac: MacAddr,
    /// Failure detection (gossip heartbeats, confirmation ping, eviction of the dead).
    pub detector: Option<DetectorConfig>,
    /// Arity of the broadcast barrier's combining tree ([`BARRIER_ARITY`] by default).
    pub barrier_arity: u16,
    /// Receives kept posted per root ahead of the application, for members that consume a stream of
    /// broadcasts as [`Event::Delivered`](super::Event::Delivered) (0: a receive is posted by each
    /// `bcast` call, the MPI way).
    pub prepost: usize,
    /// How to confirm the join's roster if the coordinator repeats it after this member
    /// joined (its confirmation was lost): from [`crate::join::Joined::late`].
    pub late: Option<LateRoster>,
    /// The ranks whose broadcasts and point-to-point messages this member takes (`None`:
    /// every member's). A frame of another rank's stream or channel is dropped before any
    /// receive stream, channel or receive is made for it: a stream's receivers take the
    /// root's alone, so that without a key a host speaking as a fellow receiver makes them
    /// reserve nothing.
    pub senders: Option<Vec<Rank>>,
}

/// The broadcast barrier's default arity: groups of up to 17 members are flat, so every
/// arrival goes straight to the root and no member's waits for another's to be combined and
/// forwarded; every member other than the root then does the same work before the release
/// (with arity 4, the member that combined three others' arrivals left each barrier last).
/// Larger groups get a tree of depth `log16(n)`.
pub const BARRIER_ARITY: u16 = 16;

impl MemberConfig {
    /// A member of the group `engine` describes, with the MAC of every rank.
    pub fn new(engine: EngineConfig, peers: impl Into<Arc<[MacAddr]>>) -> MemberConfig {
        MemberConfig {
            engine,
            peers: peers.into(),
            group_mac: BROADCAST_MAC,
            detector: None,
            barrier_arity: BARRIER_ARITY,
            prepost: 0,
            late: None,
            senders: None,
        }
    }
}
