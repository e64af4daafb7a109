//! Allgather and allreduce on the simulated switch, in virtual time: every member's part over
//! hardware broadcast (the group's [`Allgather`], `p` roots at once) against recursive
//! doubling over the members' reliable point-to-point channels (what MPI libraries run for
//! short messages over TCP: `log2(p)` rounds, each a message to one partner and one from it).
//!
//! Why: over point-to-point links an allgather of `p` parts of `s` bytes costs `log2(p)`
//! round trips and `(p - 1)·s` bytes into each member; over hardware broadcast the same bytes
//! and one round. An allreduce of `n` bytes by recursive doubling moves `n` bytes per round, so
//! the broadcast one (an allgather of the contributions, reduced locally) moves `(p - 1)·n`
//! and wins only while `p·n` is small against the rounds it saves. [`race`] measures where,
//! up to hundreds of members, so that the interposer's limits come from a measurement.
//!
//! Every member runs the same number of calls back to back (MPI style: the next call starts
//! when this member's previous one returned); the time of a call is the run's virtual time
//! over the calls. No faults: the links' rate and latency alone.

use std::time::{Duration, Instant};

use crate::cluster::{ClusterError, RunEnd, SimCluster, Traffic, Workload};
use crate::group::Allgather;
use crate::link::sim::port_mac;
use crate::Rank;
use ethbcast_proto::{Algorithm, EngineConfig, Member, MemberConfig};

/// What one race measured: virtual µs per call of each way.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Race {
    /// Members.
    pub nodes: u16,
    /// Bytes of each member's part (allgather) or contribution (allreduce).
    pub bytes: usize,
    /// Allgather over hardware broadcast.
    pub bcast_allgather_us: f64,
    /// Allgather by recursive doubling over point-to-point channels.
    pub p2p_allgather_us: f64,
    /// Allreduce by recursive doubling over point-to-point channels (the broadcast allreduce
    /// costs what the broadcast allgather does, plus the local reduction).
    pub p2p_allreduce_us: f64,
}

/// The three ways on `nodes` members (a power of two, at least 2) with parts of `bytes`,
/// `calls` calls each, links of `rate_bps` and 5 µs latency.
pub fn race(nodes: u16, bytes: usize, calls: usize, rate_bps: u64) -> Result<Race, ClusterError> {
    if nodes < 2 || !nodes.is_power_of_two() {
        return Err(ClusterError::Scenario(format!(
            "{nodes} members: recursive doubling needs a power of two"
        )));
    }
    let time = |way: Way| -> Result<f64, ClusterError> {
        let mut t = Traffic::new(nodes, 0);
        t.rate_bps = Some(rate_bps);
        let n = usize::from(nodes);
        let net = t.switch(n, Vec::new())?;
        let start = net.now();
        let macs: std::sync::Arc<[_]> = (0..n).map(|i| port_mac(i as u16)).collect();
        let members = (0..n)
            .map(|i| {
                let mut cfg = EngineConfig::new(0xC011, Rank::new(i as u16), nodes);
                // Every member holds a receive stream per root (p² in the process): room for
                // a few parts each, not the default megabyte.
                cfg.pushed_buffer = cfg.pushed_buffer.min(64 << 10).max(4 * bytes);
                Ok(Member::new(start, MemberConfig::new(cfg, macs.clone()))?)
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        let mut cluster = SimCluster::new(net, members)?;
        let mut w = Calls {
            way,
            bytes,
            calls,
            done: vec![0; n],
            state: (0..n).map(|_| State::Idle).collect(),
            failed: None,
            last: start,
        };
        let end = cluster.run(Duration::from_secs(3600), &mut w)?;
        if let Some(e) = w.failed {
            return Err(ClusterError::Scenario(e));
        }
        if end != RunEnd::Done {
            return Err(ClusterError::Scenario(format!("{way:?} ended {end:?}")));
        }
        // Until the last call returned (the run goes on until the last acknowledgements).
        let us = w.last.duration_since(start).as_secs_f64() * 1e6;
        Ok(us / calls.max(1) as f64)
    };
    Ok(Race {
        nodes,
        bytes,
        bcast_allgather_us: time(Way::Broadcast)?,
        p2p_allgather_us: time(Way::DoublingGather)?,
        p2p_allreduce_us: time(Way::DoublingReduce)?,
    })
}

#[derive(Debug, Clone, Copy)]
enum Way {
    Broadcast,
    DoublingGather,
    DoublingReduce,
}

enum State {
    Idle,
    /// An allgather over the group's broadcast streams.
    Gathering(Allgather, Vec<u8>),
    /// Recursive doubling: the round, and whether this round's message left.
    Round(u32, bool),
}

struct Calls {
    way: Way,
    bytes: usize,
    calls: usize,
    done: Vec<usize>,
    state: Vec<State>,
    failed: Option<String>,
    /// When a call last returned.
    last: Instant,
}

impl Workload for Calls {
    fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
        let n = m.size();
        let rounds = n.trailing_zeros();
        loop {
            if self.done[i] >= self.calls || self.failed.is_some() {
                return;
            }
            match &mut self.state[i] {
                State::Idle => {
                    let started = match self.way {
                        Way::Broadcast => {
                            let mut part = vec![i as u8; self.bytes];
                            let largest = part.len();
                            Allgather::start(now, m, &mut part, Algorithm::Simple, largest)
                                .map(|ag| State::Gathering(ag, part))
                        }
                        _ => Ok(State::Round(0, false)),
                    };
                    match started {
                        Ok(s) => self.state[i] = s,
                        Err(e) => self.failed = Some(format!("member {i}: {e}")),
                    }
                }
                State::Gathering(ag, spare) => {
                    let Some(end) = ag.poll(now, m, spare, &mut |_, _| Ok(())) else {
                        return;
                    };
                    match end {
                        Ok(()) => {
                            self.done[i] += 1;
                            self.last = now;
                            self.state[i] = State::Idle;
                        }
                        Err(e) => self.failed = Some(format!("member {i}: {e}")),
                    }
                }
                State::Round(k, sent) => {
                    if *k == rounds {
                        self.done[i] += 1;
                        self.last = now;
                        self.state[i] = State::Idle;
                        continue;
                    }
                    let partner = Rank::new((i as u16) ^ (1 << *k));
                    if !*sent {
                        // Allgather: the blocks gathered so far, 2^k parts; allreduce: one
                        // contribution's worth every round.
                        let len = match self.way {
                            Way::DoublingGather => self.bytes << *k,
                            _ => self.bytes,
                        };
                        if let Err(e) = m.send_to(now, partner, vec![0; len]) {
                            self.failed = Some(format!("member {i}: {e}"));
                            return;
                        }
                        *sent = true;
                    }
                    if m.take_p2p(now, partner).is_none() {
                        return;
                    }
                    *k += 1;
                    *sent = false;
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.failed.is_some() || self.done.iter().all(|&d| d >= self.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On 8 members at 1 Gbit/s, a short allgather over broadcast takes one round where
    /// recursive doubling takes three.
    #[test]
    fn a_short_allgather_over_broadcast_beats_three_rounds_of_point_to_point() {
        let r = race(8, 64, 20, 1_000_000_000).unwrap();
        assert!(r.bcast_allgather_us < r.p2p_allgather_us, "{r:?}");
        assert!(r.bcast_allgather_us < r.p2p_allreduce_us, "{r:?}");
    }
}
