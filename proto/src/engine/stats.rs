//! The engine's counters.

use crate::wire::WireError;

use super::DropReason;

/// Counters of one engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Data frames broadcast for the first time.
    pub data_frames: u64,
    /// Repair frames sent (point-to-point or re-broadcast).
    pub repair_frames: u64,
    /// Of which re-broadcasts.
    pub rebroadcasts: u64,
    /// Members switched to point-to-point delivery (fail-over; a trial of broadcast that
    /// fails switches a member again and counts again).
    pub failovers: u64,
    /// Members switched back to broadcast: a trial showed that broadcast reaches them again.
    pub failbacks: u64,
    /// ACK frames sent.
    pub ack_frames: u64,
    /// NACK frames sent.
    pub nack_frames: u64,
    /// Pull requests sent.
    pub pull_frames: u64,
    /// ACK, NACK, pull and tree acknowledgement frames received as root: the root's inbound
    /// control traffic.
    pub acks_handled: u64,
    /// Of `acks_handled`: NACKs (repair requests that reached the root).
    pub nacks_handled: u64,
    /// Of `acks_handled`: acknowledgements up the tree (from the root's children).
    pub tree_acks_handled: u64,
    /// Of `acks_handled`: answers to the root's probes and polls (acknowledgements sent
    /// straight to it).
    pub probe_answers_handled: u64,
    /// Acknowledgement polls sent as root ([`Control::AckPoll`](crate::Control::AckPoll)).
    pub ack_polls: u64,
    /// Acknowledgements sent up the acknowledgement tree (besides `ack_frames`, the ones
    /// sent to a root directly).
    pub tree_ack_frames: u64,
    /// Tree acknowledgements received from a member in another view or not a child here,
    /// and ignored.
    pub tree_acks_ignored: u64,
    /// Of the NACK frames sent, those sent to a peer (peer repair).
    pub peer_nacks: u64,
    /// Repair frames served to peers from this member's copy of a root's stream.
    pub peer_repairs: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Bytes delivered to the application.
    pub delivered_bytes: u64,
    /// Messages handed to `bcast`.
    pub sent_msgs: u64,
    /// Control frames of this member's own (acknowledgements, requests, reports, repairs for
    /// fellows, the layers above's) dropped because the outbox held `EngineConfig::outbox` frames
    /// already: they were made faster than the link took them.
    pub outbox_full: u64,
    /// Dropped frames by reason.
    pub drops: DropStats,
}

/// Dropped frames by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Truncated frames.
    pub truncated: u64,
    /// CRC mismatches.
    pub bad_crc: u64,
    /// Unknown version.
    pub bad_version: u64,
    /// Unknown kind.
    pub unknown_kind: u64,
    /// Inconsistent header.
    pub bad_geometry: u64,
    /// Other groups' frames.
    pub foreign_group: u64,
    /// Not from a member.
    pub not_member: u64,
    /// Own frames.
    pub own: u64,
    /// Addressed to someone else.
    pub not_for_me: u64,
    /// From evicted members.
    pub evicted: u64,
    /// Already delivered.
    pub stale: u64,
    /// Beyond the window.
    pub far_future: u64,
    /// Already held.
    pub duplicate: u64,
    /// Contradicting the stream.
    pub protocol: u64,
    /// No room for unposted data.
    pub no_room: u64,
    /// Frames of messages longer than `max_message`.
    pub too_long: u64,
    /// Missing or invalid keyed MAC.
    pub bad_mac: u64,
    /// Control frames whose fields contradict their kind.
    pub bad_control: u64,
    /// Control frames refused as replays.
    pub replayed: u64,
}

impl DropStats {
    pub(super) fn count(&mut self, d: &DropReason) {
        let c = match d {
            DropReason::Malformed(WireError::Truncated { .. }) => &mut self.truncated,
            DropReason::Malformed(WireError::BadCrc) => &mut self.bad_crc,
            DropReason::Malformed(WireError::BadVersion(_)) => &mut self.bad_version,
            DropReason::Malformed(WireError::UnknownKind(_)) => &mut self.unknown_kind,
            DropReason::Malformed(_) => &mut self.bad_geometry,
            DropReason::ForeignGroup(_) => &mut self.foreign_group,
            DropReason::NotMember(_) => &mut self.not_member,
            DropReason::Own => &mut self.own,
            DropReason::NotForMe(_) => &mut self.not_for_me,
            DropReason::Evicted(_) => &mut self.evicted,
            DropReason::Stale(_) => &mut self.stale,
            DropReason::FarFuture(_) => &mut self.far_future,
            DropReason::Duplicate(_) => &mut self.duplicate,
            DropReason::Protocol(_) => &mut self.protocol,
            DropReason::NoRoom => &mut self.no_room,
            DropReason::TooLong { .. } => &mut self.too_long,
            DropReason::BadMac => &mut self.bad_mac,
            DropReason::BadControl(_) => &mut self.bad_control,
            DropReason::Replayed => &mut self.replayed,
        };
        *c += 1;
    }

    /// Sum of all drops.
    pub fn total(&self) -> u64 {
        self.truncated
            + self.bad_crc
            + self.bad_version
            + self.unknown_kind
            + self.bad_geometry
            + self.foreign_group
            + self.not_member
            + self.own
            + self.not_for_me
            + self.evicted
            + self.stale
            + self.far_future
            + self.duplicate
            + self.protocol
            + self.no_room
            + self.too_long
            + self.bad_mac
            + self.bad_control
            + self.replayed
    }
}
