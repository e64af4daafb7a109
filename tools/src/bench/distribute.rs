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
//!
//! ethbcast and the blaster run once per link backend asked for (`--backend ring,xdp`), the
//! blaster on the same backend as the ethbcast row it is the limit of. Every row also gives
//! the CPU seconds its sender and all its receivers used per GiB given to each receiver
//! ([`super::cpu`]: `RUSAGE_CHILDREN` around the tool's processes, `RUSAGE_THREAD` in the
//! blaster's threads, from before each opens its link to after it closes it); without a rate
//! limit (`--rate none`) that is what the transfer costs, since nothing but the CPU limits it.
//! Under the table, per loss rate and backend, ethbcast's CPU per GiB over the blaster's: the
//! median of the rounds' ratios, each ethbcast run against the blaster run right after it
//! ([`cpu_ratios`]). On a shared machine the phase drifts between rounds, so a ratio of
//! medians (the table's columns) mixes rounds; a round's own ratio does not.
//!
//! Right before each run of ethbcast and of the blaster, the bench opens on each host the link
//! the run opens there, holds them all, and closes them ([`warm_up`], from threads of its own:
//! no tool is charged for it).
//! Why: the test-bed is a virtual machine that hands memory freed more than about 2 s ago back
//! to its host (free page reporting), and the kernel then clears a ring's pages at three
//! times the cost (8 receivers opening their rings: 82 ms of CPU after 6 s idle, 25 ms right
//! after other rings were closed). Without it, whichever tool ran after a pause paid that
//! (ethbcast, after UDPCast's run: 261 samples in `packet_set_ring` against the blaster's
//! 26 in one profiled round); with it, both pay what clearing costs on a machine that keeps
//! its memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{Backend, Link, LinkError};
use serde::Serialize;

use super::cli::{parse_limit, print_and_plot, Limit};
use super::cpu::{self, CpuCost};
use crate::netns;
use crate::testbed::{find_tool, Rate, Testbed, TestbedConfig};

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// ethbcast, udpcast or raw-blaster.
    pub tool: String,
    /// Link backend (ethbcast and the blaster; "-" for UDPCast).
    pub backend: String,
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
    /// CPU of the median run (sender, receivers, per GiB).
    pub cpu: CpuCost,
    /// CPU seconds per GiB of every run, in the order run (paired with the other tools' runs
    /// of the same round: see [`cpu_ratios`]).
    pub cpu_runs: Vec<f64>,
}

/// One run of one tool: goodput, seconds, note, CPU.
type Sample = (f64, f64, String, CpuCost);

/// The median run of `samples` (by goodput) as the row; the note tells the spread and any
/// other run that did not complete.
fn summarize(tool: &str, backend: &str, loss_pct: f64, samples: Vec<Sample>) -> Row {
    let runs: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let cpu_runs: Vec<f64> = samples.iter().map(|s| s.3.per_gib_s).collect();
    let mut sorted = samples.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (g, secs, note, cpu) = sorted[sorted.len() / 2].clone();
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
        backend: backend.into(),
        loss_pct,
        goodput_mbit: g,
        seconds: secs,
        note,
        runs,
        cpu,
        cpu_runs,
    }
}

/// The CPU per GiB of `ours` over `floor`'s, run by run: the tools run in rounds (one run of
/// each per round, one after the other), so a run's ratio to the floor's run of the same
/// round sees the same phase of the machine, which drifts between rounds by more than most
/// changes worth measuring. Sorted; rounds where either run has no CPU figure are left out.
pub fn cpu_ratios(ours: &Row, floor: &Row) -> Vec<f64> {
    let mut r: Vec<f64> = ours
        .cpu_runs
        .iter()
        .zip(&floor.cpu_runs)
        .filter(|(a, b)| **a > 0.0 && **b > 0.0)
        .map(|(a, b)| a / b)
        .collect();
    r.sort_by(f64::total_cmp);
    r
}

/// Settings.
#[derive(Debug, Clone)]
pub struct DistributeOptions {
    /// Receivers.
    pub receivers: usize,
    /// File size in MiB.
    pub mib: usize,
    /// Port rate; `None`: unshaped veths.
    pub rate: Option<Rate>,
    /// Link backends of ethbcast and the blaster, each measured.
    pub backends: Vec<Backend>,
    /// Loss percentages to run.
    pub losses: Vec<f64>,
    /// Test-bed prefix.
    pub prefix: String,
    /// Skip udpcast.
    pub no_udpcast: bool,
    /// Runs of each tool per loss rate (the rows give the median run): the 2-core machine
    /// varies by several percent from run to run.
    pub repeat: usize,
    /// GRO on every veth of the test-bed.
    pub gro: bool,
    /// MTU of the test-bed's interfaces (`None`: 1500).
    pub mtu: Option<u32>,
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `ethbcast` tool the transfers run: the one beside this program (as `cargo build` and
/// `cargo install` put them).
fn ethbcast_bin() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    ethbcast_beside(&me)
}

/// The `ethbcast` executable in the directory of `exe`, or why there is none.
fn ethbcast_beside(exe: &Path) -> Result<PathBuf, String> {
    let bin = exe.with_file_name("ethbcast");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "the transfers run the ethbcast tool, which is not beside this program (no {}): \
             build both (`cargo build --release -p ethbcast-tools`) or install both \
             (`cargo install --path tools`) and run them from there",
            bin.display()
        ))
    }
}

/// One transfer by the ethbcast tool at `bin`: goodput, seconds, whether all completed, the
/// frames the sender repaired, and the CPU of the sender and of all receivers.
fn run_ethbcast(
    bin: &Path,
    tb: &Testbed,
    input: &Path,
    n: usize,
    backend: Backend,
) -> Result<(f64, f64, bool, u64, CpuCost), String> {
    let bin = bin.to_str().ok_or("bad path")?;
    let be = backend.to_string();
    let mut rs = Vec::new();
    let c_start = cpu::children_seconds();
    let k_start = cpu::ksoftirqd_seconds();
    for h in &tb.hosts()[1..=n] {
        let c = netns::command_in(&h.netns, bin)
            .map_err(|e| e.to_string())?
            .args([
                "recv",
                "--insecure",
                "--iface",
                "eth0",
                "--quiet",
                "--wait",
                "60",
            ])
            .args(["--backend", &be])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        rs.push(Kill(c));
    }
    let out = netns::command_in(&tb.hosts()[0].netns, bin)
        .map_err(|e| e.to_string())?
        .args([
            "send",
            "--insecure",
            "--iface",
            "eth0",
            "--quiet",
            "--json",
            "--wait",
            "60",
        ])
        .args(["--backend", &be])
        .arg("-i")
        .arg(input)
        .args(["--receivers", &n.to_string()])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let sender_s = cpu::children_seconds() - c_start;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("ethbcast send gave no report ({e}), exit {:?}", out.status))?;
    for mut r in rs {
        let _ = r.0.wait();
    }
    let receivers_s = cpu::children_seconds() - c_start - sender_s;
    let bytes = std::fs::metadata(input).map_err(|e| e.to_string())?.len();
    Ok((
        v["goodput_mbit"].as_f64().unwrap_or(0.0),
        v["seconds"].as_f64().unwrap_or(0.0),
        v["ok"].as_bool().unwrap_or(false),
        v["repair_frames"].as_u64().unwrap_or(0),
        CpuCost::new(sender_s, receivers_s, bytes)
            .with_ksoftirqd(cpu::ksoftirqd_seconds() - k_start),
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
) -> Result<(f64, f64, bool, CpuCost), String> {
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
    let c_start = cpu::children_seconds();
    let k_start = cpu::ksoftirqd_seconds();
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
    // Reaped: its time is in RUSAGE_CHILDREN now.
    drop(sender);
    let sender_s = cpu::children_seconds() - c_start;
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
    let receivers_s = cpu::children_seconds() - c_start - sender_s;
    let bytes = std::fs::metadata(input).map_err(|e| e.to_string())?.len();
    Ok((
        bytes as f64 * 8.0 / secs / 1e6,
        secs,
        all_ok,
        CpuCost::new(sender_s, receivers_s, bytes)
            .with_ksoftirqd(cpu::ksoftirqd_seconds() - k_start),
    ))
}

/// The blaster's receive queues: as deep as those `ethbcast recv` asks for (its default
/// window, and the frames it retains: `LinkOptions::open_receiving`), so that the limit is
/// measured on the protocol's footing, no lower; and, since the blaster's CPU includes
/// opening and closing its links as ethbcast's processes do, no higher either.
const RX_FRAMES: usize = crate::distribute::DEFAULT_WINDOW + crate::distribute::RETAINED;

/// Runs `work` on a link opened as `open` says and closed afterwards; returns what `work`
/// returned, the CPU seconds this thread used for all of it, and those of them that opening
/// and closing the link took. Why the link's life is counted: every ethbcast process pays for
/// its rings (allocated and cleared by the kernel at open, freed at close) in the CPU the
/// bench charges it, and a floor that never opened a link is not one a program can reach.
fn with_link<L: Link, T>(
    open: impl FnOnce() -> Result<L, LinkError>,
    work: impl FnOnce(&mut L) -> Result<T, String>,
) -> Result<(T, f64, f64), String> {
    let c0 = cpu::thread_seconds();
    let mut l = open().map_err(|e| e.to_string())?;
    let c1 = cpu::thread_seconds();
    let r = work(&mut l)?;
    let c2 = cpu::thread_seconds();
    drop(l);
    let c3 = cpu::thread_seconds();
    Ok((r, c3 - c0, (c1 - c0) + (c3 - c2)))
}

/// The link the blaster opens on every host, as `ethbcast recv` sizes its own.
fn open_floor_link(
    backend: Backend,
    wait: ethbcast::WaitMode,
) -> Result<Box<dyn Link + Send>, LinkError> {
    ethbcast::open_link_sized(backend, "eth0", wait, RX_FRAMES)
}

/// Opens a link with each of `opens`, holding all of them at once, and closes them: the
/// pages their rings took are free again, and recently used, when the run that follows opens
/// its own (see the module doc).
fn warm_up<L, O>(opens: impl IntoIterator<Item = O>) -> Result<(), String>
where
    O: FnOnce() -> Result<L, String>,
{
    let open: Vec<L> = opens
        .into_iter()
        .map(|o| o())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("warming up the links: {e}"))?;
    drop(open);
    Ok(())
}

/// [`warm_up`] with the blaster's link on each of the test-bed's first `links` hosts, as a run
/// opens them (one per interface: AF_XDP takes no second socket on a queue), each from a
/// thread of its own: no tool's CPU counts it.
fn warm_up_on(tb: &Testbed, links: usize, backend: Backend) -> Result<(), String> {
    use ethbcast::WaitMode;
    warm_up(tb.hosts()[..links].iter().map(|h| {
        let ns = h.netns.clone();
        move || {
            netns::run_in(&ns, move || open_floor_link(backend, WaitMode::Doze))
                .map_err(|e| format!("{ns}: {e}"))?
                .map_err(|e| format!("{ns}: {e}"))
        }
    }))
}

fn run_blaster(tb: &Testbed, n: usize, backend: Backend) -> Result<Sample, String> {
    use ethbcast::{measure, WaitMode, BROADCAST_MAC};
    let stop = Arc::new(AtomicBool::new(false));
    let mut sinks = Vec::new();
    for h in &tb.hosts()[1..=n] {
        let stop = stop.clone();
        sinks.push(
            netns::spawn_in(&h.netns, move || -> Result<(u64, f64, f64), String> {
                // The receivers wait as `ethbcast recv`'s do (doze): sinks that spin took the
                // CPU from the blaster's sender on the 2-core test-bed (2.2 s of 3 s unshaped).
                with_link(
                    || open_floor_link(backend, WaitMode::Doze),
                    |l| {
                        measure::sink(l.as_mut(), &stop, Duration::from_millis(200))
                            .map_err(|e| e.to_string())
                    },
                )
            })
            .map_err(|e| e.to_string())?,
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    let k_start = cpu::ksoftirqd_seconds();
    // Frames as large as the link carries (its MTU), as ethbcast's are.
    let (((sent, elapsed), pdu), sender_s, sender_link_s) =
        netns::run_in(&tb.hosts()[0].netns, move || {
            // The wait mode `ethbcast send` uses by default: blocking on a full TX ring sleeps
            // past the moment slots free up and understates the medium.
            with_link(
                || open_floor_link(backend, WaitMode::Adaptive),
                |l| {
                    let pdu = l.max_pdu();
                    measure::blast(l.as_mut(), BROADCAST_MAC, pdu, Duration::from_secs(3), 64)
                        .map(|r| (r, pdu))
                        .map_err(|e| e.to_string())
                },
            )
        })
        .map_err(|e| e.to_string())??;
    stop.store(true, Ordering::Release);
    let mut min = u64::MAX;
    let mut receivers_s = 0.0;
    let mut link_s = sender_link_s;
    for s in sinks {
        let (got, c, l) = s.join().map_err(|_| "sink panicked")??;
        min = min.min(got);
        receivers_s += c;
        link_s += l;
    }
    let secs = elapsed.as_secs_f64();
    Ok((
        min as f64 * pdu as f64 * 8.0 / secs / 1e6,
        secs,
        format!(
            "slowest receiver got {:.1}% of {sent} frames; opening and closing the links took {:.3} s of the CPU",
            100.0 * min as f64 / sent.max(1) as f64,
            link_s
        ),
        // Per GiB the slowest receiver got: what every receiver was given in full.
        CpuCost::new(sender_s, receivers_s, min * pdu as u64)
            .with_ksoftirqd(cpu::ksoftirqd_seconds() - k_start),
    ))
}

/// Runs the comparison; one test-bed per loss rate.
pub fn run(o: &DistributeOptions) -> Result<Vec<Row>, String> {
    let n = o.receivers;
    // Before anything is set up: without the tool there is nothing to measure.
    let bin = ethbcast_bin()?;
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
                .gro(o.gro);
            cfg.rate = o.rate;
            cfg.mtu = o.mtu;
            if loss > 0.0 {
                cfg = cfg.loss_pct(loss);
            }
            let tb = Testbed::up(&cfg).map_err(|e| e.to_string())?;
            let backends = if o.backends.is_empty() {
                vec![Backend::Ring]
            } else {
                o.backends.clone()
            };
            let mut eb = vec![Vec::new(); backends.len()];
            let mut bl = vec![Vec::new(); backends.len()];
            let mut uc = Vec::new();
            // Interleaved, so that a slow phase of the machine hits every tool alike.
            for _ in 0..o.repeat.max(1) {
                for (i, &b) in backends.iter().enumerate() {
                    warm_up_on(&tb, n + 1, b)?;
                    let (g, s, ok, repairs, c) = run_ethbcast(&bin, &tb, &input, n, b)?;
                    let done = if ok { "all complete" } else { "INCOMPLETE" };
                    eb[i].push((g, s, format!("{done}, {repairs} repairs by the sender"), c));
                    warm_up_on(&tb, n + 1, b)?;
                    bl[i].push(run_blaster(&tb, n, b)?);
                }
                if udpcast {
                    // A UDPCast session that hangs is a result too, not the end of the comparison.
                    uc.push(match run_udpcast(&tb, &input, n, loss) {
                        Ok((g, s, true, c)) => (g, s, "all complete".to_string(), c),
                        Ok((g, s, false, c)) => (g, s, "INCOMPLETE".to_string(), c),
                        Err(e) => (0.0, 0.0, format!("FAILED: {e}"), CpuCost::default()),
                    });
                }
            }
            for (i, b) in backends.iter().enumerate() {
                let name = b.to_string();
                rows.push(summarize(
                    "ethbcast",
                    &name,
                    loss,
                    std::mem::take(&mut eb[i]),
                ));
                rows.push(summarize(
                    "raw-blaster",
                    &name,
                    loss,
                    std::mem::take(&mut bl[i]),
                ));
            }
            if udpcast {
                rows.push(summarize("udpcast", "-", loss, uc));
            }
            tb.down().map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    })();
    let _ = std::fs::remove_file(&input);
    result.map(|()| rows)
}

/// The table of a run, with ethbcast over the blaster of the same backend per loss rate.
pub fn render(o: &DistributeOptions, rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let rate = o.rate.map_or("unshaped".to_string(), |r| format!("{r}"));
    let mut out = format!(
        "{} receivers, {} MiB, {rate} ports; CPU = user + system seconds of the sender and all receivers per GiB given to each receiver (ksoftirqd: the machine's softirq threads meanwhile, not in the sum)\n",
        o.receivers, o.mib
    );
    let mut t = crate::harness::table::Table::new(&[
        "tool",
        "backend",
        "loss %",
        "goodput Mbit/s",
        "seconds",
        "CPU s/GiB",
        "CPU sender / receivers s",
        "ksoftirqd s",
        "note",
    ]);
    for r in rows {
        t.row(vec![
            r.tool.clone(),
            r.backend.clone(),
            r.loss_pct.to_string(),
            format!("{:.1}", r.goodput_mbit),
            format!("{:.2}", r.seconds),
            format!("{:.2}", r.cpu.per_gib_s),
            format!("{:.2} / {:.2}", r.cpu.sender_s, r.cpu.receivers_s),
            format!("{:.2}", r.cpu.ksoftirqd_s),
            r.note.clone(),
        ]);
    }
    out.push_str(&t.render());
    for r in rows.iter().filter(|r| r.tool == "ethbcast") {
        if let Some(b) = rows
            .iter()
            .find(|b| b.tool == "raw-blaster" && b.backend == r.backend && b.loss_pct == r.loss_pct)
        {
            let _ = writeln!(
                out,
                "loss {}%, {}: goodput, ethbcast / raw-blaster = {:.2} (medians)",
                r.loss_pct,
                r.backend,
                r.goodput_mbit / b.goodput_mbit.max(1e-9)
            );
            let ratios = cpu_ratios(r, b);
            if !ratios.is_empty() {
                let each: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
                let _ = writeln!(
                    out,
                    "loss {}%, {}: CPU per GiB, ethbcast / raw-blaster = {:.2} (median of the rounds' ratios: {})",
                    r.loss_pct,
                    r.backend,
                    ratios[ratios.len() / 2],
                    each.join(", ")
                );
            }
        }
    }
    out
}

/// File distribution on a test-bed: ethbcast vs UDPCast vs an unreliable raw-broadcast
/// blaster (the medium's limit). Needs root, nftables and (for UDPCast) udpcast.
///
/// Example: ethbcast-bench distribute --receivers 8 --mib 256 --rate 1gbit --loss 0,1
#[derive(clap::Args)]
pub struct Args {
    /// Receivers.
    #[arg(long, default_value_t = 8)]
    receivers: usize,
    /// File size, MiB.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Port rate (tbf), or none for unshaped veths (then every tool also reports its CPU
    /// seconds per GiB).
    #[arg(long, default_value = "1gbit", value_parser = parse_limit)]
    rate: Limit,
    /// Link backends of ethbcast and the raw blaster, each measured (ring, socket, pnet,
    /// xdp).
    #[arg(long, default_value = "ring", value_delimiter = ',')]
    backend: Vec<Backend>,
    /// Loss rates at the switch, percent.
    #[arg(long, default_value = "0,1", value_delimiter = ',')]
    loss: Vec<f64>,
    /// Test-bed prefix.
    #[arg(long, default_value = "ebdb")]
    prefix: String,
    /// Skip UDPCast.
    #[arg(long)]
    no_udpcast: bool,
    /// Runs of each tool per loss rate, interleaved; the table gives the median run.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// GRO on every veth of the test-bed (NAPI receive, as with native XDP).
    #[arg(long)]
    gro: bool,
    /// MTU of the test-bed's interfaces (e.g. 9000 for jumbo frames; default 1500).
    #[arg(long)]
    mtu: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Write the goodput chart (PNG and SVG) and its table (Markdown), `distribute-goodput`,
    /// into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Args {
    /// Runs the comparison.
    pub fn run(self) -> ExitCode {
        let o = DistributeOptions {
            gro: self.gro,
            mtu: self.mtu,
            receivers: self.receivers,
            mib: self.mib,
            rate: self.rate.0,
            backends: self.backend,
            losses: self.loss,
            prefix: self.prefix,
            no_udpcast: self.no_udpcast,
            repeat: self.repeat,
        };
        match run(&o) {
            Ok(rows) => print_and_plot(
                self.json,
                &rows,
                |rows| render(&o, rows),
                self.out.as_ref(),
                |rows, d| super::goodput::write(rows, d),
            ),
            Err(e) => {
                eprintln!("ethbcast-bench distribute: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until this thread has used `s` more CPU seconds.
    fn burn(s: f64) {
        let until = cpu::thread_seconds() + s;
        while cpu::thread_seconds() < until {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn a_bench_without_the_ethbcast_tool_beside_it_says_so_and_where_it_looked() {
        let dir = std::env::temp_dir().join(format!("ethbcast-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("ethbcast-bench");
        let e = ethbcast_beside(&exe);
        std::fs::write(dir.join("ethbcast"), b"").unwrap();
        let found = ethbcast_beside(&exe);
        std::fs::remove_dir_all(&dir).unwrap();
        let e = e.unwrap_err();
        assert!(
            e.contains(&dir.join("ethbcast").display().to_string()),
            "{e}"
        );
        assert!(e.contains("cargo build"), "{e}");
        assert_eq!(found.unwrap(), dir.join("ethbcast"));
    }

    #[test]
    fn the_floor_is_charged_for_opening_its_link_as_ethbcast_is() {
        use ethbcast::{SimConfig, SimNet};
        let net = SimNet::new(SimConfig::default()).expect("a switch");
        let port = net.port(0).expect("port 0");
        let (got, cpu_s, link_s) = with_link(
            || {
                burn(0.03);
                Ok(port)
            },
            |l| Ok(Link::max_pdu(l)),
        )
        .expect("opened");
        assert_eq!(got, 1500, "what the work returned: the port's MTU");
        assert!(link_s >= 0.03, "the open's CPU is counted: {link_s}");
        assert!(
            cpu_s >= link_s,
            "and is part of the total: {cpu_s} < {link_s}"
        );
        let failed = with_link::<ethbcast::SimPort, _>(
            || Err(LinkError::NoSuchInterface("eth9".into())),
            |_| Ok(()),
        );
        assert!(failed.unwrap_err().contains("eth9"));
    }

    #[test]
    fn the_warm_up_holds_every_link_open_at_once_then_closes_them_all() {
        use std::cell::Cell;
        use std::rc::Rc;
        struct Counted(Rc<Cell<usize>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        let open = Rc::new(Cell::new(0));
        let most = Cell::new(0);
        let opener = |fail: bool| {
            let open = open.clone();
            let most = &most;
            move || {
                if fail {
                    return Err("h3: no such network interface \"eth0\"".to_string());
                }
                open.set(open.get() + 1);
                most.set(most.get().max(open.get()));
                Ok(Counted(open.clone()))
            }
        };
        warm_up((0..9).map(|_| opener(false))).expect("warmed up");
        assert_eq!(most.get(), 9, "all nine were open together");
        assert_eq!(open.get(), 0, "and every one was closed");
        // A link that cannot be opened is an error that names the step and the host, and the
        // links opened before it are closed.
        let e = warm_up((0..9).map(|i| opener(i == 3))).unwrap_err();
        assert!(e.contains("warming up") && e.contains("h3"), "{e}");
        assert_eq!(open.get(), 0);
    }

    fn row(tool: &str, loss_pct: f64, goodput: f64, cpu_runs: &[f64]) -> Row {
        Row {
            tool: tool.into(),
            backend: "ring".into(),
            loss_pct,
            goodput_mbit: goodput,
            seconds: 2.0,
            note: String::new(),
            runs: vec![goodput; cpu_runs.len()],
            cpu: CpuCost::default(),
            cpu_runs: cpu_runs.to_vec(),
        }
    }

    #[test]
    fn the_cpu_ratio_pairs_each_round_with_the_floor_of_that_round() {
        // The machine slows in round 2: both tools' CPU rises; the ratio of medians would mix
        // rounds (12 / 8 = 1.5), the rounds' own ratios do not.
        let ours = row("ethbcast", 0.0, 950.0, &[11.0, 15.0, 12.0]);
        let floor = row("raw-blaster", 0.0, 1100.0, &[8.0, 11.0, 8.5]);
        let r = cpu_ratios(&ours, &floor);
        let want = [11.0 / 8.0, 12.0 / 8.5, 15.0 / 11.0];
        let mut want = want.to_vec();
        want.sort_by(f64::total_cmp);
        assert_eq!(r, want);
    }

    #[test]
    fn a_round_without_a_cpu_figure_is_left_out_of_the_ratios() {
        let ours = row("ethbcast", 1.0, 800.0, &[16.0, 0.0, 17.0]);
        let floor = row("raw-blaster", 1.0, 900.0, &[10.0, 9.0, 0.0]);
        assert_eq!(cpu_ratios(&ours, &floor), vec![1.6]);
    }

    #[test]
    fn the_table_prints_the_median_cpu_ratio_and_every_round_per_loss_rate() {
        let o = DistributeOptions {
            receivers: 8,
            mib: 256,
            rate: None,
            backends: vec![Backend::Ring],
            losses: vec![0.0],
            prefix: "t".into(),
            no_udpcast: true,
            repeat: 3,
            gro: false,
            mtu: None,
        };
        let rows = vec![
            row("ethbcast", 0.0, 950.0, &[11.0, 15.0, 12.0]),
            row("raw-blaster", 0.0, 1100.0, &[8.0, 11.0, 8.5]),
        ];
        let out = render(&o, &rows);
        assert!(
            out.contains(
                "loss 0%, ring: CPU per GiB, ethbcast / raw-blaster = 1.38 (median of the rounds' ratios: 1.36, 1.38, 1.41)"
            ),
            "{out}"
        );
        assert!(
            out.contains("loss 0%, ring: goodput, ethbcast / raw-blaster = 0.86 (medians)"),
            "{out}"
        );
    }
}
