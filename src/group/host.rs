//! A group of several ranks per host: one network member per host plus the host's
//! shared-memory ring ([`crate::host_ring`]).

use std::time::{Duration, Instant};

use thiserror::Error;

use super::{Group, GroupError, GroupOptions, Membership, ServeWait, ServeWake};
use crate::host_ring::{self, HostRing, HostRingError, Hosts, Layout, Sink};
use crate::link::{self, LinkError};
use crate::Rank;
use ethbcast_proto::{Expect, JoinConfig, MemberError};

mod placement;
mod segment;

pub use placement::{placement_from_env, Placement};
use segment::{segment_path, segment_tag};
pub use segment::{JOB_TOKEN_MIN, JOB_TOKEN_VAR};

/// Errors of [`HostGroup`] calls.
#[derive(Debug, Error)]
pub enum HostError {
    /// The group layer failed (link, timeout, membership, rank).
    #[error(transparent)]
    Group(#[from] GroupError),
    /// The shared-memory layer of ranks on one host failed.
    #[error(transparent)]
    Host(#[from] HostRingError),
    /// The root's message does not have the length this member passed.
    #[error("the message from root {root} has {got} bytes but this member's buffer has {want}: every member must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: Rank,
        /// Length of the message.
        got: usize,
        /// Length of the caller's buffer.
        want: usize,
    },
    /// The ranks-per-host description (arguments or environment) is unusable.
    #[error("ranks per host: {0}")]
    Placement(String),
}

impl From<LinkError> for HostError {
    /// A link that cannot be opened fails the group layer, as in [`Group::open`].
    fn from(e: LinkError) -> HostError {
        HostError::Group(GroupError::Link(e))
    }
}

/// How to open a [`HostGroup`].
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Options of the network group.
    pub group: GroupOptions,
    /// Membership source (with one rank per host).
    pub membership: Membership,
    /// Where the ranks run.
    pub placement: Placement,
    /// A root's broadcast longer than this many bytes returns only once every member has
    /// acknowledged it; `None` (the default): never.
    ///
    /// No broadcast needs the wait: a root's call runs until the whole message is in its
    /// windows, and so does a tree relay's until its copies are ([`Group::bcast`]), so nothing
    /// is left for them to send after the call. The acknowledgements, which receivers send at
    /// their next call, make room for the next message. Waiting for them only waited for the
    /// receivers' progress threads behind the interposer: every 64 KiB MPI_Bcast stalled
    /// 0.8-4.5 ms (median 2.4 ms) in the root's wait, every tree broadcast about 3 ms.
    pub root_waits_above: Option<usize>,
    /// How ranks of one host wait for each other in shared memory.
    pub host_wait: host_ring::Wait,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            group: GroupOptions::default(),
            membership: Membership::Env,
            placement: Placement::Auto,
            root_waits_above: None,
            host_wait: host_ring::Wait::default(),
        }
    }
}

/// The ranks of this process's host.
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
    fn host_of(&self, root: Rank) -> Result<u16, HostError> {
        self.hosts
            .host(root)
            .ok_or(HostError::Group(GroupError::BadRank {
                rank: root,
                size: self.hosts.size(),
            }))
    }
}

/// A member of a job with one or several ranks per host: the host's network member (its
/// owner only, or every rank with one rank per host) and the host's ring.
///
/// Why: the network protocol runs one member per NIC. When a job places several ranks on one
/// host (MPI's usual placement), every rank of the host joining the network group would send
/// each broadcast to the host several times over one link and repair it several times; the
/// host's ranks instead share its member. The lowest rank of each host (the host's *owner*)
/// joins the network group of one member per host (its rank there is its host's number); the
/// other ranks of the host attach to the host's ring. A root that is not an owner hands its
/// message to its owner through the ring, and the owner sends it to the other hosts; an owner
/// that receives from the network publishes the message to its host's ranks. While the owner
/// waits for the ranks of its host it keeps serving the network, so no other host waits for a
/// repair only it can send. [`Group`] knows nothing of this: the world's ranks are mapped onto
/// the hosts' network ranks here, on `Group`'s public API.
///
/// [`HostGroup`] is the blocking type (one call at a time, like [`Group`]); the C ABI wraps it
/// with a lock, a progress thread and counters.
///
/// Segment names and other local users: `/dev/shm` is shared by every user of the machine, so a
/// host's segment name carries, besides the job's public numbers (group id, size, owner rank,
/// network namespace), a tag no other user can compute when the job has a secret: a keyed hash
/// of the launcher's per-job token (`ETHBCAST_JOB_TOKEN`, [`JOB_TOKEN_VAR`]) and of the group's
/// key, whichever the job has. Every rank of a job computes the same name from the same
/// environment and options. Why not the network join's session: the owner opens the ring
/// *before* it joins (the local ranks attach while it joins, and it waits for them), and the
/// other ranks of a host never join the network at all, so no session exists that they could
/// all know in time. Without token or key the name can be guessed, and another user can make
/// a file there first: the job then fails with a clear error (the segment layer refuses a file
/// of another user, of another mode than 0600, or behind a symbolic link), but it is not fed
/// the other user's ring.
#[derive(Debug)]
pub struct HostGroup {
    /// The network member: every rank with one rank per host, only the hosts' owners
    /// otherwise (and nobody when all ranks run on one host).
    group: Option<Group>,
    /// The host's shared-memory ring (ranks sharing a host only).
    ring: Option<HostRing>,
    /// `None`: one rank per host, network ranks are the world's.
    view: Option<HostView>,
    rank: Rank,
    size: u16,
    root_waits_above: Option<usize>,
    /// The message an owner passes between the network and its host's ring, kept from call
    /// to call so that its capacity is reused.
    msg: Vec<u8>,
}

impl HostGroup {
    /// Opens `iface` (unless every rank runs on this host) and joins: the host's owner creates
    /// the host's ring (if others share the host) and joins the network group of one member
    /// per host, the others attach to the ring. With [`Placement::Auto`] and
    /// [`Membership::Env`], the launcher's environment says whether ranks share hosts.
    pub fn open(iface: &str, opts: HostOptions) -> Result<HostGroup, HostError> {
        let root_waits_above = opts.root_waits_above;
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
        Ok(HostGroup {
            group,
            ring,
            view,
            rank,
            size,
            root_waits_above,
            msg: Vec::new(),
        })
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
        self.group.is_some()
    }

    /// This host's member of the network group, if this process is it.
    pub fn network(&self) -> Option<&Group> {
        self.group.as_ref()
    }

    /// Broadcast into the caller's buffer: the root sends `buf`, every other member receives
    /// the root's message into it. Every member must pass the same length; a receiver whose
    /// length differs gets [`HostError::Length`] and its buffer is left as it was.
    pub fn bcast(&mut self, root: Rank, buf: &mut [u8]) -> Result<(), HostError> {
        super::check_root(root, self.size)?;
        let (nic_root, my_host, root_here) = match &self.view {
            None => (root, self.rank, false),
            Some(v) => {
                let h = v.host_of(root)?;
                (Rank::new(h), Rank::new(v.host), h == v.host)
            }
        };
        let mut g = self.group.as_mut();
        let large = self.root_waits_above.is_some_and(|n| buf.len() > n);
        if root == self.rank {
            // Network first: the other hosts wait longest. The ring write may wait for this
            // host's ranks, and the network keeps being served meanwhile.
            if let Some(g) = g.as_deref_mut() {
                send(g, nic_root, buf)?;
            }
            if let Some(ring) = self.ring.as_mut() {
                ring.publish(root, buf, &mut || serve(&mut g))?;
            }
            if let (Some(g), true) = (g, large) {
                g.flush()?;
            }
            return Ok(());
        }
        let mut msg = std::mem::take(&mut self.msg);
        let r = self.bcast_through(root, (nic_root, my_host, root_here), buf, &mut msg);
        self.msg = msg;
        r
    }

    /// [`HostGroup::bcast`] at a member that is not the root: the message comes through the
    /// ring or the network (into `buf` through the group's buffer, or through `msg` when the
    /// host's ring passes it on). The second argument: the root's network rank, this host's,
    /// and whether the root is on this host.
    fn bcast_through(
        &mut self,
        root: Rank,
        (nic_root, my_host, root_here): (Rank, Rank, bool),
        buf: &mut [u8],
        msg: &mut Vec<u8>,
    ) -> Result<(), HostError> {
        match (self.group.as_mut(), self.ring.as_mut()) {
            // A rank of a host with an owner (or of a job on one host): everything comes
            // through the ring.
            (None, Some(ring)) => {
                ring.read(root, Sink::Buf(buf), &mut idle)
                    .map_err(|e| match e {
                        HostError::Host(HostRingError::Length { root, got, want }) => {
                            HostError::Length { root, got, want }
                        }
                        e => e,
                    })?;
                return Ok(());
            }
            // Another rank of this host is root: its message comes through the ring, and the
            // owner sends it to the other hosts.
            (Some(g), Some(ring)) if root_here => {
                ring.read(root, Sink::Vec(msg), &mut idle)?;
                send(g, my_host, msg)?;
                if self.root_waits_above.is_some_and(|n| msg.len() > n) {
                    g.flush()?;
                }
            }
            // This rank receives from the network, straight into the caller's buffer.
            (Some(g), None) => {
                return match g.bcast_into(nic_root, buf) {
                    Err(GroupError::Length { got, want, .. }) => {
                        Err(HostError::Length { root, got, want })
                    }
                    r => r.map(drop).map_err(HostError::from),
                };
            }
            // This rank receives from the network and hands the message to its host.
            (Some(g), Some(ring)) => {
                g.bcast(nic_root, msg)?;
                let mut g = Some(g);
                ring.publish(root, msg, &mut || serve(&mut g))?;
            }
            (None, None) => {
                return Err(HostError::Placement(
                    "this rank has neither a network member nor a host ring".into(),
                ))
            }
        }
        if msg.len() != buf.len() {
            return Err(HostError::Length {
                root,
                got: msg.len(),
                want: buf.len(),
            });
        }
        buf.copy_from_slice(msg);
        Ok(())
    }

    /// MPI_Allgatherv into the caller's buffer ([`Group::allgather_into`]): every member's
    /// part, in rank order, back to back in `out`; `lens` gives every member's part length.
    /// Ranks sharing a host take the parts in one order: the host's own ranks' first, then
    /// every other rank's, each in rank order (each host's owner sends its host's parts before
    /// it waits for anyone else's, and receives the others' on their hosts' streams). A part
    /// of another length than `lens` says is [`HostError::Length`] once every part was taken.
    pub fn allgather_into(
        &mut self,
        part: &[u8],
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<(), HostError> {
        super::check_parts(self.size, lens, out.len())?;
        if self.ring.is_none() {
            return self.network_gather(Some(part), out, lens);
        }
        self.ring_gather(Some(part), out, lens)
    }

    /// [`HostGroup::allgather_into`] with this rank's part already at its place in `out`
    /// (MPI_IN_PLACE).
    pub fn allgather_in_place(&mut self, out: &mut [u8], lens: &[usize]) -> Result<(), HostError> {
        super::check_parts(self.size, lens, out.len())?;
        if self.ring.is_none() {
            return self.network_gather(None, out, lens);
        }
        self.ring_gather(None, out, lens)
    }

    /// MPI_Gather into `out` at `root` ([`Group::gather_into`]): every rank's `part`, all of
    /// one length, in rank order, back to back in the root's `out`; `out` is not touched
    /// elsewhere. With one rank per host a rank other than the root returns once its part is
    /// sent; ranks sharing hosts take the whole allgather (each rank's part reaches every rank
    /// through its host), the others' parts into a buffer of their own.
    pub fn gather_into(
        &mut self,
        root: Rank,
        part: &[u8],
        out: &mut [u8],
    ) -> Result<(), HostError> {
        super::check_root(root, self.size)?;
        if self.ring.is_some() {
            let lens = vec![part.len(); usize::from(self.size)];
            if root == self.rank {
                super::check_equal_parts(self.size, part.len(), out.len())?;
                return self.ring_gather(Some(part), out, &lens);
            }
            let mut all = vec![0u8; part.len() * lens.len()];
            return self.ring_gather(Some(part), &mut all, &lens);
        }
        let g = self.network_mut()?;
        length_of(g.gather_into(root, part, out))
    }

    /// One rank per host: the network group's allgather, whose ranks are the world's.
    fn network_gather(
        &mut self,
        part: Option<&[u8]>,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<(), HostError> {
        let g = self.network_mut()?;
        length_of(match part {
            Some(p) => g.allgather_into(p, out, lens),
            None => g.allgather_in_place(out, lens),
        })
    }

    /// The network member of a rank with one rank per host.
    fn network_mut(&mut self) -> Result<&mut Group, HostError> {
        self.group.as_mut().ok_or_else(|| {
            HostError::Placement("this rank has neither a network member nor a host ring".into())
        })
    }

    /// Ranks sharing hosts: one broadcast per rank through [`HostGroup::bcast`], this host's
    /// ranks first.
    fn ring_gather(
        &mut self,
        part: Option<&[u8]>,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<(), HostError> {
        let me = self.rank;
        let mine: Vec<Rank> = match &self.view {
            Some(v) => v.hosts.ranks_on(v.host).to_vec(),
            None => vec![me],
        };
        let others = Rank::all(self.size).filter(|r| !mine.contains(r));
        let mut failed = None;
        for root in mine.iter().copied().chain(others) {
            let i = root.index();
            let at: usize = lens[..i].iter().sum();
            let place = &mut out[at..at + lens[i]];
            let r = match part {
                Some(p) if root == me && p.len() != place.len() => {
                    // Sent as it is, so that the others take it (and fail) in step.
                    let mut own = p.to_vec();
                    self.bcast(root, &mut own).and(Err(HostError::Length {
                        root,
                        got: p.len(),
                        want: place.len(),
                    }))
                }
                Some(p) if root == me => {
                    place.copy_from_slice(p);
                    self.bcast(root, place)
                }
                _ => self.bcast(root, place),
            };
            match r {
                Ok(()) => {}
                Err(e @ HostError::Length { .. })
                | Err(e @ HostError::Group(GroupError::Member(MemberError::PeerDead(_)))) => {
                    failed.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Barrier: returns once every member has entered. Ranks sharing a host arrive through
    /// shared memory; the owners meet in the network barrier and release their hosts.
    pub fn barrier(&mut self) -> Result<(), HostError> {
        let owner = self.view.as_ref().is_none_or(|v| v.owner);
        let mut g = self.group.as_mut();
        match self.ring.as_mut() {
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
    }

    /// Waits until everything this member broadcast has been acknowledged by all (and, on a
    /// shared host, read by every rank of the host).
    pub fn flush(&mut self) -> Result<(), HostError> {
        let mut g = self.group.as_mut();
        if let Some(g) = g.as_deref_mut() {
            g.flush()?;
        }
        if let Some(ring) = self.ring.as_mut() {
            ring.flush(&mut || serve(&mut g))?;
        }
        Ok(())
    }

    /// The network member's [`Group::is_quiet`] (true for a rank without one).
    pub fn is_quiet(&self, now: Instant) -> bool {
        self.group.as_ref().is_none_or(|g| g.is_quiet(now))
    }

    /// The network member's [`Group::serve_deadline`] (`None` for a rank without one).
    pub fn serve_deadline(&self, now: Instant) -> Option<Instant> {
        self.group.as_ref().and_then(|g| g.serve_deadline(now))
    }

    /// The network member's [`Group::serve_wait`] (`None` for a rank without one).
    pub fn serve_wait(&self) -> Result<Option<(ServeWait, ServeWake)>, HostError> {
        Ok(match self.group.as_ref() {
            Some(g) => g.serve_wait()?,
            None => None,
        })
    }

    /// Drives the network protocol for up to `wait` (repairs, acknowledgements) without a
    /// call; nothing to do for a rank without a network member.
    pub fn progress(&mut self, wait: Duration) -> Result<(), HostError> {
        if let Some(g) = self.group.as_mut() {
            g.progress(wait)?;
        }
        Ok(())
    }

    /// Leaves the host's ring (the network member leaves when the group is dropped).
    pub fn leave_host(&mut self) -> Result<(), HostError> {
        if let Some(ring) = self.ring.as_mut() {
            ring.detach()?;
        }
        Ok(())
    }
}

/// What the owner does while it waits for the ranks of its host: serve the network.
fn serve(g: &mut Option<&mut Group>) -> Result<(), HostError> {
    if let Some(g) = g.as_deref_mut() {
        g.progress(Duration::ZERO)?;
    }
    Ok(())
}

/// A network call's result, a part of another length as the host group says it.
fn length_of(r: Result<super::Outcome, GroupError>) -> Result<(), HostError> {
    match r {
        Err(GroupError::Length { root, got, want }) => Err(HostError::Length { root, got, want }),
        r => r.map(drop).map_err(HostError::from),
    }
}

/// What a rank without a network member does while it waits: nothing.
fn idle() -> Result<(), HostError> {
    Ok(())
}

/// Sends `msg` as network root `nic_root` (this member), after taking in what arrived while
/// the caller was away (acknowledgements of earlier messages free the window).
///
/// `Group::bcast` returns at the root once the whole message is in the member's window, and
/// hands it to the link as it returns; the turn after it takes in what arrived meanwhile and
/// sends what that made. (An 8-byte MPI_Bcast took 3.3 ms instead of about 0.1 ms behind the
/// C ABI's progress thread when its frames waited for the root's next call.)
fn send(g: &mut Group, nic_root: Rank, msg: &mut [u8]) -> Result<(), HostError> {
    g.progress(Duration::ZERO)?;
    g.bcast_into(nic_root, msg)?;
    g.progress(Duration::ZERO)?;
    Ok(())
}

/// Opens this rank's part of a job whose ranks share hosts: the host's owner creates the
/// host's ring (if others share the host) and joins the network group of one member per
/// host; the others attach to the ring.
fn open_on_hosts(
    iface: &str,
    opts: &HostOptions,
    rank: Rank,
    hosts: Hosts,
) -> Result<(Option<Group>, Option<HostRing>, HostView), HostError> {
    opts.group.check_key()?;
    let bad = || HostError::Placement(format!("rank {rank} is not in a job of {}", hosts.size()));
    let host = hosts.host(rank).ok_or_else(bad)?;
    let local = hosts.local_index(rank).ok_or_else(bad)?;
    let locals = hosts.ranks_on(host).len();
    let token = std::env::var(JOB_TOKEN_VAR).ok();
    let tag = segment_tag(token.as_deref(), opts.group.key.as_deref())?;
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
                    key: opts.group.key.clone(),
                    expect: Expect::Ranks {
                        size: count,
                        rank: Rank::new(host),
                    },
                    max_pdu: link.max_pdu(),
                };
                let (joined, link) = super::join(link, cfg, timeout, || false)?;
                Some(Group::joined(link, joined, opts.group.clone())?)
            }
        };
        if let Some(ring) = ring.as_mut() {
            let mut g = group.as_mut();
            ring.wait_attached(&mut || serve(&mut g))?;
            ring.joined()?;
        }
        Ok::<_, HostError>(group)
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

#[cfg(test)]
mod tests;
