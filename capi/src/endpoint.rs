//! A group as C callers and the MPI interposer use it: the library's [`HostGroup`] (one or
//! several ranks per host, see [`ethbcast::host`]) behind a lock, a progress thread,
//! counters, and the C ABI's error type.
//!
//! Why a progress thread: a member serves its peers (acknowledgements, repairs, barrier
//! releases) only while one of its calls runs. An MPI program between two collectives may sit
//! in a point-to-point receive for a long time; if the peer it waits for is itself waiting for
//! a repair that only this member can send, both wait forever. The progress thread drives the
//! protocol once the caller has been out of the library for 10 ms, and then only when there is
//! something to serve: it sleeps on a copy of the link's descriptor (a frame arrived), the
//! protocol's next deadline (a retransmission, an acknowledgement timer) and a pipe that
//! closing the group closes. While the caller keeps calling, it looks once per 10 ms.
//!
//! It runs only while the member owes its peers something ([`HostGroup::is_quiet`]): a call
//! that returns with work left starts it, and it leaves once nothing has been owed (everything
//! sent acknowledged, no timer armed) for a second, in which it still answers a root whose
//! copy of an acknowledgement was lost. A peer's later message waits for this member's next
//! call, as it would without the thread: only that call can complete it. Why not one thread
//! for the group's life: on the 2-core test-bed a thread that merely slept in every rank made
//! Open MPI's own 8 KiB `MPI_Bcast` 25-30% slower under the interposer (12 rounds, against
//! 0.96-1.12x without the thread), and its 64 KiB one a few percent; a thread that had left
//! cost nothing. Before that, a thread that looked 1, 2, 4 and 8 ms after every call, then
//! every 10 ms (every millisecond while the caller kept calling), made the 64 KiB
//! `MPI_Bcast` 5-15% slower and the 8-byte one through ethbcast 0.49x of Open MPI's time
//! instead of 0.37x. Where the link has no readiness descriptor (the simulated switch), or is
//! in error, it looks every 1 to 10 ms. It only ever *tries* the lock, and drives the
//! protocol without waiting (`progress(0)`), so a caller entering a call waits at most for one
//! non-blocking poll. Only a process that talks to the network (its host's owner, or every
//! rank with one rank per host) runs one; while the owner waits for the ranks of its host in a
//! call, the call itself serves the network (and its lock keeps the progress thread out).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast::HostRingError;
use ethbcast::LinkError;
use ethbcast::Rank;
use ethbcast::{GroupError, HostError, HostGroup, HostOptions, ServeWait, ServeWake};
use thiserror::Error;

use crate::EthbcastCounters;

pub use ethbcast::Placement;

/// Shortest token accepted in [`JOB_TOKEN_VAR`].
// A literal, so that the header (cbindgen reads this crate only) keeps showing it.
pub const JOB_TOKEN_MIN: usize = 16;
const _: () = assert!(JOB_TOKEN_MIN == ethbcast::JOB_TOKEN_MIN);

/// The environment variable of the launcher's per-job token
/// ([`ethbcast::JOB_TOKEN_VAR`]).
pub use ethbcast::JOB_TOKEN_VAR;

/// How long the caller must have been out of the library before the progress thread serves
/// the group: while the caller keeps calling it serves the group itself, and the thread looks
/// once per this long (at 1 ms, the thread's wake-ups made 8 ranks' 8-byte `MPI_Bcast` 30%
/// slower on the 2-core test-bed). Also how long a peer waits for a repair only this member
/// can send when its caller left for another MPI call.
const PROGRESS_GRACE: Duration = Duration::from_millis(10);
/// The longest grace: each look that finds the caller came back within the grace doubles it up
/// to this, and a look that finds it away for the whole grace (and serves) goes back to
/// [`PROGRESS_GRACE`]. A caller that keeps calling wakes the thread about a dozen times a
/// second instead of a hundred (each wake takes a core from a busy-polling MPI rank: 8 ranks'
/// `MPI_Alltoall` between interposed barriers took 1.04x Open MPI's time with a look every
/// 10 ms, 1.00x with one every 80 ms, 1.01x without the thread); a peer that needs this
/// member right after such a run of calls waits up to this long, well inside the
/// retransmission timeouts it backs off with.
const PROGRESS_GRACE_MAX: Duration = Duration::from_millis(80);
/// How long the progress thread stays once its member owes nothing, looking only when a frame
/// arrives. An acknowledgement can be lost, and the member cannot know: its root asks again
/// after a retransmission timeout that backs off to 200 ms, and only a member that reads the
/// link can answer. A second covers about eight such asks (and the barrier's stragglers,
/// who ask at most every 32 ms).
const PROGRESS_LINGER: Duration = Duration::from_secs(1);
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

impl From<HostRingError> for CallError {
    fn from(e: HostRingError) -> CallError {
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
    /// Whether a progress thread serves it while owed: the caller wants one, and it talks to
    /// the network.
    progress_thread: bool,
    /// True while a progress thread runs. Set by a call that leaves work behind and cleared by
    /// the thread when it leaves, both with `group` locked: a call never misses a thread
    /// that is leaving, and a thread never leaves work that a call just made.
    serving: AtomicBool,
    /// The running (or the last) progress thread and what wakes it from its sleep.
    runner: Mutex<Runner>,
    /// Calls entered so far; the progress thread backs off only while this stays put.
    calls: AtomicU64,
    in_call: AtomicBool,
    /// When the last call returned, in nanoseconds after `born`.
    left_at: AtomicU64,
    born: Instant,
    stop: AtomicBool,
    counters: CounterCells,
}

/// A progress thread: joined at close; dropping `wake` wakes it from its sleep on the link.
#[derive(Debug, Default)]
struct Runner {
    thread: Option<JoinHandle<()>>,
    wake: Option<ServeWake>,
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
    rank: Rank,
    size: u16,
    linger: Duration,
    /// Whether the group has a key (every frame authenticated).
    keyed: bool,
}

/// Checks that `iface` can be opened for raw Ethernet (it exists, we have the privilege)
/// without joining a group, so that a launcher can decide quickly, on every member, whether
/// to use ethbcast at all.
pub fn probe(iface: &str) -> Result<(), CallError> {
    ethbcast::probe_link(iface)?;
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
            progress_thread: opts.progress_thread && on_network,
            serving: AtomicBool::new(false),
            runner: Mutex::new(Runner::default()),
            calls: AtomicU64::new(0),
            in_call: AtomicBool::new(false),
            left_at: AtomicU64::new(0),
            born: Instant::now(),
            stop: AtomicBool::new(false),
            counters: CounterCells::default(),
        });
        match shared.group.lock() {
            // The join may leave acknowledgements to send.
            Ok(g) => serve_if_owed(&shared, &g)?,
            Err(_) => return Err(CallError::Poisoned),
        }
        Ok(Endpoint {
            shared,
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
    pub fn rank(&self) -> Rank {
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
    pub fn bcast(&self, root: Rank, buf: &mut [u8]) -> Result<(), CallError> {
        let counters = &self.shared.counters;
        if root.get() >= self.size {
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

    /// Allgather into the caller's buffer ([`HostGroup::allgather_into`]): every member's
    /// part in rank order, back to back in `out`, `lens` giving each part's length; `part`
    /// `None` takes this member's part from its place in `out` (in place).
    pub fn allgather(
        &self,
        part: Option<&[u8]>,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<(), CallError> {
        let counters = &self.shared.counters;
        let result = self.call(|g| {
            match part {
                Some(p) => g.allgather_into(p, out, lens)?,
                None => g.allgather_in_place(out, lens)?,
            }
            Ok(())
        });
        if result.is_ok() {
            let me = self.rank.index();
            let mine = lens.get(me).copied().unwrap_or(0);
            let total: usize = lens.iter().sum();
            counters
                .bytes_sent
                .fetch_add(mine as u64, Ordering::Relaxed);
            counters
                .bytes_received
                .fetch_add((total - mine) as u64, Ordering::Relaxed);
        }
        if result.is_err() {
            counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Gather into `out` at `root` ([`HostGroup::gather_into`]): every member's `part`, all
    /// of one length, in rank order, back to back in the root's `out`.
    pub fn gather(&self, root: Rank, part: &[u8], out: &mut [u8]) -> Result<(), CallError> {
        let counters = &self.shared.counters;
        let result = self.call(|g| Ok(g.gather_into(root, part, out)?));
        match &result {
            Ok(()) => {
                counters
                    .bytes_sent
                    .fetch_add(part.len() as u64, Ordering::Relaxed);
                if root == self.rank {
                    counters
                        .bytes_received
                        .fetch_add((out.len() - part.len()) as u64, Ordering::Relaxed);
                }
            }
            Err(_) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
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

    /// Whether a progress thread serves this member now: from the call that left work behind
    /// (set before that call returns, so before the thread may have run at all) until the
    /// thread leaves.
    pub fn progress_thread_running(&self) -> bool {
        self.shared.serving.load(Ordering::Acquire)
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
            Ok(mut g) => {
                let result = f(&mut g);
                let served = serve_if_owed(s, &g);
                result.and_then(|t| served.map(|()| t))
            }
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
        self.shared.stop.store(true, Ordering::Release);
        let runner = std::mem::take(
            &mut *self
                .shared
                .runner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        // Closing the pipe's write end wakes a sleep on the link; unpark, a pause.
        drop(runner.wake);
        if let Some(t) = runner.thread {
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

/// Starts a progress thread if the member owes its peers something (see
/// [`HostGroup::is_quiet`]) and none runs; `g` is the locked group.
fn serve_if_owed(shared: &Arc<Shared>, g: &HostGroup) -> Result<(), CallError> {
    let s = &**shared;
    if !s.progress_thread
        || s.serving.load(Ordering::Acquire)
        || s.stop.load(Ordering::Acquire)
        || g.is_quiet(Instant::now())
    {
        return Ok(());
    }
    let (wait, wake) = g.serve_wait()?.unzip();
    let thread_shared = Arc::clone(shared);
    let thread = std::thread::Builder::new()
        .name("ethbcast-progress".into())
        .spawn(move || progress_loop(&thread_shared, wait))
        .map_err(|e| CallError::from(LinkError::Io(e)))?;
    s.serving.store(true, Ordering::Release);
    let last = std::mem::replace(
        &mut *s
            .runner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
        Runner {
            thread: Some(thread),
            wake,
        },
    );
    // The last thread left when it cleared `serving`, holding the group: it is returning.
    if let Some(t) = last.thread {
        let _ = t.join();
    }
    Ok(())
}

fn progress_loop(s: &Shared, wait: Option<ServeWait>) {
    let mut pause = PROGRESS_FIRST;
    let mut grace = PROGRESS_GRACE;
    let mut seen = s.calls.load(Ordering::Relaxed);
    // Since when the member has owed nothing, as far as this thread saw.
    let mut quiet_since: Option<Instant> = None;
    while !s.stop.load(Ordering::Acquire) {
        let calls = s.calls.load(Ordering::Relaxed);
        let busy = s.in_call.load(Ordering::Acquire);
        if calls != seen || busy {
            // The caller was here since the last look, or is here: it serves the group. Look
            // again once it has been away for the grace period.
            seen = calls;
            quiet_since = None;
            let away = if busy {
                Duration::ZERO
            } else {
                let left = Duration::from_nanos(s.left_at.load(Ordering::Relaxed));
                s.born.elapsed().saturating_sub(left)
            };
            std::thread::park_timeout(grace.saturating_sub(away).max(PROGRESS_FIRST));
            // The caller keeps coming back: it serves the group, so look less often.
            grace = (grace * 2).min(PROGRESS_GRACE_MAX);
            pause = PROGRESS_FIRST;
            continue;
        }
        // The caller has been away for the whole grace: serve, and notice its next absence
        // soon again.
        grace = PROGRESS_GRACE;
        let served = match s.group.try_lock() {
            Ok(mut g) => {
                // An error here (a dead link) shows up again in the caller's next call; until
                // then, look on the schedule (a due deadline would wake the sleep at once).
                let progressed = g.progress(Duration::ZERO).is_ok();
                s.counters.background_polls.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                if !g.is_quiet(now) {
                    quiet_since = None;
                    progressed.then(|| g.serve_deadline(now))
                } else {
                    let since = *quiet_since.get_or_insert(now);
                    if now - since >= PROGRESS_LINGER {
                        // Nothing owed for a while: leave. The next call that leaves work
                        // starts a thread.
                        s.serving.store(false, Ordering::Release);
                        return;
                    }
                    progressed.then_some(Some(since + PROGRESS_LINGER))
                }
            }
            Err(_) => None,
        };
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
