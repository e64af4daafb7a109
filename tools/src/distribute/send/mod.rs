//! The sending side: join, stream, watch the receivers, report.
//!
//! This module holds the steps before the transfer ([`open_input`], [`open`], [`join`]) and the
//! report; the input is read in `read.rs`, the transfer itself is [`Transfer`] (`transfer.rs`).

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{HostEntry, JoinSeen, MacAddr, Rank, Role, Settle, Stream};
use serde::Serialize;

use super::recv::RecvCounters;
use super::{Fatal, LinkOptions, EXIT_INTERRUPTED};
use crate::transfer::DigestAlgo;

mod read;
mod transfer;

use read::Input;
pub use transfer::Transfer;

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
pub(super) struct SendStatus<'a> {
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

impl<'a> SendStatus<'a> {
    /// The status before any data went: `state`, `ok`, the interface, the input's size and
    /// the receivers as they stand, every count zero.
    fn before_data(
        state: &'a str,
        ok: Option<bool>,
        iface: &'a str,
        total: Option<u64>,
        receivers: &'a [ReceiverReport],
    ) -> SendStatus<'a> {
        SendStatus {
            state,
            ok,
            iface,
            total,
            bytes_sent: 0,
            bytes_acked: 0,
            resumed_from: 0,
            seconds: 0.0,
            data_frames: 0,
            repair_frames: 0,
            receivers,
        }
    }
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
        let end = SendStatus::before_data("done", Some(false), &a.link.iface, total, &receivers);
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
    let first = SendStatus::before_data("joining", None, &a.link.iface, total, &[]);
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

#[cfg(test)]
mod tests {
    use super::{failed_hosts, Expect};
    use crate::transfer::DigestAlgo;

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
