//! Measures every raw-Ethernet backend over a veth pair in a private network namespace:
//! small-frame round-trip latency (ping-pong, median and p99) and frames per second.
//!
//! Run as root (it creates and deletes the namespace `ebsys-<pid>-pp`):
//!
//! ```text
//! cargo run --profile test --example pingpong -- [round-trips] [rate-seconds] [wait-modes]
//! ```
//!
//! defaults: 2000 round trips of 64-byte PDUs, 2 s of rate per backend, wait modes
//! `adaptive,block,spin`. `ring-mmsg` is the ring backend sending with `sendmmsg` batches
//! instead of the TX ring. veth numbers measure the software path (system calls, copies,
//! wake-ups), which is what the backends differ in; a real NIC adds its own latency.

#[path = "../sys/tests/common/netns.rs"]
mod netns;

use ethbcast::measure::{blast, echo, ping, sink};
use ethbcast::{Link, LinkError, MacAddr, WaitMode};
use ethbcast::{PnetConfig, PnetLink};
use ethbcast::{RingLink, RingLinkConfig, TxMode};
use ethbcast::{SocketConfig, SocketLink};
use netns::{NetnsPair, END_A, END_B};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

const PDU: usize = 64;

fn open(backend: &str, iface: &str, wait: WaitMode) -> Result<Box<dyn Link>, LinkError> {
    Ok(match backend {
        "ring" | "ring-mmsg" => Box::new(RingLink::open(
            iface,
            &RingLinkConfig {
                wait,
                tx_mode: if backend == "ring" {
                    TxMode::Ring
                } else {
                    TxMode::Batch
                },
                ..Default::default()
            },
        )?),
        "socket" => Box::new(SocketLink::open(
            iface,
            &SocketConfig {
                wait,
                ..Default::default()
            },
        )?),
        _ => Box::new(PnetLink::open(
            iface,
            &PnetConfig {
                wait,
                ..Default::default()
            },
        )?),
    })
}

/// Runs `client` on END_A and `server` on END_B, each on its own thread inside the namespace;
/// the server runs until the client is done.
fn pair<T: Send>(
    ns: &NetnsPair,
    backend: &str,
    wait: WaitMode,
    client: impl FnOnce(&mut dyn Link, [u8; 6]) -> Result<T, LinkError> + Send,
    server: impl FnOnce(&mut dyn Link, &AtomicBool) -> Result<u64, LinkError> + Send,
) -> Result<(T, u64), String> {
    let stop = AtomicBool::new(false);
    let (mac_tx, mac_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let srv = s.spawn(|| -> Result<u64, String> {
            ns.enter()?;
            let mut link = match open(backend, END_B, wait) {
                Ok(l) => l,
                Err(e) => {
                    let _ = mac_tx.send(None);
                    return Err(e.to_string());
                }
            };
            let _ = mac_tx.send(Some(link.local_mac()));
            server(&mut *link, &stop).map_err(|e| e.to_string())
        });
        let cli = (|| -> Result<T, String> {
            let peer = mac_rx
                .recv()
                .map_err(|e| e.to_string())?
                .ok_or("server failed to open")?;
            let r = s
                .spawn(move || -> Result<T, String> {
                    ns.enter()?;
                    let mut link = open(backend, END_A, wait).map_err(|e| e.to_string())?;
                    // Let the server reach its receive loop.
                    std::thread::sleep(Duration::from_millis(50));
                    client(&mut *link, peer.0).map_err(|e| e.to_string())
                })
                .join()
                .map_err(|_| "client panicked".to_string())?;
            r
        })();
        stop.store(true, Ordering::Release);
        let served = srv.join().map_err(|_| "server panicked".to_string())??;
        Ok((cli?, served))
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let waits: Vec<WaitMode> = args
        .get(3)
        .map(String::as_str)
        .unwrap_or("adaptive,block,spin")
        .split(',')
        .map(|w| w.parse().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let ns = match NetnsPair::create("pp") {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIPPED: pingpong needs root and iproute2: {e}");
            std::process::exit(
                if std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() == Ok("1") {
                    1
                } else {
                    0
                },
            );
        }
    };
    println!("# {n} round trips of {PDU}-byte PDUs over veth; rate: {secs} s of {PDU}-byte PDUs, flush every 32");
    println!(
        "{:<8} {:<9} {:>10} {:>10} {:>10} {:>5} {:>12} {:>12}",
        "backend", "wait", "median_us", "p99_us", "min_us", "lost", "sent/s", "recv/s"
    );
    for backend in ["ring", "ring-mmsg", "socket", "pnet"] {
        for &wait in &waits {
            let lat = pair(
                &ns,
                backend,
                wait,
                |l, peer| ping(l, MacAddr(peer), n, PDU, Duration::from_millis(200)),
                echo,
            );
            let rate = pair(
                &ns,
                backend,
                wait,
                |l, peer| blast(l, MacAddr(peer), PDU, Duration::from_secs_f64(secs), 32),
                |l, stop| sink(l, stop, Duration::from_millis(100)),
            );
            match (lat, rate) {
                (Ok((p, _)), Ok(((sent, el), recv))) => println!(
                    "{:<8} {:<9} {:>10.1} {:>10.1} {:>10.1} {:>5} {:>12.0} {:>12.0}",
                    backend,
                    format!("{wait:?}").to_lowercase(),
                    p.median.as_secs_f64() * 1e6,
                    p.p99.as_secs_f64() * 1e6,
                    p.min.as_secs_f64() * 1e6,
                    p.lost,
                    sent as f64 / el.as_secs_f64(),
                    recv as f64 / el.as_secs_f64(),
                ),
                (l, r) => println!(
                    "{backend:<8} {wait:?}: latency {:?} rate {:?}",
                    l.err(),
                    r.err()
                ),
            }
        }
    }
}
