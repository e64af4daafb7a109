//! Broadcast latency on the simulated switch, in virtual time: the fallback of `demo` where
//! network namespaces cannot be created.
//!
//! For each (algorithm, group size, message size) a fresh simulated switch (1 Gbit/s links,
//! 5 µs switch latency, no faults) gets one group member per port, run by the library's
//! driver ([`SimCluster`]); every member calls `bcast` from rank 0 `repeat` times, and the root
//! starts a call only once every receiver finished the previous one and every member is idle
//! (as the test-bed's latency runs separate iterations). The latency of the last call (warm)
//! is the virtual time from the root's call until the last receiver's call returned. The
//! binomial tree runs here too: it is a call of the group API like the others.

use std::time::{Duration, Instant};

use ethbcast::cluster::{SimCluster, Workload};
use ethbcast::{
    port_mac, Algorithm, Done, EngineConfig, Member, MemberConfig, Rank, SimConfig, SimNet,
};

use super::bed::Summary;
use super::latency::Row;

/// Rank 0 broadcasts `repeat` times; each receiver calls `bcast` once per round.
struct Rounds {
    size: usize,
    repeat: usize,
    algo: Algorithm,
    /// Round each member is in, and whether its call is running.
    round: Vec<usize>,
    in_call: Vec<bool>,
    /// Receivers done with the current round.
    done: usize,
    started_at: Option<Instant>,
    last_at: Option<Instant>,
    error: Option<String>,
    latency: Option<Duration>,
}

impl Rounds {
    /// The root starts a round once every receiver finished the previous one and its own
    /// broadcasts are acknowledged; a receiver enters a round once the root did.
    fn may_start(&self, i: usize, m: &Member) -> bool {
        let n = self.round.len();
        let (r, root) = (self.round[i], self.round[0]);
        if i == 0 {
            self.done >= (n - 1) * root && m.is_idle()
        } else {
            r < root || (r == root && self.in_call[0])
        }
    }
}

impl Workload for Rounds {
    fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
        loop {
            if self.in_call[i] {
                match m.take_result() {
                    None => return,
                    Some(Ok(Done::Bcast(d))) if i == 0 || d.len() == self.size => {}
                    Some(Ok(_)) => {
                        self.error
                            .get_or_insert(format!("rank {i} got a message of another size"));
                    }
                    Some(Err(e)) => {
                        self.error.get_or_insert(format!("rank {i}: {e}"));
                    }
                }
                self.in_call[i] = false;
                if i != 0 {
                    self.done += 1;
                    self.last_at = Some(now);
                }
                self.round[i] += 1;
            }
            if self.round[i] >= self.repeat || !self.may_start(i, m) {
                return;
            }
            if i == 0 {
                if let (Some(s), Some(l)) = (self.started_at, self.last_at) {
                    self.latency = Some(l.saturating_duration_since(s));
                }
                self.started_at = Some(now);
            }
            let data = if i == 0 {
                vec![0x5A; self.size]
            } else {
                Vec::new()
            };
            if let Err(e) = m.bcast(now, Rank::new(0), data, self.algo) {
                self.error.get_or_insert(format!("rank {i}: {e}"));
                return;
            }
            self.in_call[i] = true;
        }
    }

    fn done(&self) -> bool {
        self.round.iter().all(|&r| r >= self.repeat) || self.error.is_some()
    }
}

/// Latency of one broadcast of `size` bytes from rank 0 to `nodes - 1` receivers, virtual µs.
pub fn one(nodes: u16, size: usize, algo: Algorithm, repeat: usize) -> Result<f64, String> {
    let n = usize::from(nodes);
    let net = SimNet::new(SimConfig {
        seed: 7,
        ..SimConfig::new(n)
    })
    .map_err(|e| e.to_string())?;
    let macs: std::sync::Arc<[_]> = (0..n).map(|i| port_mac(i as u16)).collect();
    let members = (0..n)
        .map(|i| {
            let cfg = EngineConfig::new(0xEB, Rank::new(i as u16), nodes);
            Member::new(net.now(), MemberConfig::new(cfg, macs.clone())).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut cluster = SimCluster::new(net, members).map_err(|e| e.to_string())?;
    let mut w = Rounds {
        size,
        repeat: repeat.max(1),
        algo,
        round: vec![0; n],
        in_call: vec![false; n],
        done: 0,
        started_at: None,
        last_at: None,
        error: None,
        latency: None,
    };
    cluster
        .run(Duration::from_secs(60), &mut w)
        .map_err(|e| e.to_string())?;
    if let Some(e) = w.error {
        return Err(e);
    }
    if !w.done() {
        return Err("the broadcasts did not complete within 60 s of virtual time".into());
    }
    if let (Some(s), Some(l)) = (w.started_at, w.last_at) {
        w.latency = Some(l.saturating_duration_since(s));
    }
    let l = w.latency.ok_or("no broadcast completed")?;
    Ok(l.as_secs_f64() * 1e6)
}

/// Rows for every (algorithm, group size, size), in virtual time (all four statistics are the
/// one deterministic value).
pub fn rows(nodes: &[usize], sizes: &[usize], algos: &[Algorithm]) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for &a in algos {
        for &k in nodes {
            for &s in sizes {
                let v = one(k as u16, s, a, 3)?;
                out.push(Row {
                    algo: a.to_string(),
                    nodes: k,
                    size: s,
                    stats: Summary {
                        mean80_us: v,
                        median_us: v,
                        p99_us: v,
                        max_us: v,
                    },
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_messages_take_longer_in_virtual_time() {
        let small = one(4, 8, Algorithm::PushPull, 2).unwrap();
        let large = one(4, 65536, Algorithm::PushPull, 2).unwrap();
        assert!(small > 0.0 && large > small, "{small} {large}");
        // 64 KiB at 1 Gbit/s is at least ~524 µs on the wire.
        assert!(large > 500.0, "{large}");
    }

    #[test]
    fn the_tree_takes_log_n_hops_and_hardware_broadcast_one() {
        let tree = one(8, 256, Algorithm::Tree, 2).unwrap();
        let simple = one(8, 256, Algorithm::Simple, 2).unwrap();
        assert!(tree > 2.5 * simple, "tree {tree} µs, simple {simple} µs");
    }
}
