//! A group as C callers and the MPI interposer use it: the [`Group`] behind a lock, a
//! progress thread, counters, broadcasts into caller-owned buffers, and several ranks per host.
//!
//! Why a progress thread: a member serves its peers (acknowledgements, repairs, barrier
//! releases) only while one of its calls runs. An MPI program between two collectives may sit
//! in a point-to-point receive for a long time; if the peer it waits for is itself waiting for
//! a repair that only this member can send, both wait forever. The progress thread drives the
//! protocol whenever the caller has been out of the library for a while: first after 1 ms,
//! then backing off to every 10 ms, so a tight loop of collectives never meets it and an idle
//! member costs about a hundred wake-ups a second. It only ever *tries* the lock, and drives
//! the protocol without waiting (`progress(0)`), so a caller entering a call waits at most for
//! one non-blocking poll.
//!
//! Several ranks per host ([`Placement::Hosts`], or the launcher's local rank and size in the
//! environment): the lowest rank of each host is the host's member of the network group (a
//! group of one member per host) and the others go through the host's shared-memory ring
//! ([`ethbcast::smp`]). The group layer knows nothing of this: the world's ranks are mapped
//! onto the hosts' network ranks here, on `Group`'s public API. While the owner waits for the
//! ranks of its host it keeps serving the network itself (its lock keeps the progress thread
//! out).
//!
//! Segment names and other local users: `/dev/shm` is shared by every user of the machine, so a
//! host's segment name carries, besides the job's public numbers (group id, size, owner rank,
//! network namespace), a tag no other user can compute when the job has a secret: a keyed hash
//! of the launcher's per-job token (`ETHBCAST_JOB_TOKEN`, [`JOB_TOKEN_VAR`]) and of the group's
//! key, whichever the job has. Every rank of a job computes the same name from the same
//! environment and options. Why not the network join's session: the owner opens the ring
//! *before* it joins (the local ranks attach while it joins, and it waits for them), and the
//! other ranks of a host never join the network at all, so no session exists that they could
//! all know in time. Without token or key the name can be guessed, and another user can make
//! a file there first: the job then fails with a clear error (the segment layer refuses a file
//! of another user, of another mode than 0600, or behind a symbolic link), but it is not fed
//! the other user's ring.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast::group::{self, Algorithm, Group, GroupError, GroupOptions, Membership};
use ethbcast::link::{self, Backend, LinkError, WaitMode};
use ethbcast::membership::{Expect, JoinConfig};
use ethbcast::smp::{self, HostRing, Hosts, Layout, Sink, SmpError};
use thiserror::Error;

/// First pause of the progress thread after the caller left the library.
const PROGRESS_FIRST: Duration = Duration::from_millis(1);
/// Longest pause between two background polls.
const PROGRESS_MAX: Duration = Duration::from_millis(10);

/// Errors of calls on an [`Endpoint`].
#[derive(Debug, Error)]
pub enum CallError {
    /// The group layer failed (link, timeout, membership, rank).
    #[error(transparent)]
    Group(#[from] GroupError),
    /// The link could not be opened (probe).
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The shared-memory layer of ranks on one host failed.
    #[error(transparent)]
    Host(#[from] SmpError),
    /// The root's message does not have the length this member passed.
    #[error("the message from root {root} has {got} bytes but this member's buffer has {want}: every member must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: u16,
        /// Length of the message.
        got: usize,
        /// Length of the caller's buffer.
        want: usize,
    },
    /// The ranks-per-host description (arguments or environment) is unusable.
    #[error("ranks per host: {0}")]
    Placement(String),
    /// An earlier call panicked while holding the group; its state cannot be trusted.
    #[error("the group is unusable after an internal error in an earlier call: close it")]
    Poisoned,
}

/// What a member has done so far (`ethbcast_counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Broadcasts completed (as root or receiver).
    pub bcasts: u64,
    /// Payload bytes this member broadcast as root.
    pub bytes_sent: u64,
    /// Payload bytes this member received from other roots.
    pub bytes_received: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Times the progress thread drove the protocol while the caller was away.
    pub background_polls: u64,
    /// Nanoseconds spent inside broadcast and barrier calls.
    pub busy_ns: u64,
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
    /// The network member: every rank with one rank per host, only the hosts' owners
    /// otherwise (and nobody when all ranks run on one host).
    group: Option<Mutex<Group>>,
    /// Calls entered so far; the progress thread backs off only while this stays put.
    calls: AtomicU64,
    in_call: AtomicBool,
    stop: AtomicBool,
    counters: CounterCells,
}

/// Where the ranks of the job run.
#[derive(Debug, Clone, Default)]
pub enum Placement {
    /// From the membership alone; with [`Membership::Env`], the launcher's local rank and size
    /// ([`placement_from_env`]) tell when ranks share hosts.
    #[default]
    Auto,
    /// One rank per host: every rank is a member of the network group.
    OnePerHost,
    /// This process is rank `rank` of a job whose ranks run on hosts as `hosts` says.
    Hosts {
        /// This process's rank.
        rank: u16,
        /// The host of every rank.
        hosts: Hosts,
    },
}

/// How to open an [`Endpoint`].
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// Options of the group.
    pub group: GroupOptions,
    /// Membership source (with one rank per host).
    pub membership: Membership,
    /// Where the ranks run.
    pub placement: Placement,
    /// Run a progress thread.
    pub progress_thread: bool,
    /// How long `close` keeps serving peers after its own messages are acknowledged.
    pub linger: Duration,
    /// A root's broadcast longer than this many bytes returns only once every member has
    /// acknowledged it; `None`: as the algorithm needs ([`root_waits_above`]).
    pub root_waits_above: Option<usize>,
    /// How ranks of one host wait for each other in shared memory.
    pub host_wait: smp::Wait,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            group: GroupOptions::default(),
            membership: Membership::Env,
            placement: Placement::Auto,
            progress_thread: true,
            linger: Duration::from_millis(50),
            root_waits_above: None,
            host_wait: smp::Wait::default(),
        }
    }
}

/// The ranks of this process's host, as the endpoint needs them.
#[derive(Debug)]
struct HostView {
    hosts: Hosts,
    /// This process's host (its owner's rank in the network group).
    host: u16,
    /// Whether this process is its host's member of the network group.
    owner: bool,
}

impl HostView {
    /// The host of `root`, or the error a bad root gets.
    fn host_of(&self, root: u16) -> Result<u16, CallError> {
        self.hosts
            .host(root)
            .ok_or(CallError::Group(GroupError::BadRank {
                rank: root,
                size: self.hosts.size(),
            }))
    }
}

/// A member of a group, usable from any thread (calls are serialised).
#[derive(Debug)]
pub struct Endpoint {
    shared: Arc<Shared>,
    progress: Option<JoinHandle<()>>,
    /// The host's shared-memory ring (ranks sharing a host only).
    ring: Option<Mutex<HostRing>>,
    /// `None`: one rank per host, network ranks are the world's.
    view: Option<HostView>,
    rank: u16,
    size: u16,
    linger: Duration,
    root_waits_above: usize,
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

/// Pairs of (local rank, local size) variables of the usual launchers, first match wins.
const LOCAL_VARS: [(&str, &str); 4] = [
    ("ETHBCAST_LOCAL_RANK", "ETHBCAST_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
];

/// Several ranks per host from the launcher's environment: rank and size as
/// [`group::rank_size_from_env`] finds them, local rank and size from `ETHBCAST_LOCAL_RANK`/
/// `_SIZE`, Open MPI's `OMPI_COMM_WORLD_LOCAL_RANK`/`_SIZE`, MPICH's `MPI_LOCALRANKID`/
/// `MPI_LOCALNRANKS` or Slurm's `SLURM_LOCALID`/`SLURM_NTASKS_PER_NODE`. `Ok(None)`: one rank
/// per host (no local size above 1). The environment cannot say which ranks share a host, so
/// it must be blocks of consecutive ranks, the same number on every host (Open MPI's and
/// MPICH's default placement); anything else is an error that says to pass the placement.
pub fn placement_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<(u16, Hosts)>, CallError> {
    let Some((rank, size)) = group::rank_size_from_env(&get) else {
        return Ok(None);
    };
    let local = LOCAL_VARS.iter().find_map(|(r, s)| {
        let lr: u16 = get(r)?.trim().parse().ok()?;
        let ls: u16 = get(s)?.trim().parse().ok()?;
        Some((*r, lr, ls))
    });
    let Some((var, local_rank, per_host)) = local else {
        return Ok(None);
    };
    if per_host <= 1 {
        return Ok(None);
    }
    if local_rank >= per_host || size % per_host != 0 || rank % per_host != local_rank {
        return Err(CallError::Placement(format!(
            "rank {rank} of {size} is local rank {local_rank} of {per_host} ({var}): the environment describes hosts only as blocks of {per_host} consecutive ranks on every host; for other placements open with the host of every rank (ethbcast_open_hosts)"
        )));
    }
    let hosts = Hosts::blocks(size, per_host).map_err(CallError::Host)?;
    Ok(Some((rank, hosts)))
}

/// The environment variable in which a launcher gives every rank of a job the same random
/// token (at least [`JOB_TOKEN_MIN`] characters, e.g. `openssl rand -hex 16`), so that the
/// job's shared-memory segment names cannot be guessed by other local users.
pub const JOB_TOKEN_VAR: &str = "ETHBCAST_JOB_TOKEN";

/// Shortest token accepted in [`JOB_TOKEN_VAR`].
pub const JOB_TOKEN_MIN: usize = 16;

/// The part of a segment's name that only the job can compute: 128 bits of a BLAKE3 hash keyed
/// with the group's key (if any) over the launcher's token (if any), in hex. `Ok(None)`: the
/// job has neither (the name is guessable). Neither the token nor the key can be recovered
/// from the tag, which every local user can read in `/dev/shm`'s listing.
fn segment_tag(token: Option<&str>, key: Option<&[u8; 32]>) -> Result<Option<String>, CallError> {
    let token = token.filter(|t| !t.is_empty());
    if let Some(t) = token {
        if t.len() < JOB_TOKEN_MIN {
            return Err(CallError::Placement(format!(
                "{JOB_TOKEN_VAR} has {} characters: give every rank of the job the same random token of at least {JOB_TOKEN_MIN} characters (e.g. `openssl rand -hex 16`), or unset it",
                t.len()
            )));
        }
    }
    if token.is_none() && key.is_none() {
        return Ok(None);
    }
    const CONTEXT: &str = "ethbcast shared-memory segment name v1";
    let mut h = match key {
        Some(k) => blake3::Hasher::new_keyed(k),
        None => blake3::Hasher::new_derive_key(CONTEXT),
    };
    h.update(CONTEXT.as_bytes());
    h.update(&[u8::from(token.is_some())]);
    h.update(token.unwrap_or("").as_bytes());
    let out = h.finalize();
    Ok(Some(
        out.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    ))
}

/// The file of host `h`'s segment: one per job (group id, size), host (its owner's rank) and
/// network namespace, with the job's secret tag ([`segment_tag`]) when it has one. `/dev/shm`
/// is shared by every namespace of a machine: jobs on different test-beds (or containers) of
/// one machine must not meet in one segment, whatever group id they chose.
fn segment_path(group_id: u32, hosts: &Hosts, h: u16, tag: Option<&str>) -> std::path::PathBuf {
    let owner = hosts.ranks_on(h).first().copied().unwrap_or(0);
    let mut name = format!(
        "ethbcast-{group_id:08x}-{}-{owner}-{}",
        hosts.size(),
        net_namespace()
    );
    if let Some(tag) = tag {
        name.push('-');
        name.push_str(tag);
    }
    std::path::Path::new(smp::SHM_DIR).join(name)
}

/// The inode of this process's network namespace (`/proc/self/ns/net` reads `net:[N]`), or 0
/// where it cannot be read.
fn net_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

impl Endpoint {
    /// Opens `iface` and joins the group.
    pub fn open(iface: &str, opts: EndpointOptions) -> Result<Endpoint, CallError> {
        let root_waits_above = opts
            .root_waits_above
            .unwrap_or_else(|| root_waits_above(opts.group.algorithm));
        let placement = match (&opts.placement, &opts.membership) {
            (Placement::Auto, Membership::Env) => placement_from_env(|k| std::env::var(k).ok())?,
            (Placement::Hosts { rank, hosts }, _) => Some((*rank, hosts.clone())),
            _ => None,
        };
        let (group, ring, view, rank, size) = match placement {
            None => {
                let g = Group::open(iface, opts.membership.clone(), opts.group.clone())?;
                let (rank, size) = (g.rank(), g.size());
                (Some(g), None, None, rank, size)
            }
            Some((rank, hosts)) => {
                let (group, ring, view) = open_on_hosts(iface, &opts, rank, hosts)?;
                let size = view.hosts.size();
                (group, ring, Some(view), rank, size)
            }
        };
        let shared = Arc::new(Shared {
            group: group.map(Mutex::new),
            calls: AtomicU64::new(0),
            in_call: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            counters: CounterCells::default(),
        });
        let progress = if opts.progress_thread && shared.group.is_some() {
            let s = Arc::clone(&shared);
            Some(
                std::thread::Builder::new()
                    .name("ethbcast-progress".into())
                    .spawn(move || progress_loop(&s))
                    .map_err(|e| CallError::Link(LinkError::Io(e)))?,
            )
        } else {
            None
        };
        Ok(Endpoint {
            shared,
            progress,
            ring: ring.map(Mutex::new),
            view,
            rank,
            size,
            linger: opts.linger,
            root_waits_above,
            keyed: opts.group.key.is_some(),
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
        self.shared.group.is_some()
    }

    /// Broadcast into the caller's buffer: the root sends `buf`, every other member receives
    /// the root's message into it. Every member must pass the same length; a receiver whose
    /// length differs gets [`CallError::Length`] and its buffer is left as it was.
    pub fn bcast(&self, root: u16, buf: &mut [u8]) -> Result<(), CallError> {
        let counters = &self.shared.counters;
        if root >= self.size {
            let e = CallError::Group(GroupError::BadRank {
                rank: root,
                size: self.size,
            });
            counters.errors.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let result = self.call(|mut g, ring| {
            let (nic_root, my_host, root_here) = match &self.view {
                None => (root, self.rank, false),
                Some(v) => {
                    let h = v.host_of(root)?;
                    (h, v.host, h == v.host)
                }
            };
            let large = buf.len() > self.root_waits_above;
            if root == self.rank {
                // Network first: the other hosts wait longest. The ring write may wait for
                // this host's ranks, and the network keeps being served meanwhile.
                if let Some(g) = g.as_deref_mut() {
                    send(g, nic_root, buf.to_vec())?;
                }
                if let Some(ring) = ring {
                    ring.publish(root, buf, &mut || serve(&mut g))?;
                }
                if let (Some(g), true) = (g, large) {
                    g.flush()?;
                }
                counters
                    .bytes_sent
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
            let mut msg = Vec::new();
            match (g, ring) {
                // A rank of a host with an owner (or of a job on one host): everything comes
                // through the ring.
                (None, Some(ring)) => {
                    ring.read(root, Sink::Buf(buf), &mut idle)
                        .map_err(|e| match e {
                            CallError::Host(SmpError::Length { root, got, want }) => {
                                CallError::Length { root, got, want }
                            }
                            e => e,
                        })?;
                    counters
                        .bytes_received
                        .fetch_add(buf.len() as u64, Ordering::Relaxed);
                    return Ok(());
                }
                // Another rank of this host is root: its message comes through the ring, and
                // the owner sends it to the other hosts.
                (Some(g), Some(ring)) if root_here => {
                    ring.read(root, Sink::Vec(&mut msg), &mut idle)?;
                    send(g, my_host, msg.clone())?;
                    if msg.len() > self.root_waits_above {
                        g.flush()?;
                    }
                }
                // This rank receives from the network (and hands the message to its host).
                (Some(g), ring) => {
                    g.bcast(nic_root, &mut msg)?;
                    if let Some(ring) = ring {
                        let mut g = Some(g);
                        ring.publish(root, &msg, &mut || serve(&mut g))?;
                    }
                }
                (None, None) => {
                    return Err(CallError::Placement(
                        "this rank has neither a network member nor a host ring".into(),
                    ))
                }
            }
            if msg.len() != buf.len() {
                return Err(CallError::Length {
                    root,
                    got: msg.len(),
                    want: buf.len(),
                });
            }
            buf.copy_from_slice(&msg);
            counters
                .bytes_received
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            Ok(())
        });
        self.count(&result, &counters.bcasts);
        result
    }

    /// Barrier: returns once every member has entered. Ranks sharing a host arrive through
    /// shared memory; the owners meet in the network barrier and release their hosts.
    pub fn barrier(&self) -> Result<(), CallError> {
        let owner = self.view.as_ref().is_none_or(|v| v.owner);
        let result = self.call(|mut g, ring| {
            match ring {
                Some(ring) if !owner => {
                    ring.arrive()?;
                    ring.await_release(&mut idle)?;
                }
                Some(ring) => {
                    ring.await_arrivals(&mut || serve(&mut g))?;
                    if let Some(g) = g.as_deref_mut() {
                        g.barrier()?;
                    }
                    ring.release(&mut || serve(&mut g))?;
                }
                None => {
                    if let Some(g) = g {
                        g.barrier()?;
                    }
                }
            }
            Ok(())
        });
        self.count(&result, &self.shared.counters.barriers);
        result
    }

    /// Waits until everything this member broadcast has been acknowledged by all (and, on a
    /// shared host, read by every rank of the host).
    pub fn flush(&self) -> Result<(), CallError> {
        let result = self.call(|mut g, ring| {
            if let Some(g) = g.as_deref_mut() {
                g.flush()?;
            }
            if let Some(ring) = ring {
                ring.flush(&mut || serve(&mut g))?;
            }
            Ok(())
        });
        if result.is_err() {
            self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
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
        if self.shared.group.is_some() {
            let end = Instant::now() + self.linger;
            while Instant::now() < end {
                let _ = self.call(|g, _| match g {
                    Some(g) => Ok(g.progress(Duration::from_millis(1))?),
                    None => Ok(()),
                });
            }
        }
        if let Some(ring) = &self.ring {
            ring.lock().map_err(|_| CallError::Poisoned)?.detach()?;
        }
        flushed
    }

    fn call<T>(
        &self,
        f: impl FnOnce(Option<&mut Group>, Option<&mut HostRing>) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let s = &self.shared;
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.in_call.store(true, Ordering::Release);
        let t0 = Instant::now();
        let result = (|| {
            // Lock order: the ring, then the group.
            let mut ring = lock(self.ring.as_ref())?;
            let mut group = lock(s.group.as_ref())?;
            f(group.as_deref_mut(), ring.as_deref_mut())
        })();
        s.counters
            .busy_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
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

fn lock<T>(m: Option<&Mutex<T>>) -> Result<Option<MutexGuard<'_, T>>, CallError> {
    m.map(|m| m.lock().map_err(|_| CallError::Poisoned))
        .transpose()
}

/// What the owner does while it waits for the ranks of its host: serve the network.
fn serve(g: &mut Option<&mut Group>) -> Result<(), CallError> {
    if let Some(g) = g.as_deref_mut() {
        g.progress(Duration::ZERO)?;
    }
    Ok(())
}

/// What a rank without a network member does while it waits: nothing.
fn idle() -> Result<(), CallError> {
    Ok(())
}

/// Sends `msg` as network root `nic_root` (this member), after taking in what arrived while
/// the caller was away (acknowledgements of earlier messages free the window).
///
/// `Group::bcast` returns at the root as soon as the member has queued the message, before a
/// turn of the driver has handed its frames to the link: without the turn after it, the
/// frames would leave only with the next call or the progress thread's next look (an 8-byte
/// MPI_Bcast took 3.3 ms instead of about 0.1 ms).
fn send(g: &mut Group, nic_root: u16, mut msg: Vec<u8>) -> Result<(), CallError> {
    g.progress(Duration::ZERO)?;
    g.bcast(nic_root, &mut msg)?;
    g.progress(Duration::ZERO)?;
    Ok(())
}

/// Opens this rank's part of a job whose ranks share hosts: the host's owner creates the
/// host's ring (if others share the host) and joins the network group of one member per
/// host; the others attach to the ring.
fn open_on_hosts(
    iface: &str,
    opts: &EndpointOptions,
    rank: u16,
    hosts: Hosts,
) -> Result<(Option<Group>, Option<HostRing>, HostView), CallError> {
    let bad = || CallError::Placement(format!("rank {rank} is not in a job of {}", hosts.size()));
    let host = hosts.host(rank).ok_or_else(bad)?;
    let local = hosts.local_index(rank).ok_or_else(bad)?;
    let locals = hosts.ranks_on(host).len();
    let token = std::env::var(JOB_TOKEN_VAR).ok();
    let tag = segment_tag(token.as_deref(), opts.group.key.as_ref())?;
    let path = segment_path(opts.group.group_id, &hosts, host, tag.as_deref());
    let layout = Layout::new(locals);
    let timeout = opts.group.timeout;
    let (size, count) = (hosts.size(), hosts.count());
    let view = |owner| HostView { hosts, host, owner };
    if local > 0 {
        let ring = HostRing::attach(&path, layout, size, local, rank, opts.host_wait, timeout)?;
        return Ok((None, Some(ring), view(false)));
    }
    let mut ring = match locals {
        1 => None,
        _ => Some(HostRing::create(
            &path,
            layout,
            size,
            rank,
            opts.host_wait,
            timeout,
        )?),
    };
    let joined = (|| {
        let mut group = match count {
            1 => None,
            _ => {
                // The owners join as the network group's ranks (their hosts' numbers),
                // through the library's membership join like any launcher-ranked group.
                let link = link::open(opts.group.backend, iface, opts.group.wait)?;
                let cfg = JoinConfig {
                    group: opts.group.group_id,
                    mac: link.local_mac(),
                    key: opts.group.key,
                    expect: Expect::Ranks {
                        size: count,
                        rank: host,
                    },
                    max_payload: link.max_pdu().saturating_sub(ethbcast::wire::OVERHEAD),
                };
                let (joined, link) = group::join(link, cfg, timeout, || false)?;
                Some(Group::joined(link, joined, opts.group.clone())?)
            }
        };
        if let Some(ring) = ring.as_mut() {
            let mut g = group.as_mut();
            ring.wait_attached(&mut || serve(&mut g))?;
            ring.joined()?;
        }
        Ok::<_, CallError>(group)
    })();
    match joined {
        Ok(group) => Ok((group, ring, view(true))),
        Err(e) => {
            if let Some(ring) = ring.as_mut() {
                let _ = ring.failed();
            }
            Err(e)
        }
    }
}

/// Longest message a root may leave behind as soon as its call has queued it: everything
/// up to here leaves the root within the call. Longer messages need the root afterwards (a
/// simple broadcast beyond the 16-frame window sends the rest as acknowledgements come in; a
/// push-pull broadcast pushes 860 bytes and serves the pulls for the rest; the tree relays
/// point to point), and a root that returned would serve them only when it next calls in or
/// when the progress thread looks (a 64 KiB broadcast took 16 ms instead of 1.5 ms).
pub fn root_waits_above(algorithm: Algorithm) -> usize {
    match algorithm {
        // The default window's 16 frames hold 16 x 1400+ bytes; keep a margin.
        Algorithm::Simple => 16 * 1024,
        // BTP1 + BTP2 of the default configuration.
        Algorithm::PushPull => 860,
        Algorithm::Tree => 0,
    }
}

fn progress_loop(s: &Shared) {
    let Some(group) = &s.group else {
        return;
    };
    let mut pause = PROGRESS_FIRST;
    let mut seen = s.calls.load(Ordering::Relaxed);
    while !s.stop.load(Ordering::Acquire) {
        std::thread::park_timeout(pause);
        let calls = s.calls.load(Ordering::Relaxed);
        if calls != seen || s.in_call.load(Ordering::Acquire) {
            // The caller was here since the last look: it drove the protocol itself.
            seen = calls;
            pause = PROGRESS_FIRST;
            continue;
        }
        if let Ok(mut g) = group.try_lock() {
            // An error here (a dead link) shows up again in the caller's next call.
            let _ = g.progress(Duration::ZERO);
            s.counters.background_polls.fetch_add(1, Ordering::Relaxed);
        }
        pause = (pause * 2).min(PROGRESS_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(a, _)| *a == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn launchers_local_ranks_give_blocks_of_ranks_per_host() {
        let (rank, hosts) = placement_from_env(env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(rank, 5);
        assert_eq!(hosts.count(), 2);
        assert_eq!(hosts.ranks_on(1), &[4, 5, 6, 7]);
        let (_, hosts) = placement_from_env(env(&[
            ("PMI_RANK", "2"),
            ("PMI_SIZE", "6"),
            ("MPI_LOCALRANKID", "0"),
            ("MPI_LOCALNRANKS", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(hosts.count(), 3);
        // One rank per host, or no local information: the plain path.
        for pairs in [
            &[
                ("ETHBCAST_RANK", "1"),
                ("ETHBCAST_SIZE", "4"),
                ("ETHBCAST_LOCAL_RANK", "0"),
                ("ETHBCAST_LOCAL_SIZE", "1"),
            ][..],
            &[("ETHBCAST_RANK", "1"), ("ETHBCAST_SIZE", "4")][..],
            &[][..],
        ] {
            let pairs: &'static [(&str, &str)] = pairs;
            assert!(placement_from_env(env(pairs)).unwrap().is_none());
        }
    }

    #[test]
    fn placements_the_environment_cannot_describe_are_refused() {
        for pairs in [
            // Round-robin: rank 1 is local rank 0.
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_NTASKS_PER_NODE", "4"),
            ][..],
            // Uneven: 6 ranks, 4 per host.
            &[
                ("ETHBCAST_RANK", "1"),
                ("ETHBCAST_SIZE", "6"),
                ("ETHBCAST_LOCAL_RANK", "1"),
                ("ETHBCAST_LOCAL_SIZE", "4"),
            ][..],
        ] {
            let pairs: &'static [(&str, &str)] = pairs;
            let e = placement_from_env(env(pairs)).unwrap_err();
            assert!(e.to_string().contains("ethbcast_open_hosts"), "{e}");
        }
    }

    #[test]
    fn segments_are_named_per_job_and_host() {
        let hosts = Hosts::blocks(8, 4).unwrap();
        let a = segment_path(0x1234, &hosts, 0, None);
        let b = segment_path(0x1234, &hosts, 1, None);
        let c = segment_path(0x1235, &hosts, 1, None);
        assert_ne!(a, b);
        assert_ne!(b, c);
        let ns = net_namespace();
        assert_ne!(ns, 0, "/proc/self/ns/net is readable");
        assert!(
            b.to_string_lossy()
                .ends_with(&format!("ethbcast-00001234-8-4-{ns}")),
            "{b:?}"
        );
    }

    /// Issue 20, item 7: with a launcher's token or a group key, another local user who knows
    /// every public number of the job (group id, size, ranks, network namespace) cannot name
    /// its segment in advance; every rank of the job names it alike.
    #[test]
    fn segment_names_need_the_jobs_token_or_key() {
        let hosts = Hosts::blocks(8, 4).unwrap();
        let token = "3f1c9a7e55d04b2a9c8e61f0a2b7d4e9";
        let key = [7u8; 32];
        let public = segment_path(0x1234, &hosts, 1, None);
        let named = |token: Option<&str>, key: Option<&[u8; 32]>| {
            let tag = segment_tag(token, key).unwrap();
            segment_path(0x1234, &hosts, 1, tag.as_deref())
        };
        // The same inputs on every rank give the same name.
        assert_eq!(named(Some(token), None), named(Some(token), None));
        assert_eq!(named(None, Some(&key)), named(None, Some(&key)));
        // A token or a key changes the name, and so does another token or key.
        let with_token = named(Some(token), None);
        let with_key = named(None, Some(&key));
        let both = named(Some(token), Some(&key));
        for p in [&with_token, &with_key, &both] {
            assert_ne!(p, &public);
            assert!(p.to_string_lossy().starts_with(&*public.to_string_lossy()));
            assert!(!p.to_string_lossy().contains(token), "{p:?}");
        }
        assert_ne!(with_token, with_key);
        assert_ne!(with_token, both);
        assert_ne!(
            with_token,
            named(Some("3f1c9a7e55d04b2a9c8e61f0a2b7d4e8"), None)
        );
        assert_ne!(with_key, named(None, Some(&[8u8; 32])));
        // 128 bits of tag.
        let name = with_token
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let tag = name.rsplit('-').next().unwrap();
        assert_eq!(tag.len(), 32);
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
        // Neither: the public name. An empty token counts as none; a short one is refused.
        assert_eq!(named(None, None), public);
        assert_eq!(named(Some(""), None), public);
        let e = segment_tag(Some("1234"), None).unwrap_err();
        assert!(e.to_string().contains(JOB_TOKEN_VAR), "{e}");
    }
}
