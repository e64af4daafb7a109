//! Groups: what MPI-style programs call. Build a group from an interface and a membership
//! source, then `bcast(root, &mut buf)`, `allgather(part, &mut out)` and `barrier()`.
//!
//! Membership sources ([`Membership`]): an explicit MAC list (rank = position), a hostfile
//! (one MAC per line, rank = line order), the environment of the usual launchers
//! (`ETHBCAST_RANK`/`ETHBCAST_SIZE`, Slurm's `SLURM_PROCID`/`SLURM_NTASKS`, Open MPI's
//! `OMPI_COMM_WORLD_RANK`/`_SIZE`, MPICH/PMI's `PMI_RANK`/`PMI_SIZE`) completed by discovery
//! of the MACs, or pure discovery: members announce themselves by broadcast until the expected
//! number has joined, and ranks are then assigned by sorting the MACs, so every member computes
//! the same table. A member missing at join time gives [`GroupError::JoinTimeout`], never a
//! hang.
//!
//! Broadcast algorithms ([`Algorithm`]): push-pull and simple hardware broadcast (the EQA
//! paper's PPBCAST and SBCAST), and the point-to-point binomial tree (the MPICH-style
//! baseline), which rides on the node's reliable point-to-point channels.
//!
//! An allgather ([`Group::allgather`]) runs on the broadcast streams every member already has: every
//! member broadcasts its part at once, and takes the others' in rank order.
//!
//! Two more kinds of group are built on the same member and driver: [`HostGroup`]
//! ([`host`]), a job with several ranks per host (one network member per host plus the host's
//! shared-memory ring), and [`Stream`] ([`stream`]), a root that pushes a stream of messages
//! to receivers that take them as events (what `ethbcast send`/`recv` use).

use std::time::{Duration, Instant};

use crate::driver::{Clock, Driver, Sends, WallClock};
use crate::link::{self, Link, LinkError, MacAddr};
use crate::Rank;
use ethbcast_proto::{
    Algorithm, BarrierAlgo, DetectorConfig, Done, EngineConfig, EngineStats, Expect, JoinConfig,
    JoinStats, Joined, Member, MemberConfig, MemberError, MemberStats,
};

mod allgather;
mod error;
mod host;
mod joining;
mod options;
mod passphrase;
mod stream;

/// The member of this host's process, made now: one member per process, whose queues that
/// grow with use are made at their bounds ([`Member::reserve_queues`]), so that it allocates
/// nothing in steady state (a few hundred KiB; the simulator's thousands of members let them
/// grow).
fn host_member(mc: MemberConfig) -> Result<Member, ethbcast_proto::MemberError> {
    let mut member = Member::new(WallClock.now(), mc)?;
    member.reserve_queues();
    Ok(member)
}

pub(crate) use allgather::Allgather;
pub use error::GroupError;
pub(crate) use joining::join_settling;
pub use joining::{join, parse_hostfile, rank_size_from_env, HostEntry, JoinSeen, Settle};
pub use options::{Detection, GroupOptions, Membership};
pub use passphrase::{
    key_from_passphrase, key_from_passphrase_salt, PassphraseError, PASSPHRASE_COST,
};

pub use host::{
    placement_from_env, HostError, HostGroup, HostOptions, Placement, JOB_TOKEN_MIN, JOB_TOKEN_VAR,
};
pub use stream::{Role, Stream, StreamOptions};

/// What a collective call reports besides its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Members evicted (declared dead) during this call: the call completed for the others.
    pub evicted: Vec<Rank>,
}

/// The heap bytes a member holds for its fellows: a receive stream per root it took frames
/// of, and a point-to-point channel per peer it exchanged messages with. Streams and channels
/// are made only for frames that passed every check (a host without the key makes none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Heap bytes of each receive stream, by root.
    pub streams: Vec<(Rank, usize)>,
    /// Heap bytes of each point-to-point channel, by peer.
    pub channels: Vec<(Rank, usize)>,
}

/// A member of a group on a real link: the core's member run with the wall clock.
pub struct Group {
    driver: Driver<Box<dyn Link + Send>>,
    reported: usize,
    opts: GroupOptions,
    join_stats: JoinStats,
    /// The buffer [`Group::bcast_into`] sends from and receives into, kept from call to call
    /// (as large as the largest message so far).
    spare: Vec<u8>,
    /// The rest of a gather this member left once its own part was sent
    /// ([`Group::gather_into`]): the other members' parts, taken and dropped as they come
    /// whenever the group is driven between calls ([`Group::progress`]) and at the latest
    /// when the next call starts, so that every root's stream is at the same message on every
    /// member, and the parts this member relays down the tree go on to the root.
    tail: Option<Allgather>,
    /// How the rest of that gather failed, once taken between calls: the next call's error.
    tail_failed: Option<GroupError>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("stats", &self.member().stats())
            .finish()
    }
}

/// The turns of a call that only frames and the member's timers can complete (a broadcast,
/// a barrier, a flush) wait for the next frame, the member's next timer or the call's
/// deadline, whichever comes first, and for nothing else: a member that waits for a message
/// sleeps until one of those, not in slices.
const NO_SLICE: Duration = Duration::MAX;

impl Group {
    /// A group over an already opened link, with the member MACs in rank order. This
    /// member's rank is the position of the link's MAC. The members join first (a fresh
    /// session, see [`ethbcast_proto::Join`]), so every member must call this (or
    /// [`Group::open`] with the same list) within `opts.timeout`.
    pub fn from_link(
        link: Box<dyn Link + Send>,
        peers: impl IntoIterator<Item = impl Into<MacAddr>>,
        opts: GroupOptions,
    ) -> Result<Group, GroupError> {
        opts.check_key()?;
        let peers = peers.into_iter().map(Into::into).collect();
        Group::join(link, Expect::List(peers), opts)
    }

    /// Opens `iface` and builds the group from `membership`.
    pub fn open(
        iface: &str,
        membership: Membership,
        opts: GroupOptions,
    ) -> Result<Group, GroupError> {
        opts.check_key()?;
        let link = link::open(opts.backend, iface, opts.wait)?;
        let expect = match membership {
            Membership::Explicit(p) => Expect::List(p),
            Membership::Hostfile(path) => Expect::List(
                parse_hostfile(&std::fs::read_to_string(&path).map_err(|e| {
                    GroupError::Membership(format!("cannot read hostfile {}: {e}", path.display()))
                })?)?
                .into_iter()
                .map(|h| h.mac)
                .collect(),
            ),
            Membership::Env => {
                let (rank, size) = rank_size_from_env(|k| std::env::var(k).ok())
                    .ok_or_else(|| GroupError::Membership("no rank/size in the environment (ETHBCAST_RANK/ETHBCAST_SIZE, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE)".into()))?;
                Expect::Ranks { size, rank }
            }
            Membership::Discover { expected } => Expect::Discover { expected },
        };
        Group::join(link, expect, opts)
    }

    fn join(
        link: Box<dyn Link + Send>,
        expect: Expect,
        opts: GroupOptions,
    ) -> Result<Group, GroupError> {
        if let Expect::List(l) = &expect {
            let me = link.local_mac();
            if !l.contains(&me) {
                return Err(GroupError::NotAMember(me.to_string()));
            }
        }
        let cfg = JoinConfig {
            group: opts.group_id,
            mac: link.local_mac(),
            key: opts.key.clone(),
            expect,
            max_pdu: link.max_pdu(),
        };
        let (joined, link) = join(link, cfg, opts.timeout, || false)?;
        Group::joined(link, joined, opts)
    }

    /// A group of members that have joined (see [`join`]): the session's group id and key
    /// protect every frame.
    pub fn joined(
        link: Box<dyn Link + Send>,
        joined: Joined,
        opts: GroupOptions,
    ) -> Result<Group, GroupError> {
        if joined.session.key.is_none() {
            opts.check_key()?;
        }
        let rank = joined.rank;
        let join_stats = joined.stats;
        let size = u16::try_from(joined.peers.len())
            .map_err(|_| GroupError::Membership("more than 65534 members".into()))?;
        let mut cfg = EngineConfig::new(joined.session.group, rank, size);
        cfg.key = joined.session.key;
        cfg.encrypt = opts.encrypt;
        cfg.max_pdu = joined.max_pdu.min(link.max_pdu());
        cfg.prefetch = Some(ethbcast_sys::prefetch::prefetch);
        cfg.ack_delay = cfg.ack_delay.max(opts.wait.quiet_floor());
        if let Some(t) = opts.tweak {
            t(&mut cfg);
        }
        let mut mc = MemberConfig::new(cfg, joined.peers);
        mc.barrier_arity = opts.barrier_arity;
        mc.late = Some(joined.late);
        mc.detector = opts.detector.map(|d| {
            let mut dc = DetectorConfig::new(rank, size, d.t_gossip);
            dc.protocol = d.protocol;
            dc
        });
        Ok(Group {
            driver: Driver::new(host_member(mc)?, link),
            reported: 0,
            opts,
            join_stats,
            spare: Vec::new(),
            tail: None,
            tail_failed: None,
        })
    }

    /// What this member's join held and sent until it finished: hellos sent, challenges held,
    /// the most rosters collected at once (bounded by [`ethbcast_proto::MAX_CHALLENGES`]
    /// and [`ethbcast_proto::HELLO_GAP`] whatever a stranger sends during the join).
    pub fn join_stats(&self) -> JoinStats {
        self.join_stats
    }

    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.member().rank()
    }
    /// Number of members.
    pub fn size(&self) -> u16 {
        self.member().size()
    }
    /// The member this group drives.
    fn member(&self) -> &Member {
        self.driver.member()
    }
    /// The group engine's counters: data and repair frames, acknowledgements, drops by
    /// reason.
    pub fn stats(&self) -> &EngineStats {
        self.member().engine_stats()
    }
    /// This member's own counters: frames in and out, refused by layer, events dropped,
    /// broadcasts sent down the tree.
    pub fn member_stats(&self) -> MemberStats {
        self.member().stats()
    }
    /// Every member evicted so far, with when it was.
    pub fn evictions(&self) -> &[(Rank, Instant)] {
        self.member().evicted()
    }
    /// The members this member's broadcasts reach point to point because hardware broadcast
    /// does not reach them (fail-over).
    pub fn failed_over(&self) -> Vec<Rank> {
        self.member().failed_over()
    }
    /// The MAC address of `rank`.
    pub fn mac_of(&self, rank: Rank) -> Option<MacAddr> {
        self.member().mac_of(rank)
    }
    /// The largest frame the group uses: the smallest MTU its members offered in the join.
    pub fn max_pdu(&self) -> usize {
        self.member().engine().config().max_pdu
    }
    /// The heap bytes this member holds for its fellows (see [`Footprint`]).
    pub fn footprint(&self) -> Footprint {
        let m = self.member();
        Footprint {
            streams: Rank::all(m.size())
                .filter_map(|r| Some((r, m.engine().receiver(r)?.heap_bytes())))
                .collect(),
            channels: m.channels(),
        }
    }

    /// Runs the driver until the call in progress gives its result, or the timeout.
    fn finish(&mut self, what: &'static str) -> Result<Done, GroupError> {
        self.finish_with(what, Sends::Now)
    }

    /// [`Group::finish`], with the call's own frames sent as `sends` says (a receiver returns
    /// its message before sending the acknowledgements it made).
    fn finish_with(&mut self, what: &'static str, sends: Sends) -> Result<Done, GroupError> {
        let after = self.opts.timeout;
        let deadline = WallClock.now() + after;
        let r =
            self.driver
                .run_until(&WallClock, deadline, NO_SLICE, sends, Member::take_result)?;
        match r {
            Some(r) => Ok(r?),
            None => {
                self.driver.member_mut().cancel_call();
                Err(GroupError::Timeout { what, after })
            }
        }
    }

    /// MPI_Bcast with the default algorithm: at the root `buf` is sent, elsewhere it is
    /// replaced by the root's message. Every member must call it in the same order. The
    /// root's call returns once every frame of its message has been handed to the link (it
    /// waits for the acknowledgements that make room in the window for the last ones), not
    /// once every member has it (with failure detection: once every live member has it).
    ///
    /// The call copies nothing beyond what the protocol itself does (the root's frames into
    /// its retransmission buffer, a receiver's frames into the message) and allocates nothing:
    /// the root lends `buf` to the library, which cuts its frames from it and gives it back
    /// unchanged; elsewhere the message is received into `buf`'s capacity. A program that passes the same `Vec` to
    /// every call allocates nothing once it has grown to the largest message. When the call
    /// fails `buf` may be left empty (at the root, only if the call timed out with its
    /// message still being sent). For a buffer of a length every member agrees on, see
    /// [`Group::bcast_into`].
    pub fn bcast(&mut self, root: Rank, buf: &mut Vec<u8>) -> Result<Outcome, GroupError> {
        self.bcast_with(root, buf, self.opts.algorithm)
    }

    /// [`Group::bcast`] with a chosen algorithm (all members must choose the same).
    pub fn bcast_with(
        &mut self,
        root: Rank,
        buf: &mut Vec<u8>,
        algo: Algorithm,
    ) -> Result<Outcome, GroupError> {
        if let Done::Bcast(data) =
            self.run_bcast(root, |m, now| m.bcast_from(now, root, buf, algo))?
        {
            *buf = data;
        }
        Ok(self.outcome())
    }

    /// A broadcast from `root` that `start` starts at the member: runs it to its result (a
    /// receiver returns its message before sending the acknowledgements it made).
    fn run_bcast(
        &mut self,
        root: Rank,
        start: impl FnOnce(&mut Member, Instant) -> Result<(), MemberError>,
    ) -> Result<Done, GroupError> {
        check_root(root, self.size())?;
        self.finish_tail()?;
        start(self.driver.member_mut(), WallClock.now())?;
        let sends = if root == self.rank() {
            Sends::Now
        } else {
            Sends::Deferred
        };
        self.finish_with("a message from the root", sends)
    }

    /// MPI_Bcast into the caller's buffer, of a length every member agrees on: the root sends
    /// `buf`, every other member receives the root's message into it. A message whose length
    /// differs from `buf`'s fails with [`GroupError::Length`]; `buf` is then left as it was,
    /// as on any other error (the root's `buf` is never written).
    ///
    /// The root lends `buf` for the call: the frames that fit the retransmission buffer are
    /// cut from it straight into that buffer, as [`Group::bcast`] cuts them from its `Vec`,
    /// and only the rest of a message longer than the buffer's room (the window's free
    /// frames) is copied first, into a buffer the group keeps from call to call. A receiver
    /// receives into that buffer and copies the message into `buf`. So nothing is allocated
    /// once it has grown to the largest message.
    pub fn bcast_into(&mut self, root: Rank, buf: &mut [u8]) -> Result<Outcome, GroupError> {
        self.bcast_into_with(root, buf, self.opts.algorithm)
    }

    /// [`Group::bcast_into`] with a chosen algorithm (all members must choose the same).
    pub fn bcast_into_with(
        &mut self,
        root: Rank,
        buf: &mut [u8],
        algo: Algorithm,
    ) -> Result<Outcome, GroupError> {
        if root == self.rank() {
            let mut spare = std::mem::take(&mut self.spare);
            let r = self.run_bcast(root, |m, now| {
                m.bcast_slice(now, root, buf, &mut spare, algo)
            });
            // The buffer the call took for the message's rest comes back with the result;
            // the group keeps the larger of it and the one the call did not take.
            let r = r.map(|done| {
                if let Done::Bcast(back) = done {
                    if back.capacity() > spare.capacity() {
                        spare = back;
                    }
                }
            });
            self.spare = spare;
            return r.map(|()| self.outcome());
        }
        let mut spare = std::mem::take(&mut self.spare);
        let r = self.bcast_with(root, &mut spare, algo).and_then(|outcome| {
            if spare.len() != buf.len() {
                return Err(GroupError::Length {
                    root,
                    got: spare.len(),
                    want: buf.len(),
                });
            }
            buf.copy_from_slice(&spare);
            Ok(outcome)
        });
        self.spare = spare;
        r
    }

    /// MPI_Allgatherv into the caller's buffer: every member's part, in rank order, back to
    /// back in `out`. `lens` gives every member's part length (every member passes the same
    /// `lens`, MPI's `recvcounts`), `out` is as long as they add up to, and this member's
    /// `part` is `lens[rank]` long. Every member broadcasts its part once, all at the same
    /// time, on its own broadcast stream (parts of many frames in turn, in rank order, so that
    /// the switch's ports are not flooded by all the streams at once); each stream is repaired
    /// on its own. The parts go by
    /// simple broadcast (push-pull's pull serves one root at a time), or down the tree when
    /// the group's algorithm is the tree.
    ///
    /// A part whose length differs from `lens` gives [`GroupError::Length`] (naming its
    /// root; this member's own part too, which is sent all the same), once every other part
    /// has been taken, so that the next call is not shifted. A member that fails during the
    /// call (with failure detection: evicted) makes it fail with
    /// [`MemberError::PeerDead`](crate::MemberError::PeerDead); without failure detection
    /// the call times out. On an error `out` holds no result: some parts may be written.
    pub fn allgather_into(
        &mut self,
        part: &[u8],
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<Outcome, GroupError> {
        check_parts(self.size(), lens, out.len())?;
        let mut own = std::mem::take(&mut self.spare);
        own.clear();
        own.extend_from_slice(part);
        self.gather_parts(own, out, lens)
    }

    /// [`Group::allgather_into`] with this member's part already at its place in `out`
    /// (MPI_IN_PLACE).
    pub fn allgather_in_place(
        &mut self,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<Outcome, GroupError> {
        check_parts(self.size(), lens, out.len())?;
        let me = self.rank().index();
        let at: usize = lens[..me].iter().sum();
        let mut own = std::mem::take(&mut self.spare);
        own.clear();
        own.extend_from_slice(&out[at..at + lens[me]]);
        self.gather_parts(own, out, lens)
    }

    /// Allgather of parts whose lengths the members need not know in advance: `out` is
    /// replaced by every member's part in rank order, back to back, and the parts' lengths
    /// are returned in rank order. Failures as in [`Group::allgather_into`].
    pub fn allgather(&mut self, part: &[u8], out: &mut Vec<u8>) -> Result<Vec<usize>, GroupError> {
        let n = usize::from(self.size());
        let me = self.rank().index();
        let mut lens = vec![0usize; n];
        out.clear();
        let mut own = std::mem::take(&mut self.spare);
        own.clear();
        own.extend_from_slice(part);
        // The parts arrive this member's first, then the others in rank order, or all in rank
        // order when the roots take turns.
        let mut first = None;
        let r = self.run_allgather(own, part.len(), &mut |root, data| {
            first.get_or_insert(root);
            lens[root.index()] = data.len();
            out.extend_from_slice(data);
            Ok(())
        });
        r?;
        if first == Some(self.rank()) {
            let before: usize = lens[..me].iter().sum();
            out[..part.len() + before].rotate_left(part.len());
        }
        Ok(lens)
    }

    /// MPI_Gather into the caller's buffer at `root`: every member's `part`, all of one
    /// length, in rank order, back to back in the root's `out` (`size` parts long); `out` is
    /// not touched elsewhere and may be empty. It is the allgather's machinery
    /// ([`Group::allgather_into`]), except that a member other than the root returns once its
    /// own part is sent: the other members' parts, which reach it too, are taken and dropped
    /// as they come while the group is driven between calls ([`Group::progress`], as a
    /// progress thread does) and at the latest when its next call starts (so the root waits
    /// one round, and the others only for their own send). A part that comes down the tree
    /// (the tree algorithm, or a root whose broadcasts failed over) reaches the root through
    /// members that have left the call: they send it on while driven between calls. A part
    /// of another length gives [`GroupError::Length`] at the root, a dead member
    /// [`MemberError::PeerDead`](crate::MemberError::PeerDead) at the root, and at the others
    /// in this call or, once they left it, in their next call.
    pub fn gather_into(
        &mut self,
        root: Rank,
        part: &[u8],
        out: &mut [u8],
    ) -> Result<Outcome, GroupError> {
        let n = self.size();
        check_root(root, n)?;
        let len = part.len();
        let mut own = std::mem::take(&mut self.spare);
        own.clear();
        own.extend_from_slice(part);
        if root == self.rank() {
            if let Err(e) = check_equal_parts(n, len, out.len()) {
                self.spare = own;
                return Err(e);
            }
            self.run_allgather(own, len, &mut |root, data| {
                if data.len() != len {
                    return Err(GroupError::Length {
                        root,
                        got: data.len(),
                        want: len,
                    });
                }
                let at = root.index() * len;
                out[at..at + len].copy_from_slice(data);
                Ok(())
            })?;
            return Ok(self.outcome());
        }
        self.run_allgather_until(own, len, true, &mut |_, _| Ok(()))?;
        Ok(self.outcome())
    }

    fn gather_parts(
        &mut self,
        own: Vec<u8>,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<Outcome, GroupError> {
        let largest = lens.iter().copied().max().unwrap_or(0);
        self.run_allgather(own, largest, &mut |root, data| {
            let r = root.index();
            let want = lens[r];
            if data.len() != want {
                return Err(GroupError::Length {
                    root,
                    got: data.len(),
                    want,
                });
            }
            let at: usize = lens[..r].iter().sum();
            out[at..at + want].copy_from_slice(data);
            Ok(())
        })?;
        Ok(self.outcome())
    }

    /// Runs an allgather whose own part is `own` and largest part `largest` bytes; `sink`
    /// takes the parts as they come.
    fn run_allgather(
        &mut self,
        own: Vec<u8>,
        largest: usize,
        sink: &mut impl FnMut(Rank, &[u8]) -> Result<(), GroupError>,
    ) -> Result<(), GroupError> {
        self.run_allgather_until(own, largest, false, sink)
    }

    /// [`Group::run_allgather`]; with `leave`, the call returns once this member's own part
    /// is sent and the rest becomes the [`Group::tail`].
    fn run_allgather_until(
        &mut self,
        mut own: Vec<u8>,
        largest: usize,
        leave: bool,
        sink: &mut impl FnMut(Rank, &[u8]) -> Result<(), GroupError>,
    ) -> Result<(), GroupError> {
        if let Err(e) = self.finish_tail() {
            self.spare = own;
            return Err(e);
        }
        let now = WallClock.now();
        // Push-pull's pull paces one root's message by one receiver that has posted for it; in
        // an allgather every root sends at once while its receivers still wait on their own
        // parts, and two roots whose pullers are each other would wait for each other's pull.
        let algo = match self.opts.algorithm {
            Algorithm::Tree => Algorithm::Tree,
            _ => Algorithm::Simple,
        };
        let mut ag = match Allgather::start(now, self.driver.member_mut(), &mut own, algo, largest)
        {
            Ok(ag) => ag,
            Err(e) => {
                self.spare = own;
                return Err(e.into());
            }
        };
        let mut spare = own;
        let r = self.drive(
            &mut ag,
            &mut spare,
            leave,
            sink,
            "the parts of an allgather",
        );
        self.spare = spare;
        if matches!(r, Ok(true)) {
            self.tail = Some(ag);
        }
        r.map(drop)
    }

    /// Runs `ag` until it ends or, with `leave`, until this member's own part is sent
    /// (returns whether it left then); a timeout cancels the call and names `what`.
    fn drive(
        &mut self,
        ag: &mut Allgather,
        spare: &mut Vec<u8>,
        leave: bool,
        sink: &mut impl FnMut(Rank, &[u8]) -> Result<(), GroupError>,
        what: &'static str,
    ) -> Result<bool, GroupError> {
        let after = self.opts.timeout;
        let deadline = WallClock.now() + after;
        let r = self.driver.run_until(
            &WallClock,
            deadline,
            NO_SLICE,
            Sends::Deferred,
            |m| match ag.poll(WallClock.now(), m, spare, sink) {
                None if leave && ag.own_sent() => Some(Ok(true)),
                r => r.map(|r| r.map(|()| false)),
            },
        );
        match r? {
            Some(r) => r,
            None => {
                self.driver.member_mut().cancel_call();
                Err(GroupError::Timeout { what, after })
            }
        }
    }

    /// Takes and drops the rest of a gather this member left early (see [`Group::tail`]).
    fn finish_tail(&mut self) -> Result<(), GroupError> {
        if let Some(e) = self.tail_failed.take() {
            return Err(e);
        }
        let Some(mut ag) = self.tail.take() else {
            return Ok(());
        };
        // The parts land in the group's spare buffer, as a call's do.
        let mut spare = std::mem::take(&mut self.spare);
        let r = self.drive(
            &mut ag,
            &mut spare,
            false,
            &mut |_, _| Ok(()),
            "the parts of a gather",
        );
        self.spare = spare;
        r.map(drop)
    }

    fn outcome(&mut self) -> Outcome {
        let ev = self.member().evicted();
        let evicted = ev[self.reported.min(ev.len())..]
            .iter()
            .map(|&(r, _)| r)
            .collect();
        self.reported = ev.len();
        Outcome { evicted }
    }

    /// Broadcasts this member sent down the tree because hardware broadcast reached too few.
    pub fn tree_fallbacks(&self) -> u64 {
        self.member().stats().tree_fallbacks
    }

    /// Every member evicted so far.
    pub fn evicted(&self) -> Vec<Rank> {
        self.member().evicted().iter().map(|&(r, _)| r).collect()
    }

    /// MPI_Barrier: returns once every member has entered. Arrivals travel point-to-point up a
    /// combining tree of arity `barrier_arity`; the release is one hardware broadcast frame.
    /// Lost arrivals and releases are retransmitted on timers (the core's `Barrier`).
    pub fn barrier(&mut self) -> Result<(), GroupError> {
        self.barrier_with(BarrierAlgo::Broadcast)
    }

    /// A barrier of the chosen kind (all members must choose the same).
    pub fn barrier_with(&mut self, kind: BarrierAlgo) -> Result<(), GroupError> {
        self.finish_tail()?;
        self.driver.member_mut().barrier(WallClock.now(), kind)?;
        self.finish("the barrier release")?;
        Ok(())
    }

    /// Drives the protocol for up to `wait` (repairs, acknowledgements) without a call, and
    /// the rest of a gather this member left once its own part was sent: its parts are taken
    /// as they come, and those this member relays down the tree are sent on to its children,
    /// without which the gather's root would wait for this member's next call.
    pub fn progress(&mut self, wait: Duration) -> Result<(), GroupError> {
        self.serve_tail()?;
        self.driver.turn(&WallClock, Some(wait))?;
        self.serve_tail()?;
        Ok(())
    }

    /// Takes what the rest of a gather left early has received (see [`Group::tail`]) and
    /// sends what that made (a relay's copies for its children); its end, or its failure for
    /// the next call, once every part was taken.
    fn serve_tail(&mut self) -> Result<(), GroupError> {
        let Some(ag) = self.tail.as_mut() else {
            return Ok(());
        };
        let now = WallClock.now();
        // The parts land in the group's spare buffer, as a call's do.
        if let Some(r) = ag.poll(
            now,
            self.driver.member_mut(),
            &mut self.spare,
            &mut |_, _| Ok(()),
        ) {
            self.tail = None;
            self.tail_failed = r.err();
        }
        if self.member().has_data_to_send() {
            self.driver.flush(now)?;
        }
        Ok(())
    }

    /// When the protocol next needs a turn without any frame arriving (a retransmission, an
    /// acknowledgement timer), if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.member().poll_timeout()
    }

    /// True when this member owes its peers nothing: everything it sent is acknowledged by
    /// all, everything it received is acknowledged to its root, nothing waits to be sent, no
    /// timer is armed (no report, repair or retransmission due), and the last barrier is long
    /// enough past that a member that missed its release would have asked again.
    /// A peer's message that arrives later waits for this member's next call: only that call
    /// can complete it for this member. A member with the rest of a gather to take (see
    /// [`Group::progress`]) is not quiet: it may relay parts down the tree to the root.
    pub fn is_quiet(&self, now: Instant) -> bool {
        self.tail.is_none()
            && self.member().is_idle()
            && !self.member().owes_acks()
            && self.next_deadline().is_none()
            && self.stragglers_until(now).is_none()
    }

    /// When a thread serving the group while its owner is away must look again even if no
    /// frame arrives: [`Group::next_deadline`], or the end of the time it stays reachable for
    /// stragglers of the last barrier, whichever comes first.
    pub fn serve_deadline(&self, now: Instant) -> Option<Instant> {
        self.next_deadline()
            .into_iter()
            .chain(self.stragglers_until(now))
            .min()
    }

    fn stragglers_until(&self, now: Instant) -> Option<Instant> {
        self.member().serves_stragglers_until().filter(|t| *t > now)
    }

    /// What a thread serving the group while its owner is away sleeps on without holding the
    /// group, until there is something to serve (with [`Group::next_deadline`]); `None` on a
    /// link that cannot say when frames wait (the simulated switch): such a thread must look
    /// on a schedule.
    pub fn serve_wait(&self) -> Result<Option<(ServeWait, ServeWake)>, GroupError> {
        let io = |e| GroupError::Link(LinkError::Io(e));
        let Some(fd) = self.driver.link().readiness_fd() else {
            return Ok(None);
        };
        let link = fd.try_clone_to_owned().map_err(io)?;
        let (closed, wake) = std::io::pipe().map_err(io)?;
        Ok(Some((
            ServeWait { link, closed },
            ServeWake { _write_end: wake },
        )))
    }

    /// Waits until everything this member sent has been acknowledged, and acknowledges what
    /// it received (which its roots would otherwise ask for once their timers fire).
    pub fn flush(&mut self) -> Result<(), GroupError> {
        self.finish_tail()?;
        let after = self.opts.timeout;
        let now = WallClock.now();
        self.driver.member_mut().ack_all(now);
        let deadline = now + after;
        match self
            .driver
            .run_until(&WallClock, deadline, NO_SLICE, Sends::Now, |m| {
                m.is_idle().then_some(())
            })? {
            Some(()) => Ok(()),
            None => Err(GroupError::Timeout {
                what: "acknowledgements of our broadcasts",
                after,
            }),
        }
    }
}
/// Where a thread that serves a group while its owner is away sleeps ([`Group::serve_wait`]):
/// a copy of the link's descriptor, readable while frames wait, and the read end of a pipe
/// whose write end is the [`ServeWake`].
#[derive(Debug)]
pub struct ServeWait {
    link: std::os::fd::OwnedFd,
    closed: std::io::PipeReader,
}

/// Dropping it wakes the thread sleeping on its [`ServeWait`], now and at every later sleep
/// (the owner closes the group).
#[derive(Debug)]
pub struct ServeWake {
    _write_end: std::io::PipeWriter,
}

impl ServeWait {
    /// Sleeps until a frame waits on the link, `deadline` passes (`None`: no limit) or the
    /// [`ServeWake`] was dropped. A link in error (its interface went away) would wake it at
    /// once for ever: that is returned as the error, and the caller should pause instead.
    pub fn sleep(&self, deadline: Option<Instant>) -> Result<(), LinkError> {
        use std::os::fd::AsFd;
        let timeout = deadline.map(|d| d.saturating_duration_since(WallClock.now()));
        ethbcast_sys::wait::poll_readable(&[self.link.as_fd(), self.closed.as_fd()], timeout)?;
        Ok(())
    }
}

/// Refuses a root that is no member's rank.
pub(crate) fn check_root(root: Rank, size: u16) -> Result<(), GroupError> {
    if root.get() >= size {
        return Err(GroupError::BadRank { rank: root, size });
    }
    Ok(())
}

/// Refuses a buffer `out` bytes long for `size` parts of `len` bytes each.
pub(crate) fn check_equal_parts(size: u16, len: usize, out: usize) -> Result<(), GroupError> {
    let total = len.checked_mul(usize::from(size));
    if total != Some(out) {
        return Err(GroupError::Parts {
            lens: usize::from(size),
            size,
            total: total.unwrap_or(usize::MAX),
            out,
        });
    }
    Ok(())
}

/// Refuses part lengths that do not describe a buffer of `out` bytes for `size` members.
pub(crate) fn check_parts(size: u16, lens: &[usize], out: usize) -> Result<(), GroupError> {
    let total = lens.iter().fold(0usize, |a, &l| a.saturating_add(l));
    if lens.len() != usize::from(size) || total != out {
        return Err(GroupError::Parts {
            lens: lens.len(),
            size,
            total,
            out,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
