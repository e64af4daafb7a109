//! The sending side: join, stream, watch the receivers, report.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{
    Dest, Event, HostEntry, JoinSeen, Key, MacAddr, MemberError, Rank, Role, SendError, Settle,
    Stream,
};
use serde::Serialize;

use super::recv::RecvCounters;
use super::{mbit, Fatal, LinkOptions, EXIT_FAILED, EXIT_INTERRUPTED};
use crate::transfer::rate::TokenBucket;
use crate::transfer::{
    DigestAlgo, Final, Msg, Offer, PrefixHasher, Progress, StreamHasher, ABORT, EVICTED, KEEPALIVE,
};
use crate::tree::TreeReader;

/// What `ethbcast send` was asked to do.
#[derive(Debug, Clone)]
pub struct SendArgs {
    /// Interface, group, backend.
    pub link: LinkOptions,
    /// Input file (`None`: standard input).
    pub input: Option<PathBuf>,
    /// Receivers to wait for.
    pub expect: Expect,
    /// Start without some of them: once this many joined and this long passed.
    pub settle: Option<Settle>,
    /// End-to-end digest of the stream.
    pub digest: DigestAlgo,
    /// Token-bucket limit in bytes per second.
    pub max_rate: Option<u64>,
    /// Bytes per data message.
    pub chunk: usize,
    /// How long the join may take.
    pub wait: Duration,
    /// A receiver without progress and silent this long (with data outstanding) is evicted.
    pub timeout: Duration,
    /// How long to wait for completion reports once all data is acknowledged.
    pub report_wait: Duration,
    /// No progress bar or chatter.
    pub quiet: bool,
    /// Write the transfer's counters to this file every second and at the end
    /// (`--status-file`).
    pub status_file: Option<PathBuf>,
}

/// The fate of one receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Still going.
    Active,
    /// Received everything, digest verified, output committed.
    Completed,
    /// Reported a failure (or never reported).
    Failed,
    /// Evicted by the sender (dead or stalled).
    Evicted,
}

/// One line of the REPORT.
#[derive(Debug, Clone, Serialize)]
pub struct ReceiverReport {
    /// Rank in the transfer.
    pub rank: Rank,
    /// MAC address.
    pub mac: String,
    /// Host name from the hostfile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Outcome.
    pub status: Outcome,
    /// Bytes: reported by the receiver, or (evicted) bytes acknowledged by all before.
    pub bytes: u64,
    /// Seconds from the start of the data to the outcome.
    pub seconds: f64,
    /// Why it failed or was evicted.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// What the receiver counted (it sends them before its completion report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<RecvCounters>,
}

/// The sender's status file (`--status-file`): the transfer as it stands.
#[derive(Debug, Clone, Serialize)]
struct SendStatus<'a> {
    /// `joining`, `sending` or `done`.
    state: &'a str,
    /// With `done`: every receiver completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    iface: &'a str,
    /// The input's size, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<u64>,
    /// Stream bytes handed to the engine (from `resumed_from` on), and of those acknowledged
    /// by every live receiver.
    bytes_sent: u64,
    bytes_acked: u64,
    resumed_from: u64,
    seconds: f64,
    data_frames: u64,
    repair_frames: u64,
    receivers: &'a [ReceiverReport],
}

/// A receiver that was expected and did not join (the transfer started without it).
#[derive(Debug, Clone, Serialize)]
pub struct MissingHost {
    /// Host name from the hostfile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// MAC address.
    pub mac: String,
    /// Why it is missing.
    pub why: String,
}

/// The sender's final report: of a transfer, or of a run that ended before every receiver
/// had an outcome (`error` says why; `--json` writes one on every exit but a usage error).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every receiver completed.
    pub ok: bool,
    /// The exit code.
    pub code: u8,
    /// Why the run ended before every receiver had an outcome (a join timeout, an
    /// interruption, a link or input error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Interface.
    pub iface: String,
    /// Bytes in the stream.
    pub bytes: u64,
    /// Digest of the stream (`xxh3:HEX` or `blake3:HEX`; `xxh3:none` when the input was not
    /// read to its end).
    pub digest: String,
    /// Offset of the first byte sent: the receivers held the bytes before it from an earlier,
    /// interrupted transfer (`recv --resume`), checked by their digest.
    pub resumed_from: u64,
    /// Seconds the join took.
    pub join_seconds: f64,
    /// Seconds from the first data message to the last outcome.
    pub seconds: f64,
    /// Goodput in Mbit/s (stream bytes sent, from `resumed_from` on, over `seconds`).
    pub goodput_mbit: f64,
    /// Receivers.
    pub receivers: Vec<ReceiverReport>,
    /// Receivers expected that did not join (`send --min-receivers`).
    pub not_joined: usize,
    /// Of those, the hosts of the hostfile.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<MissingHost>,
    /// Data frames broadcast.
    pub data_frames: u64,
    /// Frames the sender sent again: repairs that receivers asked it for (their
    /// `repair_requests` less those to fellow receivers), and frames whose acknowledgement came
    /// late, sent again unasked (the stream's last frame; a probe of a silent receiver).
    pub repair_frames: u64,
    /// Of which re-broadcasts (to every receiver at once).
    pub rebroadcasts: u64,
}

impl Report {
    /// The human REPORT (Kascade style).
    pub fn render(&self) -> String {
        let mut s = format!(
            "REPORT: {} bytes in {:.2} s ({:.1} Mbit/s), digest {}, join {:.2} s, {} data frames, {} sent again\n",
            self.bytes,
            self.seconds,
            self.goodput_mbit,
            self.digest,
            self.join_seconds,
            self.data_frames,
            self.repair_frames
        );
        if self.resumed_from > 0 {
            s.push_str(&format!(
                "REPORT: resumed at byte {}: every receiver held the bytes before it\n",
                self.resumed_from
            ));
        }
        let named = self.receivers.iter().any(|r| r.host.is_some());
        let host = |h: &Option<String>| match (named, h) {
            (false, _) => String::new(),
            (true, h) => format!("{:<16}  ", h.as_deref().unwrap_or("-")),
        };
        s.push_str(&format!(
            "{:>4}  {}{:<17}  {:<9}  {:>12}  {:>8}  {}\n",
            "rank",
            host(&Some("host".into())),
            "mac",
            "status",
            "bytes",
            "time s",
            "error"
        ));
        for r in &self.receivers {
            let st = match r.status {
                Outcome::Active => "active",
                Outcome::Completed => "completed",
                Outcome::Failed => "failed",
                Outcome::Evicted => "evicted",
            };
            s.push_str(&format!(
                "{:>4}  {}{:<17}  {:<9}  {:>12}  {:>8.2}  {}\n",
                r.rank,
                host(&r.host),
                r.mac,
                st,
                r.bytes,
                r.seconds,
                r.error
            ));
        }
        for m in &self.missing {
            s.push_str(&format!(
                "{:>4}  {}{:<17}  {:<9}  {:>12}  {:>8}  did not join\n",
                "-",
                host(&m.host),
                m.mac,
                "missing",
                0,
                "-"
            ));
        }
        let bad = self
            .receivers
            .iter()
            .filter(|r| r.status != Outcome::Completed)
            .count();
        if self.not_joined > 0 {
            let names: Vec<String> = self
                .missing
                .iter()
                .map(|m| m.host.clone().unwrap_or_else(|| m.mac.clone()))
                .collect();
            s.push_str(&format!(
                "REPORT: {} receiver(s) did NOT join{}\n",
                self.not_joined,
                if names.is_empty() {
                    String::new()
                } else {
                    format!(": {}", names.join(", "))
                }
            ));
        }
        if self.repair_frames > 0 {
            let asked: u64 = self
                .receivers
                .iter()
                .filter_map(|r| r.counters)
                .map(|c| c.repair_requests - c.repair_requests_to_peers.min(c.repair_requests))
                .sum();
            s.push_str(&format!(
                "REPORT: {} frames sent again: repairs the receivers asked the sender for ({asked} requests, each for one or more frames) and frames whose acknowledgement came late, sent again unasked\n",
                self.repair_frames
            ));
        }
        let n = self.receivers.len();
        match (bad, n) {
            (0, 1) => s.push_str("REPORT: the receiver completed\n"),
            (0, n) => s.push_str(&format!("REPORT: all {n} receivers completed\n")),
            (_, 1) => s.push_str("REPORT: the receiver did NOT complete\n"),
            (bad, n) => s.push_str(&format!(
                "REPORT: {bad} of {n} receivers did NOT complete\n"
            )),
        }
        s
    }
}

/// How often an evicted receiver is told so again while the transfer lasts.
const EVICTED_REPEAT: Duration = Duration::from_millis(250);
/// How often the sender says it is alive (see [`KEEPALIVE`]): often enough for a receiver
/// timeout well below a second, one small frame each time.
const KEEPALIVE_EVERY: Duration = Duration::from_millis(250);

enum Block {
    /// Where the data starts (the reader's first block), and the receiver (index in the
    /// offers) whose offer did not match the input, if one did not.
    Start(u64, Option<usize>),
    Data(Vec<u8>),
    /// The end of the input, with the digest of all of it.
    Eof([u8; 32]),
    Err(std::io::Error),
}

/// The sender's input.
enum Input {
    /// A regular file: the stream can start at an offset (see [`resume_point`]).
    File(File),
    /// Standard input, a pipe, a device: read from its first byte.
    Stream(Box<dyn Read + Send>),
    /// A directory: packed into a tar stream as it is read (see [`crate::tree`]), from its
    /// first byte; the packing starts with the data, not at the join.
    Tree(PathBuf),
}

/// Where the data of a file starts, given the receivers' offers (see [`Offer`]): the smallest
/// offset any receiver holds if every offer's digest is that of the file's bytes before it
/// (keyed under `offer_key`, the transfer's [`offer_key`](crate::transfer::offer_key), when
/// it has a group key), else 0; with the stream digest of the bytes before the start, and the
/// file positioned there. The second value is the index of an offer that did not match, if
/// one did not.
fn resume_point(
    f: &mut File,
    algo: DigestAlgo,
    offer_key: Option<&Key>,
    offers: &[Offer],
) -> std::io::Result<(u64, StreamHasher, Option<usize>)> {
    use std::io::{Seek, SeekFrom};
    let mut points: Vec<u64> = offers.iter().map(|o| o.held).collect();
    points.sort_unstable();
    points.dedup();
    let mut h = PrefixHasher::new(algo, offer_key);
    let mut pos = 0u64;
    let mut at_start: Option<PrefixHasher> = None;
    let mut refused = None;
    let mut buf = vec![0u8; 1 << 20];
    for &p in points.iter().take_while(|&&p| p > 0) {
        while pos < p {
            let want = usize::try_from(p - pos)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = match f.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            pos += n as u64;
        }
        let d = h.offer();
        // Held past the input's end, or other bytes: nobody resumes.
        refused = offers
            .iter()
            .position(|o| o.held == p && (pos < p || o.digest != d));
        if refused.is_some() {
            break;
        }
        at_start.get_or_insert_with(|| h.clone());
    }
    let start = match (points.first(), at_start, refused) {
        (Some(&s), Some(h), None) if s > 0 => Some((s, h.into_stream())),
        _ => None,
    };
    let (offset, h) = start.unwrap_or_else(|| (0, StreamHasher::new(algo)));
    f.seek(SeekFrom::Start(offset))?;
    Ok((offset, h, refused))
}

/// Reads `msg` bytes at a time (each buffer starts with the `D` type byte) on a thread, which
/// also computes the stream digest (off the thread that drives the link, where every cycle
/// is a frame not sent). A file waits for the receivers' offers first (on `offers`) and
/// starts where they allow ([`resume_point`]); the first block says where.
fn reader(
    input: Input,
    msg: usize,
    algo: DigestAlgo,
    offer_key: Option<Key>,
    offers: Receiver<Vec<Offer>>,
    spent: Receiver<Vec<u8>>,
) -> Receiver<Block> {
    let (tx, rx) = sync_channel(2);
    std::thread::spawn(move || {
        let (mut input, mut hasher): (Box<dyn Read + Send>, _) = match input {
            Input::File(mut f) => {
                let Ok(offers) = offers.recv() else {
                    return;
                };
                match resume_point(&mut f, algo, offer_key.as_ref(), &offers) {
                    Ok((offset, h, refused)) => {
                        if tx.send(Block::Start(offset, refused)).is_err() {
                            return;
                        }
                        (Box::new(f), h)
                    }
                    Err(e) => {
                        let _ = tx.send(Block::Err(e));
                        return;
                    }
                }
            }
            Input::Stream(r) => {
                if tx.send(Block::Start(0, None)).is_err() {
                    return;
                }
                (r, StreamHasher::new(algo))
            }
            Input::Tree(dir) => {
                let r = match TreeReader::spawn(&dir) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Block::Err(e));
                        return;
                    }
                };
                if tx.send(Block::Start(0, None)).is_err() {
                    return;
                }
                (Box::new(r), StreamHasher::new(algo))
            }
        };
        read_blocks(&mut input, msg, &mut hasher, &tx, &spent);
    });
    rx
}

/// The reader's loop (see [`reader`]), from where `input` stands: each block is read into a
/// buffer from `spent` (given back by the engine, see [`Transfer::give_back`]), or a new one
/// when none is there.
fn read_blocks(
    input: &mut Box<dyn Read + Send>,
    msg: usize,
    hasher: &mut StreamHasher,
    tx: &std::sync::mpsc::SyncSender<Block>,
    spent: &Receiver<Vec<u8>>,
) {
    loop {
        // Read into spare capacity: zeroing every buffer first cost the sender more CPU than
        // hashing it.
        let mut buf = spent
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(msg + 1));
        buf.clear();
        buf.push(b'D');
        if let Err(e) = input.by_ref().take(msg as u64).read_to_end(&mut buf) {
            let _ = tx.send(Block::Err(e));
            return;
        }
        let n = buf.len();
        let eof = n < msg + 1;
        hasher.update(&buf[1..]);
        if n > 1 && tx.send(Block::Data(buf)).is_err() {
            return;
        }
        if eof {
            let _ = tx.send(Block::Eof(hasher.finalize()));
            return;
        }
    }
}

/// The progress bar on stderr (hidden when stderr is not a terminal, or `quiet`).
pub(super) fn progress_bar(total: Option<u64>, quiet: bool) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    if quiet {
        return ProgressBar::hidden();
    }
    let (pb, tpl) = match total {
        Some(t) => (
            ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
            "{spinner} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        ),
        None => (
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            "{spinner} [{elapsed_precise}] {bytes} {binary_bytes_per_sec} {msg}",
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(tpl) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Tells every receiver to discard the transfer: data stops at once, the abort is repeated
/// for about 100 ms (the first copies may meet queues still full of data), and the link is
/// drained before the process exits with them.
fn abort_receivers(node: &mut Stream) {
    node.abandon();
    for _ in 0..6 {
        control(node, Dest::All, ABORT);
        let _ = node.turn(Duration::from_millis(20));
    }
    let _ = node.drain(Duration::from_millis(500));
}

fn control(node: &mut Stream, dst: Dest, payload: &[u8]) {
    let _ = node.notice(dst, payload.to_vec());
}

/// Whom the sender waits for.
#[derive(Debug, Clone)]
pub enum Expect {
    /// The first `n` distinct receivers.
    Count(usize),
    /// Exactly these hosts (hostfile), in this rank order.
    List(Vec<HostEntry>),
}

impl Expect {
    /// Receivers expected.
    pub fn len(&self) -> usize {
        match self {
            Expect::Count(n) => *n,
            Expect::List(l) => l.len(),
        }
    }

    /// True if no receiver is expected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sender's role in the join: it coordinates and takes the first that answer.
    fn role(&self, settle: Option<Settle>) -> Role {
        Role::Root {
            receivers: self.len(),
            only: match self {
                Expect::Count(_) => None,
                Expect::List(l) => Some(l.iter().map(|h| h.mac).collect()),
            },
            settle,
        }
    }

    /// The hostfile's name of `mac`, if any.
    fn name_of(&self, mac: &MacAddr) -> Option<String> {
        match self {
            Expect::Count(_) => None,
            Expect::List(l) => l.iter().find(|h| h.mac == *mac)?.name.clone(),
        }
    }
}

/// Whom `send --only-failed` sends to, from a previous report (`send --json`, of any run: a
/// transfer, a join timeout, an interruption, a link error): the receivers it lists as not
/// completed (failed, evicted, or the transfer never started for them) and the hosts it
/// names as not joined (`missing`), with their host names. A report of `--receivers N`
/// cannot name the receivers that did not join: then the sender waits for as many receivers
/// as the report counts failed or not joined, the first that answer ([`Expect::Count`]).
pub fn failed_hosts(report_json: &str) -> Result<Expect, String> {
    let v: serde_json::Value =
        serde_json::from_str(report_json).map_err(|e| format!("not a JSON report: {e}"))?;
    let receivers = v["receivers"]
        .as_array()
        .ok_or("not a report of `ethbcast send --json` (no receivers)")?;
    let failed = receivers.iter().filter(|r| r["status"] != "completed");
    let missing = v["missing"].as_array().map_or(&[][..], Vec::as_slice);
    let mut hosts: Vec<HostEntry> = Vec::new();
    for r in failed.chain(missing) {
        let mac = r["mac"]
            .as_str()
            .and_then(ethbcast::parse_mac)
            .ok_or_else(|| format!("a receiver without a MAC address: {r}"))?;
        if !hosts.iter().any(|h| h.mac == mac) {
            hosts.push(HostEntry {
                name: r["host"].as_str().map(str::to_owned),
                mac,
            });
        }
    }
    let not_joined = v["not_joined"].as_u64().unwrap_or(0) as usize;
    let unnamed = not_joined.saturating_sub(missing.len());
    if unnamed > 0 {
        return Ok(Expect::Count(hosts.len() + unnamed));
    }
    if hosts.is_empty() {
        return Err("every receiver of the report completed: nothing to send again".into());
    }
    Ok(Expect::List(hosts))
}

/// Runs `ethbcast send`, its steps in order: [`open_input`], [`open`], [`join`],
/// [`Transfer::start`], [`Transfer::run`], [`Transfer::report`]. Returns the report in every
/// case: its `code` is the exit code, its `error` why the run ended before every receiver
/// had an outcome (join timeout, interruption, I/O errors), its receivers who joined and its
/// `missing` who did not.
pub fn run(a: &SendArgs) -> Report {
    let mut seen = JoinSeen::default();
    let mut status = None;
    let mut total = None;
    match steps(a, &mut seen, &mut status, &mut total) {
        Ok(r) => r,
        Err(f) => not_started(a, f, &seen, total, &mut status),
    }
}

/// [`run`]'s steps up to the transfer, which reports itself whatever way it ends.
fn steps(
    a: &SendArgs,
    seen: &mut JoinSeen,
    status: &mut Option<super::StatusFile>,
    total: &mut Option<u64>,
) -> Result<Report, Fatal> {
    let input = open_input(a)?;
    *total = input.total;
    *status = status_file(a, input.total)?;
    let link = open(a, input)?;
    let joined = join(a, link, seen)?;
    let mut t = Transfer::start(a, joined);
    let ended = t.run(status);
    Ok(t.report(status, ended.err()))
}

/// The report of a run that ended before its transfer began: the receivers that answered
/// (the transfer did not start for them) and the hosts of the hostfile that did not.
fn not_started(
    a: &SendArgs,
    f: Fatal,
    seen: &JoinSeen,
    total: Option<u64>,
    status: &mut Option<super::StatusFile>,
) -> Report {
    let reason = match f.code {
        super::EXIT_JOIN_TIMEOUT => format!(
            "did not answer within --wait {}",
            super::render_seconds(a.wait)
        ),
        EXIT_INTERRUPTED => "had not answered when the sender was interrupted".into(),
        _ => format!("not reached: {}", f.msg),
    };
    let receivers: Vec<ReceiverReport> = seen
        .heard
        .iter()
        .enumerate()
        .map(|(i, mac)| ReceiverReport {
            // The rank it would have had.
            rank: Rank::new(i as u16 + 1),
            mac: mac.to_string(),
            host: a.expect.name_of(mac),
            status: Outcome::Failed,
            bytes: 0,
            seconds: 0.0,
            error: format!(
                "answered, but the transfer did not start: {}",
                first_line(&f.msg)
            ),
            counters: None,
        })
        .collect();
    let missing: Vec<MissingHost> = match &a.expect {
        Expect::Count(_) => Vec::new(),
        Expect::List(l) => l
            .iter()
            .filter(|h| !seen.heard.contains(&h.mac))
            .map(|h| MissingHost {
                host: h.name.clone(),
                mac: h.mac.to_string(),
                why: reason.clone(),
            })
            .collect(),
    };
    let not_joined = a.expect.len().saturating_sub(receivers.len());
    if let Some(st) = status.as_mut() {
        let end = SendStatus {
            state: "done",
            ok: Some(false),
            iface: &a.link.iface,
            total,
            bytes_sent: 0,
            bytes_acked: 0,
            resumed_from: 0,
            seconds: 0.0,
            data_frames: 0,
            repair_frames: 0,
            receivers: &receivers,
        };
        st.update(&end, true);
    }
    Report {
        ok: false,
        code: f.code,
        error: Some(f.msg),
        iface: a.link.iface.clone(),
        bytes: 0,
        digest: format!("{}:none", a.digest.name()),
        resumed_from: 0,
        join_seconds: 0.0,
        seconds: 0.0,
        goodput_mbit: 0.0,
        receivers,
        not_joined,
        missing,
        data_frames: 0,
        repair_frames: 0,
        rebroadcasts: 0,
    }
}

/// The first line of a message (up to a `;`), for a receiver's line.
fn first_line(msg: &str) -> &str {
    msg.split(['(', ';']).next().unwrap_or(msg).trim_end()
}

/// The sender's input, opened, with its size when it is a file.
pub struct Opened {
    input: Input,
    total: Option<u64>,
}

/// Step 1: opens the input (`-i FILE` or `-i DIR`, else standard input). A directory is sent
/// as a tree: a tar stream of unknown length, packed while it is sent.
pub fn open_input(a: &SendArgs) -> Result<Opened, Fatal> {
    let (input, total) = match &a.input {
        Some(p) => {
            let f = File::open(p)
                .map_err(|e| Fatal::io(format!("cannot open input {}: {e}", p.display())))?;
            let meta = f
                .metadata()
                .map_err(|e| Fatal::io(format!("cannot stat input {}: {e}", p.display())))?;
            if meta.is_dir() {
                // Readable, or refused now rather than after the join.
                std::fs::read_dir(p)
                    .map_err(|e| Fatal::io(format!("cannot read input {}: {e}", p.display())))?;
                (Input::Tree(p.clone()), None)
            } else if meta.is_file() {
                (Input::File(f), Some(meta.len()))
            } else {
                (Input::Stream(Box::new(f)), None)
            }
        }
        None => (Input::Stream(Box::new(std::io::stdin())), None),
    };
    Ok(Opened { input, total })
}

/// The status file's first state (`joining`), written before the link opens: a path that
/// cannot be written is an error before anything starts.
fn status_file(a: &SendArgs, total: Option<u64>) -> Result<Option<super::StatusFile>, Fatal> {
    let Some(p) = &a.status_file else {
        return Ok(None);
    };
    let first = SendStatus {
        state: "joining",
        ok: None,
        iface: &a.link.iface,
        total,
        bytes_sent: 0,
        bytes_acked: 0,
        resumed_from: 0,
        seconds: 0.0,
        data_frames: 0,
        repair_frames: 0,
        receivers: &[],
    };
    super::StatusFile::create(p, &first).map(Some)
}

/// The link, open, with the process's capabilities dropped and the interruption flag set up.
pub struct OpenLink {
    link: Box<dyn ethbcast::Link + Send>,
    stop: Arc<AtomicBool>,
    input: Opened,
    began: Instant,
}

/// Step 2: opens the link, drops every capability, and says whom the sender waits for.
pub fn open(a: &SendArgs, input: Opened) -> Result<OpenLink, Fatal> {
    let began = Instant::now();
    a.link.check_up()?;
    let link = a
        .link
        .open()
        .map_err(|e| super::link_error(&a.link.iface, e))?;
    // Before the Ctrl-C handler's thread starts: it inherits the empty sets.
    super::drop_capabilities()?;
    let stop = super::interrupt_flag();
    if !a.quiet {
        eprintln!(
            "ethbcast: waiting for {} receiver(s) on {} ({}), group {:#x}, {}",
            a.expect.len(),
            a.link.iface,
            link.local_mac(),
            a.link.stream.group_id,
            match super::render_seconds(a.wait) {
                s if a.wait >= super::NO_LIMIT => s,
                s => format!("up to {s}"),
            }
        );
    }
    if a.expect.len() >= usize::from(u16::MAX - 1) {
        return Err(Fatal::new(super::EXIT_USAGE, "too many receivers"));
    }
    Ok(OpenLink {
        link,
        stop,
        input,
        began,
    })
}

/// The transfer's members once the join is done.
pub struct Joined {
    node: Stream,
    stop: Arc<AtomicBool>,
    input: Opened,
    /// Every rank's MAC, the sender's (rank 0) first.
    roster: Vec<MacAddr>,
    /// Receivers expected that did not join, and of those the hosts of the hostfile.
    not_joined: usize,
    missing: Vec<MissingHost>,
    /// Who a rank is, for messages: its host name and MAC, else its MAC.
    who: Vec<String>,
    join_seconds: f64,
}

/// Step 3: the join ([`LinkOptions::join`]): the receivers expected, or (`--min-receivers`)
/// those that came; says who did not.
pub fn join(a: &SendArgs, l: OpenLink, seen: &mut JoinSeen) -> Result<Joined, Fatal> {
    let node = a
        .link
        .join(l.link, a.expect.role(a.settle), a.wait, &l.stop, seen)?;
    let roster = node.peers().to_vec();
    let not_joined = a.expect.len().saturating_sub(roster.len() - 1);
    let missing: Vec<MissingHost> = match &a.expect {
        Expect::Count(_) => Vec::new(),
        Expect::List(l) => l
            .iter()
            .filter(|h| !roster.contains(&h.mac))
            .map(|h| MissingHost {
                host: h.name.clone(),
                mac: h.mac.to_string(),
                why: format!(
                    "did not join within --max-wait {}",
                    a.settle
                        .map_or_else(String::new, |s| super::render_seconds(s.after))
                ),
            })
            .collect(),
    };
    let who: Vec<String> = roster
        .iter()
        .map(|m| {
            a.expect
                .name_of(m)
                .map_or_else(|| m.to_string(), |n| format!("{n}, {m}"))
        })
        .collect();
    let join_seconds = l.began.elapsed().as_secs_f64();
    if !a.quiet {
        if not_joined > 0 {
            let names: Vec<String> = missing
                .iter()
                .map(|m| m.host.clone().unwrap_or_else(|| m.mac.clone()))
                .collect();
            eprintln!(
                "ethbcast: starting without {not_joined} receiver(s) that did not join{}",
                if names.is_empty() {
                    String::new()
                } else {
                    format!(": {}", names.join(", "))
                }
            );
        }
        eprintln!(
            "ethbcast: {} receiver(s) joined in {join_seconds:.2} s; sending {}",
            roster.len() - 1,
            match (&l.input.input, l.input.total) {
                (Input::Tree(dir), _) => format!(
                    "the directory {} as a tree (a tar stream of unknown length)",
                    dir.display()
                ),
                (_, Some(t)) => format!("{t} bytes"),
                (_, None) => "a stream of unknown length".into(),
            }
        );
    }
    Ok(Joined {
        node,
        stop: l.stop,
        input: l.input,
        roster,
        not_joined,
        missing,
        who,
        join_seconds,
    })
}

/// Sets `f`'s outcome, `seconds` after `start`.
fn finish(f: &mut ReceiverReport, start: Instant, what: Outcome, bytes: u64, err: String) {
    f.status = what;
    f.bytes = bytes;
    f.seconds = start.elapsed().as_secs_f64();
    f.error = err;
}

/// Step 4: the transfer, from the header to every receiver's outcome.
pub struct Transfer<'a> {
    a: &'a SendArgs,
    node: Stream,
    stop: Arc<AtomicBool>,
    total: Option<u64>,
    not_joined: usize,
    missing: Vec<MissingHost>,
    who: Vec<String>,
    join_seconds: f64,
    /// Bytes per data message, and data messages handed to the engine at most.
    msg: usize,
    max_inflight: usize,
    /// Stream bytes a data frame carries at most (see [`Transfer::show_bytes`]).
    frame_bytes: u64,
    /// Every rank's line of the report as it stands (the sender's, rank 0, is not reported).
    fate: Vec<ReceiverReport>,
    /// Watching the receivers (see [`Watch`]).
    watch: Watch,
    /// The reader's blocks, and the rank of each offer it was given (in the reader's order).
    rx: Receiver<Block>,
    /// Where the buffers of data messages go back to the reader once the engine gave them
    /// back (see [`Transfer::give_back`]).
    spent: std::sync::mpsc::Sender<Vec<u8>>,
    offer_ranks: Vec<usize>,
    /// Reading a file: where the receivers' offers go (see [`Transfer::begin`]).
    offers_tx: Option<std::sync::mpsc::SyncSender<Vec<Offer>>>,
    pb: indicatif::ProgressBar,
    start: Instant,
    bucket: Option<TokenBucket>,
    /// Data messages in the engine: id and stream bytes.
    inflight: VecDeque<(u64, u64)>,
    pending: Option<Vec<u8>>,
    sent: u64,
    acked: u64,
    /// Where the data starts, once the reader said (its first block).
    resumed_from: Option<u64>,
    /// The trailer's message id, and when every live receiver had acknowledged it.
    trailer: Option<u64>,
    trailer_stable: Option<Instant>,
    /// Set at the end of the input: the digest of all of it.
    digest: Option<[u8; 32]>,
}

/// What the sender tracks of each receiver to tell a slow one from a dead one.
struct Watch {
    /// When each evicted receiver was last told so: the notice is repeated while the transfer
    /// lasts, because a receiver that was only stalled resumes with a full receive queue, in
    /// which the first notice found no room.
    told_evicted: Vec<Option<Instant>>,
    /// A receiver that acknowledged everything, trailer included, still owes its report: when
    /// it was first seen so, when it last showed progress towards the report (its output
    /// taking data, or done taking it), and the bytes its last notice said.
    all_acked_at: Vec<Option<Instant>>,
    progress_at: Vec<Option<Instant>>,
    took: Vec<Option<u64>>,
    kept_alive: Instant,
}

impl Watch {
    fn new(n: usize) -> Watch {
        Watch {
            told_evicted: vec![None; n],
            all_acked_at: vec![None; n],
            progress_at: vec![None; n],
            took: vec![None; n],
            kept_alive: Instant::now(),
        }
    }
}

impl<'a> Transfer<'a> {
    /// Sets the transfer up: each receiver's line, the reader.
    pub fn start(a: &'a SendArgs, j: Joined) -> Transfer<'a> {
        let Joined {
            node,
            stop,
            input,
            roster,
            not_joined,
            missing,
            who,
            join_seconds,
        } = j;
        let resumable = matches!(input.input, Input::File(_));
        // Smaller messages under a rate limit keep bursts near 5 ms worth of bytes.
        let msg = match a.max_rate {
            Some(r) => a.chunk.min(((r / 200) as usize).max(16 * 1024)),
            None => a.chunk,
        };
        let cfg = a.link.stream.config(Rank::new(0), roster.len() as u16);
        // Data messages handed to the engine at most: enough to cover the shared buffer
        // twice. A message leaves only when every receiver acknowledged all of it, repairs
        // included, so with fewer the buffer runs dry while the oldest message waits for its
        // last repair.
        let max_inflight = (2 * cfg.window * cfg.max_payload()).div_ceil(msg).max(4);
        let n = roster.len();
        let fate: Vec<ReceiverReport> = roster
            .iter()
            .enumerate()
            .map(|(r, mac)| ReceiverReport {
                rank: Rank::new(r as u16),
                mac: mac.to_string(),
                host: a.expect.name_of(mac),
                status: Outcome::Active,
                bytes: 0,
                seconds: 0.0,
                error: String::new(),
                counters: None,
            })
            .collect();
        let (offers_tx, offers_rx) = sync_channel(1);
        let offer_key = a.link.stream.key.as_ref().map(crate::transfer::offer_key);
        let (spent_tx, spent_rx) = std::sync::mpsc::channel();
        let rx = reader(input.input, msg, a.digest, offer_key, offers_rx, spent_rx);
        let pb = progress_bar(input.total, a.quiet);
        let start = Instant::now();
        let bucket = a
            .max_rate
            .map(|r| TokenBucket::new(r, (msg as u64).max(r / 100), start));
        Transfer {
            a,
            node,
            stop,
            total: input.total,
            not_joined,
            missing,
            who,
            join_seconds,
            msg,
            max_inflight,
            frame_bytes: cfg.max_payload() as u64,
            fate,
            watch: Watch::new(n),
            rx,
            spent: spent_tx,
            offer_ranks: Vec::new(),
            offers_tx: resumable.then_some(offers_tx),
            pb,
            start,
            bucket,
            inflight: VecDeque::new(),
            pending: None,
            sent: 0,
            acked: 0,
            resumed_from: None,
            trailer: None,
            trailer_stable: None,
            digest: None,
        }
    }

    /// The header, and (a file) the receivers' offers: a file can start where every
    /// receiver's partial output ends (each receiver offers what it holds, see [`Offer`], and
    /// the reader checks the offers against the input).
    fn begin(&mut self) -> Result<(), Fatal> {
        let header = Msg::Header {
            total: self.total,
            chunk: self.msg as u32,
            digest: self.a.digest,
        };
        self.node.send(header.encode())?;
        if let Some(tx) = self.offers_tx.take() {
            let (node, fate) = (&mut self.node, &mut self.fate);
            let offers = gather_offers(node, fate, &self.stop, self.a.timeout, self.start)?;
            self.offer_ranks = offers.iter().map(|o| o.0).collect();
            let _ = tx.send(offers.into_iter().map(|o| o.1).collect());
        }
        Ok(())
    }

    /// Streams the input and watches the receivers until each has an outcome. `Err` when
    /// interrupted (the receivers are told to discard the transfer) or the input fails.
    pub fn run(&mut self, status: &mut Option<super::StatusFile>) -> Result<(), Fatal> {
        self.begin()?;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                self.pb.finish_and_clear();
                abort_receivers(&mut self.node);
                return Err(Fatal::new(
                    EXIT_INTERRUPTED,
                    "interrupted: transfer aborted, receivers told to discard it",
                ));
            }
            let wait = self.feed()?;
            self.node.turn(wait)?;
            let now = Instant::now();
            self.take_notices(now);
            self.count_acknowledged(now);
            self.take_reports();
            self.keep_alive(now);
            self.check_receivers(now);
            self.give_up_on_reports(now);
            self.pb.set_position(self.acked);
            self.show_bytes();
            if let Some(st) = status.as_mut() {
                let stats = self.node.stats();
                st.update(
                    &self.status("sending", None, self.start.elapsed(), stats),
                    false,
                );
            }
            if self.fate[1..].iter().all(|f| f.status != Outcome::Active) {
                return Ok(());
            }
        }
    }

    /// Each active receiver's bytes as they move, as far as the sender can tell: what every
    /// live receiver acknowledged, and for one ahead of the slowest, the frames by which it is
    /// ahead (its outstanding frames against the slowest's). Short of the truth by less than
    /// a message; the receiver's report has the exact count.
    fn show_bytes(&mut self) {
        let outstanding: Vec<Option<u64>> = (0..self.fate.len())
            .map(|r| {
                let live = r > 0 && self.fate[r].status == Outcome::Active;
                live.then(|| self.node.receiver_progress(Rank::new(r as u16)))
                    .flatten()
                    .map(|p| p.outstanding)
            })
            .collect();
        let slowest = outstanding.iter().flatten().copied().max().unwrap_or(0);
        for (line, out) in self.fate.iter_mut().zip(outstanding) {
            if let Some(o) = out {
                let ahead = (slowest - o).saturating_mul(self.frame_bytes);
                line.bytes = self.acked.saturating_add(ahead).min(self.sent);
            }
        }
    }

    /// The status file's content.
    fn status(
        &self,
        state: &'static str,
        ok: Option<bool>,
        seconds: Duration,
        stats: &ethbcast::EngineStats,
    ) -> SendStatus<'_> {
        SendStatus {
            state,
            ok,
            iface: &self.a.link.iface,
            total: self.total,
            bytes_sent: self.sent,
            bytes_acked: self.acked,
            resumed_from: self.resumed_from.unwrap_or(0),
            seconds: seconds.as_secs_f64(),
            data_frames: stats.data_frames,
            repair_frames: stats.repair_frames,
            receivers: &self.fate[1..],
        }
    }

    /// Hands the engine what the reader has, as far as the engine's room and the rate allow;
    /// returns how long the loop may wait for the link.
    fn feed(&mut self) -> Result<Duration, Fatal> {
        let live_receivers = self.fate[1..].iter().any(|f| f.status == Outcome::Active);
        let mut wait = Duration::from_millis(5);
        while live_receivers && self.digest.is_none() && self.inflight.len() < self.max_inflight {
            if self.pending.is_none() {
                match self.rx.try_recv() {
                    Ok(Block::Start(offset, refused)) => {
                        self.started(offset, refused)?;
                        continue;
                    }
                    Ok(Block::Data(v)) => self.pending = Some(v),
                    Ok(Block::Eof(d)) => {
                        self.digest = Some(d);
                        let id = self.node.send(
                            Msg::Trailer {
                                bytes: self.sent,
                                digest: d,
                            }
                            .encode(),
                        );
                        match id {
                            Ok(id) => self.trailer = Some(id),
                            Err(MemberError::Send(SendError::NoReceivers)) => {}
                            Err(e) => return Err(e.into()),
                        }
                        break;
                    }
                    Ok(Block::Err(e)) => {
                        self.pb.finish_and_clear();
                        abort_receivers(&mut self.node);
                        return Err(Fatal::io(format!("reading the input: {e}")));
                    }
                    Err(TryRecvError::Empty) => {
                        wait = Duration::from_millis(1);
                        break;
                    }
                    Err(TryRecvError::Disconnected) => {
                        return Err(Fatal::io("the input reader stopped"));
                    }
                }
            }
            let len = self.pending.as_ref().map_or(0, |v| v.len() as u64 - 1);
            if let Some(b) = self.bucket.as_mut() {
                if let Err(d) = b.take(len, Instant::now()) {
                    wait = d.min(Duration::from_millis(5));
                    break;
                }
            }
            let mut v = self.pending.take().expect("pending data");
            self.sent += len;
            match self.node.send_from(&mut v) {
                Ok(id) => self.inflight.push_back((id, len)),
                Err(MemberError::Send(SendError::NoReceivers)) => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.give_back();
        Ok(wait)
    }

    /// Hands the reader the buffers of the data messages the engine has cut into frames, in
    /// the order they were sent: it reads the next blocks into them instead of into new
    /// allocations (1 MiB each, which the allocator got from the kernel as fresh pages to
    /// fault in and clear). Every data message in flight was lent; one acknowledged before
    /// its buffer was taken, or beyond the newest two the engine keeps, is only a buffer the
    /// reader allocates again.
    fn give_back(&mut self) {
        for &(id, _) in &self.inflight {
            if let Some(buf) = self.node.take_sent(id) {
                // A reader that stopped needs no more buffers.
                let _ = self.spent.send(buf);
            }
        }
    }

    /// The reader's first block: where the data starts (and which offer, if one, did not
    /// match the input).
    fn started(&mut self, offset: u64, refused: Option<usize>) -> Result<(), Fatal> {
        if let Some(r) = refused.filter(|_| !self.a.quiet) {
            // The offers went in rank order (those that came).
            let rank = self.offer_ranks.get(r).copied().unwrap_or(0);
            let who = self.who.get(rank).map_or("?", String::as_str);
            self.pb.suspend(|| eprintln!(
                "ethbcast: rank {rank} ({who}) holds a partial output that is not the start of this input: sending from byte 0"
            ));
        }
        if offset > 0 && !self.a.quiet {
            self.pb.suspend(|| eprintln!(
                "ethbcast: resuming at byte {offset}: every receiver holds the bytes before it (digest checked)"
            ));
        }
        match self.node.send(Msg::Start { offset }.encode()) {
            Ok(_) | Err(MemberError::Send(SendError::NoReceivers)) => {}
            Err(e) => return Err(e.into()),
        }
        self.resumed_from = Some(offset);
        self.sent = offset;
        self.acked = offset;
        Ok(())
    }

    /// The receivers' progress notices (see [`Progress`]).
    fn take_notices(&mut self, now: Instant) {
        let n = self.fate.len();
        let w = &mut self.watch;
        while let Some(ev) = self.node.poll_event() {
            if let Event::Notice { src, body } = ev {
                let r = src.index();
                if let (Some(p), true) = (Progress::decode(&body), (1..n).contains(&r)) {
                    if p.all_taken || w.took[r] != Some(p.took) {
                        w.progress_at[r] = Some(now);
                    }
                    w.took[r] = Some(p.took);
                }
            }
        }
    }

    /// What every live receiver has acknowledged: whole messages, then the trailer.
    fn count_acknowledged(&mut self, now: Instant) {
        let Some(stable) = self.node.stable_through() else {
            return;
        };
        while self.inflight.front().is_some_and(|f| f.0 <= stable) {
            self.acked += self.inflight.pop_front().map_or(0, |f| f.1);
        }
        if self.trailer.is_some_and(|t| t <= stable) && self.trailer_stable.is_none() {
            self.trailer_stable = Some(now);
            self.acked = self.sent;
        }
    }

    /// Completion reports: each receiver's counters, then its report.
    fn take_reports(&mut self) {
        for line in &mut self.fate[1..] {
            if line.status != Outcome::Active {
                continue;
            }
            while let Some(m) = self.node.take_p2p(line.rank) {
                if let Some(c) = RecvCounters::decode(&m) {
                    line.counters = Some(c);
                    continue;
                }
                let Some(f) = Final::decode(&m) else {
                    continue;
                };
                // A completion counts only after the trailer and for every byte sent: a
                // receiver (a buggy or hostile member) that says so earlier is failed, so that
                // `--only-failed` sends to it again.
                let early = match (f.ok, self.digest) {
                    (true, None) => Some("reported completion before the end of the stream".into()),
                    (true, Some(_)) if f.bytes != self.sent => Some(format!(
                        "reported completion of {} bytes, the sender sent {}",
                        f.bytes, self.sent
                    )),
                    _ => None,
                };
                match (f.ok, early) {
                    (true, None) => {
                        finish(line, self.start, Outcome::Completed, f.bytes, String::new())
                    }
                    (true, Some(why)) => {
                        self.node.evict(line.rank);
                        finish(line, self.start, Outcome::Failed, f.bytes, why);
                    }
                    (false, _) => {
                        self.node.evict(line.rank);
                        finish(line, self.start, Outcome::Failed, f.bytes, f.error);
                    }
                }
                break;
            }
        }
    }

    /// Says the sender is alive, and tells evicted receivers again that they were.
    fn keep_alive(&mut self, now: Instant) {
        if now.duration_since(self.watch.kept_alive) >= KEEPALIVE_EVERY {
            control(&mut self.node, Dest::All, KEEPALIVE);
            self.watch.kept_alive = now;
        }
        for (r, told) in self.watch.told_evicted.iter_mut().enumerate() {
            if told.is_some_and(|t| now.duration_since(t) >= EVICTED_REPEAT) {
                control(&mut self.node, Dest::Rank(Rank::new(r as u16)), EVICTED);
                *told = Some(now);
            }
        }
    }

    /// Liveness: evicts receivers without progress and silent for `--timeout`, and fails
    /// those that acknowledged everything but make no progress towards their report.
    fn check_receivers(&mut self, now: Instant) {
        for r in 1..self.fate.len() {
            if self.fate[r].status != Outcome::Active {
                continue;
            }
            let Some(l) = self.node.receiver_progress(Rank::new(r as u16)) else {
                continue;
            };
            let last = [l.last_heard, l.last_progress, Some(self.start)]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(self.start);
            if l.outstanding > 0 && now.duration_since(last) > self.a.timeout {
                let msg = format!(
                    "no progress and silent for {:.1} s",
                    now.duration_since(last).as_secs_f64()
                );
                self.drop_receiver(r, now, "evicting", Outcome::Evicted, self.acked, msg);
                continue;
            }
            // Everything acknowledged, the trailer included: from now on only its output and
            // its report are left, and the receiver says how its output gets on (progress
            // notices). None for `timeout` and it is failed like a stalled receiver, not
            // waited for until `report_wait`.
            let all_acked = self.trailer.is_some() && self.node.queued() == 0 && l.outstanding == 0;
            if !all_acked {
                continue;
            }
            let since = *self.watch.all_acked_at[r].get_or_insert(now);
            let last = self.watch.progress_at[r].map_or(since, |p| p.max(since));
            if now.duration_since(last) > self.a.timeout {
                let msg = format!(
                    "acknowledged all data, then no progress towards its report for {:.1} s (its output took {})",
                    now.duration_since(last).as_secs_f64(),
                    self.watch.took[r].map_or("nothing it told of".into(), |b| format!("{b} bytes"))
                );
                self.drop_receiver(r, now, "failing", Outcome::Failed, self.sent, msg);
            }
        }
    }

    /// Evicts rank `r`, tells it so, and gives it `what` (`doing`: for the message).
    fn drop_receiver(
        &mut self,
        r: usize,
        now: Instant,
        doing: &str,
        what: Outcome,
        bytes: u64,
        msg: String,
    ) {
        self.node.evict(Rank::new(r as u16));
        control(&mut self.node, Dest::Rank(Rank::new(r as u16)), EVICTED);
        self.watch.told_evicted[r] = Some(now);
        if !self.a.quiet {
            let who = &self.who[r];
            self.pb
                .suspend(|| eprintln!("ethbcast: {doing} rank {r} ({who}): {msg}"));
        }
        finish(&mut self.fate[r], self.start, what, bytes, msg);
    }

    /// All data acknowledged but no report: gives up after `--report-wait`.
    fn give_up_on_reports(&mut self, now: Instant) {
        let Some(t) = self.trailer_stable else {
            return;
        };
        if now.duration_since(t) <= self.a.report_wait {
            return;
        }
        for line in &mut self.fate[1..] {
            if line.status == Outcome::Active {
                finish(
                    line,
                    self.start,
                    Outcome::Failed,
                    self.sent,
                    "acknowledged all data but sent no completion report".into(),
                );
            }
        }
    }

    /// Step 5: the report, once every receiver has an outcome, or once the transfer ended
    /// early (`failure`: interrupted, the input or the link failed): receivers still active
    /// then failed with it. The last status too.
    pub fn report(
        mut self,
        status: &mut Option<super::StatusFile>,
        failure: Option<Fatal>,
    ) -> Report {
        let seconds = self.start.elapsed();
        self.pb.finish_and_clear();
        // Linger: acknowledge the last point-to-point reports.
        let linger = Instant::now() + Duration::from_millis(300);
        while failure.is_none() && Instant::now() < linger {
            if self.node.turn(Duration::from_millis(10)).is_err() {
                break;
            }
        }
        // Counters that came with the last reports.
        for line in &mut self.fate[1..] {
            while let Some(m) = self.node.take_p2p(line.rank) {
                if let Some(c) = RecvCounters::decode(&m) {
                    line.counters = Some(c);
                }
            }
            if let (Outcome::Active, Some(f)) = (line.status, &failure) {
                let bytes = line.bytes.max(self.acked);
                finish(line, self.start, Outcome::Failed, bytes, f.msg.clone());
            }
        }
        let st = self.node.stats().clone();
        let ok = failure.is_none()
            && self.not_joined == 0
            && self.fate[1..]
                .iter()
                .all(|r| r.status == Outcome::Completed);
        if let Some(s) = status.as_mut() {
            s.update(&self.status("done", Some(ok), seconds, &st), true);
        }
        let resumed_from = self.resumed_from.unwrap_or(0);
        let code = match (&failure, ok) {
            (Some(f), _) => f.code,
            (None, true) => super::EXIT_OK,
            (None, false) => EXIT_FAILED,
        };
        Report {
            ok,
            code,
            error: failure.map(|f| f.msg),
            iface: self.a.link.iface.clone(),
            bytes: self.sent,
            resumed_from,
            // Known only for an input read to its end.
            digest: self.digest.map_or_else(
                || format!("{}:none", self.a.digest.name()),
                |d| self.a.digest.render(&d),
            ),
            join_seconds: self.join_seconds,
            seconds: seconds.as_secs_f64(),
            goodput_mbit: mbit(self.sent - resumed_from, seconds),
            receivers: self.fate.split_off(1),
            not_joined: self.not_joined,
            missing: std::mem::take(&mut self.missing),
            data_frames: st.data_frames,
            repair_frames: st.repair_frames,
            rebroadcasts: st.rebroadcasts,
        }
    }
}

/// Waits for the offer of every receiver still in the transfer (see [`Offer`]), telling them
/// meanwhile that the sender is alive. A receiver that sends its final report instead is done
/// (failed, as a rule: it gave up at the header); one that has not offered and was not heard
/// from for `timeout` is taken to hold nothing (the transfer then starts at 0, and the main
/// loop evicts it if it stays silent). Returns each remaining receiver's rank and offer.
fn gather_offers(
    node: &mut Stream,
    fate: &mut [ReceiverReport],
    stop: &std::sync::atomic::AtomicBool,
    timeout: Duration,
    start: Instant,
) -> Result<Vec<(usize, Offer)>, Fatal> {
    let n = fate.len();
    let began = Instant::now();
    let mut got: Vec<Option<Offer>> = vec![None; n];
    let mut kept_alive = began;
    loop {
        if stop.load(Ordering::SeqCst) {
            abort_receivers(node);
            return Err(Fatal::new(
                EXIT_INTERRUPTED,
                "interrupted: transfer aborted, receivers told to discard it",
            ));
        }
        let now = Instant::now();
        let waiting: Vec<usize> = (1..n)
            .filter(|&r| fate[r].status == Outcome::Active && got[r].is_none())
            .filter(|&r| {
                let heard = node
                    .receiver_progress(Rank::new(r as u16))
                    .and_then(|l| l.last_heard)
                    .map_or(began, |t| t.max(began));
                now.saturating_duration_since(heard) <= timeout
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        node.turn(Duration::from_millis(5))?;
        while node.poll_event().is_some() {}
        for r in waiting {
            // One message at a time: a final report after the offer is the main loop's.
            let Some(m) = node.take_p2p(Rank::new(r as u16)) else {
                continue;
            };
            if let Some(o) = Offer::decode(&m) {
                got[r] = Some(o);
            } else if let Some(f) = Final::decode(&m) {
                // Before the stream began nothing can have completed (see `take_reports`).
                let why = match f.ok {
                    true => "reported completion before the stream began".into(),
                    false => f.error,
                };
                node.evict(Rank::new(r as u16));
                finish(&mut fate[r], start, Outcome::Failed, f.bytes, why);
            }
        }
        if now.duration_since(kept_alive) >= KEEPALIVE_EVERY {
            control(node, Dest::All, KEEPALIVE);
            kept_alive = now;
        }
    }
    Ok((1..n)
        .filter(|&r| fate[r].status == Outcome::Active)
        .map(|r| {
            let o = got[r].take().unwrap_or(Offer {
                held: 0,
                digest: [0; 32],
            });
            (r, o)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{failed_hosts, read_blocks, resume_point, Block, Expect};
    use crate::transfer::{offer_key, DigestAlgo, Offer, StreamHasher};
    use ethbcast::Key;
    use std::io::{Read, Seek};

    /// A buffer the engine gave back is where the reader reads its next block: the block's
    /// bytes are the input's, in a data message, whatever the buffer held before; without one
    /// the reader allocates, and the stream's digest is the same either way.
    #[test]
    fn the_reader_reads_into_the_buffers_given_back() {
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 13 + i / 5) as u8).collect();
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let (spent_tx, spent_rx) = std::sync::mpsc::channel();
        let mut old = Vec::with_capacity(1001);
        old.extend_from_slice(&[0xAA; 700]);
        let at = old.as_ptr();
        spent_tx.send(old).unwrap();
        let mut input: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(data.clone()));
        let mut hasher = StreamHasher::new(DigestAlgo::Xxh3);
        read_blocks(&mut input, 1000, &mut hasher, &tx, &spent_rx);
        drop(tx);
        let blocks: Vec<Block> = rx.iter().collect();
        let mut whole = StreamHasher::new(DigestAlgo::Xxh3);
        whole.update(&data);
        match &blocks[..] {
            [Block::Data(a), Block::Data(b), Block::Data(c), Block::Eof(d)] => {
                assert_eq!(a.as_ptr(), at, "the first block in the buffer given back");
                assert_ne!(b.as_ptr(), at);
                assert_eq!(a[0], b'D');
                assert_eq!(&a[1..], &data[..1000]);
                assert_eq!(&b[1..], &data[1000..2000]);
                assert_eq!(&c[1..], &data[2000..]);
                assert_eq!(*d, whole.finalize());
            }
            _ => panic!("three data blocks and the end expected"),
        }
    }

    #[test]
    fn a_file_starts_at_the_smallest_offer_only_if_every_offer_matches_it() {
        let path = std::env::temp_dir().join(format!("ethbcast-resume-{}", std::process::id()));
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let digest = |n: usize| {
            let mut h = StreamHasher::new(DigestAlgo::Blake3);
            h.update(&data[..n]);
            h.finalize()
        };
        let held = |n: usize| Offer {
            held: n as u64,
            digest: digest(n),
        };
        let mut wrong = held(2_500_000);
        wrong.digest[3] ^= 1;
        let past_the_end = Offer {
            held: 3_000_001,
            digest: digest(3_000_000),
        };
        for (offers, start, refused) in [
            (vec![], 0, None),
            (vec![held(0), held(1000)], 0, None),
            (vec![held(1_200_000)], 1_200_000, None),
            (
                vec![held(2_500_000), held(1_200_000), held(2_500_000)],
                1_200_000,
                None,
            ),
            (vec![held(3_000_000)], 3_000_000, None),
            (vec![held(1_200_000), wrong], 0, Some(1)),
            (vec![past_the_end, held(1000)], 0, Some(0)),
        ] {
            let mut f = std::fs::File::open(&path).unwrap();
            let (at, h, why) = resume_point(&mut f, DigestAlgo::Blake3, None, &offers).unwrap();
            assert_eq!((at, why), (start, refused), "{offers:?}");
            // The digest so far is of the bytes before the start, and the file stands there.
            assert_eq!(h.finalize(), digest(start as usize), "{offers:?}");
            assert_eq!(f.stream_position().unwrap(), start);
            let mut rest = Vec::new();
            f.read_to_end(&mut rest).unwrap();
            assert!(rest == data[start as usize..]);
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The attack: a local user who can write a receiver's partial file fills it with bytes
    /// that are not the input's but have the same XXH3 digest as its first bytes; that receiver
    /// then offers the input's own XXH3 digest. With a group key the sender checks offers under
    /// the keyed digest (`offer_key`), so that offer (and one keyed under the group key itself,
    /// or under another group's) is refused and the transfer starts at 0; the keyed digest of
    /// the input's bytes is taken. Without a key (`--insecure`) offers stay under the header's
    /// algorithm.
    #[test]
    fn with_a_key_an_offer_is_taken_only_under_the_keyed_digest() {
        let path = std::env::temp_dir().join(format!("ethbcast-forged-{}", std::process::id()));
        let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 17 + i / 5) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let key = Key::from_bytes([0x5a; 32]);
        let other = Key::from_bytes([0xa5; 32]);
        let held = 1_200_000;
        let prefix = &data[..held];
        for algo in [DigestAlgo::Xxh3, DigestAlgo::Blake3] {
            let mut h = StreamHasher::new(algo);
            h.update(prefix);
            let plain = h.finalize();
            let offer = |digest: [u8; 32]| {
                vec![Offer {
                    held: held as u64,
                    digest,
                }]
            };
            let start = |k: Option<&Key>, offers: &[Offer]| {
                let mut f = std::fs::File::open(&path).unwrap();
                let (at, h, why) =
                    resume_point(&mut f, algo, k.map(offer_key).as_ref(), offers).unwrap();
                assert_eq!(f.stream_position().unwrap(), at);
                (at, h.finalize(), why)
            };
            let refused = (0, StreamHasher::new(algo).finalize(), Some(0));
            // Without a key: the header's digest, as before.
            assert_eq!(
                start(None, &offer(plain)),
                (held as u64, plain, None),
                "{algo:?}"
            );
            // With one: the forger's digest, and digests under keys other than the offer key.
            assert_eq!(
                start(Some(&key), &offer(plain)),
                refused,
                "{algo:?}: forged"
            );
            let under = |k: &Key| *blake3::keyed_hash(k, prefix).as_bytes();
            assert_eq!(start(Some(&key), &offer(under(&key))), refused, "{algo:?}");
            let theirs = under(&offer_key(&other));
            assert_eq!(start(Some(&key), &offer(theirs)), refused, "{algo:?}");
            // The keyed digest of the input's first bytes: resumed there, and the stream
            // digest goes on from theirs under the header's algorithm.
            let good = under(&offer_key(&key));
            assert_eq!(
                start(Some(&key), &offer(good)),
                (held as u64, plain, None),
                "{algo:?}"
            );
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn only_the_failed_and_missing_receivers_of_a_report_are_sent_to_again() {
        let report = r#"{"ok": false, "receivers": [
            {"rank": 1, "mac": "02:00:00:00:00:01", "host": "node1", "status": "completed"},
            {"rank": 2, "mac": "02:00:00:00:00:02", "host": "node2", "status": "evicted"},
            {"rank": 3, "mac": "02:00:00:00:00:03", "status": "failed"}],
            "not_joined": 1, "missing": [{"host": "node4", "mac": "02:00:00:00:00:04"}]}"#;
        let Expect::List(hosts) = failed_hosts(report).unwrap() else {
            panic!("a report that names every host gives a list");
        };
        let got: Vec<(Option<&str>, String)> = hosts
            .iter()
            .map(|h| (h.name.as_deref(), h.mac.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                (Some("node2"), "02:00:00:00:00:02".to_string()),
                (None, "02:00:00:00:00:03".to_string()),
                (Some("node4"), "02:00:00:00:00:04".to_string()),
            ]
        );
        let all_done = r#"{"receivers": [{"mac": "02:00:00:00:00:01", "status": "completed"}]}"#;
        assert!(failed_hosts(all_done)
            .unwrap_err()
            .contains("nothing to send"));
        assert!(failed_hosts("{").is_err());
        assert!(failed_hosts("{}").is_err());
        assert!(failed_hosts(r#"{"receivers": [{"mac": "nope", "status": "failed"}]}"#).is_err());
    }

    fn report_of(receivers: usize, repair_requests: u64, repair_frames: u64) -> super::Report {
        use super::{Outcome, ReceiverReport};
        let line = |i: usize| ReceiverReport {
            rank: ethbcast::Rank::new(i as u16 + 1),
            mac: format!("02:00:00:00:00:0{}", i + 1),
            host: None,
            status: Outcome::Completed,
            bytes: 10,
            seconds: 1.0,
            error: String::new(),
            counters: Some(crate::distribute::recv::RecvCounters {
                repair_requests,
                ..Default::default()
            }),
        };
        super::Report {
            ok: true,
            code: 0,
            error: None,
            iface: "eth0".into(),
            bytes: 10,
            digest: "xxh3:00".into(),
            resumed_from: 0,
            join_seconds: 0.1,
            seconds: 1.0,
            goodput_mbit: 1.0,
            receivers: (0..receivers).map(line).collect(),
            not_joined: 0,
            missing: Vec::new(),
            data_frames: 100,
            repair_frames,
            rebroadcasts: 0,
        }
    }

    /// One receiver is "the receiver", not "all 1 receivers"; frames sent again are
    /// explained beside the receivers' repair requests, which may be none.
    #[test]
    fn the_report_counts_in_words_and_explains_frames_sent_again() {
        let one = report_of(1, 0, 0).render();
        assert!(one.contains("REPORT: the receiver completed"), "{one}");
        assert!(!one.contains("all 1 receivers"), "{one}");
        assert!(!one.contains("sent again:"), "nothing sent again: {one}");
        let two = report_of(2, 0, 170).render();
        assert!(two.contains("REPORT: all 2 receivers completed"), "{two}");
        assert!(
            two.contains("170 frames sent again")
                && two.contains("0 requests")
                && two.contains("unasked"),
            "{two}"
        );
        let asked = report_of(2, 3, 9).render();
        assert!(asked.contains("6 requests"), "{asked}");
    }

    fn args(input: Option<std::path::PathBuf>, iface: &str) -> super::SendArgs {
        super::SendArgs {
            link: crate::distribute::LinkOptions {
                iface: iface.into(),
                stream: ethbcast::StreamOptions::default(),
            },
            input,
            expect: Expect::Count(2),
            settle: None,
            digest: DigestAlgo::Xxh3,
            max_rate: None,
            chunk: 1 << 20,
            wait: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_secs(1),
            report_wait: std::time::Duration::from_secs(1),
            quiet: true,
            status_file: None,
        }
    }

    /// The first step alone: a file has a size, a directory is a tree to pack, a missing
    /// path is refused naming it, and a run that stops at a step still reports (here: no such interface), with the
    /// receivers it expected as not joined.
    #[test]
    fn the_steps_stand_alone_and_every_early_end_reports() {
        let dir = std::env::temp_dir().join(format!("ethbcast-steps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("in");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(
            super::open_input(&args(Some(file.clone()), "eth0"))
                .unwrap()
                .total,
            Some(5)
        );
        let tree = super::open_input(&args(Some(dir.clone()), "eth0")).unwrap();
        assert!(
            matches!(tree.input, super::Input::Tree(ref p) if *p == dir) && tree.total.is_none(),
            "a directory is sent as a tree, its size unknown before packing"
        );
        let missing = dir.join("missing");
        let Err(e) = super::open_input(&args(Some(missing), "eth0")) else {
            panic!("a missing input was opened");
        };
        assert!(
            e.msg.contains("cannot open input") && e.msg.contains("missing"),
            "{}",
            e.msg
        );
        let r = super::run(&args(Some(file), "ethbcast-nope0"));
        assert_eq!(r.code, crate::distribute::EXIT_IO, "{:?}", r.error);
        assert!(
            r.error
                .as_deref()
                .is_some_and(|e| e.contains("ethbcast-nope0")),
            "{:?}",
            r.error
        );
        assert_eq!((r.ok, r.not_joined, r.receivers.len()), (false, 2, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--receivers N` names no host that did not join: every receiver that joined completed,
    /// two never joined, and there is something to send again, to two receivers.
    #[test]
    fn a_count_report_whose_receivers_did_not_join_sends_to_as_many_again() {
        let report = r#"{"ok": false, "receivers": [
            {"rank": 1, "mac": "02:00:00:00:00:01", "status": "completed"}],
            "not_joined": 2}"#;
        assert!(matches!(failed_hosts(report), Ok(Expect::Count(2))));
        // And with a receiver that failed: it and the two.
        let report = r#"{"ok": false, "receivers": [
            {"rank": 1, "mac": "02:00:00:00:00:01", "status": "failed"}],
            "not_joined": 2, "missing": []}"#;
        assert!(matches!(failed_hosts(report), Ok(Expect::Count(3))));
    }
}
