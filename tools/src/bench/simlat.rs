//! Broadcast latency on the simulated switch, in virtual time: the fallback of `demo` where
//! network namespaces cannot be created.
//!
//! For each (algorithm, group size, message size) a fresh [`SimNet`] (1 Gbit/s links, 5 µs
//! switch latency, no faults) gets one engine per port; rank 0 broadcasts `repeat` messages one
//! after another (the next starts once every receiver has the previous one), and the latency of
//! the last one (warm) is the virtual time from the root's call until the last receiver
//! delivered it. Only the hardware-broadcast algorithms run here: the point-to-point binomial
//! tree lives in the group layer on real links, not in the simulator's engine-level harness.

use std::time::{Duration, Instant};

use ethbcast::link::sim::{Faults, SimConfig, SimNet, SimPort};
use ethbcast::link::{Link, BROADCAST_MAC};
use ethbcast::proto::{Algo, Config, Dest, Engine, Event};

use super::latency::Row;

/// Latency of one broadcast of `size` bytes from rank 0 to `nodes - 1` receivers, virtual µs.
pub fn one(nodes: u16, size: usize, algo: Algo, repeat: usize) -> Result<f64, String> {
    let n = usize::from(nodes);
    let net = SimNet::new(SimConfig {
        ports: n,
        rate_bps: Some(1_000_000_000),
        latency: Duration::from_micros(5),
        mtu: 1500,
        seed: 7,
        faults: Faults::NONE,
        per_port: Vec::new(),
        switch_buffer: None,
    })
    .map_err(|e| e.to_string())?;
    let mut members: Vec<(Engine, SimPort)> = (0..n)
        .map(|i| {
            let cfg = Config::new(0xEB, i as u16, nodes);
            Ok((
                Engine::new(cfg).map_err(|e| e.to_string())?,
                net.port(i).map_err(|e| e.to_string())?,
            ))
        })
        .collect::<Result<_, String>>()?;
    let macs: Vec<_> = members.iter().map(|m| m.1.local_mac()).collect();
    let mut buf = vec![0u8; 1500];
    let mut last = 0.0;
    for _ in 0..repeat.max(1) {
        let t0: Instant = net.now();
        members[0]
            .0
            .bcast(t0, vec![0x5A; size], algo)
            .map_err(|e| e.to_string())?;
        let mut got = 0usize;
        let mut last_at = t0;
        let limit = t0 + Duration::from_secs(60);
        while got < n - 1 {
            let now = net.now();
            for (e, p) in members.iter_mut() {
                while let Some(t) = e.poll_transmit(now, &mut buf) {
                    let dst = match t.dst {
                        Dest::All => BROADCAST_MAC,
                        Dest::Rank(r) => macs[usize::from(r)],
                    };
                    p.send(dst, &buf[..t.len]).map_err(|e| e.to_string())?;
                }
            }
            let next = [
                net.next_event(),
                members.iter().filter_map(|m| m.0.poll_timeout()).min(),
            ]
            .into_iter()
            .flatten()
            .min()
            .ok_or("the simulation stalled")?;
            if next > limit {
                return Err("the broadcast did not complete within 60 s of virtual time".into());
            }
            net.advance_to(next.max(now));
            let now = net.now();
            for (e, p) in members.iter_mut() {
                p.recv(None, &mut |_, pdu| {
                    let _ = e.handle_frame(now, pdu);
                })
                .map_err(|e| e.to_string())?;
                e.handle_timeout(now);
                while let Some(ev) = e.poll_event() {
                    if let Event::Delivered { data, .. } = ev {
                        if data.len() != size {
                            return Err(format!("delivered {} bytes, sent {size}", data.len()));
                        }
                        got += 1;
                        last_at = now;
                    }
                }
            }
        }
        last = last_at.duration_since(t0).as_secs_f64() * 1e6;
        // Let acknowledgements settle before the next broadcast.
        while !members.iter().all(|m| m.0.is_idle()) {
            let now = net.now();
            for (e, p) in members.iter_mut() {
                while let Some(t) = e.poll_transmit(now, &mut buf) {
                    let dst = match t.dst {
                        Dest::All => BROADCAST_MAC,
                        Dest::Rank(r) => macs[usize::from(r)],
                    };
                    p.send(dst, &buf[..t.len]).map_err(|e| e.to_string())?;
                }
            }
            let Some(next) = [
                net.next_event(),
                members.iter().filter_map(|m| m.0.poll_timeout()).min(),
            ]
            .into_iter()
            .flatten()
            .min() else {
                break;
            };
            if next > limit {
                break;
            }
            net.advance_to(next.max(now));
            let now = net.now();
            for (e, p) in members.iter_mut() {
                p.recv(None, &mut |_, pdu| {
                    let _ = e.handle_frame(now, pdu);
                })
                .map_err(|e| e.to_string())?;
                e.handle_timeout(now);
                while e.poll_event().is_some() {}
            }
        }
    }
    Ok(last)
}

/// Rows for every (algorithm, group size, size), in virtual time (all four statistics are the
/// one deterministic value).
pub fn rows(nodes: &[usize], sizes: &[usize], algos: &[Algo]) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for &a in algos {
        for &k in nodes {
            for &s in sizes {
                let v = one(k as u16, s, a, 3)?;
                out.push(Row {
                    algo: match a {
                        Algo::PushPull => "ppbcast".into(),
                        Algo::Simple => "sbcast".into(),
                    },
                    nodes: k,
                    size: s,
                    mean80_us: v,
                    median_us: v,
                    p99_us: v,
                    max_us: v,
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
        let small = one(4, 8, Algo::PushPull, 2).unwrap();
        let large = one(4, 65536, Algo::PushPull, 2).unwrap();
        assert!(small > 0.0 && large > small, "{small} {large}");
        // 64 KiB at 1 Gbit/s is at least ~524 µs on the wire.
        assert!(large > 500.0, "{large}");
    }
}
