//! Step 4 of `ethbcast send`: the transfer, from the header to every receiver's outcome, with
//! the watch that tells a slow receiver from a dead one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{Dest, Event, MemberError, Rank, SendError, Stream};

use crate::distribute::recv::RecvCounters;
use crate::distribute::{mbit, progress_bar, Fatal, EXIT_FAILED, EXIT_INTERRUPTED};
use crate::transfer::rate::TokenBucket;
use crate::transfer::{Final, Msg, Offer, Progress, ABORT, EVICTED, KEEPALIVE};

use super::read::{reader, Block, Input};
use super::{Joined, MissingHost, Outcome, ReceiverReport, Report, SendArgs, SendStatus};

/// How often an evicted receiver is told so again while the transfer lasts.
const EVICTED_REPEAT: Duration = Duration::from_millis(250);
/// How often the sender says it is alive (see [`KEEPALIVE`]): often enough for a receiver
/// timeout well below a second, one small frame each time.
const KEEPALIVE_EVERY: Duration = Duration::from_millis(250);

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
    pub fn run(&mut self, status: &mut Option<crate::distribute::StatusFile>) -> Result<(), Fatal> {
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
        status: &mut Option<crate::distribute::StatusFile>,
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
            (None, true) => crate::distribute::EXIT_OK,
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
