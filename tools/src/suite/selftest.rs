//! `ethbcast-suite selftest`: reliable broadcast between real hosts on the test-bed.
//!
//! It builds its own test-bed (namespaces, bridge, optional rate limit and loss), runs one
//! member per host, each in a thread that entered the host's namespace before opening its
//! packet socket (a socket stays in the namespace it was created in; one process keeps the
//! test simple and the verdict exact, and on a 2-core machine threads and processes compete
//! for the same cores either way). Every member runs the same schedule, MPI style: message `i`
//! comes from root `i mod R`, with a size and an algorithm drawn from a seeded generator; the
//! root broadcasts it, the others receive it and compare it byte for byte with what the root
//! sent. At the end members meet at the group barrier (nobody leaves while others may still need
//! repairs from it), then the test-bed is torn down and a verdict is printed.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::cluster::message_bytes;
use ethbcast::{
    Algorithm, Backend, BarrierAlgo, EngineConfig, Group, GroupError, GroupOptions, Rank, WaitMode,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::harness::report::{code, fail, print};
use crate::netns;
use crate::testbed::{Rate, Testbed, TestbedConfig, TestbedError};

/// Options of a self-test.
#[derive(Debug, Clone)]
pub struct SelftestOptions {
    /// Hosts on the test-bed.
    pub hosts: usize,
    /// Random frame loss at the switch, percent.
    pub loss: f64,
    /// Link rate limit.
    pub rate: Option<Rate>,
    /// Messages in the schedule.
    pub messages: usize,
    /// Sizes to draw from.
    pub sizes: Vec<usize>,
    /// Roots that take turns.
    pub roots: usize,
    /// Algorithms to draw from.
    pub algos: Vec<Algorithm>,
    /// Link backend.
    pub backend: Backend,
    /// Wait mode of the link.
    pub wait: WaitMode,
    /// Seed of the schedule.
    pub seed: u64,
    /// Test-bed name prefix.
    pub prefix: String,
    /// Give up after this long.
    pub timeout: Duration,
}

impl SelftestOptions {
    /// Defaults for `hosts` hosts.
    pub fn new(hosts: usize) -> SelftestOptions {
        SelftestOptions {
            hosts,
            loss: 0.0,
            rate: None,
            messages: 40,
            sizes: vec![1, 80, 860, 1460, 4096, 65536, 1 << 20],
            roots: 4,
            algos: vec![Algorithm::Simple, Algorithm::PushPull],
            backend: Backend::Ring,
            wait: WaitMode::Block,
            seed: 1,
            prefix: "ebst".into(),
            timeout: Duration::from_secs(300),
        }
    }
}

/// The verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Hosts.
    pub hosts: usize,
    /// Loss at the switch, percent.
    pub loss_pct: f64,
    /// Backend used.
    pub backend: String,
    /// Deliveries expected (messages × receivers).
    pub expected: u64,
    /// Intact, in-order deliveries.
    pub delivered: u64,
    /// Deliveries with wrong bytes.
    pub corrupt: u64,
    /// Deliveries that never happened.
    pub missing: u64,
    /// Deliveries of a message twice.
    pub duplicated: u64,
    /// Repair frames sent by all roots.
    pub repair_frames: u64,
    /// Data frames sent by all roots.
    pub data_frames: u64,
    /// Frames the switch dropped (nftables counter).
    pub dropped_by_switch: u64,
    /// Bytes delivered in all.
    pub bytes_delivered: u64,
    /// Wall-clock seconds of the schedule.
    pub wall_s: f64,
    /// Errors reported by members.
    pub errors: Vec<String>,
    /// True if everything arrived intact exactly once.
    pub passed: bool,
}

/// Why the self-test could not run.
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    /// The test-bed could not be built.
    #[error("test-bed: {0}")]
    Testbed(#[from] TestbedError),
    /// A member thread could not start.
    #[error("could not start a member in its namespace: {0}")]
    Spawn(std::io::Error),
}

#[derive(Debug, Clone, Copy)]
struct Step {
    root: u16,
    size: usize,
    algo: Algorithm,
}

fn schedule(o: &SelftestOptions) -> Vec<Step> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(o.seed);
    let roots = o.roots.clamp(1, o.hosts) as u16;
    (0..o.messages)
        .map(|i| Step {
            root: (i as u16) % roots,
            size: o.sizes[rng.gen_range(0..o.sizes.len())],
            algo: o.algos[rng.gen_range(0..o.algos.len())],
        })
        .collect()
}

#[derive(Debug, Default)]
struct MemberResult {
    delivered: u64,
    corrupt: u64,
    missing: u64,
    duplicated: u64,
    bytes: u64,
    repair_frames: u64,
    data_frames: u64,
    error: Option<String>,
}

fn member(
    rank: u16,
    size: u16,
    macs: Vec<[u8; 6]>,
    o: Arc<SelftestOptions>,
    plan: Arc<Vec<Step>>,
) -> MemberResult {
    let mut res = MemberResult::default();
    let link = match ethbcast::open_link(o.backend, "eth0", o.wait) {
        Ok(l) => l,
        Err(e) => {
            res.error = Some(format!("rank {rank}: {e}"));
            res.missing = plan.iter().filter(|s| s.root != rank).count() as u64;
            return res;
        }
    };
    let opts = GroupOptions {
        group_id: 0x5E1F,
        backend: o.backend,
        wait: o.wait,
        timeout: o.timeout,
        tweak: Some(|c: &mut EngineConfig| {
            c.window = 64;
            c.ack_every = 16;
        }),
        ..GroupOptions::insecure()
    };
    let mut g = match Group::from_link(link, macs, opts) {
        Ok(g) => g,
        Err(e) => {
            res.error = Some(format!("rank {rank}: {e}"));
            return res;
        }
    };
    let mut index_of_root = vec![0u64; usize::from(size)];
    let r: Result<(), GroupError> = (|| {
        for step in plan.iter() {
            let idx = index_of_root[usize::from(step.root)];
            index_of_root[usize::from(step.root)] += 1;
            let algo = step.algo;
            let want = message_bytes(o.seed, Rank::new(step.root), idx, step.size);
            let mut buf = if step.root == rank {
                want.clone()
            } else {
                Vec::new()
            };
            g.bcast_with(Rank::new(step.root), &mut buf, algo)?;
            if step.root == rank {
                continue;
            }
            if buf == want {
                res.delivered += 1;
                res.bytes += buf.len() as u64;
            } else {
                res.corrupt += 1;
            }
        }
        g.flush()
    })();
    if let Err(e) = r {
        res.error = Some(format!("rank {rank}: {e}"));
    }
    // Nobody leaves before everybody has received everything and had its broadcasts
    // acknowledged: the group's barrier. Then linger briefly so that late barrier frames and
    // acknowledgements are still answered.
    if let Err(e) = g.barrier_with(BarrierAlgo::Broadcast) {
        res.error
            .get_or_insert(format!("rank {rank}: final barrier: {e}"));
    }
    let linger = Instant::now() + Duration::from_millis(200);
    while Instant::now() < linger && g.progress(Duration::from_millis(5)).is_ok() {}
    let st = g.stats();
    res.repair_frames = st.repair_frames;
    res.data_frames = st.data_frames;
    let expected = plan.iter().filter(|s| s.root != rank).count() as u64;
    res.missing = expected.saturating_sub(res.delivered + res.corrupt);
    res
}

/// Runs the self-test.
pub fn run(o: &SelftestOptions) -> Result<Verdict, SelftestError> {
    let mut cfg = TestbedConfig::new(o.hosts);
    cfg.prefix = o.prefix.clone();
    cfg.rate = o.rate;
    if o.loss > 0.0 {
        cfg.loss_pct = Some(o.loss);
    }
    let bed = Testbed::up(&cfg)?;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let plan = Arc::new(schedule(o));
    let opts = Arc::new(o.clone());
    let size = o.hosts as u16;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for h in bed.hosts() {
        let (macs, plan, opts) = (macs.clone(), plan.clone(), opts.clone());
        let rank = h.index as u16;
        handles.push(
            netns::spawn_in(&h.netns, move || member(rank, size, macs, opts, plan))
                .map_err(SelftestError::Spawn)?,
        );
    }
    let results: Vec<MemberResult> = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| MemberResult {
                error: Some("member thread panicked".into()),
                ..Default::default()
            })
        })
        .collect();
    let wall_s = t0.elapsed().as_secs_f64();
    let dropped = bed.loss_counter().unwrap_or(0);
    drop(bed);
    let expected: u64 = plan.len() as u64 * (o.hosts as u64 - 1);
    let mut v = Verdict {
        hosts: o.hosts,
        loss_pct: o.loss,
        backend: format!("{:?}", o.backend).to_lowercase(),
        expected,
        wall_s,
        dropped_by_switch: dropped,
        ..Verdict::default()
    };
    for r in results {
        v.delivered += r.delivered;
        v.corrupt += r.corrupt;
        v.missing += r.missing;
        v.duplicated += r.duplicated;
        v.repair_frames += r.repair_frames;
        v.data_frames += r.data_frames;
        v.bytes_delivered += r.bytes;
        v.errors.extend(r.error);
    }
    v.passed = v.delivered == v.expected && v.corrupt == 0 && v.missing == 0 && v.duplicated == 0;
    Ok(v)
}

/// Renders a verdict for a terminal.
pub fn render(v: &Verdict) -> String {
    let mut t = crate::harness::table::Table::new(&["metric", "value"]);
    for (k, val) in [
        ("hosts", v.hosts.to_string()),
        ("loss at the switch", format!("{}%", v.loss_pct)),
        ("backend", v.backend.clone()),
        ("expected deliveries", v.expected.to_string()),
        ("delivered intact", v.delivered.to_string()),
        ("corrupt", v.corrupt.to_string()),
        ("missing", v.missing.to_string()),
        ("duplicated", v.duplicated.to_string()),
        ("data frames", v.data_frames.to_string()),
        ("repair frames", v.repair_frames.to_string()),
        ("dropped by the switch", v.dropped_by_switch.to_string()),
        ("bytes delivered", v.bytes_delivered.to_string()),
        ("wall time", format!("{:.2} s", v.wall_s)),
        (
            "verdict",
            if v.passed {
                "PASS".into()
            } else {
                "FAIL".into()
            },
        ),
    ] {
        t.row(vec![k.to_string(), val]);
    }
    let mut s = t.render();
    for e in &v.errors {
        s.push_str(&format!("error: {e}\n"));
    }
    s
}

/// Reliable broadcast between real hosts: builds a test-bed of network namespaces, runs a
/// mixed schedule from several roots with both algorithms, checks every byte, tears down.
///
/// Example: ethbcast-suite selftest --testbed 8 --loss 5 --json
#[derive(clap::Args)]
pub struct Args {
    /// Hosts on the test-bed.
    #[arg(long, default_value_t = 4)]
    testbed: usize,
    /// Random frame loss at the switch, percent.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Link rate limit (tbf), e.g. 100mbit or 1gbit.
    #[arg(long)]
    rate: Option<Rate>,
    /// Messages in the schedule.
    #[arg(long, default_value_t = 40)]
    messages: usize,
    /// Message sizes, drawn at random.
    #[arg(
        long,
        default_value = "1,80,860,1460,4096,65536,1048576",
        value_delimiter = ','
    )]
    sizes: Vec<usize>,
    /// Link backend: ring, socket, pnet or xdp.
    #[arg(long, default_value = "ring")]
    backend: Backend,
    /// Wait mode: spin, block or adaptive.
    #[arg(long, default_value = "block")]
    wait: WaitMode,
    /// Seed of the schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Test-bed name prefix.
    #[arg(long, default_value = "ebst")]
    prefix: String,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the self-test; exits 1 unless it passed.
    pub fn run(self) -> ExitCode {
        let mut o = SelftestOptions::new(self.testbed);
        o.loss = self.loss;
        o.rate = self.rate;
        o.messages = self.messages;
        o.sizes = self.sizes;
        o.backend = self.backend;
        o.wait = self.wait;
        o.seed = self.seed;
        o.prefix = self.prefix;
        match run(&o) {
            Ok(v) => {
                print(self.json, &v, |v| render(v) + "\n");
                code(v.passed)
            }
            Err(e) => fail(e),
        }
    }
}
