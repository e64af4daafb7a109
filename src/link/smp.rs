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
//! a reader that finds anything else than it expects reports a [`SmpError::Protocol`] instead of
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
//! fail with [`SmpError::RankGone`] instead of waiting out the timeout.
//!
//! Waiting: spin (yielding the CPU) for [`Wait::spin`], then sleep on a futex. Two futex words:
//! `data` (an entry was published, the host joined) and `room` (a cursor moved, a rank
//! arrived at a barrier or attached), so that readers are not woken by other readers.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ethbcast_sys::shm::{self, Segment, ShmError, Wake};

pub use ethbcast_sys::shm::SHM_DIR;
use thiserror::Error;

use crate::eqa::Rank;

/// Ranks of a job and the host each one runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// Host index of every rank. Hosts are numbered in the order of their lowest rank.
    host_of: Vec<u16>,
    /// Ranks of every host, ascending.
    ranks: Vec<Vec<Rank>>,
}

impl Hosts {
    /// From a host label per rank (`labels[r]`; equal labels = one host: a MAC address, a host
    /// name, an index).
    pub fn from_labels<T: Eq + Hash>(labels: &[T]) -> Result<Hosts, SmpError> {
        if labels.is_empty() || labels.len() >= usize::from(Rank::MAX) {
            return Err(SmpError::Topology(format!(
                "a job of {} ranks (1 to 65534)",
                labels.len()
            )));
        }
        let mut index: HashMap<&T, u16> = HashMap::new();
        let mut ranks: Vec<Vec<Rank>> = Vec::new();
        let mut host_of = Vec::with_capacity(labels.len());
        for (r, label) in labels.iter().enumerate() {
            let next = ranks.len() as u16;
            let h = *index.entry(label).or_insert(next);
            if h == next {
                ranks.push(Vec::new());
            }
            ranks[usize::from(h)].push(r as Rank);
            host_of.push(h);
        }
        Ok(Hosts { host_of, ranks })
    }

    /// `size` ranks in blocks of `per_host` consecutive ranks (the last host may have fewer).
    pub fn blocks(size: u16, per_host: u16) -> Result<Hosts, SmpError> {
        if per_host == 0 {
            return Err(SmpError::Topology("0 ranks per host".into()));
        }
        let labels: Vec<u16> = (0..size).map(|r| r / per_host).collect();
        Hosts::from_labels(&labels)
    }

    /// Ranks in the job.
    pub fn size(&self) -> u16 {
        self.host_of.len() as u16
    }

    /// Number of hosts (members of the network group).
    pub fn count(&self) -> u16 {
        self.ranks.len() as u16
    }

    /// Host of rank `r` (its rank in the network group), `None` outside the job.
    pub fn host(&self, r: Rank) -> Option<u16> {
        self.host_of.get(usize::from(r)).copied()
    }

    /// Ranks on host `h`, ascending.
    pub fn ranks_on(&self, h: u16) -> &[Rank] {
        self.ranks.get(usize::from(h)).map_or(&[], Vec::as_slice)
    }

    /// Position of rank `r` among the ranks of its host (0: the owner).
    pub fn local_index(&self, r: Rank) -> Option<usize> {
        let h = self.host(r)?;
        self.ranks_on(h).iter().position(|&x| x == r)
    }

    /// Whether any host runs more than one rank.
    pub fn shares_hosts(&self) -> bool {
        self.ranks.iter().any(|r| r.len() > 1)
    }
}

/// Geometry of a host's segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Ranks on the host (the owner included): one cursor block each.
    pub locals: usize,
    /// Slots of the ring.
    pub slots: usize,
    /// Payload bytes per slot (a multiple of 64).
    pub slot_payload: usize,
}

/// Bytes of the segment's header.
pub const HEADER_BYTES: usize = 128;
/// Bytes of a local rank's cursor block (one cache line: cursors of different ranks never
/// share a line).
pub const CURSOR_BYTES: usize = 64;
/// Bytes of a slot's header.
pub const SLOT_HEADER_BYTES: usize = 64;
/// Most ranks one host's segment serves.
pub const MAX_LOCALS: usize = 4096;
/// Largest message the ring accepts from a writer (as the engine's `max_message`).
pub const MAX_MESSAGE: u64 = 1 << 30;

const MAGIC: u64 = u64::from_le_bytes(*b"EBSMP\0\0\x01");

// Header words.
const H_MAGIC: usize = 0;
const H_STATE: usize = 8;
const H_LOCALS: usize = 16;
const H_SLOTS: usize = 24;
const H_PAYLOAD: usize = 32;
const H_OWNER_PID: usize = 40;
const H_WORLD: usize = 48;
const H_DATA_EVENT: usize = 56;
const H_DATA_WAITERS: usize = 60;
const H_ROOM_EVENT: usize = 64;
const H_ROOM_WAITERS: usize = 68;
const H_OWNER_RANK: usize = 72;

// States of the segment.
const STATE_OPEN: u64 = 1;
const STATE_JOINED: u64 = 2;
const STATE_FAILED: u64 = 3;

// Cursor block words.
const L_CURSOR: usize = 0;
const L_BARRIERS: usize = 8;
const L_RANK: usize = 16;
const L_PID: usize = 24;
const L_STATE: usize = 32;

const LOCAL_ATTACHED: u64 = 1;
const LOCAL_DETACHED: u64 = 2;

// Slot header words.
const S_STAMP: usize = 0;
const S_KIND: usize = 8;
const S_CALL: usize = 16;
const S_ROOT: usize = 24;
const S_TOTAL: usize = 32;
const S_OFFSET: usize = 40;
const S_LEN: usize = 48;

const KIND_DATA: u64 = 1;
const KIND_RELEASE: u64 = 2;

/// How often a waiting rank checks that the ranks it may be waiting for still exist.
const LIVENESS_EVERY: Duration = Duration::from_millis(20);
/// Longest futex sleep of a rank without other duties.
const SLEEP_SLICE: Duration = Duration::from_millis(20);
/// Longest futex sleep of a rank with other duties (the owner serves the network in between).
const DUTY_SLICE: Duration = Duration::from_millis(1);

impl Layout {
    /// Slots of the default ring.
    pub const DEFAULT_SLOTS: usize = 64;
    /// Payload bytes of a default slot: a 64 KiB message takes 8 slots, and the ring holds
    /// 512 KiB.
    pub const DEFAULT_SLOT_PAYLOAD: usize = 8192;

    /// The default geometry for `locals` ranks.
    pub fn new(locals: usize) -> Layout {
        Layout {
            locals,
            slots: Self::DEFAULT_SLOTS,
            slot_payload: Self::DEFAULT_SLOT_PAYLOAD,
        }
    }

    /// Bytes of one slot (header and payload).
    pub fn slot_bytes(&self) -> usize {
        SLOT_HEADER_BYTES + self.slot_payload
    }

    /// Bytes of the ring (every slot).
    pub fn ring_bytes(&self) -> usize {
        self.slots * self.slot_bytes()
    }

    /// Bytes of the cursor blocks.
    pub fn cursor_bytes(&self) -> usize {
        self.locals * CURSOR_BYTES
    }

    /// Bytes of the whole segment.
    pub fn segment_bytes(&self) -> usize {
        HEADER_BYTES + self.cursor_bytes() + self.ring_bytes()
    }

    fn check(&self) -> Result<(), SmpError> {
        let ok = (1..=MAX_LOCALS).contains(&self.locals)
            && (1..=1 << 16).contains(&self.slots)
            && (64..=1 << 20).contains(&self.slot_payload)
            && self.slot_payload.is_multiple_of(64);
        if ok {
            Ok(())
        } else {
            Err(SmpError::Topology(format!(
                "unusable ring geometry {self:?} (1-{MAX_LOCALS} ranks, 1-65536 slots, 64 B-1 MiB per slot in multiples of 64)"
            )))
        }
    }

    fn cursor(&self, local: usize) -> usize {
        HEADER_BYTES + local * CURSOR_BYTES
    }

    fn slot(&self, seq: u64) -> usize {
        HEADER_BYTES + self.cursor_bytes() + (seq % self.slots as u64) as usize * self.slot_bytes()
    }
}

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

/// Errors of the shared-memory layer, each saying what to do.
#[derive(Debug, Error)]
pub enum SmpError {
    /// The segment could not be made, opened or accessed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The ranks-per-host description is unusable.
    #[error("ranks per host: {0}")]
    Topology(String),
    /// The segment found under this host's name was made for another job.
    #[error("shared-memory segment {path} {why}: is another job with the same group id running on this host?")]
    Layout {
        /// The segment's file.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// Another process holds this rank's cursor block.
    #[error("cursor block {local} of segment {path} belongs to rank {holder}: is another job with the same group id running on this host?")]
    SlotTaken {
        /// The segment's file.
        path: PathBuf,
        /// The block.
        local: usize,
        /// The rank holding it.
        holder: u64,
    },
    /// A wait did not end in time.
    #[error("timed out after {after:?} waiting for {what} (a rank on this host is not calling, or is stuck)")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// A rank of this host exited while others still needed it.
    #[error("rank {rank} on this host (process {pid}) is gone: the job cannot go on")]
    RankGone {
        /// Its rank.
        rank: u64,
        /// Its process id.
        pid: u64,
    },
    /// The host's owner could not join the network group.
    #[error(
        "the member of this host in the network group (rank {owner}) failed to join: see its error"
    )]
    OwnerFailed {
        /// The owner's rank.
        owner: u64,
    },
    /// An entry of the ring is not what this call expects: the ranks called collectives in
    /// different orders, or the segment is corrupt.
    #[error("{0}")]
    Protocol(String),
    /// The message of the root has another length than this rank's buffer. The message was
    /// consumed and the buffer left as it was.
    #[error("the message from root {root} has {got} bytes but this rank's buffer has {want}: every rank must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: Rank,
        /// Length of the message.
        got: usize,
        /// Length of the buffer.
        want: usize,
    },
}

/// Where a message read from the ring goes.
#[derive(Debug)]
pub enum Sink<'a> {
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
pub fn no_duty() -> Result<(), SmpError> {
    Ok(())
}

/// One rank's view of its host's segment: the ring, the cursors and the barrier counts.
#[derive(Debug)]
pub struct HostRing {
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
    /// The owner makes its host's segment at `path` (replacing a stale one left by a crashed
    /// job of this user; a file of another user there is [`ShmError::Foreign`]) for `layout.locals` ranks of a job of `world` ranks; `rank` is its own rank. The
    /// segment is open for the others to attach; call [`HostRing::wait_attached`] and then
    /// [`HostRing::joined`] (or [`HostRing::failed`]).
    pub fn create(
        path: &Path,
        layout: Layout,
        world: u16,
        rank: Rank,
        wait: Wait,
        timeout: Duration,
    ) -> Result<HostRing, SmpError> {
        layout.check()?;
        // A stale segment of a crashed job of this user goes; another user's file at the name
        // stays, and the job fails (it may be a forged ring the local ranks would meet).
        Segment::remove_stale(path)?;
        let seg = Segment::create(path, layout.segment_bytes())?;
        let ring = HostRing {
            seg,
            layout,
            me: 0,
            cursor: 0,
            calls: 0,
            barriers: 0,
            wait,
            timeout,
            checked: Instant::now(),
        };
        for (at, v) in [
            (H_LOCALS, layout.locals as u64),
            (H_SLOTS, layout.slots as u64),
            (H_PAYLOAD, layout.slot_payload as u64),
            (H_OWNER_PID, u64::from(std::process::id())),
            (H_WORLD, u64::from(world)),
            (H_OWNER_RANK, u64::from(rank)),
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
    pub fn attach(
        path: &Path,
        layout: Layout,
        world: u16,
        local: usize,
        rank: Rank,
        wait: Wait,
        timeout: Duration,
    ) -> Result<HostRing, SmpError> {
        layout.check()?;
        if local == 0 || local >= layout.locals {
            return Err(SmpError::Topology(format!(
                "local rank {local} of {} cannot attach (0 is the owner)",
                layout.locals
            )));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if Instant::now() > deadline {
                return Err(SmpError::Timeout {
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
            let mut ring = HostRing {
                seg,
                layout,
                me: local,
                cursor: 0,
                calls: 0,
                barriers: 0,
                wait,
                timeout,
                checked: Instant::now(),
            };
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
    ) -> Result<bool, SmpError> {
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
            return Err(SmpError::Layout {
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
            STATE_FAILED => Err(SmpError::OwnerFailed {
                owner: self.word(H_OWNER_RANK)?.load(Ordering::Relaxed),
            }),
            _ => Ok(false),
        }
    }

    /// Claims this rank's cursor block.
    fn register(&self, rank: Rank) -> Result<(), SmpError> {
        let tag = u64::from(rank) + 1;
        let at = self.layout.cursor(self.me);
        match self
            .word(at + L_RANK)?
            .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(holder) if holder == tag => {}
            Err(holder) => {
                return Err(SmpError::SlotTaken {
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
    pub fn wait_attached<E: From<SmpError>>(
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
    pub fn joined(&mut self) -> Result<(), SmpError> {
        Segment::unlink(self.seg.path())?;
        self.word(H_STATE)?.store(STATE_JOINED, Ordering::Release);
        self.notify(Word::Data)
    }

    /// The owner could not join: the local ranks fail their open.
    pub fn failed(&mut self) -> Result<(), SmpError> {
        Segment::unlink(self.seg.path())?;
        self.word(H_STATE)?.store(STATE_FAILED, Ordering::Release);
        self.notify(Word::Data)
    }

    /// This rank's position among its host's ranks.
    pub fn local(&self) -> usize {
        self.me
    }

    /// The geometry.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Collectives this rank has taken part in through the ring.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Writes the message of `root` (this rank, or a root on another host whose message the
    /// owner received) as the next collective's entry, slot by slot as room frees up.
    pub fn publish<E: From<SmpError>>(
        &mut self,
        root: Rank,
        data: &[u8],
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        if data.len() as u64 > MAX_MESSAGE {
            return Err(SmpError::Protocol(format!(
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
    /// [`SmpError::Length`] once the whole message has been consumed.
    pub fn read<E: From<SmpError>>(
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
                    .map_err(SmpError::from)?;
            }
            self.consume(slot)?;
            offset += len;
            if offset >= total {
                if let Sink::Buf(b) = &sink {
                    if b.len() != total {
                        return Err(SmpError::Length {
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
    pub fn arrive(&mut self) -> Result<(), SmpError> {
        self.barriers += 1;
        let at = self.layout.cursor(self.me);
        self.word(at + L_BARRIERS)?
            .store(self.barriers, Ordering::Release);
        self.notify(Word::Room)
    }

    /// A local rank waits for the barrier's release (after [`HostRing::arrive`]).
    pub fn await_release<E: From<SmpError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        self.calls += 1;
        let deadline = Instant::now() + self.timeout;
        let (slot, _, _) = self.next_entry(KIND_RELEASE, 0, 0, deadline, duty)?;
        self.consume(slot)?;
        Ok(())
    }

    /// The owner enters a barrier: waits until every local rank has arrived.
    pub fn await_arrivals<E: From<SmpError>>(
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
    pub fn release<E: From<SmpError>>(
        &mut self,
        duty: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        self.calls += 1;
        self.put(KIND_RELEASE, 0, 0, 0, &[], duty)
    }

    /// Waits until every attached rank of the host has read everything this rank has seen.
    pub fn flush<E: From<SmpError>>(
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
    pub fn detach(&mut self) -> Result<(), SmpError> {
        let at = self.layout.cursor(self.me);
        self.word(at + L_STATE)?
            .store(LOCAL_DETACHED, Ordering::Release);
        self.notify(Word::Room)
    }

    /// Writes one slot at this rank's cursor once every other attached rank has read what
    /// the slot held before.
    fn put<E: From<SmpError>>(
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
            (S_ROOT, u64::from(root)),
            (S_TOTAL, total as u64),
            (S_OFFSET, offset as u64),
            (S_LEN, chunk.len() as u64),
        ] {
            self.word(slot + at)?.store(v, Ordering::Relaxed);
        }
        self.seg
            .write(slot + SLOT_HEADER_BYTES, chunk)
            .map_err(SmpError::from)?;
        self.word(slot + S_STAMP)?.store(seq + 1, Ordering::Release);
        self.advance()?;
        self.notify(Word::Data)?;
        Ok(())
    }

    /// Waits for the entry at this rank's cursor and checks it against what the call expects:
    /// kind, collective number, root and offset. Returns the slot, the message's total length
    /// and the chunk's length.
    fn next_entry<E: From<SmpError>>(
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
        let get = |at: usize| -> Result<u64, SmpError> {
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
            || (kind == KIND_DATA && e_root != u64::from(root))
        {
            return Err(self
                .protocol(format!(
                    "this rank's collective #{} is {}, but the host's ring holds {} as collective #{e_call}: every rank must call the same collectives in the same order",
                    self.calls,
                    name(kind, u64::from(root)),
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
    fn consume(&mut self, slot: usize) -> Result<(), SmpError> {
        let seq = self.cursor;
        if self.word(slot + S_STAMP)?.load(Ordering::Acquire) != seq + 1 {
            return Err(self.protocol(format!(
                "slot of entry {seq} was overwritten while this rank read it"
            )));
        }
        self.advance()?;
        self.notify(Word::Room)
    }

    fn advance(&mut self) -> Result<(), SmpError> {
        self.cursor += 1;
        let at = self.layout.cursor(self.me);
        self.word(at + L_CURSOR)?
            .store(self.cursor, Ordering::Release);
        Ok(())
    }

    /// The lowest cursor of the other attached ranks (`None`: no other rank attached).
    fn min_cursor(&self) -> Result<Option<u64>, SmpError> {
        let mut min = None;
        for j in 0..self.layout.locals {
            if j == self.me {
                continue;
            }
            let at = self.layout.cursor(j);
            if self.word(at + L_STATE)?.load(Ordering::Acquire) != LOCAL_ATTACHED {
                continue;
            }
            let c = self.word(at + L_CURSOR)?.load(Ordering::Acquire);
            min = Some(min.map_or(c, |m: u64| m.min(c)));
        }
        Ok(min)
    }

    fn protocol(&self, what: String) -> SmpError {
        SmpError::Protocol(format!(
            "shared-memory ring {} (local rank {}): {what}",
            self.seg.path().display(),
            self.me
        ))
    }

    fn word(&self, at: usize) -> Result<&AtomicU64, SmpError> {
        Ok(self.seg.u64_at(at)?)
    }

    fn futex(&self, word: Word) -> (usize, usize) {
        match word {
            Word::Data => (H_DATA_EVENT, H_DATA_WAITERS),
            Word::Room => (H_ROOM_EVENT, H_ROOM_WAITERS),
        }
    }

    fn word32(&self, at: usize) -> Result<&AtomicU32, SmpError> {
        Ok(self.seg.u32_at(at)?)
    }

    /// Tells sleepers on `word` that something changed.
    fn notify(&self, word: Word) -> Result<(), SmpError> {
        let (event, waiters) = self.futex(word);
        self.word32(event)?.fetch_add(1, Ordering::SeqCst);
        if self.word32(waiters)?.load(Ordering::SeqCst) > 0 {
            self.seg.futex_wake(event, u32::MAX)?;
        }
        Ok(())
    }

    /// Every other attached rank's process still exists (looked at every
    /// [`LIVENESS_EVERY`]).
    fn check_alive(&mut self) -> Result<(), SmpError> {
        if self.checked.elapsed() < LIVENESS_EVERY {
            return Ok(());
        }
        self.checked = Instant::now();
        for j in 0..self.layout.locals {
            if j == self.me {
                continue;
            }
            let at = self.layout.cursor(j);
            if self.word(at + L_STATE)?.load(Ordering::Acquire) != LOCAL_ATTACHED {
                continue;
            }
            let pid = self.word(at + L_PID)?.load(Ordering::Relaxed);
            if !alive(pid) {
                let rank = self.word(at + L_RANK)?.load(Ordering::Relaxed);
                return Err(SmpError::RankGone {
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
    fn wait_for<T, E: From<SmpError>>(
        &mut self,
        word: Word,
        what: &'static str,
        deadline: Instant,
        duty: &mut dyn FnMut() -> Result<(), E>,
        mut ready: impl FnMut(&Self) -> Result<Option<T>, SmpError>,
    ) -> Result<T, E> {
        if let Some(t) = ready(self)? {
            return Ok(t);
        }
        let start = Instant::now();
        let timeout_error = SmpError::Timeout {
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
                    let w = w.map_err(SmpError::from)?;
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Local rank `local` (rank `local` of the job) attaches with the default wait.
    fn attach(
        path: &Path,
        layout: Layout,
        world: u16,
        local: usize,
        timeout: Duration,
    ) -> Result<HostRing, SmpError> {
        HostRing::attach(
            path,
            layout,
            world,
            local,
            local as Rank,
            Wait::default(),
            timeout,
        )
    }

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "ethbcast-smp-test-{}-{name}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A ring forged by another local user (issue 20, item 7): `nobody` writes a well-formed
    /// segment (a real ring's bytes, its owner's process alive) at a job's name before the job
    /// makes it. A local rank of the job must refuse it at once, without registering in it
    /// (the forger would see the rank and could then release it into its own ring), and the
    /// job's owner must neither use nor remove it. Needs root (to be two users); skips without
    /// it unless `ETHBCAST_REQUIRE_NETNS=1`.
    #[test]
    fn a_ring_forged_by_another_user_is_refused() {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        const NOBODY: u32 = 65534;
        let euid = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
        if euid != 0 {
            assert!(
                std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
                "needs root to act as a second local user (ETHBCAST_REQUIRE_NETNS=1)"
            );
            eprintln!("SKIPPED: a_ring_forged_by_another_user_is_refused: needs root");
            return;
        }
        let name = |tag: &str| {
            Path::new(SHM_DIR).join(format!(
                "ethbcast-smp-forged-{}-{tag}-{:x}",
                std::process::id(),
                rand::random::<u32>()
            ))
        };
        // The forger's bytes: a real, initialised ring whose owner (this process) is alive.
        let template = name("template");
        let world = SMALL.locals as u16;
        let timeout = Duration::from_millis(300);
        let real = HostRing::create(&template, SMALL, world, 0, Wait::default(), timeout).unwrap();
        let forged = std::fs::read(&template).unwrap();
        drop(real);
        std::fs::remove_file(&template).unwrap();

        let path = name("job");
        let mut sh = std::process::Command::new("sh")
            .args(["-c", r#"umask 077 && cat > "$1""#, "sh"])
            .arg(&path)
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut sh.stdin.take().unwrap(), &forged).unwrap();
        assert!(
            sh.wait().unwrap().success(),
            "nobody writes the forged ring"
        );
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let _cleanup = Remove(path.clone());
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), NOBODY);

        let t0 = Instant::now();
        match attach(&path, SMALL, world, 1, timeout) {
            Err(SmpError::Shm(ShmError::Foreign { owner, .. })) => assert_eq!(owner, NOBODY),
            Err(e) => panic!("a local rank took the forged ring for its host's: {e}"),
            Ok(_) => panic!("a local rank attached to a ring forged by uid {NOBODY}"),
        }
        assert!(t0.elapsed() < timeout, "refused at once, not after waiting");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            forged,
            "the rank did not register in the forged ring"
        );
        match HostRing::create(&path, SMALL, world, 0, Wait::default(), timeout) {
            Err(SmpError::Shm(ShmError::Foreign { owner, .. })) => assert_eq!(owner, NOBODY),
            other => panic!("the owner replaced or used uid {NOBODY}'s file: {other:?}"),
        }
        assert!(path.exists(), "another user's file is not removed");
    }

    const SMALL: Layout = Layout {
        locals: 4,
        slots: 4,
        slot_payload: 256,
    };

    /// An owner and `layout.locals - 1` attached ranks (ranks 0..locals), joined.
    fn host(name: &str, layout: Layout, timeout: Duration) -> (HostRing, Vec<HostRing>) {
        let path = temp(name);
        let world = layout.locals as u16;
        let mut owner =
            HostRing::create(&path, layout, world, 0, Wait::default(), timeout).unwrap();
        let locals: Vec<_> = (1..layout.locals)
            .map(|j| {
                let path = path.clone();
                std::thread::spawn(move || {
                    HostRing::attach(&path, layout, world, j, j as Rank, Wait::default(), timeout)
                })
            })
            .collect();
        owner.wait_attached(&mut no_duty).unwrap();
        owner.joined().unwrap();
        let locals = locals
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();
        assert!(!path.exists(), "the name is removed once everyone attached");
        (owner, locals)
    }

    fn pattern(call: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (call * 31 + i * 7 + (i >> 8)) as u8)
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A broadcast of `len` bytes from local rank `root`, or from a rank on another host.
        Bcast {
            root: Option<usize>,
            len: usize,
        },
        Barrier,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (proptest::option::of(0usize..4), 0usize..2000)
                .prop_map(|(root, len)| Op::Bcast { root, len }),
            1 => Just(Op::Barrier),
        ]
    }

    /// Every rank runs `ops` as MPI ranks would; returns what each received, in order.
    fn run(ops: Vec<Op>, layout: Layout) -> Vec<Vec<Vec<u8>>> {
        const REMOTE: Rank = 100;
        let (owner, locals) = host("oracle", layout, Duration::from_secs(20));
        let mut threads = Vec::new();
        for mut ring in std::iter::once(owner).chain(locals) {
            let ops = ops.clone();
            threads.push(std::thread::spawn(move || {
                let me = ring.local();
                let mut got = Vec::new();
                for (call, op) in ops.iter().enumerate() {
                    match *op {
                        Op::Bcast { root, len } => {
                            let data = pattern(call, len);
                            let root_rank = root.map_or(REMOTE, |r| r as Rank);
                            if root == Some(me) || (root.is_none() && me == 0) {
                                ring.publish(root_rank, &data, &mut no_duty).unwrap();
                                got.push(data);
                            } else if me == 0 {
                                let mut v = Vec::new();
                                ring.read(root_rank, Sink::Vec(&mut v), &mut no_duty)
                                    .unwrap();
                                got.push(v);
                            } else {
                                let mut buf = vec![0xEE; len];
                                ring.read(root_rank, Sink::Buf(&mut buf), &mut no_duty)
                                    .unwrap();
                                got.push(buf);
                            }
                        }
                        Op::Barrier if me == 0 => {
                            ring.await_arrivals(&mut no_duty).unwrap();
                            ring.release(&mut no_duty).unwrap();
                        }
                        Op::Barrier => {
                            ring.arrive().unwrap();
                            ring.await_release(&mut no_duty).unwrap();
                        }
                    }
                }
                ring.flush(&mut no_duty).unwrap();
                got
            }));
        }
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        /// Against the oracle "every rank gets every message, whole and in call order":
        /// messages of 0 to 8 slots through a ring of 4 slots, from the owner, from local
        /// roots and from other hosts, mixed with barriers.
        #[test]
        fn every_rank_gets_every_message_whole_and_in_order(ops in proptest::collection::vec(op(), 1..40)) {
            let got = run(ops.clone(), SMALL);
            let want: Vec<Vec<u8>> = ops
                .iter()
                .enumerate()
                .filter_map(|(call, op)| match *op {
                    Op::Bcast { len, .. } => Some(pattern(call, len)),
                    Op::Barrier => None,
                })
                .collect();
            for (rank, g) in got.iter().enumerate() {
                prop_assert_eq!(g, &want, "rank {}", rank);
            }
        }
    }

    #[test]
    fn a_long_run_of_large_messages_wraps_the_default_ring_many_times() {
        let ops: Vec<Op> = (0..60)
            .map(|i| Op::Bcast {
                root: (i % 5 != 4).then_some(i % 4),
                len: 65536 + i * 3,
            })
            .collect();
        let got = run(ops, Layout::new(4));
        for g in &got {
            assert_eq!(g.len(), 60);
            for (i, m) in g.iter().enumerate() {
                assert_eq!(m, &pattern(i, 65536 + i * 3), "message {i}");
            }
        }
    }

    #[test]
    fn hosts_are_numbered_by_their_lowest_rank() {
        let h = Hosts::from_labels(&["b", "a", "b", "c", "a"]).unwrap();
        assert_eq!(h.size(), 5);
        assert_eq!(h.count(), 3);
        assert_eq!(h.host(0), Some(0));
        assert_eq!(h.host(1), Some(1));
        assert_eq!(h.host(3), Some(2));
        assert_eq!(h.host(5), None);
        assert_eq!(h.ranks_on(0), &[0, 2]);
        assert_eq!(h.ranks_on(1), &[1, 4]);
        assert_eq!(h.local_index(4), Some(1));
        assert_eq!(h.local_index(3), Some(0));
        assert!(h.shares_hosts());
        let b = Hosts::blocks(10, 4).unwrap();
        assert_eq!(b.count(), 3);
        assert_eq!(b.ranks_on(2), &[8, 9]);
        assert!(!Hosts::blocks(3, 1).unwrap().shares_hosts());
        assert!(Hosts::blocks(3, 0).is_err());
        assert!(Hosts::from_labels::<u8>(&[]).is_err());
    }

    #[test]
    fn a_buffer_of_another_length_is_left_alone_and_the_ring_goes_on() {
        let (mut owner, mut locals) = host("length", SMALL, Duration::from_secs(5));
        owner.publish(0, &pattern(1, 700), &mut no_duty).unwrap();
        owner.publish(0, &pattern(2, 10), &mut no_duty).unwrap();
        let mut short = vec![7u8; 50];
        let e = locals[0]
            .read(0, Sink::Buf(&mut short), &mut no_duty)
            .unwrap_err();
        assert!(
            matches!(
                e,
                SmpError::Length {
                    root: 0,
                    got: 700,
                    want: 50
                }
            ),
            "{e}"
        );
        assert_eq!(short, vec![7u8; 50]);
        let mut next = vec![0u8; 10];
        locals[0]
            .read(0, Sink::Buf(&mut next), &mut no_duty)
            .unwrap();
        assert_eq!(next, pattern(2, 10));
    }

    #[test]
    fn collectives_in_different_orders_are_reported_not_delivered() {
        let (mut owner, mut locals) = host("order", SMALL, Duration::from_secs(5));
        owner.publish(0, b"data", &mut no_duty).unwrap();
        locals[0].arrive().unwrap();
        let e = locals[0].await_release(&mut no_duty).unwrap_err();
        assert!(e.to_string().contains("same order"), "{e}");
        let mut buf = [0u8; 4];
        let e = locals[1]
            .read(3, Sink::Buf(&mut buf), &mut no_duty)
            .unwrap_err();
        assert!(e.to_string().contains("root 3"), "{e}");
    }

    /// Garbage in a slot's header (a crashed or buggy writer) gives an error, never a read
    /// outside the slot or a panic.
    #[test]
    fn corrupt_entries_are_refused() {
        let corruptions: [(usize, u64); 5] = [
            (S_LEN, 1 << 40),
            (S_LEN, 300),
            (S_OFFSET, 64),
            (S_TOTAL, u64::MAX),
            (S_KIND, 99),
        ];
        for (field, value) in corruptions {
            let (mut owner, mut locals) = host("corrupt", SMALL, Duration::from_secs(5));
            owner.publish(0, &pattern(0, 600), &mut no_duty).unwrap();
            let slot = owner.layout.slot(0);
            owner
                .word(slot + field)
                .unwrap()
                .store(value, Ordering::Relaxed);
            let mut v = Vec::new();
            let e = locals[0]
                .read(0, Sink::Vec(&mut v), &mut no_duty)
                .unwrap_err();
            assert!(matches!(e, SmpError::Protocol(_)), "field {field}: {e}");
        }
        // A stamp ahead of the reader: the slot was overwritten.
        let (owner, mut locals) = host("lapped", SMALL, Duration::from_secs(5));
        let slot = owner.layout.slot(0);
        owner
            .word(slot + S_STAMP)
            .unwrap()
            .store(5, Ordering::Release);
        let e = locals[0]
            .read(0, Sink::Vec(&mut Vec::new()), &mut no_duty)
            .unwrap_err();
        assert!(e.to_string().contains("overwritten"), "{e}");
    }

    #[test]
    fn a_dead_rank_stops_the_writer_with_an_error_not_the_timeout() {
        let (mut owner, locals) = host("dead", SMALL, Duration::from_secs(20));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let at = owner.layout.cursor(2);
        owner
            .word(at + L_PID)
            .unwrap()
            .store(u64::from(dead), Ordering::Relaxed);
        let t0 = Instant::now();
        let mut result = Ok(());
        for i in 0..=SMALL.slots {
            result = owner.publish(0, &pattern(i, 8), &mut no_duty);
            if result.is_err() {
                break;
            }
        }
        let e = result.unwrap_err();
        assert!(matches!(e, SmpError::RankGone { rank: 2, .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(locals);
    }

    /// The ring is bounded: a writer a whole ring ahead waits, and a slot is reused only
    /// once every attached rank has read it (the slowest cursor frees it, not the first).
    #[test]
    fn a_full_ring_holds_the_writer_until_every_rank_has_read() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        let (owner, mut locals) = host("bounded", SMALL, Duration::from_secs(10));
        let written = Arc::new(AtomicUsize::new(0));
        let writer = {
            let written = Arc::clone(&written);
            let mut owner = owner;
            std::thread::spawn(move || {
                for i in 0..=SMALL.slots {
                    owner.publish(0, &pattern(i, 100), &mut no_duty).unwrap();
                    written.fetch_add(1, Ordering::SeqCst);
                }
                owner
            })
        };
        let settle = || std::thread::sleep(Duration::from_millis(100));
        settle();
        assert_eq!(
            written.load(Ordering::SeqCst),
            SMALL.slots,
            "one entry per slot, no more"
        );
        // All but the slowest rank read the oldest entry: its slot stays taken.
        let mut buf = vec![0u8; 100];
        for l in &mut locals[1..] {
            l.read(0, Sink::Buf(&mut buf), &mut no_duty).unwrap();
            assert_eq!(buf, pattern(0, 100));
        }
        settle();
        assert_eq!(written.load(Ordering::SeqCst), SMALL.slots);
        locals[0]
            .read(0, Sink::Buf(&mut buf), &mut no_duty)
            .unwrap();
        assert_eq!(buf, pattern(0, 100));
        let _owner = writer.join().unwrap();
        assert_eq!(written.load(Ordering::SeqCst), SMALL.slots + 1);
        // Every rank still reads the rest whole, the last one from the reused slot.
        for l in &mut locals {
            for i in 1..=SMALL.slots {
                l.read(0, Sink::Buf(&mut buf), &mut no_duty).unwrap();
                assert_eq!(buf, pattern(i, 100), "rank {} entry {i}", l.local());
            }
        }
    }

    /// One copy of each message per host: the segment grows by one cursor block per rank, the
    /// ring's bytes do not depend on how many ranks read it.
    #[test]
    fn the_segment_holds_one_ring_and_a_cursor_block_per_rank() {
        let (owner, _locals) = host("size", SMALL, Duration::from_secs(5));
        assert_eq!(owner.seg.len(), SMALL.segment_bytes());
        let two = Layout { locals: 2, ..SMALL };
        assert_eq!(SMALL.ring_bytes(), two.ring_bytes());
        assert_eq!(
            SMALL.segment_bytes() - two.segment_bytes(),
            2 * CURSOR_BYTES
        );
    }

    #[test]
    fn a_detached_rank_no_longer_holds_the_ring() {
        let (mut owner, mut locals) = host("detach", SMALL, Duration::from_secs(2));
        for mut l in locals.drain(..) {
            l.detach().unwrap();
        }
        for i in 0..3 * SMALL.slots {
            owner.publish(0, &pattern(i, 300), &mut no_duty).unwrap();
        }
    }

    #[test]
    fn waits_end_at_the_timeout_with_an_error() {
        let (_owner, mut locals) = host("timeout", SMALL, Duration::from_millis(100));
        let t0 = Instant::now();
        let e = locals[0]
            .read(0, Sink::Vec(&mut Vec::new()), &mut no_duty)
            .unwrap_err();
        assert!(matches!(e, SmpError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn duties_run_while_the_owner_waits() {
        let (mut owner, _locals) = host("duty", SMALL, Duration::from_millis(50));
        let mut runs = 0;
        let e = owner
            .await_arrivals(&mut || -> Result<(), SmpError> {
                runs += 1;
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(e, SmpError::Timeout { .. }), "{e}");
        assert!(runs >= 5, "the duty ran {runs} times in 50 ms");
    }

    #[test]
    fn a_stale_segment_of_a_dead_owner_is_replaced() {
        let path = temp("stale");
        let layout = Layout::new(2);
        // A segment as a crashed job leaves it: complete, joined, its owner gone.
        {
            let stale =
                HostRing::create(&path, layout, 2, 0, Wait::default(), Duration::from_secs(1))
                    .unwrap();
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let dead = child.id();
            child.wait().unwrap();
            stale
                .word(H_OWNER_PID)
                .unwrap()
                .store(u64::from(dead), Ordering::Relaxed);
            stale
                .word(H_STATE)
                .unwrap()
                .store(STATE_JOINED, Ordering::Release);
            std::mem::forget(stale);
        }
        let local = {
            let path = path.clone();
            std::thread::spawn(move || attach(&path, layout, 2, 1, Duration::from_secs(5)))
        };
        std::thread::sleep(Duration::from_millis(30));
        let mut owner =
            HostRing::create(&path, layout, 2, 0, Wait::default(), Duration::from_secs(5)).unwrap();
        owner.wait_attached(&mut no_duty).unwrap();
        owner.joined().unwrap();
        let mut local = local.join().unwrap().unwrap();
        owner.publish(0, b"fresh", &mut no_duty).unwrap();
        let mut buf = [0u8; 5];
        local.read(0, Sink::Buf(&mut buf), &mut no_duty).unwrap();
        assert_eq!(&buf, b"fresh");
    }

    #[test]
    fn a_segment_of_another_geometry_or_a_taken_block_is_refused() {
        let path = temp("layout");
        let mut owner =
            HostRing::create(&path, SMALL, 4, 0, Wait::default(), Duration::from_secs(1)).unwrap();
        let other = Layout { locals: 3, ..SMALL };
        let e = attach(&path, other, 4, 1, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, SmpError::Layout { .. }), "{e}");
        let e = attach(&path, SMALL, 5, 1, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, SmpError::Layout { .. }), "{e}");
        owner
            .word(owner.layout.cursor(2) + L_RANK)
            .unwrap()
            .store(8, Ordering::Relaxed);
        let e = attach(&path, SMALL, 4, 2, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, SmpError::SlotTaken { holder: 7, .. }), "{e}");
        owner.failed().unwrap();
        let e = attach(&path, SMALL, 4, 1, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, SmpError::Timeout { .. }), "{e}");
    }
}
