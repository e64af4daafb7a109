//! `ethbcast-bench distribute`: file distribution on the test-bed, ethbcast against UDPCast
//! (`udp-sender`/`udp-receiver`) and against an unreliable raw-broadcast blaster (the limit
//! of the medium: frames of 0x88B5 broadcast with no reliability, receivers counting).
//!
//! Everything runs inside namespaces built here: the `ethbcast` binary (next to this one)
//! and udpcast through `ip netns exec`; udpcast gets temporary addresses 10.250.0.x/24 on the
//! hosts' eth0 inside the namespaces, and for its lossy runs an nft rule in the switch
//! namespace drops the same fraction of IPv4 frames as the test-bed drops of 0x88B5 frames.
//! Goodput = file bytes × 8 / time: for ethbcast the sender's data time (join excluded), for
//! udpcast the sender's wall time (its session set-up included, a few ms), for the blaster
//! the slowest receiver's frames × PDU bytes over the blasting time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::netns;
use crate::testbed::{find_tool, Rate, Testbed, TestbedConfig};

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// ethbcast, udpcast or raw-blaster.
    pub tool: String,
    /// Loss at the switch, percent.
    pub loss_pct: f64,
    /// Goodput per receiver, Mbit/s (slowest receiver for the blaster).
    pub goodput_mbit: f64,
    /// Seconds.
    pub seconds: f64,
    /// Whether every receiver got everything (the blaster: frames received / sent, %), and
    /// the spread of the runs.
    pub note: String,
    /// Goodput of every run, Mbit/s, in the order run.
    pub runs: Vec<f64>,
}

/// One run of one tool: goodput, seconds, note.
type Sample = (f64, f64, String);

/// The median run of `samples` (by goodput) as the row; the note tells the spread and any
/// other run that did not complete.
fn summarize(tool: &str, loss_pct: f64, samples: Vec<Sample>) -> Row {
    let runs: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let mut sorted = samples.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (g, secs, note) = sorted[sorted.len() / 2].clone();
    let odd: Vec<&str> = samples
        .iter()
        .map(|s| s.2.as_str())
        .filter(|n| *n != note && (n.contains("INCOMPLETE") || n.contains("FAILED")))
        .collect();
    let mut note = if samples.len() > 1 {
        format!(
            "{note}; median of {} runs ({:.0}..{:.0})",
            samples.len(),
            sorted[0].0,
            sorted[sorted.len() - 1].0
        )
    } else {
        note
    };
    if !odd.is_empty() {
        note.push_str(&format!("; other runs: {}", odd.join(", ")));
    }
    Row {
        tool: tool.into(),
        loss_pct,
        goodput_mbit: g,
        seconds: secs,
        note,
        runs,
    }
}

/// Settings.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Receivers.
    pub receivers: usize,
    /// File size in MiB.
    pub mib: usize,
    /// Port rate.
    pub rate: Rate,
    /// Loss percentages to run.
    pub losses: Vec<f64>,
    /// Test-bed prefix.
    pub prefix: String,
    /// Skip udpcast.
    pub no_udpcast: bool,
    /// Runs of each tool per loss rate (the rows give the median run): the 2-core machine
    /// varies by several percent from run to run.
    pub repeat: usize,
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ethbcast_bin() -> PathBuf {
    let me = std::env::current_exe().expect("current exe");
    me.with_file_name("ethbcast")
}

fn run_ethbcast(tb: &Testbed, input: &Path, n: usize) -> Result<(f64, f64, bool), String> {
    let bin = ethbcast_bin();
    let bin = bin.to_str().ok_or("bad path")?;
    let mut rs = Vec::new();
    for h in &tb.hosts()[1..=n] {
        let c = netns::command_in(&h.netns, bin)
            .map_err(|e| e.to_string())?
            .args(["recv", "--iface", "eth0", "--quiet", "--wait", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        rs.push(Kill(c));
    }
    let out = netns::command_in(&tb.hosts()[0].netns, bin)
        .map_err(|e| e.to_string())?
        .args([
            "send", "--iface", "eth0", "--quiet", "--json", "--wait", "60",
        ])
        .arg("-i")
        .arg(input)
        .args(["--receivers", &n.to_string()])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("ethbcast send gave no report ({e}), exit {:?}", out.status))?;
    for mut r in rs {
        let _ = r.0.wait();
    }
    Ok((
        v["goodput_mbit"].as_f64().unwrap_or(0.0),
        v["seconds"].as_f64().unwrap_or(0.0),
        v["ok"].as_bool().unwrap_or(false),
    ))
}

fn sh_in(ns: &str, script: &str) -> Result<(), String> {
    let st = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", script])
        .status()
        .map_err(|e| e.to_string())?;
    st.success()
        .then_some(())
        .ok_or(format!("{ns}: {script} failed"))
}

fn run_udpcast(
    tb: &Testbed,
    input: &Path,
    n: usize,
    loss: f64,
) -> Result<(f64, f64, bool), String> {
    for (i, h) in tb.hosts()[..=n].iter().enumerate() {
        sh_in(
            &h.netns,
            &format!(
                // `brd +`: udpcast finds its rendezvous address with SIOCGIFBRDADDR; without a
                // broadcast address it says hello to 0.0.0.0 and the session never starts.
                "ip addr flush dev eth0 scope global && ip addr add 10.250.0.{}/24 brd + dev eth0 && ip route replace 224.0.0.0/4 dev eth0",
                i + 1
            ),
        )?;
    }
    let rule = if loss > 0.0 {
        format!(
            "add table bridge ebdistudp\nadd chain bridge ebdistudp forward {{ type filter hook forward priority 0; policy accept; }}\nflush chain bridge ebdistudp forward\nadd rule bridge ebdistudp forward ether type ip numgen random mod 10000 < {} drop\n",
            (loss * 100.0).round() as u32
        )
    } else {
        "add table bridge ebdistudp\ndelete table bridge ebdistudp\n".into()
    };
    let mut c = Command::new("ip")
        .args(["netns", "exec", tb.switch_netns(), "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::io::Write::write_all(c.stdin.as_mut().expect("stdin"), rule.as_bytes())
        .map_err(|e| e.to_string())?;
    drop(c.stdin.take());
    c.wait().map_err(|e| e.to_string())?;
    let mut rs = Vec::new();
    for h in &tb.hosts()[1..=n] {
        let c = netns::command_in(&h.netns, "udp-receiver")
            .map_err(|e| e.to_string())?
            .args(["--interface", "eth0", "--nokbd", "--file", "/dev/null"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        rs.push(Kill(c));
    }
    let t0 = Instant::now();
    let mut sender = Kill(
        netns::command_in(&tb.hosts()[0].netns, "udp-sender")
            .map_err(|e| e.to_string())?
            .args(["--interface", "eth0", "--nokbd", "--min-receivers"])
            .arg(n.to_string())
            .arg("--file")
            .arg(input)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?,
    );
    // udpcast's session can hang (seen under loss): give up after a minute.
    let limit = t0 + Duration::from_secs(60);
    let st = loop {
        if let Ok(Some(s)) = sender.0.try_wait() {
            break Some(s);
        }
        if Instant::now() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = t0.elapsed().as_secs_f64();
    let Some(st) = st else {
        return Err("udp-sender did not finish within 60 s".into());
    };
    let mut all_ok = st.success();
    for mut r in rs {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match r.0.try_wait() {
                Ok(Some(s)) => {
                    all_ok &= s.success();
                    break;
                }
                _ if Instant::now() > deadline => {
                    all_ok = false;
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    let bytes = std::fs::metadata(input).map_err(|e| e.to_string())?.len();
    Ok((bytes as f64 * 8.0 / secs / 1e6, secs, all_ok))
}

/// The blaster's receive queues: at least as deep as those `ethbcast recv` asks for (its
/// window), so that the limit is never measured lower than the protocol's footing.
const RX_FRAMES: usize = 4096;

fn run_blaster(tb: &Testbed, n: usize) -> Result<(f64, f64, String), String> {
    use ethbcast::link::{self, measure, Backend, WaitMode, BROADCAST_MAC};
    let stop = Arc::new(AtomicBool::new(false));
    let mut sinks = Vec::new();
    for h in &tb.hosts()[1..=n] {
        let stop = stop.clone();
        sinks.push(
            netns::spawn_in(&h.netns, move || -> Result<u64, String> {
                let mut l = link::open_sized(Backend::Ring, "eth0", WaitMode::Adaptive, RX_FRAMES)
                    .map_err(|e| e.to_string())?;
                measure::sink(l.as_mut(), &stop, Duration::from_millis(200))
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?,
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    let pdu = 1500usize;
    let (sent, elapsed) = netns::run_in(&tb.hosts()[0].netns, move || {
        // The wait mode `ethbcast send` uses by default: blocking on a full TX ring sleeps
        // past the moment slots free up and understates the medium.
        let mut l = link::open_sized(Backend::Ring, "eth0", WaitMode::Adaptive, RX_FRAMES)
            .map_err(|e| e.to_string())?;
        measure::blast(l.as_mut(), BROADCAST_MAC, pdu, Duration::from_secs(3), 64)
            .map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())??;
    stop.store(true, Ordering::Release);
    let mut min = u64::MAX;
    for s in sinks {
        let got = s.join().map_err(|_| "sink panicked")??;
        min = min.min(got);
    }
    let secs = elapsed.as_secs_f64();
    Ok((
        min as f64 * pdu as f64 * 8.0 / secs / 1e6,
        secs,
        format!(
            "slowest receiver got {:.1}% of {sent} frames",
            100.0 * min as f64 / sent.max(1) as f64
        ),
    ))
}

/// Runs the comparison; one test-bed per loss rate.
pub fn run(o: &Opts) -> Result<Vec<Row>, String> {
    let n = o.receivers;
    let input = std::env::temp_dir().join(format!("ethbcast-bench-{}.bin", std::process::id()));
    {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut v = vec![0u8; o.mib << 20];
        rng.fill_bytes(&mut v);
        std::fs::write(&input, &v).map_err(|e| e.to_string())?;
    }
    let udpcast = !o.no_udpcast && find_tool("udp-sender").is_some();
    let mut rows = Vec::new();
    let result = (|| {
        for &loss in &o.losses {
            let mut cfg = TestbedConfig::new(n + 1)
                .prefix(o.prefix.clone())
                .rate(o.rate);
            if loss > 0.0 {
                cfg = cfg.loss_pct(loss);
            }
            let tb = Testbed::up(&cfg).map_err(|e| e.to_string())?;
            let (mut eb, mut uc, mut bl) = (Vec::new(), Vec::new(), Vec::new());
            // Interleaved, so that a slow phase of the machine hits every tool alike.
            for _ in 0..o.repeat.max(1) {
                let (g, s, ok) = run_ethbcast(&tb, &input, n)?;
                let note = if ok { "all complete" } else { "INCOMPLETE" };
                eb.push((g, s, note.to_string()));
                if udpcast {
                    // A UDPCast session that hangs is a result too, not the end of the comparison.
                    uc.push(match run_udpcast(&tb, &input, n, loss) {
                        Ok((g, s, true)) => (g, s, "all complete".to_string()),
                        Ok((g, s, false)) => (g, s, "INCOMPLETE".to_string()),
                        Err(e) => (0.0, 0.0, format!("FAILED: {e}")),
                    });
                }
                bl.push(run_blaster(&tb, n)?);
            }
            rows.push(summarize("ethbcast", loss, eb));
            if udpcast {
                rows.push(summarize("udpcast", loss, uc));
            }
            rows.push(summarize("raw-blaster", loss, bl));
            tb.down().map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    })();
    let _ = std::fs::remove_file(&input);
    result.map(|()| rows)
}
