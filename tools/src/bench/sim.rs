//! `ethbcast-bench sim`: the protocol on the simulated switch, in virtual time.

use std::process::ExitCode;
use std::time::Duration;

use ethbcast::cluster::{run, ClusterError, Deliveries, Report, Scenario, Traffic};
use ethbcast::simgroup::{run_group, GroupReport, GroupScenario};
use ethbcast::{Algorithm, Faults, Rank};
use serde::Serialize;

use super::cli::parse_rate;
use crate::harness::report::{code, fail, print};

/// Options of a simulator run (rates in percent of frames, per port).
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Members.
    pub nodes: u16,
    /// Algorithms.
    pub algos: Vec<Algorithm>,
    /// Messages.
    pub messages: usize,
    /// Sizes to draw from.
    pub sizes: Vec<usize>,
    /// Roots (default: up to 4 members take turns).
    pub roots: Option<Vec<Rank>>,
    /// Independent loss, percent.
    pub loss: f64,
    /// Burst-loss start probability, percent.
    pub burst_loss: f64,
    /// Duplication, percent.
    pub dup: f64,
    /// Reordering, percent.
    pub reorder: f64,
    /// Corruption, percent.
    pub corrupt: f64,
    /// Seed.
    pub seed: u64,
    /// Link rate in bit/s.
    pub rate_bps: Option<u64>,
    /// Receive window / buffer slots.
    pub window: Option<usize>,
    /// Acknowledgement tree fan-out (0: every receiver acknowledges to the root).
    pub ack_tree: Option<u16>,
    /// Peer repair.
    pub peer_repair: Option<bool>,
    /// Also run the same scenario with this many members first, and report the goodput as a
    /// fraction of that run's.
    pub compare_nodes: Option<u16>,
    /// Receive interrupt coalescing of every host, microseconds (0: a turn per arrival
    /// instant).
    pub rx_coalesce_us: u64,
    /// Members observe each message's bytes as they consume them and keep none
    /// (`Scenario::observe`), rather than reassemble each message whole.
    pub observe: bool,
}

/// The JSON the subcommand prints.
#[derive(Debug, Serialize)]
pub struct SimJson {
    /// Members.
    pub nodes: u16,
    /// Algorithms used.
    pub algos: Vec<String>,
    /// Seed.
    pub seed: u64,
    /// The delivery checker's counts (flat in the JSON).
    #[serde(flatten)]
    pub deliveries: Deliveries,
    /// First transmissions of data frames.
    pub data_frames: u64,
    /// Repair frames.
    pub repair_frames: u64,
    /// Of which re-broadcasts.
    pub rebroadcasts: u64,
    /// Frames the simulator dropped.
    pub lost_frames: u64,
    /// Frames the simulator delivered to a port (each port's copy of a broadcast counts).
    pub frames_delivered: u64,
    /// CPU microseconds per frame delivered: the simulator's cost per unit of work.
    pub cpu_us_per_frame: f64,
    /// repair_frames / lost_frames.
    pub repair_ratio: f64,
    /// ACK frames sent to a root directly.
    pub ack_frames: u64,
    /// Acknowledgements sent up the acknowledgement tree.
    pub tree_ack_frames: u64,
    /// Control frames the roots received (acks, nacks, pulls, tree acknowledgements).
    pub root_control_frames: u64,
    /// root_control_frames / data_frames.
    pub root_control_per_data_frame: f64,
    /// Repair frames members relayed to fellow members (peer repair).
    pub peer_repairs: u64,
    /// Of root_control_frames: NACKs.
    pub root_nacks: u64,
    /// Of root_control_frames: tree acknowledgements.
    pub root_tree_acks: u64,
    /// Of root_control_frames: answers to the roots' probes.
    pub root_probe_answers: u64,
    /// Message bytes delivered per receiver (in megabits) divided by the virtual time.
    pub goodput_mbps: f64,
    /// NACK frames.
    pub nack_frames: u64,
    /// Pull requests.
    pub pull_frames: u64,
    /// Frames the simulator corrupted.
    pub corrupted_frames: u64,
    /// Of those, caught by the CRC.
    pub bad_crc: u64,
    /// Virtual time.
    pub virtual_time_us: u64,
    /// Whether the run finished before its limit.
    pub completed: bool,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
    /// CPU seconds (user and system) the simulation took: the wall time of an idle machine.
    pub cpu_s: f64,
    /// Peak resident memory of the process, MiB (the whole group is in it).
    pub peak_rss_mib: f64,
    /// peak_rss_mib per member, KiB.
    pub rss_per_member_kib: f64,
    /// With `--compare-nodes`: that run's goodput, and this one's as a fraction of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared: Option<Compared>,
}

/// The goodput of the same scenario with another number of members (`--compare-nodes`).
#[derive(Debug, Serialize)]
pub struct Compared {
    /// Members of the reference run.
    pub nodes: u16,
    /// Its goodput per receiver, Mbit/s.
    pub goodput_mbps: f64,
    /// Whether every delivery of it was exact.
    pub exact: bool,
    /// This run's goodput divided by the reference's.
    pub goodput_ratio: f64,
}

impl SimOptions {
    fn faults(&self) -> Faults {
        Faults {
            loss: self.loss / 100.0,
            burst_loss: self.burst_loss / 100.0,
            dup: self.dup / 100.0,
            reorder: self.reorder / 100.0,
            reorder_delay: Duration::from_micros(200),
            corrupt: self.corrupt / 100.0,
            ..Faults::NONE
        }
    }

    /// The group, its links and the messages of a run with these options.
    fn traffic(&self) -> Traffic {
        Traffic {
            sizes: self.sizes.clone(),
            seed: self.seed,
            faults: self.faults(),
            rate_bps: self.rate_bps,
            ..Traffic::new(self.nodes, self.messages)
        }
    }
}

/// Options of a run of the group API (`sim --api group`).
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// The switch, the faults and the workload's size.
    pub sim: SimOptions,
    /// Algorithms drawn per call.
    pub algos: Vec<Algorithm>,
    /// A barrier after every this many broadcasts.
    pub barrier_every: usize,
    /// Members killed a third of the way through.
    pub kill: usize,
    /// Members behind a broadcast filter.
    pub filter: usize,
}

/// The JSON of `sim --api group`: the scenario, the simulator's report, and the verdict.
#[derive(Debug, Serialize)]
pub struct GroupJson {
    /// Members.
    pub nodes: u16,
    /// Algorithms drawn per call.
    pub algos: Vec<String>,
    /// Seed.
    pub seed: u64,
    /// What the run gave (deliveries, barriers, evictions, detection, ...).
    #[serde(flatten)]
    pub report: GroupReport,
    /// Everything in the report held (and detection within the bound).
    pub perfect: bool,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

/// Runs the group API on the simulator.
pub fn run_group_sim(o: &GroupOptions) -> Result<GroupJson, ClusterError> {
    let mut sc = GroupScenario::new(o.sim.nodes, o.sim.messages);
    sc.traffic = o.sim.traffic();
    sc.algos = o.algos.clone();
    sc.barrier_every = o.barrier_every;
    sc.kill = o.kill;
    sc.filter = o.filter;
    let t0 = std::time::Instant::now();
    let report = run_group(&sc)?;
    Ok(GroupJson {
        nodes: o.sim.nodes,
        algos: o.algos.iter().map(|a| a.to_string()).collect(),
        seed: o.sim.seed,
        perfect: report.perfect(),
        report,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// Renders a group run for a terminal.
pub fn render_group(j: &GroupJson) -> String {
    let r = &j.report;
    let mut t = crate::harness::table::Table::new(&["metric", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("nodes", j.nodes.to_string()),
        ("algorithms", j.algos.join(",")),
        ("expected deliveries", r.deliveries.expected.to_string()),
        ("delivered intact", r.deliveries.delivered.to_string()),
        (
            "corrupt / duplicated / out of order / missing",
            format!(
                "{} / {} / {} / {}",
                r.deliveries.corrupt,
                r.deliveries.duplicated,
                r.deliveries.out_of_order,
                r.deliveries.missing
            ),
        ),
        (
            "barriers completed",
            format!("{} of {}", r.barriers_completed, r.barriers_expected),
        ),
        (
            "killed / evicted",
            format!("{:?} / {:?}", r.killed, r.evicted),
        ),
        ("wrongly evicted", format!("{:?}", r.wrongly_evicted)),
        ("behind a broadcast filter", format!("{:?}", r.filtered)),
        (
            "detection (max) / bound",
            format!("{:.1} ms / {:.1} ms", r.max_detect_ms, r.bound_ms),
        ),
        ("tree fall-backs", r.tree_fallbacks.to_string()),
        ("peak queued events", r.peak_queued_events.to_string()),
        (
            "virtual time",
            format!("{:.3} s", r.virtual_time_us as f64 / 1e6),
        ),
        ("perfect", j.perfect.to_string()),
        ("wall time", format!("{:.2} s", j.wall_s)),
    ];
    for (k, v) in rows {
        t.row(vec![k.to_string(), v]);
    }
    t.render()
}

/// Runs the simulation (first at `compare_nodes` members, if given, for the goodput ratio).
pub fn run_sim(o: &SimOptions) -> Result<SimJson, ClusterError> {
    let reference = match o.compare_nodes {
        Some(nodes) => Some(run_one(&SimOptions {
            nodes,
            compare_nodes: None,
            ..o.clone()
        })?),
        None => None,
    };
    let mut r = run_one(o)?;
    r.compared = reference.map(|c| Compared {
        nodes: c.nodes,
        goodput_mbps: c.goodput_mbps,
        exact: c.completed && c.deliveries.exact(),
        goodput_ratio: if c.goodput_mbps > 0.0 {
            r.goodput_mbps / c.goodput_mbps
        } else {
            0.0
        },
    });
    Ok(r)
}

/// One run of the simulation: its report, with the time and memory it took.
fn run_one(o: &SimOptions) -> Result<SimJson, ClusterError> {
    let mut sc = Scenario::new(o.nodes, o.messages);
    sc.traffic = o.traffic();
    sc.algos = o.algos.clone();
    if let Some(r) = &o.roots {
        sc.roots = r.clone();
    }
    sc.limit = Duration::from_secs(24 * 3600);

    sc.window = o.window;
    sc.ack_tree = o.ack_tree;
    sc.peer_repair = o.peer_repair;
    sc.rx_coalesce = Duration::from_micros(o.rx_coalesce_us);
    sc.observe = o.observe;
    let t0 = std::time::Instant::now();
    let cpu0 = super::cpu::process_seconds();
    let r: Report = run(&sc)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = super::cpu::process_seconds() - cpu0;
    // The peak of the process: the larger run's when there are two (the reference is smaller).
    let peak = super::cpu::peak_rss_bytes() as f64;
    Ok(SimJson {
        nodes: o.nodes,
        algos: o
            .algos
            .iter()
            .map(|a| format!("{a:?}").to_lowercase())
            .collect(),
        seed: o.seed,
        deliveries: r.deliveries,
        data_frames: r.data_frames,
        repair_frames: r.repair_frames,
        rebroadcasts: r.rebroadcasts,
        lost_frames: r.lost_frames,
        frames_delivered: r.frames_delivered,
        cpu_us_per_frame: cpu_s * 1e6 / r.frames_delivered.max(1) as f64,
        repair_ratio: if r.lost_frames == 0 {
            0.0
        } else {
            r.repair_frames as f64 / r.lost_frames as f64
        },
        ack_frames: r.ack_frames,
        tree_ack_frames: r.tree_ack_frames,
        root_control_frames: r.root_control_frames,
        root_control_per_data_frame: r.root_control_frames as f64 / r.data_frames.max(1) as f64,
        peer_repairs: r.peer_repairs,
        root_nacks: r.root_nacks,
        root_tree_acks: r.root_tree_acks,
        root_probe_answers: r.root_probe_answers,
        goodput_mbps: if r.virtual_time_us == 0 {
            0.0
        } else {
            r.delivered_bytes as f64 * 8.0
                / f64::from(o.nodes.saturating_sub(1).max(1))
                / r.virtual_time_us as f64
        },
        nack_frames: r.nack_frames,
        pull_frames: r.pull_frames,
        corrupted_frames: r.corrupted_frames,
        bad_crc: r.bad_crc,
        virtual_time_us: r.virtual_time_us,
        completed: r.completed,
        wall_s,
        cpu_s,
        peak_rss_mib: peak / (1024.0 * 1024.0),
        rss_per_member_kib: peak / 1024.0 / f64::from(o.nodes.max(1)),
        compared: None,
    })
}

/// Renders a run for a terminal.
pub fn render(r: &SimJson) -> String {
    let mut t = crate::harness::table::Table::new(&["metric", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("nodes", r.nodes.to_string()),
        ("algorithms", r.algos.join(",")),
        ("expected deliveries", r.deliveries.expected.to_string()),
        ("delivered intact", r.deliveries.delivered.to_string()),
        ("corrupt", r.deliveries.corrupt.to_string()),
        ("duplicated", r.deliveries.duplicated.to_string()),
        ("out of order", r.deliveries.out_of_order.to_string()),
        ("missing", r.deliveries.missing.to_string()),
        ("data frames", r.data_frames.to_string()),
        ("frames lost by the switch", r.lost_frames.to_string()),
        ("repair frames", r.repair_frames.to_string()),
        ("  of which re-broadcasts", r.rebroadcasts.to_string()),
        ("repair / lost", format!("{:.3}", r.repair_ratio)),
        (
            "ack / tree ack / nack / pull frames",
            format!(
                "{} / {} / {} / {}",
                r.ack_frames, r.tree_ack_frames, r.nack_frames, r.pull_frames
            ),
        ),
        (
            "control frames into the roots",
            format!(
                "{} ({:.2} per data frame)",
                r.root_control_frames, r.root_control_per_data_frame
            ),
        ),
        (
            "goodput per receiver",
            format!("{:.1} Mbit/s", r.goodput_mbps),
        ),
        (
            "corrupted by switch / caught by CRC",
            format!("{} / {}", r.corrupted_frames, r.bad_crc),
        ),
        (
            "virtual time",
            format!("{:.3} s", r.virtual_time_us as f64 / 1e6),
        ),
        ("completed", r.completed.to_string()),
        ("wall time", format!("{:.2} s", r.wall_s)),
        ("CPU time", format!("{:.2} s", r.cpu_s)),
        (
            "frames delivered by the switch",
            format!(
                "{} ({:.2} us of CPU each)",
                r.frames_delivered, r.cpu_us_per_frame
            ),
        ),
        (
            "peak resident memory",
            format!(
                "{:.0} MiB ({:.0} KiB per member)",
                r.peak_rss_mib, r.rss_per_member_kib
            ),
        ),
    ];
    for (k, v) in rows {
        t.row(vec![k.to_string(), v]);
    }
    if let Some(c) = &r.compared {
        t.row(vec![
            format!("goodput at {} members", c.nodes),
            format!(
                "{:.1} Mbit/s{}",
                c.goodput_mbps,
                if c.exact { "" } else { " (not exact!)" }
            ),
        ]);
        t.row(vec![
            "goodput ratio".to_string(),
            format!("{:.2}", c.goodput_ratio),
        ]);
    }
    t.render()
}

/// How the members of `sim --api stream` receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Receive {
    /// Each message is reassembled whole and checked.
    Whole,
    /// Each frame's bytes are checked where the port holds them as they are consumed, and
    /// no message is reassembled (as `ethbcast recv` writes a stream out). Members that
    /// keep no message serve their fellows from the frames they copy once asked, not from
    /// held messages: fewer bytes held, more requests to the roots.
    Observe,
}

/// Which layer `sim` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimApi {
    /// Streams of broadcasts from several roots.
    Stream,
    /// The group API, call by call.
    Group,
    /// Allgather over hardware broadcast against recursive doubling over point-to-point
    /// channels (allgather and allreduce), for 2, 4, ... up to --nodes members and every
    /// --sizes (bytes per member), --messages calls each.
    Collectives,
}

/// Run the protocol on the simulated switch and check every delivery.
///
/// Example: ethbcast-bench sim --nodes 16 --messages 20000 --loss 5 --burst-loss 1 --dup 1
/// --reorder 1 --corrupt 0.1 --json
///
/// With `--api group`, the group API call by call (bcast from rotating roots with every
/// algorithm, barriers, killed and filtered members, failure detection):
/// ethbcast-bench sim --api group --nodes 64 --messages 5000 --barrier-every 20 --kill 2
/// --filter 1 --loss 2 --burst-loss 1 --dup 1 --reorder 1 --corrupt 0.1 --seed 7 --json
#[derive(clap::Args)]
pub struct Args {
    /// stream: roots broadcast streams of messages (the engine under every member);
    /// group: the group API, call by call.
    #[arg(long, default_value = "stream")]
    api: SimApi,
    /// Members of the group.
    #[arg(long, default_value_t = 8)]
    nodes: u16,
    /// Algorithms (comma-separated): simple, pushpull, and with --api group also tree.
    /// Default: simple,pushpull (stream); pushpull,simple,tree (group).
    #[arg(long, value_delimiter = ',')]
    algo: Option<Vec<Algorithm>>,
    /// With --api group: a barrier after every this many broadcasts (0: none).
    #[arg(long, default_value_t = 10)]
    barrier_every: usize,
    /// With --api group: members killed a third of the way through.
    #[arg(long, default_value_t = 0)]
    kill: usize,
    /// With --api group: members behind a filter that drops broadcast frames.
    #[arg(long, default_value_t = 0)]
    filter: usize,
    /// Messages in all, from several roots in turn.
    #[arg(long, default_value_t = 1000)]
    messages: usize,
    /// Message sizes in bytes, drawn at random.
    #[arg(long, default_value = "8,256,4096,65536", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Roots (comma-separated ranks); default: up to four members take turns.
    #[arg(long, value_delimiter = ',')]
    roots: Option<Vec<Rank>>,
    /// Independent frame loss per port, percent.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability of starting a loss burst, percent.
    #[arg(long, default_value_t = 0.0)]
    burst_loss: f64,
    /// Duplication, percent.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Reordering, percent.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Corruption (bit flips), percent.
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Link rate: 100mbit, 1gbit or 0 (infinitely fast).
    #[arg(long, default_value = "1gbit")]
    rate: String,
    /// Retransmission buffer slots (= receive window in frames).
    #[arg(long)]
    window: Option<usize>,
    /// Fan-out of the acknowledgement tree; 0: every receiver acknowledges to the root.
    /// Default: a tree of fan-out 4 from 32 members on.
    #[arg(long)]
    ack_tree: Option<u16>,
    /// Peer repair (a receiver asks a fellow receiver before the root): on or off.
    /// Default: on from 32 members.
    #[arg(long, value_parser = parse_on_off)]
    peer_repair: Option<bool>,
    /// Run the same scenario with this many members first and report the goodput as a
    /// fraction of theirs (e.g. 16).
    #[arg(long)]
    compare_nodes: Option<u16>,
    /// Receive interrupt coalescing of every simulated host, in microseconds: a host takes
    /// the frames that reach it in one turn this long after the first (as a NIC's
    /// `rx-usecs`); 0: one turn per arrival instant.
    #[arg(long, default_value_t = 25)]
    rx_coalesce_us: u64,
    /// How members receive the stream.
    #[arg(long, value_enum, default_value = "whole")]
    receive: Receive,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the simulation; exits 1 unless every delivery was exact, 2 on bad options.
    pub fn run(self) -> ExitCode {
        let rate_bps = match parse_rate(&self.rate) {
            Ok(r) => r,
            Err(e) => return usage(e),
        };
        let stream_algos: Result<Vec<Algorithm>, String> = self
            .algo
            .clone()
            .unwrap_or(vec![Algorithm::Simple, Algorithm::PushPull])
            .into_iter()
            .map(|a| match a {
                Algorithm::Tree => Err("--algo tree needs --api group".to_string()),
                hardware => Ok(hardware),
            })
            .collect();
        let stream_algos = match (self.api, stream_algos) {
            (SimApi::Stream, Err(e)) => return usage(e),
            (_, a) => a.unwrap_or_default(),
        };
        let o = SimOptions {
            nodes: self.nodes,
            algos: stream_algos,
            messages: self.messages,
            sizes: self.sizes,
            roots: self.roots,
            loss: self.loss,
            burst_loss: self.burst_loss,
            dup: self.dup,
            reorder: self.reorder,
            corrupt: self.corrupt,
            seed: self.seed,
            rate_bps,
            window: self.window,
            ack_tree: self.ack_tree,
            peer_repair: self.peer_repair,
            compare_nodes: self.compare_nodes,
            rx_coalesce_us: self.rx_coalesce_us,
            observe: self.receive == Receive::Observe,
        };
        if self.api == SimApi::Collectives {
            return collectives(self.json, &o);
        }
        if self.api == SimApi::Group {
            let g = GroupOptions {
                sim: o,
                algos: self.algo.unwrap_or(vec![
                    Algorithm::PushPull,
                    Algorithm::Simple,
                    Algorithm::Tree,
                ]),
                barrier_every: self.barrier_every,
                kill: self.kill,
                filter: self.filter,
            };
            return match run_group_sim(&g) {
                Ok(r) => {
                    print(self.json, &r, |r| render_group(r) + "\n");
                    code(r.perfect)
                }
                Err(e) => usage(e),
            };
        }
        match run_sim(&o) {
            Ok(r) => {
                print(self.json, &r, |r| render(r) + "\n");
                let reference_exact = r.compared.as_ref().is_none_or(|c| c.exact);
                code(r.completed && r.deliveries.exact() && reference_exact)
            }
            Err(e) => fail(e),
        }
    }
}

/// The collectives' race ([`ethbcast::simcoll::race`]) for 2, 4, ... `o.nodes` members and
/// every size.
fn collectives(json: bool, o: &SimOptions) -> ExitCode {
    let mut races = Vec::new();
    let mut nodes = 2u16;
    while nodes <= o.nodes {
        for &bytes in &o.sizes {
            match ethbcast::simcoll::race(
                nodes,
                bytes,
                o.messages,
                o.rate_bps.unwrap_or(1_000_000_000),
            ) {
                Ok(r) => races.push(r),
                Err(e) => return fail(e),
            }
        }
        nodes = nodes.saturating_mul(2);
    }
    print(json, &races, |rs| {
        let mut t = crate::harness::table::Table::new(&[
            "nodes",
            "bytes",
            "bcast allgather µs",
            "p2p allgather µs",
            "ratio",
            "p2p allreduce µs",
            "ratio",
        ]);
        for r in rs {
            t.row(vec![
                r.nodes.to_string(),
                r.bytes.to_string(),
                format!("{:.1}", r.bcast_allgather_us),
                format!("{:.1}", r.p2p_allgather_us),
                format!("{:.2}", r.bcast_allgather_us / r.p2p_allgather_us),
                format!("{:.1}", r.p2p_allreduce_us),
                format!("{:.2}", r.bcast_allgather_us / r.p2p_allreduce_us),
            ]);
        }
        t.render() + "virtual time per call on the simulated switch (5 µs links); ratio: the broadcast allgather (an allreduce's cost too, before its local reduction) over recursive doubling\n"
    });
    ExitCode::SUCCESS
}

/// Says `error: {e}` and exits 2.
fn usage(e: impl std::fmt::Display) -> ExitCode {
    fail(e);
    ExitCode::from(2)
}

/// `on` or `off`.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: on or off")),
    }
}
