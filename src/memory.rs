//! Memory accounting: what EQA saves, computed from the structures really allocated.
//!
//! Section 4.2 of the EQA paper compares two ways to give every member a reliable channel to
//! `n` destinations. With point-to-point channels each one needs a send-only directed point
//! (SDP) and a receive-only one (RDP): `(s_SDP + s_RDP)·n`. With hardware broadcast and EQA
//! one SDP is shared and each further destination costs a lightweight LDP:
//! `s_SDP + (n-1)·s_LDP + n·s_RDP`. The fraction saved is
//! `M_save(n) = 1 - HB(n) / P2P(n) = (s_SDP - s_LDP)(n-1) / ((s_SDP + s_RDP)·n)`,
//! which the paper gives as `0.386(1 - 1/n)`.
//!
//! Here the sizes are not constants: [`sizes`] builds a real engine with the configuration and
//! adds up what its structures own (struct sizes plus heap capacity). The counting-allocator
//! test checks that this agrees with what the allocator really hands out.

use crate::Rank;
use ethbcast_proto::{Engine, EngineConfig, HardwareAlgorithm};

/// Which queue sizes to account for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The queue sizes of the EQA paper.
    Paper,
    /// This crate's defaults.
    Default,
}

ethbcast_proto::spelled!(Profile, "profile", {
    Paper => "paper",
    Default => "default",
});

impl Profile {
    /// The engine configuration of this profile for member `rank` of `size`.
    pub fn config(self, rank: Rank, size: u16) -> EngineConfig {
        match self {
            Profile::Paper => EngineConfig::paper(0, rank, size),
            Profile::Default => EngineConfig::new(0, rank, size),
        }
    }
}

/// Sizes of the three kinds of directed point, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// A send-only directed point: send queue, send-side pushed buffer, retransmission buffer.
    pub s_sdp: usize,
    /// A receive-only directed point: receive queue, pushed buffer, receive window.
    pub s_rdp: usize,
    /// A lightweight directed point: a cursor structure and its send (repair) queue.
    pub s_ldp: usize,
}

/// Measures the sizes from the structures a real engine of `profile` allocates (in a group
/// of two: the sizes below [`ethbcast_proto::ACK_TREE_FROM`] members). `now` is the instant the
/// engine is built and driven at (the caller's clock: any instant gives the same sizes).
pub fn sizes(profile: Profile, now: std::time::Instant) -> Sizes {
    sizes_for(profile, 2, now)
}

/// The sizes in a group of `n` members: the default window grows with the acknowledgement
/// tree from [`ethbcast_proto::ACK_TREE_FROM`] members (see [`ethbcast_proto::default_window`]),
/// and with it `s_SDP` and `s_RDP`.
pub fn sizes_for(profile: Profile, n: u16, now: std::time::Instant) -> Sizes {
    let cfg = profile.config(Rank::new(0), n.max(2));
    let mut engine = Engine::new(cfg).expect("profile configurations are valid");
    // Create the receive stream of root 1 (streams are created when a root is first heard).
    let _ = engine.post_recv(now, Rank::new(1), 0);
    // Make the destination structures (a member makes them at its first broadcast).
    let _ = engine.bcast(now, Vec::new(), HardwareAlgorithm::Simple);
    let tx = engine.sender();
    let ldp = &tx.eqa().dests()[0];
    let s_ldp = std::mem::size_of_val(ldp) + ldp.heap_bytes();
    let s_sdp = std::mem::size_of_val(tx) + tx.heap_bytes_without_dests() + engine.outbox_bytes();
    let rx = engine
        .receiver(Rank::new(1))
        .expect("stream created by post_recv");
    let s_rdp = std::mem::size_of_val(rx) + rx.heap_bytes();
    Sizes {
        s_sdp,
        s_rdp,
        s_ldp,
    }
}

impl Sizes {
    /// Point-to-point total `(s_SDP + s_RDP)·n`.
    pub fn p2p(&self, n: usize) -> usize {
        (self.s_sdp + self.s_rdp) * n
    }
    /// Hardware-broadcast total `s_SDP + (n-1)·s_LDP + n·s_RDP`.
    pub fn hb(&self, n: usize) -> usize {
        self.s_sdp + n.saturating_sub(1) * self.s_ldp + n * self.s_rdp
    }
    /// Fraction of memory saved, `M_save(n)`.
    pub fn m_save(&self, n: usize) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let p = self.p2p(n) as f64;
        (p - self.hb(n) as f64) / p
    }
    /// Bytes one host spends on a job of `hosts` hosts with `k` ranks each when every rank
    /// is its own member (its own socket) of the group of `hosts·k`: `k·HB(hosts·k)`.
    pub fn host_socket_per_rank(&self, hosts: usize, k: usize) -> usize {
        k * self.hb(hosts * k)
    }
    /// Bytes one host spends when only its owner is a member of the group of `hosts` and its
    /// `k` ranks share the host's ring (the default geometry): `HB(hosts)` plus the segment,
    /// which holds each message once for all `k` ranks and a cursor block per rank.
    pub fn host_shared(&self, hosts: usize, k: usize) -> usize {
        self.hb(hosts) + crate::host_ring::Layout::new(k).segment_bytes()
    }
    /// The constant `c` of `M_save(n) = c(1 - 1/n)`.
    pub fn m_save_coefficient(&self) -> f64 {
        (self.s_sdp as f64 - self.s_ldp as f64) / (self.s_sdp + self.s_rdp) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{SimConfig, SimNet};

    /// An instant of the simulator's virtual clock: the sizes do not depend on it.
    fn sizes(profile: Profile) -> Sizes {
        let net = SimNet::new(SimConfig::new(2)).expect("a valid switch");
        super::sizes(profile, net.now())
    }

    /// The paper's totals (33.8, 41.4, 4.4 "Kbytes") are read with 1 KB = 1000 bytes; its
    /// queue sizes (4, 12, 24 KB) are allocated as 1024-byte kilobytes.
    fn within(actual: usize, paper_kb: f64, tol: f64) -> bool {
        let want = paper_kb * 1000.0;
        ((actual as f64 - want) / want).abs() <= tol
    }

    /// Several ranks per host: the shared ring costs less than a member per rank from two
    /// ranks per host on, and the gap grows with the ranks per host (each socket-per-rank
    /// member keeps a receive point per member of the larger group).
    #[test]
    fn sharing_a_host_costs_less_than_a_member_per_rank() {
        for profile in [Profile::Paper, Profile::Default] {
            let s = sizes(profile);
            let hosts = 8;
            assert_eq!(
                s.host_socket_per_rank(hosts, 1),
                s.hb(hosts),
                "one rank per host is the plain group"
            );
            let mut last_saving = 0;
            for k in [2, 4, 8] {
                let nic = s.host_socket_per_rank(hosts, k);
                let shared = s.host_shared(hosts, k);
                assert!(
                    shared < nic,
                    "{profile:?} k={k}: shared {shared} B, sockets {nic} B"
                );
                assert!(nic - shared > last_saving, "{profile:?} k={k}");
                last_saving = nic - shared;
            }
        }
    }

    #[test]
    fn the_paper_profile_reproduces_the_papers_sizes() {
        let s = sizes(Profile::Paper);
        assert!(within(s.s_sdp, 33.8, 0.03), "s_SDP = {} B", s.s_sdp);
        assert!(within(s.s_rdp, 41.4, 0.03), "s_RDP = {} B", s.s_rdp);
        assert!(within(s.s_ldp, 4.4, 0.03), "s_LDP = {} B", s.s_ldp);
        assert!(
            (s.m_save(128) - 0.383).abs() <= 0.005,
            "M_save(128) = {}",
            s.m_save(128)
        );
    }

    #[test]
    fn m_save_follows_its_closed_form() {
        let s = sizes(Profile::Default);
        for n in [1usize, 2, 8, 128, 1024] {
            let closed = s.m_save_coefficient() * (1.0 - 1.0 / n as f64);
            assert!((s.m_save(n) - closed).abs() < 1e-9, "n = {n}");
        }
        assert_eq!(s.m_save(1), 0.0, "one member saves nothing");
    }
}
