//! Nothing a member holds grows with the length of a run: a million broadcasts through the
//! members that `Group` runs, on the simulated switch, leave their queues and heap where a
//! hundred thousand left them.
//!
//! One test in this binary: the counting allocator sees every allocation.

use std::time::{Duration, Instant};

use ethbcast::cluster::{SimCluster, Workload};
use ethbcast::{port_mac, Rank, SimConfig, SimNet};
use ethbcast_proto::{Algorithm, Done, EngineConfig, Member, MemberConfig};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Every member calls `bcast` `calls` times, roots taking turns, and checks what it gets.
struct Calls {
    calls: u64,
    n: usize,
    at: Vec<u64>,
    in_call: Vec<bool>,
    wrong: u64,
    peak_events: usize,
}

fn payload(call: u64) -> Vec<u8> {
    call.to_be_bytes().to_vec()
}

impl Workload for Calls {
    fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
        self.peak_events = self.peak_events.max(m.queued_events());
        while m.poll_event().is_some() {}
        loop {
            if self.in_call[i] {
                match m.take_result() {
                    None => return,
                    Some(Ok(Done::Bcast(d))) if d == payload(self.at[i]) => {}
                    Some(_) => self.wrong += 1,
                }
                self.in_call[i] = false;
                self.at[i] += 1;
            }
            let c = self.at[i];
            if c >= self.calls {
                return;
            }
            let root = (c % self.n as u64) as u16;
            let data = if usize::from(root) == i {
                payload(c)
            } else {
                Vec::new()
            };
            m.bcast(now, Rank::new(root), data, Algorithm::Simple)
                .expect("a call starts");
            self.in_call[i] = true;
        }
    }
    fn done(&self) -> bool {
        self.at.iter().all(|&a| a >= self.calls)
    }
}

#[test]
fn a_million_broadcasts_leave_queues_and_heap_where_they_were() {
    let n = 3usize;
    let net = SimNet::new(SimConfig::new(n)).unwrap();
    let macs: Vec<_> = (0..n).map(|i| port_mac(i as u16)).collect();
    let members = (0..n)
        .map(|i| {
            let cfg = EngineConfig::new(0xB0, Rank::new(i as u16), n as u16);
            Member::new(net.now(), MemberConfig::new(cfg, macs.clone())).unwrap()
        })
        .collect();
    let mut cluster = SimCluster::new(net, members).unwrap();
    let mut w = Calls {
        calls: 0,
        n,
        at: vec![0; n],
        in_call: vec![false; n],
        wrong: 0,
        peak_events: 0,
    };
    let limit = Duration::from_secs(3600);
    let mut heap = Vec::new();
    for calls in [100_000u64, 1_000_000] {
        w.calls = calls;
        cluster.run(limit, &mut w).unwrap();
        assert!(w.done(), "every call completed");
        heap.push(ALLOC.live_bytes());
    }
    assert_eq!(w.wrong, 0, "every member got every message intact");
    assert!(w.peak_events <= 1, "events queued: {}", w.peak_events);
    let grown = heap[1].saturating_sub(heap[0]);
    assert!(
        grown < 64 * 1024,
        "heap after 10^5 calls {} B, after 10^6 {} B",
        heap[0],
        heap[1]
    );
    for m in cluster.members() {
        let s = m.stats();
        assert_eq!(s.events_dropped, 0);
        assert!(m.queued_events() == 0 && !m.in_call());
    }
}
