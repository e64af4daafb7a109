//! `ethbcast-bench latency`: the EQA paper's broadcast latency runs (section 4) on real hosts.
//!
//! One test-bed of N hosts serves every group size: the group of `k` is the first `k` hosts
//! (a separate [`ethbcast::Group`] per group size, with its own group id); the other
//! hosts idle. Root = rank 0. After a warm-up, each (algorithm, size) is broadcast `iters`
//! times. The time of one broadcast runs from the root's call until the last receiver has the
//! whole message: every member is a thread of this process, so one `Instant` clock serves all;
//! each receiver records the instant its `bcast` returned, the root the instant it called, and
//! latency = max(receiver instants) - root instant. Where the group has no more hosts than the
//! machine has cores, each host thread runs on a core of its own ([`super::bed::own_core`]).
//! Between iterations the root waits, out of band (a shared counter between the threads, while
//! it keeps polling the protocol), until every receiver has finished, so broadcasts never
//! overlap; receivers are already waiting in their next `bcast` when the root calls.
//!
//! Unless told otherwise, every group size is first measured at the raw floor
//! ([`super::floor`]: raw broadcast frames, the same threads, clock, link and waits, no
//! protocol), so that every protocol row is also given as a multiple of the floor measured in
//! the same run, moments before it.

use super::plot::{draw, Chart, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use ethbcast::{Algorithm, Group, Rank};
use serde::Serialize;

use super::bed::{self, fmt_us, summarize, BedOptions, Frames, Summary};
use super::cli::{plots, GroupArgs, LinkArgs};
use super::cpu::{sum_counts, Counts, Meter, PerOp};
use super::floor::{self, FLOOR};
use super::probe::{receiver_done, root_mark_probe, MemberRun, Stamp};
use super::reference::{self, REFERENCE};
use crate::harness::report::{code, fail, print};
use crate::harness::table::Table;
use crate::testbed::Testbed;

/// The method, as printed with every report.
pub const METHOD: &str = "root = rank 0; warm-up, then `iters` broadcasts per (algorithm, size, \
group size); latency of one broadcast = (instant the LAST receiver's bcast returned) - (instant \
the root called bcast), all members being threads of one process sharing one clock, each on a \
core of its own where the group has no more hosts than the machine has cores; between \
iterations the root waits out of band (shared counter between the threads, not the network; \
it yields the CPU and polls its link without blocking meanwhile) until every receiver is done, \
so broadcasts never overlap; mean80 = mean of the middle 80% \
(10% fastest and 10% slowest dropped, the EQA paper's method)";

/// Options of a latency run.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// The test-bed and link.
    pub bed: BedOptions,
    /// Group sizes (the first k hosts).
    pub nodes: Vec<usize>,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Measured broadcasts per (algorithm, size, group size).
    pub iters: usize,
    /// Unmeasured broadcasts before them.
    pub warmup: usize,
    /// Algorithms.
    pub algos: Vec<Algorithm>,
    /// Show a progress bar.
    pub progress: bool,
    /// Measure the raw floor of every group size first (rows named `floor`).
    pub floor: bool,
    /// Split the iterations into this many blocks, each floor then protocol, so that a busy
    /// phase of a shared machine hits both alike (each block has its own warm-up).
    pub blocks: usize,
    /// Count the work per broadcast of every row (system calls, sends, context switches, timers
    /// armed, CPU time of every member thread) with the kernel's perf counters.
    pub cost: bool,
    /// An independent fan-out program to run in every block beside the floor (rows named
    /// `reference`, see [`super::reference`]).
    pub reference: Option<PathBuf>,
    /// How the protocol's frames are protected, each a row of its own per (algorithm, size),
    /// measured in turn in every block (rows `sbcast+auth`, `sbcast+enc`).
    pub frames: Vec<Frames>,
}

impl LatencyOptions {
    /// The paper's defaults on an N-host test-bed.
    pub fn new(hosts: usize) -> LatencyOptions {
        LatencyOptions {
            bed: BedOptions::new(hosts, "eblat"),
            nodes: vec![2, 4, 8],
            sizes: vec![4, 8, 256, 1024, 4096, 16384, 65536],
            iters: 500,
            warmup: 50,
            algos: vec![Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree],
            progress: false,
            floor: true,
            blocks: 4,
            cost: false,
            reference: None,
            frames: vec![Frames::Plain],
        }
    }
}

/// One (algorithm, group size, message size).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// ppbcast, sbcast or tree.
    pub algo: String,
    /// Group size.
    pub nodes: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Latency statistics, µs (flattened: the keys `mean80_us`, `median_us`, `p99_us`, `max_us`).
    #[serde(flatten)]
    pub stats: Summary,
}

/// Latency growth from the smallest to the largest group, per algorithm and size.
#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    /// Algorithm.
    pub algo: String,
    /// Message size.
    pub size: usize,
    /// Smallest group.
    pub from_nodes: usize,
    /// Largest group.
    pub to_nodes: usize,
    /// mean80 at the smallest group, µs.
    pub from_us: f64,
    /// mean80 at the largest group, µs.
    pub to_us: f64,
    /// (to - from) / from, percent.
    pub growth_pct: f64,
}

/// PPBCAST (and SBCAST) over the tree, per group size and message size (mean80).
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// Group size.
    pub nodes: usize,
    /// Message size.
    pub size: usize,
    /// PPBCAST mean80 / tree mean80.
    pub ppbcast_over_tree: Option<f64>,
    /// SBCAST mean80 / tree mean80.
    pub sbcast_over_tree: Option<f64>,
}

/// One protocol row over the raw floor of the same group size and message size.
#[derive(Debug, Clone, Serialize)]
pub struct OverFloor {
    /// Algorithm.
    pub algo: String,
    /// Group size.
    pub nodes: usize,
    /// Message size.
    pub size: usize,
    /// The floor's mean80, µs.
    pub floor_us: f64,
    /// The algorithm's mean80, µs.
    pub algo_us: f64,
    /// algo / floor.
    pub ratio: f64,
}

/// Where the time of one broadcast goes (medians; probing only). The instants: the root's
/// call, its first `send` to the link, the link `flush` after it, the last receiver's first
/// received frame, that receiver's return.
#[derive(Debug, Clone, Serialize)]
pub struct Breakdown {
    /// Algorithm (or floor).
    pub algo: String,
    /// Group size.
    pub nodes: usize,
    /// Message size.
    pub size: usize,
    /// Iterations with every instant.
    pub samples: usize,
    /// Root: call -> first frame handed to the link (engine, copies, encoding).
    pub pre_send_us: f64,
    /// Root: first send -> its flush returned (the kick; on veth it also runs the delivery).
    pub kick_us: f64,
    /// Root's first send -> the last receiver's first frame (medium and wake-up).
    pub to_last_rx_us: f64,
    /// Last receiver: first frame -> return (engine, the node's loop, the group call).
    pub last_rx_to_return_us: f64,
    /// Root: flush returned -> its next waiting receive (work that delays a receiver woken on
    /// the root's CPU).
    pub root_back_to_wait_us: f64,
}

/// The work of one row per broadcast, all member threads together, counted by the kernel
/// over the measured iterations (see [`super::cpu::Meter`]).
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// Algorithm (or floor).
    pub algo: String,
    /// Group size.
    pub nodes: usize,
    /// Message size.
    pub size: usize,
    /// Broadcasts counted.
    pub broadcasts: u64,
    /// Repair frames (retransmissions, rebroadcasts, probes) every member sent over them: on
    /// the lossless test-bed every one is spurious.
    pub repairs: u64,
    /// Per broadcast.
    pub per_bcast: PerOp,
    /// Per broadcast over the floor's of the same group size and message size, measured in
    /// the same run (absent for the floor rows or without the floor).
    pub over_floor: Option<PerOp>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    /// Rows.
    pub rows: Vec<Row>,
    /// Growth from the smallest to the largest group.
    pub growth: Vec<Growth>,
    /// Hardware broadcast over the tree.
    pub ratios: Vec<Ratio>,
    /// Every protocol row over the raw floor measured in the same run (empty without it).
    pub over_floor: Vec<OverFloor>,
    /// Every row over the reference measured in the same run (empty without it; `floor_us`
    /// is the reference's).
    pub over_reference: Vec<OverFloor>,
    /// Where the time goes (empty unless probing).
    pub breakdown: Vec<Breakdown>,
    /// The work per broadcast of every row (empty unless counting, `--cost`).
    pub cost: Vec<Cost>,
    /// How it was measured.
    pub method: String,
    /// Link backend.
    pub backend: String,
    /// Wait mode.
    pub wait: String,
    /// Hosts on the test-bed.
    pub hosts: usize,
    /// Measured iterations.
    pub iters: usize,
    /// Warm-up iterations.
    pub warmup: usize,
    /// Link rate limit, if any.
    pub rate: Option<String>,
    /// Loss at the switch, percent.
    pub loss_pct: f64,
}

impl LatencyReport {
    /// The row of (algo, nodes, size).
    pub fn get(&self, algo: &str, nodes: usize, size: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.algo == algo && r.nodes == nodes && r.size == size)
    }
}

/// Builds a test-bed, runs, tears down.
pub fn run(o: &LatencyOptions) -> Result<LatencyReport, String> {
    let bed = o.bed.up()?;
    let r = run_on(&bed, o);
    drop(bed);
    r
}

/// Runs on an existing test-bed (hosts `0..max(nodes)`).
pub fn run_on(bed: &Testbed, o: &LatencyOptions) -> Result<LatencyReport, String> {
    if o.iters == 0 || o.sizes.is_empty() || (o.algos.is_empty() && !o.floor) || o.nodes.is_empty()
    {
        return Err(
            "nothing to measure (iters, sizes, algorithms or the floor, and nodes must be given)"
                .into(),
        );
    }
    let plan: Arc<Vec<(Algorithm, usize)>> = Arc::new(
        o.algos
            .iter()
            .flat_map(|&a| o.sizes.iter().map(move |&s| (a, s)))
            .collect(),
    );
    let blocks = o.blocks.clamp(1, o.iters);
    let per_group = (plan.len() * o.frames.len() * (o.iters + o.warmup * blocks)) as u64;
    let pb = bed::progress_bar(per_group * o.nodes.len() as u64, o.progress, "latency");
    let mut rows = Vec::new();
    let mut breakdown = Vec::new();
    let mut cost = Vec::new();
    for &k in &o.nodes {
        // Per (algorithm, size) of the plan, and per floor size: the stamps of every member,
        // block after block.
        let entries = plan.len() * o.frames.len();
        let mut proto: Vec<Vec<Vec<Stamp>>> = vec![vec![Vec::new(); k]; entries];
        let mut raw: Vec<Vec<Vec<Stamp>>> = vec![vec![Vec::new(); k]; o.sizes.len()];
        // Per size, the reference's statistics of every block.
        let mut refs: Vec<Vec<(Summary, usize)>> = vec![Vec::new(); o.sizes.len()];
        // Per entry, the work of all members over every block.
        let mut proto_cost = vec![Counts::default(); entries];
        let mut raw_cost = vec![Counts::default(); o.sizes.len()];
        let mut proto_repairs = vec![0u64; entries];
        for blk in 0..blocks {
            let iters = o.iters / blocks + usize::from(blk < o.iters % blocks);
            if o.floor {
                let st = floor::stamps(bed, k, &o.bed, &o.sizes, o.warmup, iters, o.cost)
                    .inspect_err(|_| pb.abandon())?;
                let c: Vec<_> = st.iter().map(|m| m.counts.clone()).collect();
                append(&mut raw, st.into_iter().map(|m| m.stamps).collect(), iters);
                sum_counts(&mut raw_cost, &c);
            }
            if let Some(program) = &o.reference {
                for (i, &size) in o.sizes.iter().enumerate() {
                    if size <= reference::MAX_SIZE {
                        refs[i].push((reference::measure(bed, program, k, size, iters)?, iters));
                    }
                }
            }
            for (f, &frames) in o.frames.iter().enumerate().filter(|_| !plan.is_empty()) {
                let at = f * plan.len()..(f + 1) * plan.len();
                let st = protocol_stamps(bed, k, o, frames, &plan, iters, &pb)
                    .inspect_err(|_| pb.abandon())?;
                let c: Vec<_> = st.iter().map(|m| m.counts.clone()).collect();
                for m in &st {
                    for (a, r) in proto_repairs[at.clone()].iter_mut().zip(&m.repairs) {
                        *a += r;
                    }
                }
                append(
                    &mut proto[at.clone()],
                    st.into_iter().map(|m| m.stamps).collect(),
                    iters,
                );
                sum_counts(&mut proto_cost[at], &c);
            }
        }
        if o.cost {
            let ops = o.iters as u64;
            let floor_of = |size: usize| {
                o.sizes
                    .iter()
                    .position(|&s| s == size)
                    .filter(|_| o.floor)
                    .map(|i| PerOp::new(&raw_cost[i], ops))
            };
            let named = o
                .sizes
                .iter()
                .map(|&s| (FLOOR.to_string(), s))
                .zip(raw_cost.iter().map(|c| (c, 0)))
                .filter(|_| o.floor)
                .chain(
                    entry_names(&o.frames, &plan)
                        .zip(proto_cost.iter().zip(proto_repairs.iter().copied())),
                );
            for ((algo, size), (c, repairs)) in named {
                let per_bcast = PerOp::new(c, ops);
                let over_floor = floor_of(size)
                    .filter(|_| algo != FLOOR)
                    .map(|f| per_bcast.over(&f));
                cost.push(Cost {
                    algo,
                    nodes: k,
                    size,
                    broadcasts: ops,
                    repairs,
                    per_bcast,
                    over_floor,
                });
            }
        }
        let named = o
            .sizes
            .iter()
            .map(|&s| (FLOOR.to_string(), s))
            .zip(&raw)
            .filter(|_| o.floor)
            .chain(entry_names(&o.frames, &plan).zip(&proto));
        for ((algo, size), st) in named {
            let (row, b) = summarize_stamps(&algo, k, size, st);
            rows.push(row);
            breakdown.extend(b);
        }
        for (&size, blocks) in o.sizes.iter().zip(&refs) {
            if let Some(stats) = reference::combine(blocks) {
                rows.push(Row {
                    algo: REFERENCE.into(),
                    nodes: k,
                    size,
                    stats,
                });
            }
        }
    }
    pb.finish_and_clear();
    let mut r = analyse(rows, o);
    r.breakdown = breakdown;
    r.cost = cost;
    Ok(r)
}

/// The (row name, size) of every protocol entry, frames after frames: `sbcast`, `sbcast+enc`.
fn entry_names<'a>(
    frames: &'a [Frames],
    plan: &'a [(Algorithm, usize)],
) -> impl Iterator<Item = (String, usize)> + 'a {
    frames.iter().flat_map(move |f| {
        plan.iter()
            .map(move |&(a, s)| (format!("{a}{}", f.suffix()), s))
    })
}

/// Appends one block's stamps (`st[member]` holds `iters` per entry, entry after entry) to
/// `acc[entry][member]`.
fn append(acc: &mut [Vec<Vec<Stamp>>], st: Vec<Vec<Stamp>>, iters: usize) {
    for (m, v) in st.into_iter().enumerate() {
        for (e, chunk) in v.chunks(iters.max(1)).enumerate() {
            if let Some(a) = acc.get_mut(e) {
                a[m].extend_from_slice(chunk);
            }
        }
    }
}

/// The row (and, with probing, the breakdown) of one (algorithm or floor, size) from the
/// stamps of every member: latency = last receiver's `t` - root's `t`.
fn summarize_stamps(
    algo: &str,
    k: usize,
    size: usize,
    st: &[Vec<Stamp>],
) -> (Row, Option<Breakdown>) {
    let n = st[0].len();
    let mut lat = Vec::with_capacity(n);
    let (mut pre, mut kick, mut wire, mut post) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut back = Vec::new();
    for j in 0..n {
        let root = st[0][j];
        let last = st[1..]
            .iter()
            .map(|v| v[j])
            .max_by_key(|s| s.t)
            .expect("k >= 2");
        lat.push(bed::us(root.t, last.t));
        if let (Some(send), Some(flushed), Some(rx)) = (root.a, root.b, last.a) {
            pre.push(bed::us(root.t, send));
            kick.push(bed::us(send, flushed));
            wire.push(bed::us(send, rx));
            post.push(bed::us(rx, last.t));
            if let Some(w) = root.c {
                back.push(bed::us(flushed, w));
            }
        }
    }
    let row = Row {
        algo: algo.to_string(),
        nodes: k,
        size,
        stats: summarize(&lat),
    };
    let b = (!pre.is_empty()).then(|| Breakdown {
        algo: algo.to_string(),
        nodes: k,
        size,
        samples: pre.len(),
        pre_send_us: summarize(&pre).median_us,
        kick_us: summarize(&kick).median_us,
        to_last_rx_us: summarize(&wire).median_us,
        last_rx_to_return_us: summarize(&post).median_us,
        root_back_to_wait_us: summarize(&back).median_us,
    });
    (row, b)
}

/// The protocol's stamps of group size `k` for `iters` measured iterations of every plan entry
/// (after `o.warmup` unmeasured ones): `[member]` = (stamps `[entry * iters + i]`, the
/// member's work per entry over the measured iterations, counted with `o.cost`).
fn protocol_stamps(
    bed: &Testbed,
    k: usize,
    o: &LatencyOptions,
    frames: Frames,
    plan: &Arc<Vec<(Algorithm, usize)>>,
    iters: usize,
    pb: &indicatif::ProgressBar,
) -> Result<Vec<MemberRun>, String> {
    let done = Arc::new(AtomicUsize::new(0));
    let (plan2, pb2) = (plan.clone(), pb.clone());
    let (warmup, cost) = (o.warmup, o.cost);
    let bed_o = BedOptions {
        frames,
        ..o.bed.clone()
    };
    bed::run_group(bed, k, 0x00EB_1000 | k as u32, &bed_o, move |rank, g, b| {
        let mut out: Vec<Stamp> = Vec::with_capacity(plan2.len() * iters);
        let mut meter = Meter::new(cost, plan2.len())?;
        let mut repairs = vec![0u64; plan2.len()];
        let sent = |g: &Group| g.stats().repair_frames;
        let mut since: Option<(usize, u64)> = None;
        let mut round = 0usize;
        // One buffer for every call, as a program that broadcasts in a loop keeps one: the
        // group lends it to the protocol and gives it back, so no iteration allocates.
        let mut buf: Vec<u8> = Vec::new();
        for (e, &(algo, size)) in plan2.iter().enumerate() {
            for it in 0..warmup + iters {
                // The window of an entry runs from its first measured iteration to the first of
                // the next entry: the root's wait before each call, where it answers the
                // receivers of the previous broadcast, is in it.
                if it == 0 {
                    meter.stop()?;
                    if let Some((e, r)) = since.take() {
                        repairs[e] += sent(g) - r;
                    }
                }
                if it == warmup {
                    meter.start(e)?;
                    since = Some((e, sent(g)));
                }
                if rank == 0 {
                    b.wait_for(&done, round * (k - 1), || bed::spin(g))?;
                    buf.clear();
                    buf.resize(size, (round % 251) as u8);
                    root_mark_probe(&mut out);
                    let t = Instant::now();
                    g.bcast_with(Rank::new(0), &mut buf, algo)
                        .map_err(|e| format!("{algo} bcast of {size} B: {e}"))?;
                    if it >= warmup {
                        out.push(Stamp::root(t));
                    }
                    pb2.inc(1);
                } else {
                    g.bcast_with(Rank::new(0), &mut buf, algo)
                        .map_err(|e| format!("{algo} receive of {size} B: {e}"))?;
                    let t = Instant::now();
                    if buf.len() != size || buf.first() != Some(&((round % 251) as u8)) {
                        return Err(format!(
                            "{algo}: got {} bytes, expected {size} (round {round})",
                            buf.len()
                        ));
                    }
                    receiver_done(&mut out, t, &done, it >= warmup);
                }
                round += 1;
            }
        }
        if rank == 0 {
            b.wait_for(&done, round * (k - 1), || bed::spin(g))?;
            root_mark_probe(&mut out);
        }
        meter.stop()?;
        if let Some((e, r)) = since.take() {
            repairs[e] += sent(g) - r;
        }
        Ok(MemberRun {
            stamps: out,
            counts: meter.into_counts(),
            repairs,
        })
    })
}

/// Growth and ratios from the rows (also used for simulator rows).
pub fn analyse(rows: Vec<Row>, o: &LatencyOptions) -> LatencyReport {
    let mut nodes = o.nodes.clone();
    nodes.sort_unstable();
    nodes.dedup();
    let mut growth = Vec::new();
    let mut ratios = Vec::new();
    let find = |a: &str, n: usize, s: usize| {
        rows.iter()
            .find(|r| r.algo == a && r.nodes == n && r.size == s)
            .map(|r| r.stats.mean80_us)
    };
    if let (Some(&lo), Some(&hi)) = (nodes.first(), nodes.last()) {
        if lo != hi {
            for a in &o.algos {
                for &s in &o.sizes {
                    if let (Some(f), Some(t)) =
                        (find(&a.to_string(), lo, s), find(&a.to_string(), hi, s))
                    {
                        growth.push(Growth {
                            algo: a.to_string(),
                            size: s,
                            from_nodes: lo,
                            to_nodes: hi,
                            from_us: f,
                            to_us: t,
                            growth_pct: if f > 0.0 { (t - f) / f * 100.0 } else { 0.0 },
                        });
                    }
                }
            }
        }
    }
    for &n in &nodes {
        for &s in &o.sizes {
            if let Some(tree) = find("tree", n, s).filter(|&t| t > 0.0) {
                let pp = find("ppbcast", n, s).map(|v| v / tree);
                let sb = find("sbcast", n, s).map(|v| v / tree);
                if pp.is_some() || sb.is_some() {
                    ratios.push(Ratio {
                        nodes: n,
                        size: s,
                        ppbcast_over_tree: pp,
                        sbcast_over_tree: sb,
                    });
                }
            }
        }
    }
    let over = |base: &str| -> Vec<OverFloor> {
        rows.iter()
            .filter(|r| r.algo != base)
            .filter_map(|r| {
                let f = find(base, r.nodes, r.size).filter(|&f| f > 0.0)?;
                Some(OverFloor {
                    algo: r.algo.clone(),
                    nodes: r.nodes,
                    size: r.size,
                    floor_us: f,
                    algo_us: r.stats.mean80_us,
                    ratio: r.stats.mean80_us / f,
                })
            })
            .collect()
    };
    let over_floor = over(FLOOR);
    let over_reference = over(REFERENCE);
    LatencyReport {
        rows,
        growth,
        ratios,
        over_floor,
        over_reference,
        breakdown: Vec::new(),
        cost: Vec::new(),
        method: METHOD.into(),
        backend: o.bed.backend.resolve().unwrap_or(o.bed.backend).to_string(),
        wait: format!("{:?}", o.bed.wait).to_lowercase(),
        hosts: o.bed.hosts,
        iters: o.iters,
        warmup: o.warmup,
        rate: o.bed.rate.map(|r| r.to_string()),
        loss_pct: o.bed.loss,
    }
}

/// Renders the report for a terminal.
pub fn render(r: &LatencyReport) -> String {
    let mut out = format!(
        "broadcast latency on a {}-host test-bed (backend {}, wait {}, rate {}, loss {}%), {} iterations after {} warm-up\n\n",
        r.hosts,
        r.backend,
        r.wait,
        r.rate.as_deref().unwrap_or("unlimited"),
        r.loss_pct,
        r.iters,
        r.warmup
    );
    let mut head = vec!["algo", "nodes", "size B"];
    head.extend(Summary::HEADERS);
    let mut t = Table::new(&head);
    for row in &r.rows {
        let mut cells = vec![
            row.algo.clone(),
            row.nodes.to_string(),
            row.size.to_string(),
        ];
        cells.extend(row.stats.cells());
        t.row(cells);
    }
    out.push_str(&t.render());
    if !r.growth.is_empty() {
        let _ = writeln!(out, "\nlatency growth with the group size (mean80):");
        let mut t = Table::new(&["algo", "size B", "from", "to", "µs", "µs", "growth"]);
        for g in &r.growth {
            t.row(vec![
                g.algo.clone(),
                g.size.to_string(),
                g.from_nodes.to_string(),
                g.to_nodes.to_string(),
                fmt_us(g.from_us),
                fmt_us(g.to_us),
                format!("{:+.1}%", g.growth_pct),
            ]);
        }
        out.push_str(&t.render());
    }
    if !r.ratios.is_empty() {
        let _ = writeln!(
            out,
            "\nhardware broadcast over the binomial tree (mean80; < 1 = faster than the tree):"
        );
        let mut t = Table::new(&["nodes", "size B", "PPBCAST/tree", "SBCAST/tree"]);
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        for x in &r.ratios {
            t.row(vec![
                x.nodes.to_string(),
                x.size.to_string(),
                f(x.ppbcast_over_tree),
                f(x.sbcast_over_tree),
            ]);
        }
        out.push_str(&t.render());
    }
    if !r.over_floor.is_empty() {
        out.push_str(&render_over(
            "over the raw floor measured in this run (mean80 / floor mean80; 1.0 = the medium's own latency)",
            "floor µs",
            &r.over_floor,
        ));
        let _ = writeln!(out, "floor: {}", floor::METHOD);
    }
    if !r.over_reference.is_empty() {
        out.push_str(&render_over(
            "over the reference measured in this run (mean80 / reference mean80)",
            "reference µs",
            &r.over_reference,
        ));
        let _ = writeln!(out, "reference: {}", reference::METHOD);
    }
    if !r.breakdown.is_empty() {
        let _ = writeln!(
            out,
            "\nwhere the time goes (medians, µs; root call -> root's first send -> last receiver's first frame -> its return):"
        );
        let mut t = Table::new(&[
            "algo",
            "nodes",
            "size B",
            "call->send",
            "send->flushed",
            "send->last rx",
            "rx->return",
            "root flushed->waits",
        ]);
        for b in &r.breakdown {
            t.row(vec![
                b.algo.clone(),
                b.nodes.to_string(),
                b.size.to_string(),
                fmt_us(b.pre_send_us),
                fmt_us(b.kick_us),
                fmt_us(b.to_last_rx_us),
                fmt_us(b.last_rx_to_return_us),
                fmt_us(b.root_back_to_wait_us),
            ]);
        }
        out.push_str(&t.render());
    }
    if !r.cost.is_empty() {
        out.push_str(&render_cost(&r.cost));
    }
    let _ = writeln!(out, "\nmethod: {}", r.method);
    out
}

/// One table of ratios over a base row (the floor or the reference): a column per algorithm.
fn render_over(title: &str, base: &str, over: &[OverFloor]) -> String {
    let mut out = format!("\n{title}:\n");
    let mut algos: Vec<&str> = Vec::new();
    for x in over {
        if !algos.contains(&x.algo.as_str()) {
            algos.push(&x.algo);
        }
    }
    let mut head = vec!["nodes", "size B", base];
    head.extend(algos.iter().copied());
    let mut t = Table::new(&head);
    let mut keys: Vec<(usize, usize, f64)> = Vec::new();
    for x in over {
        if !keys.iter().any(|k| k.0 == x.nodes && k.1 == x.size) {
            keys.push((x.nodes, x.size, x.floor_us));
        }
    }
    for (n, s, f) in keys {
        let mut row = vec![n.to_string(), s.to_string(), fmt_us(f)];
        for a in &algos {
            row.push(
                over.iter()
                    .find(|x| x.nodes == n && x.size == s && x.algo == *a)
                    .map_or("-".into(), |x| format!("{:.2}", x.ratio)),
            );
        }
        t.row(row);
    }
    out.push_str(&t.render());
    out
}

/// The cost table: work per broadcast of every row, and of the protocol rows over the floor.
pub fn render_cost(cost: &[Cost]) -> String {
    let mut out = String::from(
        "\nwork per broadcast, all member threads together (kernel perf counters over the \
         measured iterations; x = over the floor of the same run):\n",
    );
    let mut t = Table::new(&[
        "algo",
        "nodes",
        "size B",
        "syscalls",
        "sendto",
        "ctx sw",
        "timers",
        "CPU µs",
        "syscalls x",
        "sendto x",
        "ctx sw x",
        "CPU x",
        "repairs",
    ]);
    for c in cost {
        let p = &c.per_bcast;
        let x = |f: fn(&PerOp) -> f64| c.over_floor.map_or("-".into(), |o| format!("{:.2}", f(&o)));
        t.row(vec![
            c.algo.clone(),
            c.nodes.to_string(),
            c.size.to_string(),
            format!("{:.2}", p.syscalls),
            format!("{:.2}", p.sendto),
            format!("{:.2}", p.ctx_switches),
            format!("{:.2}", p.timers),
            format!("{:.1}", p.cpu_us),
            x(|o| o.syscalls),
            x(|o| o.sendto),
            x(|o| o.ctx_switches),
            x(|o| o.cpu_us),
            c.repairs.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// Writes the rows as CSV.
pub fn write_csv(r: &LatencyReport, path: &Path) -> std::io::Result<()> {
    let mut s = String::from("algo,nodes,size,mean80_us,median_us,p99_us,max_us\n");
    for row in &r.rows {
        let _ = writeln!(
            s,
            "{},{},{},{:.3},{:.3},{:.3},{:.3}",
            row.algo,
            row.nodes,
            row.size,
            row.stats.mean80_us,
            row.stats.median_us,
            row.stats.p99_us,
            row.stats.max_us
        );
    }
    std::fs::write(path, s)
}

/// What `latency` and `floor` measure: the test-bed and its groups, the message sizes and the
/// iterations.
#[derive(clap::Args)]
struct SweepArgs {
    #[command(flatten)]
    groups: GroupArgs,
    /// Message sizes in bytes.
    #[arg(
        long,
        default_value = "4,8,256,1024,4096,16384,65536",
        value_delimiter = ','
    )]
    sizes: Vec<usize>,
    /// Measured iterations per (algorithm or floor, group size, size).
    #[arg(long, default_value_t = 500)]
    iters: usize,
    /// Unmeasured iterations before them.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
}

impl SweepArgs {
    /// A latency run of these groups, sizes and iterations on the test-bed `link` describes
    /// (`default_prefix` without `--prefix`; every link probed with `probe`), the rest as
    /// [`LatencyOptions::new`] has it.
    fn options(self, link: &LinkArgs, default_prefix: &str, probe: bool) -> LatencyOptions {
        let mut bed = link.bed(self.groups.testbed, default_prefix);
        bed.probe = probe;
        LatencyOptions {
            bed,
            nodes: self.groups.nodes,
            sizes: self.sizes,
            iters: self.iters,
            warmup: self.warmup,
            ..LatencyOptions::new(self.groups.testbed)
        }
    }
}

/// Broadcast latency on real hosts (the EQA paper, section 4): PPBCAST, SBCAST and the
/// binomial tree, groups of the first k hosts of one test-bed, root = rank 0.
///
/// Latency of one broadcast = from the root's call until the LAST receiver has the whole
/// message (all members are threads of this process: one clock); iterations are separated
/// out of band so they never overlap. Reports the mean of the middle 80%, median, p99, max.
///
/// Example: ethbcast-bench latency --testbed 8 --nodes 2,4,8 --iters 500 --out bench-out
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    sweep: SweepArgs,
    /// Algorithms: ppbcast, sbcast, tree.
    #[arg(long, default_value = "ppbcast,sbcast,tree", value_delimiter = ',')]
    algos: Vec<Algorithm>,
    /// Skip the raw floor (measured by default before each group size, for the ratios).
    #[arg(long)]
    no_floor: bool,
    /// Split the iterations into this many blocks, each floor then protocol, so that a
    /// busy phase of a shared machine hits both alike.
    #[arg(long, default_value_t = 4)]
    blocks: usize,
    /// Also say where the time goes: root call, root's first send, its flush, the last
    /// receiver's first frame and return (medians).
    #[arg(long)]
    breakdown: bool,
    /// Also count the work per broadcast of every row and of the floor: system calls,
    /// `sendto`s, context switches, timers armed and CPU time of every member thread, from the kernel's
    /// per-thread perf counters (needs root and tracefs), and print their ratios. Counting
    /// slows the counted threads (every system call takes the kernel's traced path): take
    /// latencies, and ratios over `--reference`, from a run without it.
    #[arg(long)]
    cost: bool,
    /// Also run this independent raw fan-out program in every block, beside the floor, and
    /// print every row over it (rows `reference`; message sizes up to one frame). Its
    /// contract is that of rawfanout.c: `PROGRAM NODES ITERS block PAYLOAD` with
    /// `NETNS_FORMAT`, printing `mean80_us= median_us= p99_us=`.
    #[arg(long, value_name = "PROGRAM")]
    reference: Option<PathBuf>,
    /// How the groups' frames are protected, each measured in turn in every block: plain (no
    /// key), auth (a key, frames authenticated only), enc (a key, frames encrypted, a keyed
    /// group's default). Rows of auth and enc are named `sbcast+auth`, `sbcast+enc`.
    #[arg(long, value_enum, default_value = "plain", value_delimiter = ',')]
    frames: Vec<Frames>,
    #[command(flatten)]
    link: LinkArgs,
    /// Write the rows as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write plots (PNG and SVG) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON object (no progress bar).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the comparison (and writes the CSV and plots).
    pub fn run(self) -> ExitCode {
        let o = LatencyOptions {
            algos: self.algos,
            progress: !self.json,
            floor: !self.no_floor,
            blocks: self.blocks,
            cost: self.cost,
            reference: self.reference,
            frames: self.frames,
            ..self.sweep.options(&self.link, "eblat", self.breakdown)
        };
        let r = match run(&o) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        print(self.json, &r, render);
        let mut ok = true;
        if let Some(p) = self.csv {
            if let Err(e) = write_csv(&r, &p) {
                eprintln!("error: write {}: {e}", p.display());
                ok = false;
            }
        }
        code(ok && plots(self.out.as_ref(), |d| plot(&r, d)))
    }
}

/// The raw floor of broadcast latency: raw broadcast frames, no protocol, measured exactly
/// as `latency` measures (same threads, clock, link, wait modes, sizes, group sizes).
///
/// Latency of one iteration = from the root's send until the LAST receiver has every frame.
///
/// Example: ethbcast-bench floor --testbed 8 --nodes 2,8 --sizes 8,256 --iters 2000
#[derive(clap::Args)]
pub struct FloorArgs {
    #[command(flatten)]
    sweep: SweepArgs,
    /// Also say where the time goes (see `latency --breakdown`).
    #[arg(long)]
    breakdown: bool,
    #[command(flatten)]
    link: LinkArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

impl FloorArgs {
    /// Measures the floor alone: a latency run without algorithms (floor.rs measures, this
    /// module reports).
    pub fn run(self) -> ExitCode {
        let o = LatencyOptions {
            algos: Vec::new(),
            progress: false,
            floor: true,
            blocks: 1,
            cost: false,
            ..self.sweep.options(&self.link, "ebfl", self.breakdown)
        };
        match run(&o) {
            Ok(mut r) => {
                r.method = floor::METHOD.into();
                print(self.json, &r, render);
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        }
    }
}

/// One series per algorithm: the mean80 of the rows `keep` selects, against `x` of each.
fn algo_series(
    r: &LatencyReport,
    algos: &[String],
    keep: impl Fn(&Row) -> bool,
    x: impl Fn(&Row) -> f64,
) -> Vec<Series> {
    algos
        .iter()
        .map(|a| Series {
            limit: false,
            name: a.to_uppercase(),
            points: r
                .rows
                .iter()
                .filter(|row| &row.algo == a && keep(row))
                .map(|row| (x(row), row.stats.mean80_us))
                .collect(),
        })
        .collect()
}

/// Latency vs size per algorithm (one chart per group size) and latency vs group size (for
/// 8 B and 256 B, or the two smallest sizes measured).
pub fn plot(r: &LatencyReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut algos: Vec<String> = Vec::new();
    let mut nodes: Vec<usize> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    for row in &r.rows {
        if !algos.contains(&row.algo) {
            algos.push(row.algo.clone());
        }
        if !nodes.contains(&row.nodes) {
            nodes.push(row.nodes);
        }
        if !sizes.contains(&row.size) {
            sizes.push(row.size);
        }
    }
    nodes.sort_unstable();
    sizes.sort_unstable();
    for &n in &nodes {
        let c = Chart {
            title: format!("Broadcast latency, {n} nodes (mean of middle 80%)"),
            x_label: "message size (bytes)".into(),
            y_label: "latency (µs)".into(),
            log_x: true,
            log_y: true,
            series: algo_series(r, &algos, |x| x.nodes == n, |x| x.size as f64),
        };
        files.extend(draw(&c, dir, &format!("latency-vs-size-{n}nodes"))?);
    }
    let mut pick: Vec<usize> = [8, 256].into_iter().filter(|s| sizes.contains(s)).collect();
    if pick.is_empty() {
        pick = sizes.iter().copied().take(2).collect();
    }
    if nodes.len() >= 2 {
        for s in pick {
            let c = Chart {
                title: format!("Broadcast latency of {s} B vs group size"),
                x_label: "nodes".into(),
                y_label: "latency (µs)".into(),
                log_x: false,
                log_y: false,
                series: algo_series(r, &algos, |x| x.size == s, |x| x.nodes as f64),
            };
            files.extend(draw(&c, dir, &format!("latency-vs-nodes-{s}B"))?);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protection_of_the_frames_is_a_row_of_its_own_with_its_key() {
        let plan = [(Algorithm::Simple, 8), (Algorithm::Tree, 4096)];
        let names: Vec<_> =
            entry_names(&[Frames::Plain, Frames::Auth, Frames::Enc], &plan).collect();
        let want = [
            ("sbcast", 8),
            ("tree", 4096),
            ("sbcast+auth", 8),
            ("tree+auth", 4096),
            ("sbcast+enc", 8),
            ("tree+enc", 4096),
        ];
        assert_eq!(names, want.map(|(a, s)| (a.to_string(), s)));
        let bed = BedOptions::new(2, "t");
        let plain = Frames::Plain.options(7, &bed);
        assert!(plain.key.is_none() && plain.insecure);
        let auth = Frames::Auth.options(7, &bed);
        assert!(auth.key.is_some() && !auth.encrypt && !auth.insecure);
        let enc = Frames::Enc.options(7, &bed);
        assert!(enc.key.is_some() && enc.encrypt && enc.group_id == 7);
    }

    fn row() -> Row {
        Row {
            algo: "tree".into(),
            nodes: 4,
            size: 256,
            stats: Summary {
                mean80_us: 12.5,
                median_us: 12.0,
                p99_us: 30.75,
                max_us: 1500.0,
            },
        }
    }

    #[test]
    fn a_row_keeps_its_json_keys_and_table_columns() {
        assert_eq!(
            serde_json::to_string(&row()).unwrap(),
            r#"{"algo":"tree","nodes":4,"size":256,"mean80_us":12.5,"median_us":12.0,"p99_us":30.75,"max_us":1500.0}"#
        );
        let text = render(&analyse(vec![row()], &LatencyOptions::new(8)));
        assert!(
            text.contains(
                "algo  nodes  size B  mean80 µs  median µs  p99 µs  max µs\n\
                 ----  -----  ------  ---------  ---------  ------  ------\n\
                 tree      4     256       12.5       12.0    30.8    1500\n"
            ),
            "{text}"
        );
    }
}
