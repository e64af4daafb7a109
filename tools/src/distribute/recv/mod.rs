//! The receiving side: join, write the stream as it arrives, verify, commit or discard.
//!
//! This module runs the protocol loop ([`Receiving`]); the output it writes to is in `sink.rs`,
//! the thread that writes it in `writer.rs`, and the end-to-end check of what the engine
//! consumed against the sender's trailer in `verify.rs`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ethbcast::{Dest, Event, JoinSeen, Message, Piece, Rank, Role, Stream};
use serde::Serialize;

use super::direct;
use super::{Fatal, LinkOptions, EXIT_FAILED, EXIT_INTERRUPTED};
use crate::transfer::{
    Budget, Data, DigestAlgo, Final, Msg, Offer, PieceDigest, Progress, ABORT, EVICTED,
};

mod sink;
mod verify;
mod writer;

pub use sink::partial_name;
use sink::{null_output, Guard, Sink};
pub(super) use sink::{write_err, Counted};
use verify::{check_count, check_digest};
pub(super) use verify::{lock, Hashed};
use writer::{stalled, Job, Pushed, Writer, Written};

/// Where the stream goes.
#[derive(Debug, Clone)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// A file, written under a temporary name and renamed after the digest matched.
    File(PathBuf),
    /// The standard input of `sh -c COMMAND`.
    Command(String),
    /// A directory (`--extract`): the stream is a tar archive (`send -i DIR`), unpacked into a
    /// fresh directory next to this one and renamed to it after the digest matched (see
    /// `super::extract`).
    Tree(PathBuf),
}

/// What `ethbcast recv` was asked to do.
#[derive(Debug, Clone)]
pub struct RecvArgs {
    /// Interface, group, backend.
    pub link: LinkOptions,
    /// Output.
    pub output: Output,
    /// Give up after this long without a frame from the sender.
    pub timeout: Duration,
    /// How long to wait for a sender's roster.
    pub wait: Duration,
    /// Refuse a stream larger than this many bytes (`--max-bytes`); the header's total is
    /// enforced in any case.
    pub max_bytes: Option<u64>,
    /// No chatter on stderr.
    pub quiet: bool,
    /// The user to run as once the link is open (`--user`).
    pub user: Option<String>,
    /// Into a file: keep what arrived under a fixed partial name when the transfer does not
    /// complete, and offer it to the next sender (`--resume`, see [`partial_name`]).
    pub resume: bool,
    /// Write the counters to this file every second and at the end (`--status-file`).
    pub status_file: Option<PathBuf>,
    /// Into a file: never replace an existing one (`--no-clobber`).
    pub no_clobber: bool,
}

/// A receiver's outcome: of a transfer, or of a run that ended before one began (a join
/// timeout, an interruption, a link or output error: `error` says which; `--json` writes one
/// on every exit but a usage error).
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    /// Completed and verified.
    pub ok: bool,
    /// Rank in the transfer (none before the join).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<Rank>,
    /// Bytes received.
    pub bytes: u64,
    /// Seconds from the header to the end.
    pub seconds: f64,
    /// Digest of what was received (`xxh3:HEX` or `blake3:HEX`; empty if nothing was).
    pub digest: String,
    /// Whether the data went from the link's frames to the output with no copy in between
    /// (a ring link, and `/dev/null` for output: see `direct.rs`).
    pub direct: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Exit code.
    pub code: u8,
    /// Bytes at the start of the stream taken from the partial output of an earlier transfer
    /// (`--resume`), not received.
    pub resumed: u64,
    /// What the receiver's engine did.
    pub counters: RecvCounters,
}

/// A receiver's counters, in its report, its status file, and (sent before its final report)
/// the sender's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecvCounters {
    /// Stream bytes received from the link (without those `resumed`).
    pub data_bytes: u64,
    /// Bytes at the start of the stream kept from a partial output (`--resume`).
    pub resumed: u64,
    /// Bytes the output took (the file, the pipe, the command).
    pub written: u64,
    /// Requests for repair sent (NACK frames), to the sender or to fellow receivers.
    pub repair_requests: u64,
    /// Of those, to fellow receivers (peer repair).
    pub repair_requests_to_peers: u64,
    /// Frames this receiver repaired for fellow receivers.
    pub repairs_served: u64,
    /// Acknowledgement frames sent.
    pub ack_frames: u64,
    /// Frames received twice (a repair that crossed the original, say).
    pub duplicate_frames: u64,
}

/// First byte of the point-to-point message carrying a receiver's [`RecvCounters`].
const COUNTERS: u8 = b'C';

/// The sender's rank: the root of the stream, to whom a receiver reports.
const SENDER: Rank = Rank::new(0);

impl RecvCounters {
    /// What `node` counted so far, with the stream's bytes as the receiver sees them.
    fn of(node: &Stream, data_bytes: u64, resumed: u64, written: u64) -> RecvCounters {
        let st = node.stats();
        RecvCounters {
            data_bytes,
            resumed,
            written,
            repair_requests: st.nack_frames,
            repair_requests_to_peers: st.peer_nacks,
            repairs_served: st.peer_repairs,
            ack_frames: st.ack_frames + st.tree_ack_frames,
            duplicate_frames: st.drops.duplicate,
        }
    }

    fn fields(&self) -> [u64; 8] {
        [
            self.data_bytes,
            self.resumed,
            self.written,
            self.repair_requests,
            self.repair_requests_to_peers,
            self.repairs_served,
            self.ack_frames,
            self.duplicate_frames,
        ]
    }

    /// Encodes (`C` and eight u64).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![COUNTERS];
        for f in self.fields() {
            v.extend_from_slice(&f.to_be_bytes());
        }
        v
    }

    /// Decodes.
    pub fn decode(m: &[u8]) -> Option<RecvCounters> {
        if m.len() != 65 || m[0] != COUNTERS {
            return None;
        }
        let f = |i: usize| u64::from_be_bytes(m[1 + 8 * i..9 + 8 * i].try_into().expect("8"));
        Some(RecvCounters {
            data_bytes: f(0),
            resumed: f(1),
            written: f(2),
            repair_requests: f(3),
            repair_requests_to_peers: f(4),
            repairs_served: f(5),
            ack_frames: f(6),
            duplicate_frames: f(7),
        })
    }
}

/// A receiver's status file (`--status-file`): what it did so far.
#[derive(Debug, Clone, Serialize)]
struct RecvStatus<'a> {
    /// `waiting` (for a sender), `receiving`, `completed` or `failed`.
    state: &'a str,
    rank: u16,
    /// Stream bytes this receiver holds (kept and received).
    bytes: u64,
    /// The stream's size, if the sender said.
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<u64>,
    seconds: f64,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    counters: RecvCounters,
}

impl RecvStatus<'static> {
    /// Before the join.
    fn waiting() -> RecvStatus<'static> {
        RecvStatus {
            state: "waiting",
            rank: 0,
            bytes: 0,
            total: None,
            seconds: 0.0,
            error: "",
            counters: RecvCounters::default(),
        }
    }
}

fn interrupted() -> Fatal {
    Fatal::new(EXIT_INTERRUPTED, "interrupted")
}

/// What a control frame of the sender ends this receiver with, if anything: an abort or an
/// eviction notice.
fn sender_verdict(ev: &Event) -> Option<Fatal> {
    let Event::Notice {
        src: SENDER,
        body: payload,
    } = ev
    else {
        return None;
    };
    if payload.starts_with(ABORT) {
        return Some(Fatal::new(
            EXIT_INTERRUPTED,
            "the sender aborted the transfer",
        ));
    }
    if payload.starts_with(EVICTED) {
        return Some(Fatal::new(
            EXIT_FAILED,
            "evicted by the sender (this receiver was too slow or silent)",
        ));
    }
    None
}

/// How often a receiver finishing its output tells the sender how far it got (see
/// [`Progress`]).
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// After the trailer (`total` bytes in the stream): keeps answering the sender while the
/// writer delivers the rest of the stream to the output and commits it, and tells the sender
/// how far the output got. Gives up on Ctrl-C, on the sender's abort or eviction notice, and
/// when the output took no data for `patience` while bytes were left to give it (once it took
/// them all, flushing, syncing and the command's exit take what they take: the sender's
/// `--report-wait` bounds them).
fn await_writer(
    node: &mut Stream,
    w: &Writer,
    total: u64,
    stop: &AtomicBool,
    patience: Duration,
) -> Result<(), Fatal> {
    let mut seen = (w.written(), Instant::now());
    let mut told: Option<Instant> = None;
    while !w.stopped() {
        if stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        if told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
            let took = w.written();
            let p = Progress {
                took,
                all_taken: took >= total,
            };
            let _ = node.notice(Dest::Rank(Rank::new(0)), p.encode());
            told = Some(Instant::now());
        }
        node.turn(Duration::from_millis(10))?;
        while let Some(ev) = node.poll_event() {
            if let Some(f) = sender_verdict(&ev) {
                return Err(f);
            }
        }
        let now = Instant::now();
        let took = w.written();
        if took != seen.0 || took >= total {
            seen = (took, now);
        } else if now.duration_since(seen.1) > patience {
            return Err(stalled(patience));
        }
    }
    Ok(())
}

/// The longest message a receiver limited to `max_bytes` of data takes: a data message of
/// them all (after its one-byte type), and never less than the stream's other messages need.
fn longest_message(max_bytes: u64) -> usize {
    const OTHERS: usize = 64 << 10;
    usize::try_from(max_bytes.saturating_add(1))
        .unwrap_or(usize::MAX)
        .max(OTHERS)
}

/// Runs `ethbcast recv`, its steps in order: [`open`], [`join`], [`Receiving::start`],
/// [`Receiving::run`], [`Receiving::report`]. Returns the report in every case (its `code` is
/// the exit code).
pub fn run(a: &RecvArgs) -> RecvReport {
    let opened = match open(a) {
        Ok(o) => o,
        Err(f) => return RecvReport::not_started(f),
    };
    let mut seen = JoinSeen::default();
    let (mut setup, node) = join(a, opened, &mut seen);
    let node = match node {
        Ok(n) => n,
        Err(f) => {
            if let Some(st) = setup.status.as_mut() {
                let mut end = RecvStatus::waiting();
                end.state = "failed";
                end.error = &f.msg;
                st.update(&end, true);
            }
            return RecvReport::not_started(f);
        }
    };
    let mut r = Receiving::start(a, setup, node);
    let outcome = r.run();
    r.report(outcome)
}

impl RecvReport {
    /// The report of a run that ended before its transfer began.
    fn not_started(f: Fatal) -> RecvReport {
        RecvReport {
            ok: false,
            rank: None,
            bytes: 0,
            seconds: 0.0,
            digest: String::new(),
            direct: false,
            error: f.msg,
            code: f.code,
            resumed: 0,
            counters: RecvCounters::default(),
        }
    }
}

/// A receiver's link, open, before the join.
pub struct Opened {
    link: Box<dyn ethbcast::Link + Send>,
    setup: Setup,
}

/// A receiver's output, open, its status file and its interruption flag.
pub struct Setup {
    /// The link has room for frames the receiver keeps in it (see
    /// `LinkOptions::open_receiving`).
    retaining: bool,
    /// The output, discarded unless committed, whatever way the receiver ends.
    guard: Guard,
    /// Bytes the output took (see [`Counted`]).
    output_took: Arc<AtomicU64>,
    status: Option<super::StatusFile>,
    stop: Arc<AtomicBool>,
}

/// Step 1: opens the link; becomes `--user`, drops every capability; opens the output and
/// the status file.
pub fn open(a: &RecvArgs) -> Result<Opened, Fatal> {
    // Decided before the output is opened (the link needs the capabilities dropped below);
    // `Sink::direct` checks the output itself.
    let retaining = null_output(&a.output);
    a.link.check_up()?;
    let link = a
        .link
        .open_receiving(retaining)
        .map_err(|e| super::link_error(&a.link.iface, e))?;
    // Before any thread starts (the Ctrl-C handler's, the writer): they inherit the user and
    // the empty sets. The output is opened afterwards, with the same rights its final rename
    // has.
    if let Some(user) = &a.user {
        super::become_user(user)?;
    }
    super::drop_capabilities()?;
    let stop = super::interrupt_flag();
    let output_took = Arc::new(AtomicU64::new(0));
    let guard = Guard(Sink::open(&a.output, &output_took, a.resume, a.no_clobber)?);
    let status = match &a.status_file {
        Some(p) => Some(super::StatusFile::create(p, &RecvStatus::waiting())?),
        None => None,
    };
    if !a.quiet {
        eprintln!(
            "ethbcast: {} ({}) waiting for a sender, group {:#x}",
            a.link.iface,
            link.local_mac(),
            a.link.stream.group_id
        );
    }
    Ok(Opened {
        link,
        setup: Setup {
            retaining,
            guard,
            output_took,
            status,
            stop,
        },
    })
}

/// Step 2: waits for a sender whose roster names this host ([`LinkOptions::join`]).
pub fn join(a: &RecvArgs, o: Opened, seen: &mut JoinSeen) -> (Setup, Result<Stream, Fatal>) {
    // No message longer than `--max-bytes` allows is reserved or kept: its frames are
    // dropped as they come (see `StreamOptions::max_message`) and the transfer refused.
    let mut link = a.link.clone();
    if let Some(max) = a.max_bytes {
        link.stream.max_message = longest_message(max).min(link.stream.max_message);
    }
    let node = link.join(o.link, Role::Receiver, a.wait, &o.setup.stop, seen);
    (o.setup, node)
}

/// Why the writer stopped before the trailer (it returns its own error from `finish`).
fn writer_failed(w: &mut Writer) -> Fatal {
    match w.finish(Duration::from_secs(2)) {
        Some(Written { result: Err(e), .. }) => e,
        _ => Fatal::new(EXIT_FAILED, "the writer stopped"),
    }
}

/// Queues `job` for the writer ([`Writer::push`]), waiting at most `patience` for an output
/// that takes no data.
fn push(w: &mut Writer, job: Job, stop: &AtomicBool, patience: Duration) -> Result<(), Fatal> {
    match w.push(job, stop, patience) {
        Pushed::Queued => Ok(()),
        Pushed::Stopped => Err(writer_failed(w)),
        Pushed::Interrupted => Err(interrupted()),
        Pushed::Stalled => Err(stalled(patience)),
    }
}

/// Steps 3 and 4: the transfer, from the sender's header to its trailer and the output's
/// commit.
pub struct Receiving<'a> {
    a: &'a RecvArgs,
    node: Stream,
    rank: Rank,
    setup: Setup,
    /// What the engine consumed of the stream (see `PieceDigest`).
    seen: Arc<Mutex<Hashed>>,
    /// Written straight from the link's frames (see `super::direct`), and the direct
    /// observer's failure (an output that refused a write, data past a limit).
    direct: bool,
    failure: direct::Failure,
    start: Instant,
    writer: Option<Writer>,
    /// What this receiver accepts of the stream, from the header on.
    budget: Option<Budget>,
    /// Only frames of this transfer from the sender count as hearing from it (not frames of
    /// other groups on the segment, nor garbage).
    heard_since: Instant,
    written: Option<Written>,
    /// The offer (see `Offer`): waiting for the writer's answer, then what it said was held.
    offer_pending: bool,
    told_alive: Option<Instant>,
    offered: Option<u64>,
    /// The sender's start (see `Msg::Start`): where its data begins.
    resumed: Option<u64>,
    /// The output's content is wrong (not only incomplete): a partial output is removed.
    spoilt: bool,
    /// The header's total, and the progress bar from the header on.
    announced: Option<u64>,
    pb: Option<indicatif::ProgressBar>,
    pb_told: Option<Instant>,
}

impl<'a> Receiving<'a> {
    /// Step 3: watches the sender's data as the engine consumes it: its digest, and where
    /// both allow it, the output written straight from the link's frames.
    pub fn start(a: &'a RecvArgs, setup: Setup, mut node: Stream) -> Receiving<'a> {
        let rank = node.rank();
        let seen = Arc::new(Mutex::new(Hashed::default()));
        let shared = seen.clone();
        let failure = direct::Failure::default();
        let out = if node.link_holds_frames() {
            setup.guard.0.direct()
        } else {
            None
        };
        let direct = out.is_some();
        if let Some((out, what)) = out {
            node.keep_at_most(SENDER, direct::KEEP);
            // Frames behind a gap wait for it in the ring, not in copies (see
            // `super::direct`), where the ring was opened with room for them.
            if setup.retaining {
                node.leave_in_link(SENDER, super::RETAINED);
            }
            node.observe(
                SENDER,
                Box::new(direct::Direct::new(
                    out,
                    what,
                    a.max_bytes,
                    shared,
                    failure.clone(),
                    setup.output_took.clone(),
                )),
            );
        } else {
            let mut digest = PieceDigest::new();
            node.observe(
                SENDER,
                Box::new(move |p: &Piece<'_>| {
                    digest.piece(p);
                    if p.offset + p.bytes.len() == p.msg_len {
                        // What this loop looks at, the trailer or a failure, comes after a
                        // message ends: the result is shared once a message, not locked once
                        // a frame (a lock and an unlock per frame were half the observer's
                        // samples).
                        *lock(&shared) = Hashed::of(&digest);
                    }
                }),
            );
        }
        Receiving {
            a,
            node,
            rank,
            setup,
            seen,
            direct,
            failure,
            start: Instant::now(),
            writer: None,
            budget: None,
            heard_since: Instant::now(),
            written: None,
            offer_pending: false,
            told_alive: None,
            offered: None,
            resumed: None,
            spoilt: false,
            announced: None,
            pb: None,
            pb_told: None,
        }
    }

    /// Step 4: receives until the output is committed (`Ok`) or the transfer fails here.
    pub fn run(&mut self) -> Result<(), Fatal> {
        loop {
            self.tick()?;
            while let Some(ev) = self.node.poll_event() {
                if self.on_event(ev)? {
                    return Ok(());
                }
            }
        }
    }

    /// The direct observer's failure, if it had one.
    fn direct_failed(&self) -> Option<Fatal> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One turn of the link, and everything checked once a turn: an interruption, the
    /// writer, limits, progress, the status file, the offer, the sender's silence.
    fn tick(&mut self) -> Result<(), Fatal> {
        let a = self.a;
        if self.setup.stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        if let Some(w) = self.writer.as_mut() {
            if w.stopped() {
                return Err(writer_failed(w));
            }
        }
        self.node.turn(Duration::from_millis(20))?;
        if let Some(max) = a.max_bytes.filter(|_| self.node.stats().drops.too_long > 0) {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!("the sender sent a message longer than --max-bytes {max} allows: refused"),
            ));
        }
        if let Some(e) = self.direct.then(|| self.direct_failed()).flatten() {
            return Err(e);
        }
        self.show_progress();
        // While the writer reads the partial output, the sender hears that this receiver is
        // alive (it waits for every offer).
        if self.offer_pending
            && self
                .told_alive
                .is_none_or(|t| t.elapsed() >= PROGRESS_EVERY)
        {
            let p = Progress {
                took: 0,
                all_taken: false,
            };
            let _ = self.node.notice(Dest::Rank(SENDER), p.encode());
            self.told_alive = Some(Instant::now());
        }
        if let (true, Some(o)) = (
            self.offer_pending,
            self.writer.as_ref().and_then(Writer::offer),
        ) {
            self.offer_pending = false;
            self.offered = Some(o.held);
            self.node.send_to(SENDER, o.encode())?;
        }
        let heard = self
            .node
            .last_heard(SENDER)
            .map_or(self.heard_since, |t| t.max(self.heard_since));
        if Instant::now().saturating_duration_since(heard) > a.timeout {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!(
                    "nothing heard from the sender for {:.0} s: giving up",
                    a.timeout.as_secs_f64()
                ),
            ));
        }
        Ok(())
    }

    /// Stream bytes this receiver holds (kept and received).
    fn held(&self) -> u64 {
        lock(&self.seen).bytes + self.resumed.unwrap_or(0)
    }

    /// The progress bar and the status file.
    fn show_progress(&mut self) {
        let held = self.held();
        if let Some(pb) = self.pb.as_ref() {
            pb.set_position(held);
            if self.pb_told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                pb.set_message(format!("{} repairs asked", self.node.stats().nack_frames));
                self.pb_told = Some(Instant::now());
            }
        }
        if let Some(st) = self.setup.status.as_mut() {
            let c = RecvCounters::of(
                &self.node,
                held - self.resumed.unwrap_or(0),
                self.resumed.unwrap_or(0),
                self.setup.output_took.load(Ordering::Relaxed),
            );
            let state = if self.writer.is_some() {
                "receiving"
            } else {
                "waiting"
            };
            let now = RecvStatus {
                state,
                rank: self.rank.get(),
                bytes: held,
                total: self.announced,
                seconds: self.start.elapsed().as_secs_f64(),
                error: "",
                counters: c,
            };
            st.update(&now, false);
        }
    }

    /// One event of the link: the stream's messages, and the sender's verdicts. `Ok(true)`
    /// once the output is committed.
    fn on_event(&mut self, ev: Event) -> Result<bool, Fatal> {
        let Event::Delivered(Message {
            root: SENDER, data, ..
        }) = ev
        else {
            return match sender_verdict(&ev) {
                Some(f) => Err(f),
                None => Ok(false),
            };
        };
        match Msg::decode(data) {
            Ok(Msg::Header { total, digest, .. }) if self.writer.is_none() => {
                self.on_header(total, digest)?
            }
            Ok(Msg::Start { offset }) if self.resumed.is_none() => self.on_start(offset)?,
            Ok(Msg::Data(d)) => self.on_data(d)?,
            Ok(Msg::Trailer { bytes, digest }) => {
                self.on_trailer(bytes, digest)?;
                return Ok(true);
            }
            Ok(Msg::Abort(why)) => {
                return Err(Fatal::new(
                    EXIT_INTERRUPTED,
                    format!("the sender aborted the transfer ({why})"),
                ))
            }
            Ok(Msg::Header { .. }) => {
                return Err(Fatal::new(EXIT_FAILED, "a second stream header"))
            }
            Ok(Msg::Start { .. }) => return Err(Fatal::new(EXIT_FAILED, "a second stream start")),
            Err(e) => return Err(Fatal::new(EXIT_FAILED, e)),
        }
        Ok(false)
    }

    /// The header: the stream's budget, the output started, the writer, and the offer.
    fn on_header(&mut self, total: Option<u64>, digest: DigestAlgo) -> Result<(), Fatal> {
        let a = self.a;
        // Before the output starts: a stream refused here never runs a command or writes a
        // byte.
        let b =
            Budget::new(total, a.max_bytes).map_err(|e| Fatal::new(EXIT_FAILED, e.to_string()))?;
        self.budget = Some(b);
        if !a.quiet {
            eprintln!(
                "ethbcast: rank {}: receiving {}",
                self.rank,
                total.map_or("a stream".into(), |t| format!("{t} bytes"))
            );
        }
        self.announced = total;
        self.pb = Some(super::progress_bar(total, a.quiet));
        let sink = &mut self.setup.guard.0;
        sink.start()?;
        let partial = matches!(sink, Sink::File { keep: true, .. });
        let out = std::mem::replace(sink, Sink::Done);
        let mut w = Writer::spawn(out, self.setup.output_took.clone())?;
        // What this receiver holds of the stream already, for the sender's start: a partial
        // output's (once the writer read it), else nothing.
        match (partial, total) {
            (true, Some(limit)) => {
                let job = Job::Offer {
                    algo: digest,
                    key: a.link.stream.key.as_ref().map(crate::transfer::offer_key),
                    limit,
                };
                push(&mut w, job, &self.setup.stop, a.timeout)?;
                self.offer_pending = true;
            }
            _ => {
                self.offered = Some(0);
                let none = Offer {
                    held: 0,
                    digest: [0; 32],
                };
                self.node.send_to(SENDER, none.encode())?;
            }
        }
        self.writer = Some(w);
        Ok(())
    }

    /// The sender's start: where its data begins (0, or where the partial output ends).
    fn on_start(&mut self, offset: u64) -> Result<(), Fatal> {
        let (Some(w), Some(b)) = (self.writer.as_mut(), self.budget.as_mut()) else {
            return Err(Fatal::new(EXIT_FAILED, "stream start before its header"));
        };
        let held = self.offered.unwrap_or(0);
        if offset > held {
            return Err(Fatal::new(
                EXIT_FAILED,
                format!("the sender starts at byte {offset}, this receiver holds {held} bytes of the stream"),
            ));
        }
        if let Err(e) = b.take(offset) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        if offset > 0 && !self.a.quiet {
            let rank = self.rank;
            let say = || {
                eprintln!(
                    "ethbcast: rank {rank}: resuming at byte {offset} (the partial output's first {offset} bytes match the sender's input)"
                )
            };
            match self.pb.as_ref() {
                Some(pb) => pb.suspend(say),
                None => say(),
            }
        }
        push(w, Job::Start(offset), &self.setup.stop, self.a.timeout)?;
        self.resumed = Some(offset);
        Ok(())
    }

    /// A data message: to the writer (unless the observer writes it).
    fn on_data(&mut self, d: Data) -> Result<(), Fatal> {
        let (Some(w), Some(b), Some(_)) =
            (self.writer.as_mut(), self.budget.as_mut(), self.resumed)
        else {
            return Err(Fatal::new(
                EXIT_FAILED,
                "stream data before its header and start",
            ));
        };
        if self.direct {
            // Written by the observer, which keeps its own budget.
            return Ok(());
        }
        if let Err(e) = b.take(d.bytes().len() as u64) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        push(w, Job::Data(d), &self.setup.stop, self.a.timeout)
    }

    /// The trailer: the byte count and digest checked, the output committed.
    fn on_trailer(&mut self, bytes: u64, digest: [u8; 32]) -> Result<(), Fatal> {
        let a = self.a;
        let (Some(w), Some(b)) = (self.writer.as_mut(), self.budget.as_ref()) else {
            return Err(Fatal::new(EXIT_FAILED, "stream trailer before its header"));
        };
        if let Err(e) = b.end(bytes) {
            self.spoilt = true;
            return Err(Fatal::new(EXIT_FAILED, e.to_string()));
        }
        if self.direct {
            // Copies the engine handed over outside a batch go out now.
            self.node.flush_observer();
            if let Some(e) = self
                .failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(e);
            }
            // Nothing else writes to the output in this mode.
            let n = self.setup.output_took.load(Ordering::Relaxed);
            push(w, Job::Direct(n), &self.setup.stop, a.timeout)?;
        }
        // Resumed: the data received is the rest of the stream, whose digest the writer
        // checks with the bytes the output kept.
        let from = self.resumed.unwrap_or(0);
        let checked = if from > 0 {
            check_count(&self.seen, from, bytes)
        } else {
            check_digest(&self.seen, bytes, &digest)
        };
        if let Err(e) = checked {
            self.spoilt = true;
            return Err(e);
        }
        let job = Job::Verify {
            bytes,
            digest: (from > 0).then_some(digest),
        };
        push(w, job, &self.setup.stop, a.timeout)?;
        await_writer(&mut self.node, w, bytes, &self.setup.stop, a.timeout)?;
        let done = w.finish(Duration::ZERO);
        let result = match &done {
            Some(d) => d.result.as_ref().map(|_| ()).map_err(Clone::clone),
            None => Err(Fatal::new(EXIT_FAILED, "the writer stopped")),
        };
        self.written = done;
        result
    }

    /// Step 5: the outcome. A failure discards the output (a partial output is kept for
    /// `--resume` unless what it holds is wrong); the sender is told (best effort for
    /// failures) what this receiver counted and how it ended.
    pub fn report(mut self, outcome: Result<(), Fatal>) -> RecvReport {
        let (ok, error, code) = match &outcome {
            Ok(()) => (true, String::new(), super::EXIT_OK),
            Err(f) => {
                self.discard();
                (false, f.msg.clone(), f.code)
            }
        };
        if let Some(pb) = self.pb.take() {
            pb.finish_and_clear();
        }
        let bytes = self.written.as_ref().map_or(0, |w| w.bytes);
        let digest = match (&self.written, lock(&self.seen).digest) {
            (Some(w), Some((algo, d))) => algo.render(&w.digest.unwrap_or(d)),
            _ => String::new(),
        };
        let resumed = self.resumed.unwrap_or(0);
        let counters = RecvCounters::of(
            &self.node,
            lock(&self.seen).bytes,
            resumed,
            self.setup.output_took.load(Ordering::Relaxed),
        );
        let report = Final {
            ok,
            bytes,
            error: error.clone(),
        };
        let _ = self.node.send_to(SENDER, counters.encode());
        if self.node.send_to(SENDER, report.encode()).is_ok() {
            let patience = if ok {
                Duration::from_secs(3)
            } else {
                Duration::from_millis(500)
            };
            let _ = self.node.settle(patience);
        }
        let seconds = self.start.elapsed().as_secs_f64();
        let held = self.held();
        if let Some(st) = self.setup.status.as_mut() {
            let end = RecvStatus {
                state: if ok { "completed" } else { "failed" },
                rank: self.rank.get(),
                bytes: held,
                total: self.announced,
                seconds,
                error: &error,
                counters,
            };
            st.update(&end, true);
        }
        RecvReport {
            ok,
            rank: Some(self.rank),
            bytes,
            seconds,
            digest,
            direct: self.direct,
            error,
            code,
            resumed,
            counters,
        }
    }

    /// Discards the output, wherever it is: still here, or with the writer (which may be
    /// stuck writing to a command that does not read: it is killed first).
    fn discard(&mut self) {
        let sink = &mut self.setup.guard.0;
        if self.spoilt {
            sink.discard();
        } else {
            sink.abort();
        }
        if let Some(w) = self.writer.as_mut() {
            if !w.stopped() {
                w.abandon();
            }
            self.written = w.finish(Duration::from_millis(500));
            if self.spoilt {
                w.handle.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_and_nothing_else_parses_as_them() {
        let c = RecvCounters {
            data_bytes: 1 << 40,
            resumed: 2,
            written: 3,
            repair_requests: 4,
            repair_requests_to_peers: 5,
            repairs_served: 6,
            ack_frames: 7,
            duplicate_frames: u64::MAX,
        };
        assert_eq!(RecvCounters::decode(&c.encode()), Some(c));
        assert_eq!(RecvCounters::decode(&c.encode()[..64]), None);
        let f = Final {
            ok: true,
            bytes: 9,
            error: String::new(),
        };
        assert_eq!(RecvCounters::decode(&f.encode()), None);
        assert_eq!(Final::decode(&c.encode()), None);
    }
}
