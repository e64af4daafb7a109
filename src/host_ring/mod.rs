//! Several ranks per host: one of them is the host's member of the network group, the others
//! receive through a ring in shared memory. This is the EQA paper's DP-SMP setting (section 2:
//! SMP nodes coupled by hardware broadcast; section 3: one queue and buffer shared by many
//! consumers, a lightweight cursor each), and LA-MPI's "one process per node on the network,
//! then shared memory on the node".
//!
//! Why: with `k` ranks on a host each holding its own socket, every broadcast frame is
//! delivered `k` times to the host, acknowledged `k` times and repaired `k` times, and the
//! group has `k·H` members instead of `H`. Here the lowest rank on each host (the *owner*) is
//! the host's only member of the network group; a message crosses the network once per host
//! and is copied once into the host's ring, where every local rank reads it through its own
//! cursor.
//!
//! The ring ([`HostRing`]) holds one entry per collective call, in call order: a broadcast's
//! message (in chunks of at most one slot) or a barrier's release. Whoever has the message
//! writes it: the owner for a root on another host (after receiving it from the network) or
//! for itself, a local root for its own message, which the owner then reads like everyone
//! else and sends to the other hosts. A slot is free again once every attached local rank's
//! cursor has passed it (the EQA reference count, as a minimum of cursors). Barriers: each
//! local rank counts its arrivals in its cursor block; the owner waits for all, runs the
//! network barrier among owners, and writes the release entry.
//!
//! Invariants that make one writer at a time enough, without locks: all ranks call the
//! collectives in the same order (MPI requires it), and a rank starts collective `c` only after
//! it has consumed every entry of collectives before `c`, so whoever writes entry `c` finds the
//! ring's head at its own cursor. Every entry carries its collective number, kind and root, and
//! a reader that finds anything else than it expects reports a [`HostRingError::Protocol`] instead of
//! delivering.
//!
//! Other local users: a segment is this user's with mode 0600, and a rank maps only such a
//! file, never through a symbolic link ([`Segment::open`]); the owner removes a stale name
//! only if it is its user's. Another user who made a file at a job's name first (a forged ring)
//! makes the job fail with [`ShmError::Foreign`] instead of feeding it; names that cannot be
//! guessed (the C ABI's per-job token) take that away too.
//!
//! Robustness: every field read from the segment is checked before use (lengths against the
//! slot and the message, offsets against the message), and every access goes through
//! [`ethbcast_sys::shm::Segment`], which refuses offsets outside the mapping. A rank that dies
//! leaves its cursor behind: waits check the other ranks' processes every few milliseconds and
//! fail with [`HostRingError::RankGone`] instead of waiting out the timeout.
//!
//! Waiting: spin (yielding the CPU) for [`Wait::spin`], then sleep on a futex. Two futex words:
//! `data` (an entry was published, the host joined) and `room` (a cursor moved, a rank
//! arrived at a barrier or attached), so that readers are not woken by other readers.

mod error;
mod hosts;
mod layout;

pub use error::HostRingError;
pub use hosts::Hosts;
pub(crate) use layout::*;

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ethbcast_sys::shm::{self, Segment, ShmError, Wake};

pub(crate) use ethbcast_sys::shm::SHM_DIR;

use crate::Rank;

/// How often a waiting rank checks that the ranks it may be waiting for still exist.
const LIVENESS_EVERY: Duration = Duration::from_millis(20);
/// Longest futex sleep of a rank without other duties.
const SLEEP_SLICE: Duration = Duration::from_millis(20);
/// Longest futex sleep of a rank with other duties (the owner serves the network in between).
const DUTY_SLICE: Duration = Duration::from_millis(1);

/// How a rank waits for the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Look again (yielding the CPU in between) for this long before sleeping on a futex.
    /// `Duration::MAX`: never sleep.
    pub spin: Duration,
}

impl Default for Wait {
    fn default() -> Self {
        Wait {
            spin: Duration::from_micros(20),
        }
    }
}

/// Where a message read from the ring goes.
#[derive(Debug)]
pub(crate) enum Sink<'a> {
    /// Into this buffer, which must have the message's length.
    Buf(&'a mut [u8]),
    /// Into this vector, resized to the message's length.
    Vec(&'a mut Vec<u8>),
}

/// Which futex word a wait sleeps on.
#[derive(Debug, Clone, Copy)]
enum Word {
    Data,
    Room,
}

/// Nothing to do while waiting.
pub(crate) fn no_duty() -> Result<(), HostRingError> {
    Ok(())
}

/// One rank's view of its host's segment: the ring, the cursors and the barrier counts.
#[derive(Debug)]
pub(crate) struct HostRing {
    seg: Segment,
    layout: Layout,
    /// This rank's cursor block.
    me: usize,
    /// Next sequence number this rank reads (or writes).
    cursor: u64,
    /// Collectives this rank has called.
    calls: u64,
    /// Barriers this rank has entered.
    barriers: u64,
    wait: Wait,
    timeout: Duration,
    /// Liveness of the other ranks, last looked at.
    checked: Instant,
}

impl HostRing {
    /// Local rank `me`'s view of `seg`, before its first call.
    fn at_start(
        seg: Segment,
        layout: Layout,
        me: usize,
        wait: Wait,
        timeout: Duration,
    ) -> HostRing {
        HostRing {
            seg,
            layout,
            me,
            cursor: 0,
            calls: 0,
            barriers: 0,
            wait,
            timeout,
            checked: Instant::now(),
        }
    }

    /// The owner makes its host's segment at `path` (replacing a stale one left by a crashed
    /// job of this user; a file of another user there is [`ShmError::Foreign`]) for `layout.locals` ranks of a job of `world` ranks; `rank` is its own rank. The
    /// segment is open for the others to attach; call [`HostRing::wait_attached`] and then
    /// [`HostRing::joined`] (or [`HostRing::failed`]).
    pub(crate) fn create(
        path: &Path,
        layout: Layout,
        world: u16,
        rank: Rank,
        wait: Wait,
        timeout: Duration,
    ) -> Result<HostRing, HostRingError> {
        layout.check()?;
        // A stale segment of a crashed job of this user goes; another user's file at the name
        // stays, and the job fails (it may be a forged ring the local ranks would meet).
        Segment::remove_stale(path)?;
        let seg = Segment::create(path, layout.segment_bytes())?;
        let ring = HostRing::at_start(seg, layout, 0, wait, timeout);
        for (at, v) in [
            (H_LOCALS, layout.locals as u64),
            (H_SLOTS, layout.slots as u64),
            (H_PAYLOAD, layout.slot_payload as u64),
            (H_OWNER_PID, u64::from(std::process::id())),
            (H_WORLD, u64::from(world)),
            (H_OWNER_RANK, u64::from(rank.get())),
        ] {
            ring.word(at)?.store(v, Ordering::Relaxed);
        }
        ring.register(rank)?;
        ring.word(H_MAGIC)?.store(MAGIC, Ordering::Release);
        ring.word(H_STATE)?.store(STATE_OPEN, Ordering::Release);
        Ok(ring)
    }

    /// A local rank attaches to its host's segment at `path` as cursor block `local` (its
    /// position among the host's ranks), waiting up to `timeout` for the owner to create it
    /// and to join the network group. A file at `path` that is not this user's with mode 0600,
    /// or a symbolic link, fails at once ([`Segment::open`]), before anything is written to it.
    pub(crate) fn attach(
        path: &Path,
        layout: Layout,
        world: u16,
        local: usize,
        rank: Rank,
        wait: Wait,
        timeout: Duration,
    ) -> Result<HostRing, HostRingError> {
        layout.check()?;
        if local == 0 || local >= layout.locals {
            return Err(HostRingError::Topology(format!(
                "local rank {local} of {} cannot attach (0 is the owner)",
                layout.locals
            )));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if Instant::now() > deadline {
                return Err(HostRingError::Timeout {
                    what: "this host's owner to create the shared-memory segment and join",
                    after: timeout,
                });
            }
            let seg = match Segment::open(path) {
                Ok(s) => s,
                Err(ShmError::NotFound(_)) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let mut ring = HostRing::at_start(seg, layout, local, wait, timeout);
            match ring.join_segment(world, rank, deadline)? {
                true => return Ok(ring),
                // A segment left by a dead owner, or not yet initialised: look again.
                false => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Checks the segment, registers, and waits for the owner's verdict. `Ok(false)`: the
    /// segment is stale or not initialised yet.
    fn join_segment(
        &mut self,
        world: u16,
        rank: Rank,
        deadline: Instant,
    ) -> Result<bool, HostRingError> {
        if self.seg.len() < HEADER_BYTES || self.word(H_MAGIC)?.load(Ordering::Acquire) != MAGIC {
            return Ok(false);
        }
        let owner_pid = self.word(H_OWNER_PID)?.load(Ordering::Relaxed);
        if !alive(owner_pid) {
            return Ok(false);
        }
        let found = Layout {
            locals: self.word(H_LOCALS)?.load(Ordering::Relaxed) as usize,
            slots: self.word(H_SLOTS)?.load(Ordering::Relaxed) as usize,
            slot_payload: self.word(H_PAYLOAD)?.load(Ordering::Relaxed) as usize,
        };
        let found_world = self.word(H_WORLD)?.load(Ordering::Relaxed);
        if found != self.layout
            || found_world != u64::from(world)
            || self.seg.len() < self.layout.segment_bytes()
        {
            return Err(HostRingError::Layout {
                path: self.seg.path().to_path_buf(),
                why: format!(
                    "was made for {found:?} in a job of {found_world} ranks, this rank expects {:?} in a job of {world}",
                    self.layout
                ),
            });
        }
        self.register(rank)?;
        self.notify(Word::Room)?;
        let what = "this host's owner to join the network group";
        let state = self.wait_for(Word::Data, what, deadline, &mut no_duty, |me| {
            let s = me.word(H_STATE)?.load(Ordering::Acquire);
            if s == STATE_JOINED || s == STATE_FAILED {
                return Ok(Some(s));
            }
            if !alive(owner_pid) {
                return Ok(Some(0));
            }
            Ok(None)
        })?;
        match state {
            STATE_JOINED => Ok(true),
            STATE_FAILED => Err(HostRingError::OwnerFailed {
                owner: self.word(H_OWNER_RANK)?.load(Ordering::Relaxed),
            }),
            _ => Ok(false),
        }
    }

    /// Claims this rank's cursor block.
    fn register(&self, rank: Rank) -> Result<(), HostRingError> {
        let tag = u64::from(rank.get()) + 1;
        let at = self.layout.cursor(self.me);
        match self
            .word(at + L_RANK)?
            .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(holder) if holder == tag => {}
            Err(holder) => {
                return Err(HostRingError::SlotTaken {
                    path: self.seg.path().to_path_buf(),
                    local: self.me,
                    holder: holder - 1,
                })
            }
        }
        self.word(at + L_PID)?
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        self.word(at + L_STATE)?
            .store(LOCAL_ATTACHED, Ordering::Release);
        Ok(())
    }

    /// The owner waits until every local rank has attached (`duty` runs between looks).
    pub(crate) fn wait_attached<E: From<HostRingError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        let deadline = Instant::now() + self.timeout;
        self.wait_for(
            Word::Room,
            "every rank on this host to attach",
            deadline,
            duty,
            |me| {
                for j in 1..me.layout.locals {
                    let at = me.layout.cursor(j);
                    if me.word(at + L_STATE)?.load(Ordering::Acquire) != LOCAL_ATTACHED {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
    }

    /// The owner joined the network group: the local ranks may go. Removes the segment's name
    /// (everyone has mapped it).
    pub(crate) fn joined(&mut self) -> Result<(), HostRingError> {
        Segment::unlink(self.seg.path())?;
        self.word(H_STATE)?.store(STATE_JOINED, Ordering::Release);
        self.notify(Word::Data)
    }

    /// The owner could not join: the local ranks fail their open.
    pub(crate) fn failed(&mut self) -> Result<(), HostRingError> {
        Segment::unlink(self.seg.path())?;
        self.word(H_STATE)?.store(STATE_FAILED, Ordering::Release);
        self.notify(Word::Data)
    }

    /// This rank's position among its host's ranks.
    #[cfg(test)]
    pub(crate) fn local(&self) -> usize {
        self.me
    }

    /// Writes the message of `root` (this rank, or a root on another host whose message the
    /// owner received) as the next collective's entry, slot by slot as room frees up.
    pub(crate) fn publish<E: From<HostRingError>>(
        &mut self,
        root: Rank,
        data: &[u8],
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        if data.len() as u64 > MAX_MESSAGE {
            return Err(HostRingError::Protocol(format!(
                "a message of {} bytes exceeds the ring's limit of {MAX_MESSAGE}",
                data.len()
            ))
            .into());
        }
        self.calls += 1;
        let payload = self.layout.slot_payload;
        let mut offset = 0;
        loop {
            let len = (data.len() - offset).min(payload);
            self.put(
                KIND_DATA,
                root,
                data.len(),
                offset,
                &data[offset..offset + len],
                duty,
            )?;
            offset += len;
            if offset >= data.len() {
                return Ok(());
            }
        }
    }

    /// Reads the next collective's entry, which must be the message of `root`, into `sink`.
    /// Returns the message's length. A buffer of another length is left as it was and gives
    /// [`HostRingError::Length`] once the whole message has been consumed.
    pub(crate) fn read<E: From<HostRingError>>(
        &mut self,
        root: Rank,
        mut sink: Sink<'_>,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<usize, E> {
        self.calls += 1;
        let deadline = Instant::now() + self.timeout;
        let mut total = None;
        let mut offset = 0usize;
        loop {
            let (slot, chunk_total, len) =
                self.next_entry(KIND_DATA, root, offset, deadline, duty)?;
            let total = *total.get_or_insert(chunk_total);
            if chunk_total != total {
                return Err(self.protocol(format!(
                    "chunk at offset {offset} gives the message {chunk_total} bytes, its first chunk {total}"
                ))
                .into());
            }
            if offset == 0 {
                if let Sink::Vec(v) = &mut sink {
                    v.clear();
                    v.resize(total, 0);
                }
            }
            let dst = match &mut sink {
                Sink::Buf(b) if b.len() == total => Some(&mut b[offset..offset + len]),
                Sink::Buf(_) => None,
                Sink::Vec(v) => Some(&mut v[offset..offset + len]),
            };
            if let Some(dst) = dst {
                self.seg
                    .read(slot + SLOT_HEADER_BYTES, dst)
                    .map_err(HostRingError::from)?;
            }
            self.consume(slot)?;
            offset += len;
            if offset >= total {
                if let Sink::Buf(b) = &sink {
                    if b.len() != total {
                        return Err(HostRingError::Length {
                            root,
                            got: total,
                            want: b.len(),
                        }
                        .into());
                    }
                }
                return Ok(total);
            }
        }
    }

    /// A local rank enters a barrier: counts its arrival for the owner.
    pub(crate) fn arrive(&mut self) -> Result<(), HostRingError> {
        self.barriers += 1;
        let at = self.layout.cursor(self.me);
        self.word(at + L_BARRIERS)?
            .store(self.barriers, Ordering::Release);
        self.notify(Word::Room)
    }

    /// A local rank waits for the barrier's release (after [`HostRing::arrive`]).
    pub(crate) fn await_release<E: From<HostRingError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        self.calls += 1;
        let deadline = Instant::now() + self.timeout;
        let (slot, _, _) = self.next_entry(KIND_RELEASE, Rank::new(0), 0, deadline, duty)?;
        self.consume(slot)?;
        Ok(())
    }

    /// The owner enters a barrier: waits until every local rank has arrived.
    pub(crate) fn await_arrivals<E: From<HostRingError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        self.barriers += 1;
        let b = self.barriers;
        let deadline = Instant::now() + self.timeout;
        self.wait_for(
            Word::Room,
            "every rank on this host to enter the barrier",
            deadline,
            duty,
            |me| {
                for j in 0..me.layout.locals {
                    if j == me.me {
                        continue;
                    }
                    let at = me.layout.cursor(j);
                    if me.word(at + L_BARRIERS)?.load(Ordering::Acquire) < b {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
    }

    /// The owner releases the local ranks from the barrier (after the network barrier).
    pub(crate) fn release<E: From<HostRingError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        self.calls += 1;
        self.put(KIND_RELEASE, Rank::new(0), 0, 0, &[], duty)
    }

    /// Waits until every attached rank of the host has read everything this rank has seen.
    pub(crate) fn flush<E: From<HostRingError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        let deadline = Instant::now() + self.timeout;
        let mine = self.cursor;
        self.wait_for(
            Word::Room,
            "the other ranks on this host to read the ring",
            deadline,
            duty,
            |me| Ok(me.min_cursor()?.is_none_or(|c| c >= mine).then_some(())),
        )
    }

    /// Leaves the segment: writers stop waiting for this rank's cursor.
    pub(crate) fn detach(&mut self) -> Result<(), HostRingError> {
        let at = self.layout.cursor(self.me);
        self.word(at + L_STATE)?
            .store(LOCAL_DETACHED, Ordering::Release);
        self.notify(Word::Room)
    }

    /// Writes one slot at this rank's cursor once every other attached rank has read what
    /// the slot held before.
    fn put<E: From<HostRingError>>(
        &mut self,
        kind: u64,
        root: Rank,
        total: usize,
        offset: usize,
        chunk: &[u8],
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        let seq = self.cursor;
        let slots = self.layout.slots as u64;
        let deadline = Instant::now() + self.timeout;
        self.wait_for(
            Word::Room,
            "room in this host's ring (a rank on this host is not reading)",
            deadline,
            duty,
            |me| {
                Ok(me
                    .min_cursor()?
                    .is_none_or(|c| seq < c + slots)
                    .then_some(()))
            },
        )?;
        let slot = self.layout.slot(seq);
        for (at, v) in [
            (S_KIND, kind),
            (S_CALL, self.calls),
            (S_ROOT, u64::from(root.get())),
            (S_TOTAL, total as u64),
            (S_OFFSET, offset as u64),
            (S_LEN, chunk.len() as u64),
        ] {
            self.word(slot + at)?.store(v, Ordering::Relaxed);
        }
        self.seg
            .write(slot + SLOT_HEADER_BYTES, chunk)
            .map_err(HostRingError::from)?;
        self.word(slot + S_STAMP)?.store(seq + 1, Ordering::Release);
        self.advance()?;
        self.notify(Word::Data)?;
        Ok(())
    }

    /// Waits for the entry at this rank's cursor and checks it against what the call expects:
    /// kind, collective number, root and offset. Returns the slot, the message's total length
    /// and the chunk's length.
    fn next_entry<E: From<HostRingError>>(
        &mut self,
        kind: u64,
        root: Rank,
        offset: usize,
        deadline: Instant,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(usize, usize, usize), E> {
        let seq = self.cursor;
        let slot = self.layout.slot(seq);
        let what = if kind == KIND_RELEASE {
            "the barrier release from this host's owner"
        } else {
            "the message in this host's ring"
        };
        self.wait_for(Word::Data, what, deadline, duty, |me| {
            let stamp = me.word(slot + S_STAMP)?.load(Ordering::Acquire);
            match stamp.cmp(&(seq + 1)) {
                std::cmp::Ordering::Less => Ok(None),
                std::cmp::Ordering::Equal => Ok(Some(())),
                std::cmp::Ordering::Greater => Err(me.protocol(format!(
                    "slot of entry {seq} was overwritten before this rank read it"
                ))),
            }
        })?;
        let get = |at: usize| -> Result<u64, HostRingError> {
            Ok(self.word(slot + at)?.load(Ordering::Relaxed))
        };
        let (e_kind, e_call, e_root) = (get(S_KIND)?, get(S_CALL)?, get(S_ROOT)?);
        let (e_total, e_offset, e_len) = (get(S_TOTAL)?, get(S_OFFSET)?, get(S_LEN)?);
        let name = |k: u64, r: u64| match k {
            KIND_DATA => format!("a broadcast from root {r}"),
            KIND_RELEASE => "a barrier".to_string(),
            _ => format!("an unknown entry (kind {k})"),
        };
        if e_kind != kind
            || e_call != self.calls
            || (kind == KIND_DATA && e_root != u64::from(root.get()))
        {
            return Err(self
                .protocol(format!(
                    "this rank's collective #{} is {}, but the host's ring holds {} as collective #{e_call}: every rank must call the same collectives in the same order",
                    self.calls,
                    name(kind, u64::from(root.get())),
                    name(e_kind, e_root)
                ))
                .into());
        }
        let fits = e_total <= MAX_MESSAGE
            && e_len <= self.layout.slot_payload as u64
            && e_offset == offset as u64
            && e_offset + e_len <= e_total
            && (e_len > 0 || e_total == 0)
            && (e_offset + e_len == e_total || e_len == self.layout.slot_payload as u64);
        if !fits {
            return Err(self
                .protocol(format!(
                    "corrupt entry {seq}: chunk of {e_len} bytes at offset {e_offset} of {e_total} (expected offset {offset}, slots of {} bytes)",
                    self.layout.slot_payload
                ))
                .into());
        }
        Ok((slot, e_total as usize, e_len as usize))
    }

    /// Done with the entry at the cursor: checks it was not overwritten meanwhile, moves on.
    fn consume(&mut self, slot: usize) -> Result<(), HostRingError> {
        let seq = self.cursor;
        if self.word(slot + S_STAMP)?.load(Ordering::Acquire) != seq + 1 {
            return Err(self.protocol(format!(
                "slot of entry {seq} was overwritten while this rank read it"
            )));
        }
        self.advance()?;
        self.notify(Word::Room)
    }

    fn advance(&mut self) -> Result<(), HostRingError> {
        self.cursor += 1;
        let at = self.layout.cursor(self.me);
        self.word(at + L_CURSOR)?
            .store(self.cursor, Ordering::Release);
        Ok(())
    }

    /// The lowest cursor of the other attached ranks (`None`: no other rank attached).
    fn min_cursor(&self) -> Result<Option<u64>, HostRingError> {
        let mut min = None;
        for at in self.others() {
            let at = at?;
            let c = self.word(at + L_CURSOR)?.load(Ordering::Acquire);
            min = Some(min.map_or(c, |m: u64| m.min(c)));
        }
        Ok(min)
    }

    /// The cursor blocks of the other attached ranks (no allocation: the writer asks on
    /// every slot it fills).
    fn others(&self) -> impl Iterator<Item = Result<usize, HostRingError>> + '_ {
        (0..self.layout.locals)
            .filter(move |&j| j != self.me)
            .filter_map(move |j| {
                let at = self.layout.cursor(j);
                match self.word(at + L_STATE) {
                    Ok(w) if w.load(Ordering::Acquire) == LOCAL_ATTACHED => Some(Ok(at)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                }
            })
    }

    fn protocol(&self, what: String) -> HostRingError {
        HostRingError::Protocol(format!(
            "shared-memory ring {} (local rank {}): {what}",
            self.seg.path().display(),
            self.me
        ))
    }

    fn word(&self, at: usize) -> Result<&AtomicU64, HostRingError> {
        Ok(self.seg.u64_at(at)?)
    }

    fn futex(&self, word: Word) -> (usize, usize) {
        match word {
            Word::Data => (H_DATA_EVENT, H_DATA_WAITERS),
            Word::Room => (H_ROOM_EVENT, H_ROOM_WAITERS),
        }
    }

    fn word32(&self, at: usize) -> Result<&AtomicU32, HostRingError> {
        Ok(self.seg.u32_at(at)?)
    }

    /// Tells sleepers on `word` that something changed.
    fn notify(&self, word: Word) -> Result<(), HostRingError> {
        let (event, waiters) = self.futex(word);
        self.word32(event)?.fetch_add(1, Ordering::SeqCst);
        if self.word32(waiters)?.load(Ordering::SeqCst) > 0 {
            self.seg.futex_wake(event, u32::MAX)?;
        }
        Ok(())
    }

    /// Every other attached rank's process still exists (looked at every
    /// [`LIVENESS_EVERY`]).
    fn check_alive(&mut self) -> Result<(), HostRingError> {
        if self.checked.elapsed() < LIVENESS_EVERY {
            return Ok(());
        }
        self.checked = Instant::now();
        for at in self.others() {
            let at = at?;
            let pid = self.word(at + L_PID)?.load(Ordering::Relaxed);
            if !alive(pid) {
                let rank = self.word(at + L_RANK)?.load(Ordering::Relaxed);
                return Err(HostRingError::RankGone {
                    rank: rank.saturating_sub(1),
                    pid,
                });
            }
        }
        Ok(())
    }

    /// Waits until `ready` gives a value: spins (yielding) for the configured time, then sleeps
    /// on the futex `word` in slices, running `duty` and checking the other ranks between
    /// slices; fails at `deadline`.
    fn wait_for<T, E: From<HostRingError>>(
        &mut self,
        word: Word,
        what: &'static str,
        deadline: Instant,
        duty: &mut dyn FnMut() -> Result<(), E>,
        mut ready: impl FnMut(&Self) -> Result<Option<T>, HostRingError>,
    ) -> Result<T, E> {
        if let Some(t) = ready(self)? {
            return Ok(t);
        }
        let start = Instant::now();
        let timeout_error = HostRingError::Timeout {
            what,
            after: self.timeout,
        };
        let mut last_duty = start;
        while start.elapsed() < self.wait.spin {
            std::thread::yield_now();
            if let Some(t) = ready(self)? {
                return Ok(t);
            }
            let now = Instant::now();
            if now > deadline {
                return Err(timeout_error.into());
            }
            if now.duration_since(last_duty) >= DUTY_SLICE {
                duty()?;
                self.check_alive()?;
                last_duty = now;
            }
        }
        let (event, waiters) = self.futex(word);
        loop {
            let seen = self.word32(event)?.load(Ordering::SeqCst);
            self.word32(waiters)?.fetch_add(1, Ordering::SeqCst);
            let look = ready(self);
            let now = Instant::now();
            let woke = match look {
                Ok(None) if now < deadline => {
                    // The owner serves the network between slices; the others only look
                    // after the other ranks.
                    let slice = if self.me == 0 {
                        DUTY_SLICE
                    } else {
                        SLEEP_SLICE
                    };
                    let slice = (deadline - now).min(slice);
                    Some(self.seg.futex_wait(event, seen, Some(slice)))
                }
                _ => None,
            };
            self.word32(waiters)?.fetch_sub(1, Ordering::SeqCst);
            match (look?, woke) {
                (Some(t), _) => return Ok(t),
                (None, None) => return Err(timeout_error.into()),
                (None, Some(w)) => {
                    let w = w.map_err(HostRingError::from)?;
                    let now = Instant::now();
                    if w == Wake::TimedOut || now.duration_since(last_duty) >= DUTY_SLICE {
                        duty()?;
                        last_duty = now;
                    }
                    self.check_alive()?;
                }
            }
        }
    }
}

impl Drop for HostRing {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}

fn alive(pid: u64) -> bool {
    u32::try_from(pid).is_ok_and(shm::process_alive)
}

#[cfg(test)]
mod tests;
