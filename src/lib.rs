//! ethbcast: reliable broadcast over raw Ethernet that uses the switch's hardware broadcast.
//!
//! One broadcast frame, sent once by the root, reaches every member of the segment; a shared
//! retransmission buffer and point-to-point repair make it reliable. The design is the
//! Enhanced Queue Architecture of Wong & Wang, *Efficient Reliable Broadcast for Commodity
//! Clusters*: one buffer for all destinations, a lightweight cursor per destination.
//!
//! The protocol itself is the sans-IO crate `ethbcast-proto` (frames and time in, frames and
//! events out); this crate runs it on real media: the links (AF_PACKET rings, plain socket,
//! AF_XDP, pnet, the simulated switch) behind one [`Link`] trait, the shared-memory ring of the
//! ranks of one host ([`HostGroup`]), the loop that moves frames between a machine and a link,
//! and the blocking API a program calls: [`Group`] (`bcast`, `barrier`) and [`Stream`].
//!
//! Every name of the API is re-exported here, the core's types that its signatures use
//! included; the modules themselves are private. With the `sim` feature, `memory` (the
//! paper's memory accounting, computed from the real structures), `cluster` and
//! `simgroup` (whole groups on the simulated switch, with a delivery checker) are there too,
//! for the tools and the tests.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![warn(unnameable_types)]

mod driver;
mod group;
mod host_ring;
mod keyfile;
mod link;

#[cfg(feature = "sim")]
pub mod cluster;
#[cfg(feature = "sim")]
pub mod memory;
#[cfg(feature = "sim")]
pub mod simcoll;
#[cfg(feature = "sim")]
pub mod simgroup;
/// The core crate, whose machines the simulator's harnesses run: every type a member's
/// methods name is there.
#[cfg(feature = "sim")]
pub use ethbcast_proto as proto;
/// What the simulator's harnesses run and report: the member itself, as the core defines it.
#[cfg(feature = "sim")]
pub use ethbcast_proto::{Done, Machine, Member, MemberConfig};

// The core's types that the API's signatures name (the core's own names, from its root).
pub use ethbcast_proto::{
    group_mac, parse_mac, Algorithm, BarrierAlgo, BarrierError, BatchEnd, Clock, ConfigError, Dest,
    DestProgress, DetectorConfig, DropStats, EngineConfig, EngineStats, Event, Expect, Frames,
    Gossip, GroupAddress, GroupAddressError, HardwareAlgorithm, Held, JoinConfig, JoinError,
    JoinStats, Joined, Key, Kind, LateRoster, MacAddr, MemberError, MemberStats, Message, Observe,
    Observer, Piece, PostError, Rank, SendError, Session, SessionEnded, Transmit, WireError,
    BROADCAST_MAC, MAX_WINDOW,
};
// The system layer's types that the links' signatures name.
#[cfg(target_os = "linux")]
pub use ethbcast_sys::{
    bpf::XdpMode,
    iface::Interface,
    shm::ShmError,
    xsk::{XskConfig, XskStats},
};

/// What a program that broadcasts calls.
pub use group::{
    join, key_from_passphrase, key_from_passphrase_salt, parse_hostfile, placement_from_env,
    rank_size_from_env, Detection, Footprint, Group, GroupError, GroupOptions, HostEntry,
    HostError, HostGroup, HostOptions, JoinSeen, Membership, Outcome, PassphraseError, Placement,
    Role, ServeWait, ServeWake, Settle, Stream, StreamOptions, JOB_TOKEN_MIN, JOB_TOKEN_VAR,
    PASSPHRASE_COST,
};
pub use host_ring::{HostRingError, Hosts, Wait as HostWait};
pub use keyfile::{
    key_from_env, read_key_file, write_new_key, write_new_passphrase, KeyFileError, KEY_FILE_ENV,
    PASSPHRASE_TAG, RAW_KEY_TAG, SALT_LEN,
};

pub use link::measure;
pub use link::pnet::{PnetConfig, PnetLink};
#[cfg(target_os = "linux")]
pub use link::ring::{RingConfig, RingLink, RingLinkConfig, TxMode};
pub use link::sim::{port_mac, Faults, SimConfig, SimError, SimNet, SimPort, SimStats};
#[cfg(target_os = "linux")]
pub use link::socket::{SocketConfig, SocketLink};
#[cfg(target_os = "linux")]
pub use link::xdp::{XdpLink, XdpLinkConfig};
/// The links: one trait, the media that implement it, and how to open one by name.
pub use link::{
    check_mtu, open as open_link, open_sized as open_link_sized, probe as probe_link, Backend,
    Link, LinkError, WaitMode, BACKEND_ENV, DOZE_INTERVAL, MIN_MTU,
};
