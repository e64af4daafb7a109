//! A group as C callers and the MPI interposer use it: the library's [`HostGroup`] (one or
//! several ranks per host, see [`ethbcast::group::host`]) behind a lock, a progress thread,
//! counters, and the C ABI's error type.
//!
//! Why a progress thread: a member serves its peers (acknowledgements, repairs, barrier
//! releases) only while one of its calls runs. An MPI program between two collectives may sit
//! in a point-to-point receive for a long time; if the peer it waits for is itself waiting for
//! a repair that only this member can send, both wait forever. The progress thread drives the
//! protocol once the caller has been out of the library for 10 ms, and then only when there is
//! something to serve: it sleeps on a copy of the link's descriptor (a frame arrived), the
//! protocol's next deadline (a retransmission, an acknowledgement timer) and a pipe that
//! closing the group closes. While the caller keeps calling, it looks once per 10 ms; a member
//! with nothing in flight costs no wake-up at all while its program works or talks MPI without
//! it. On the 2-core test-bed the old schedule (a look 1, 2, 4 and 8 ms after every call, then
//! every 10 ms; every millisecond while the caller kept calling) made Open MPI's own 64 KiB
//! `MPI_Bcast` 5-15% slower under the interposer, and its 8-byte one through ethbcast took
//! 0.49x Open MPI's time instead of 0.37x without the thread. Where the link has no such
//! descriptor (the simulated switch) it looks every 1 to 10 ms. It only ever *tries* the lock,
//! and drives the protocol without waiting (`progress(0)`), so a caller entering a call waits
//! at most for one non-blocking poll. Only a process that talks to the network (its host's
//! owner, or every rank with one rank per host) runs one; while the owner waits for the ranks
//! of its host in a call, the call itself serves the network (and its lock keeps the progress
//! thread out).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast::group::{GroupError, HostError, HostGroup, HostOptions, ServeWait, ServeWake};
use ethbcast::link::{self, Backend, LinkError, WaitMode};
use ethbcast::smp::SmpError;
use thiserror::Error;

use crate::EthbcastCounters;

pub use ethbcast::group::Placement;

/// Shortest token accepted in [`JOB_TOKEN_VAR`].
// A literal, so that the header (cbindgen reads this crate only) keeps showing it.
pub const JOB_TOKEN_MIN: usize = 16;
const _: () = assert!(JOB_TOKEN_MIN == ethbcast::group::host::JOB_TOKEN_MIN);

/// The environment variable of the launcher's per-job token
/// ([`ethbcast::group::host::JOB_TOKEN_VAR`]).
pub use ethbcast::group::host::JOB_TOKEN_VAR;

/// How long the caller must have been out of the library before the progress thread serves
/// the group: while the caller keeps calling it serves the group itself, and the thread looks
/// once per this long (at 1 ms, the thread's wake-ups made 8 ranks' 8-byte `MPI_Bcast` 30%
/// slower on the 2-core test-bed). Also how long a peer waits for a repair only this member
/// can send when its caller left for another MPI call.
const PROGRESS_GRACE: Duration = Duration::from_millis(10);
/// First pause between two background polls on a link without a readiness descriptor, and
/// the shortest sleep on one.
const PROGRESS_FIRST: Duration = Duration::from_millis(1);
/// Longest pause between two background polls on a link without a readiness descriptor.
const PROGRESS_MAX: Duration = Duration::from_millis(10);

/// Errors of calls on an [`Endpoint`]: those of [`HostGroup`] and a poisoned lock.
#[derive(Debug, Error)]
pub enum CallError {
    /// The group, its link, its host ring or the caller's arguments.
    #[error(transparent)]
    Host(#[from] HostError),
    /// An earlier call panicked while holding the group; its state cannot be trusted.
    #[error("the group is unusable after an internal error in an earlier call: close it")]
    Poisoned,
}

impl From<GroupError> for CallError {
    fn from(e: GroupError) -> CallError {
        CallError::Host(HostError::Group(e))
    }
}

impl From<LinkError> for CallError {
    fn from(e: LinkError) -> CallError {
        CallError::Host(HostError::from(e))
    }
}

impl From<SmpError> for CallError {
    fn from(e: SmpError) -> CallError {
        CallError::Host(HostError::Host(e))
    }
}

#[derive(Debug, Default)]
struct CounterCells {
    bcasts: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    barriers: AtomicU64,
    errors: AtomicU64,
    background_polls: AtomicU64,
    busy_ns: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    /// This rank's part of the group.
    group: Mutex<HostGroup>,
    /// Whether it talks to the network (then the progress thread serves it).
    on_network: bool,
    /// Calls entered so far; the progress thread backs off only while this stays put.
    calls: AtomicU64,
    in_call: AtomicBool,
    /// When the last call returned, in nanoseconds after `born`.
    left_at: AtomicU64,
    born: Instant,
    stop: AtomicBool,
    counters: CounterCells,
}

/// How to open an [`Endpoint`]: the host group's options, and what the C ABI adds.
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// The group, its members, their placement and waits.
    pub host: HostOptions,
    /// Run a progress thread.
    pub progress_thread: bool,
    /// How long `close` keeps serving peers after its own messages are acknowledged.
    pub linger: Duration,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            host: HostOptions::default(),
            progress_thread: true,
            linger: Duration::from_millis(50),
        }
    }
}

/// A member of a group, usable from any thread (calls are serialised).
#[derive(Debug)]
pub struct Endpoint {
    shared: Arc<Shared>,
    progress: Option<JoinHandle<()>>,
    /// Dropped to wake the progress thread from its sleep on the link.
    wake: Option<ServeWake>,
    rank: u16,
    size: u16,
    linger: Duration,
    /// Whether the group has a key (every frame authenticated).
    keyed: bool,
}

/// Checks that `iface` can be opened for raw Ethernet (it exists, we have the privilege)
/// without joining a group, so that a launcher can decide quickly, on every member, whether
/// to use ethbcast at all.
pub fn probe(iface: &str, backend: Backend) -> Result<(), CallError> {
    link::open(backend, iface, WaitMode::Block)?;
    Ok(())
}

impl Endpoint {
    /// Opens `iface` and joins the group.
    pub fn open(iface: &str, opts: EndpointOptions) -> Result<Endpoint, CallError> {
        let keyed = opts.host.group.key.is_some();
        let host = HostGroup::open(iface, opts.host)?;
        let (rank, size, on_network) = (host.rank(), host.size(), host.on_network());
        let shared = Arc::new(Shared {
            group: Mutex::new(host),
            on_network,
            calls: AtomicU64::new(0),
            in_call: AtomicBool::new(false),
            left_at: AtomicU64::new(0),
            born: Instant::now(),
            stop: AtomicBool::new(false),
            counters: CounterCells::default(),
        });
        let (progress, wake) = if opts.progress_thread && on_network {
            let s = Arc::clone(&shared);
            let (wait, wake) = match shared.group.lock() {
                Ok(g) => g.serve_wait()?.unzip(),
                Err(_) => return Err(CallError::Poisoned),
            };
            let thread = std::thread::Builder::new()
                .name("ethbcast-progress".into())
                .spawn(move || progress_loop(&s, wait))
                .map_err(|e| CallError::from(LinkError::Io(e)))?;
            (Some(thread), wake)
        } else {
            (None, None)
        };
        Ok(Endpoint {
            shared,
            progress,
            wake,
            rank,
            size,
            linger: opts.linger,
            keyed,
        })
    }

    /// Whether the group has a key: every frame is authenticated, and a host without the key
    /// can neither write into buffers nor release barriers nor evict members.
    pub fn keyed(&self) -> bool {
        self.keyed
    }

    /// This member's rank.
    pub fn rank(&self) -> u16 {
        self.rank
    }

    /// Number of members.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Whether this process talks to the network (it is its host's owner, or alone on it).
    pub fn on_network(&self) -> bool {
        self.shared.on_network
    }

    /// Broadcast into the caller's buffer: the root sends `buf`, every other member receives
    /// the root's message into it. Every member must pass the same length; a receiver whose
    /// length differs gets [`HostError::Length`] and its buffer is left as it was.
    pub fn bcast(&self, root: u16, buf: &mut [u8]) -> Result<(), CallError> {
        let counters = &self.shared.counters;
        if root >= self.size {
            let e = CallError::from(GroupError::BadRank {
                rank: root,
                size: self.size,
            });
            counters.errors.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let result = self.call(|g| Ok(g.bcast(root, buf)?));
        if result.is_ok() {
            let bytes = match root == self.rank {
                true => &counters.bytes_sent,
                false => &counters.bytes_received,
            };
            bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        self.count(&result, &counters.bcasts);
        result
    }

    /// Barrier: returns once every member has entered. Ranks sharing a host arrive through
    /// shared memory; the owners meet in the network barrier and release their hosts.
    pub fn barrier(&self) -> Result<(), CallError> {
        let result = self.call(|g| Ok(g.barrier()?));
        self.count(&result, &self.shared.counters.barriers);
        result
    }

    /// Waits until everything this member broadcast has been acknowledged by all (and, on a
    /// shared host, read by every rank of the host).
    pub fn flush(&self) -> Result<(), CallError> {
        let result = self.call(|g| Ok(g.flush()?));
        if result.is_err() {
            self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Counters so far, as `ethbcast_counters` gives them to C.
    pub fn counters(&self) -> EthbcastCounters {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EthbcastCounters {
            bcasts: get(&c.bcasts),
            bytes_sent: get(&c.bytes_sent),
            bytes_received: get(&c.bytes_received),
            barriers: get(&c.barriers),
            errors: get(&c.errors),
            background_polls: get(&c.background_polls),
            busy_ns: get(&c.busy_ns),
        }
    }

    /// Leaves the group: waits (up to the group's timeout) until this member's broadcasts are
    /// acknowledged, serves peers for the linger time, then closes the link and leaves the
    /// host's ring.
    pub fn close(mut self) -> Result<(), CallError> {
        self.stop_progress();
        let flushed = self.flush();
        if self.shared.on_network {
            let end = Instant::now() + self.linger;
            while Instant::now() < end {
                let _ = self.call(|g| Ok(g.progress(Duration::from_millis(1))?));
            }
        }
        self.shared
            .group
            .lock()
            .map_err(|_| CallError::Poisoned)?
            .leave_host()?;
        flushed
    }

    fn call<T>(
        &self,
        f: impl FnOnce(&mut HostGroup) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let s = &self.shared;
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.in_call.store(true, Ordering::Release);
        let t0 = Instant::now();
        let result = match s.group.lock() {
            Ok(mut g) => f(&mut g),
            Err(_) => Err(CallError::Poisoned),
        };
        let end = Instant::now();
        s.counters
            .busy_ns
            .fetch_add((end - t0).as_nanos() as u64, Ordering::Relaxed);
        s.left_at
            .store((end - s.born).as_nanos() as u64, Ordering::Relaxed);
        s.in_call.store(false, Ordering::Release);
        result
    }

    fn count<T>(&self, result: &Result<T, CallError>, done: &AtomicU64) {
        match result {
            Ok(_) => done.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.shared.counters.errors.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn stop_progress(&mut self) {
        if let Some(t) = self.progress.take() {
            self.shared.stop.store(true, Ordering::Release);
            // Closing the pipe's write end wakes a sleep on the link; unpark, a pause.
            self.wake.take();
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop_progress();
    }
}

fn progress_loop(s: &Shared, wait: Option<ServeWait>) {
    let mut pause = PROGRESS_FIRST;
    let mut seen = s.calls.load(Ordering::Relaxed);
    while !s.stop.load(Ordering::Acquire) {
        let calls = s.calls.load(Ordering::Relaxed);
        let busy = s.in_call.load(Ordering::Acquire);
        if calls != seen || busy {
            // The caller was here since the last look, or is here: it serves the group. Look
            // again once it has been away for the grace period.
            seen = calls;
            let away = if busy {
                Duration::ZERO
            } else {
                let left = Duration::from_nanos(s.left_at.load(Ordering::Relaxed));
                s.born.elapsed().saturating_sub(left)
            };
            std::thread::park_timeout(PROGRESS_GRACE.saturating_sub(away).max(PROGRESS_FIRST));
            pause = PROGRESS_FIRST;
            continue;
        }
        let served = s.group.try_lock().ok().map(|mut g| {
            // An error here (a dead link) shows up again in the caller's next call.
            let _ = g.progress(Duration::ZERO);
            s.counters.background_polls.fetch_add(1, Ordering::Relaxed);
            g.next_deadline()
        });
        // Until a frame arrives, the protocol's deadline or the close; without a way to wait
        // for frames, or with the link in error (it would wake the sleep at once for ever), on a
        // schedule.
        let slept = match (&wait, served) {
            // A deadline already due is served a millisecond later, never in a loop.
            (Some(w), Some(deadline)) => {
                let soonest = Instant::now() + PROGRESS_FIRST;
                w.sleep(deadline.map(|d| d.max(soonest))).is_ok()
            }
            _ => false,
        };
        if !slept {
            std::thread::park_timeout(pause);
            pause = (pause * 2).min(PROGRESS_MAX);
        }
    }
}
