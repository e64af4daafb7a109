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

use thiserror::Error;

use crate::detect::{DetectorConfig, Gossip};
use crate::driver::{Clock, Driver, Sends, WallClock};
use crate::engine::Config;
use crate::join::{Expect, Join, JoinConfig, JoinError, JoinStats, Joined};
use crate::link::{self, Backend, Link, LinkError, MacAddr, WaitMode};
use crate::member::{Done, Member, MemberConfig, MemberError};
use crate::Key;
use crate::Rank;

use crate::member::Algorithm;
use crate::wire::BarrierAlgo;

mod allgather;
mod host;
mod stream;

pub(crate) use allgather::Allgather;

pub use host::{
    placement_from_env, HostError, HostGroup, HostOptions, Placement, JOB_TOKEN_MIN, JOB_TOKEN_VAR,
};
pub use stream::{Role, Stream, StreamOptions};

/// Where the member list comes from.
#[derive(Debug, Clone)]
pub enum Membership {
    /// MAC addresses in rank order.
    Explicit(Vec<MacAddr>),
    /// A file with one MAC address per line (rank = line order; `#` comments, blank lines
    /// ignored; a line may hold a host name before the MAC).
    Hostfile(std::path::PathBuf),
    /// Rank and size from the launcher's environment; MACs found by discovery.
    Env,
    /// Wait for `expected` members to announce themselves; ranks by sorted MAC.
    Discover {
        /// Members expected, this one included.
        expected: u16,
    },
}

/// Options of a group. Its `Debug` shows whether there is a key, never the key.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Group id (frames of other ids on the segment are ignored).
    pub group_id: u32,
    /// Link backend.
    pub backend: Backend,
    /// Wait mode.
    pub wait: WaitMode,
    /// Default broadcast algorithm.
    pub algorithm: Algorithm,
    /// How long a call may wait (join, bcast, barrier) before failing.
    pub timeout: Duration,
    /// Adjusts the engine configuration.
    pub tweak: Option<fn(&mut Config)>,
    /// Arity of the barrier's combining tree (at least the group size - 1: one coordinator).
    pub barrier_arity: u16,
    /// Shared group key (see [`key_from_passphrase`] and [`read_key_file`](crate::read_key_file)): the join and
    /// every frame are authenticated. Without one, joining fails unless `insecure` is set.
    pub key: Option<Key>,
    /// Join without a key: any host of the segment can then join the group, send frames as
    /// any member, and broadcast data the members deliver. Off by default.
    pub insecure: bool,
    /// Failure detection (gossip heartbeats, confirmation ping, eviction of the dead). Off by
    /// default: heartbeats only flow while a member is inside a call (or calls `progress`),
    /// so turn it on when members call into the library at least every `T_cleanup`.
    pub detector: Option<Detection>,
}

/// Failure-detection settings of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    /// Gossip schedule (the P2P-MPI paper's RR, BRR or DBRR).
    pub protocol: Gossip,
    /// Gossip period.
    pub t_gossip: Duration,
}

impl Detection {
    /// Detection bound: `T_cleanup` of the protocol plus the confirmation time and one period.
    pub fn bound(&self, size: u16) -> Duration {
        let cfg = DetectorConfig {
            protocol: self.protocol,
            ..DetectorConfig::new(Rank::new(0), size, self.t_gossip)
        };
        cfg.cleanup() + cfg.confirm_timeout + self.t_gossip
    }
}

/// What a collective call reports besides its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Members evicted (declared dead) during this call: the call completed for the others.
    pub evicted: Vec<Rank>,
}

/// Argon2id cost of [`key_from_passphrase`]: 19 MiB, 2 passes, 1 lane (the OWASP minimum for
/// Argon2id), about 50 ms on one core of a current machine.
pub const PASSPHRASE_COST: (u32, u32, u32) = (19 * 1024, 2, 1);

/// A passphrase could not be stretched into a key.
#[derive(Debug, Error)]
#[error("cannot derive a key from the passphrase: {0}")]
pub struct PassphraseError(String);

/// Derives the 256-bit key of group `group_id` from a passphrase: Argon2id
/// ([`PASSPHRASE_COST`]) with a salt derived from the group id. A frame sealed with the key
/// (a captured challenge, say) lets an attacker test guesses offline, so every guess must
/// cost as much memory and time as the stretching does; the salt makes the same passphrase a
/// different key in another group, so no table of guesses serves two groups. A random salt
/// ([`key_from_passphrase_salt`], what a key file of `ethbcast keygen --passphrase` holds)
/// makes it a different key in every deployment. Random keys need no stretching.
pub fn key_from_passphrase(passphrase: &str, group_id: u32) -> Result<Key, PassphraseError> {
    let salt = blake3::derive_key("ethbcast 2026-11 passphrase salt", &group_id.to_be_bytes());
    key_from_passphrase_salt(passphrase, &salt[..16])
}

/// Derives a 256-bit key from a passphrase with Argon2id ([`PASSPHRASE_COST`]) under `salt`
/// (at least 8 bytes; 16 random bytes in a key file, see [`read_key_file`](crate::read_key_file)).
pub fn key_from_passphrase_salt(passphrase: &str, salt: &[u8]) -> Result<Key, PassphraseError> {
    let (m, t, p) = PASSPHRASE_COST;
    let params =
        argon2::Params::new(m, t, p, Some(32)).map_err(|e| PassphraseError(e.to_string()))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Key::from_bytes([0; 32]);
    argon
        .hash_password_into(passphrase.as_bytes(), salt, key.as_mut_bytes())
        .map_err(|e| PassphraseError(e.to_string()))?;
    Ok(key)
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            group_id: 0xEB_CA57,
            backend: Backend::Ring,
            wait: WaitMode::Adaptive,
            algorithm: Algorithm::PushPull,
            timeout: Duration::from_secs(30),
            tweak: None,
            barrier_arity: 4,
            key: None,
            insecure: false,
            detector: None,
        }
    }
}

impl GroupOptions {
    /// The default options without a key, chosen explicitly: any host of the segment can
    /// join and inject frames ([`GroupOptions::insecure`]).
    pub fn insecure() -> Self {
        GroupOptions {
            insecure: true,
            ..GroupOptions::default()
        }
    }

    /// Refuses a group without a key unless `insecure` says so. Every way to open a group
    /// asks before it joins (no frame of a refused group is sent); [`Group::joined`], which
    /// every way ends in, asks again of a keyless session.
    pub(crate) fn check_key(&self) -> Result<(), GroupError> {
        match (&self.key, self.insecure) {
            (None, false) => Err(GroupError::NoKey),
            _ => Ok(()),
        }
    }
}

/// Errors of group calls.
#[derive(Debug, Error)]
pub enum GroupError {
    /// The link could not be opened or failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The member refused the call or it failed (configuration, a dead peer).
    #[error(transparent)]
    Member(#[from] MemberError),
    /// The call did not complete in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// The options carry no key and do not set `insecure`.
    #[error("no group key: without one any host of the segment can join, inject frames and broadcast data the members deliver; give the group a key (GroupOptions::key, from a file written by `ethbcast keygen`), or set GroupOptions::insecure to join without one")]
    NoKey,
    /// Not everyone joined in time.
    #[error("only {joined} of {expected} members joined within {timeout:?} ({waiting}): check that every member runs, on the same segment, with the same group id and key")]
    JoinTimeout {
        /// Members heard from (this one included).
        joined: usize,
        /// Members expected.
        expected: usize,
        /// How long we waited.
        timeout: Duration,
        /// What this member was waiting for, and hosts it heard that the membership excludes.
        waiting: String,
        /// What the join knew when it timed out (boxed: it is large beside the other errors).
        seen: Box<JoinSeen>,
    },
    /// The join failed (two members claim one rank, rosters disagree, a bad configuration).
    #[error(transparent)]
    Join(#[from] JoinError),
    /// The caller asked to stop while waiting.
    #[error("interrupted")]
    Interrupted,
    /// The membership source is unusable.
    #[error("membership: {0}")]
    Membership(String),
    /// This host's MAC is not in the member list.
    #[error("this interface's MAC {0} is not in the member list")]
    NotAMember(String),
    /// The rank given is outside the group.
    #[error("rank {rank} is not in a group of {size}")]
    BadRank {
        /// Rank.
        rank: Rank,
        /// Size.
        size: u16,
    },
    /// An allgather's part lengths do not describe its buffer ([`Group::allgather_into`]):
    /// nothing was sent.
    #[error("allgather: {lens} part lengths for a group of {size}, adding up to {total} bytes for a buffer of {out}: pass one length per member, adding up to the buffer's length")]
    Parts {
        /// Lengths given.
        lens: usize,
        /// Members.
        size: u16,
        /// What they add up to (saturating).
        total: usize,
        /// Length of the buffer.
        out: usize,
    },
    /// The root's message does not have the length of this member's buffer
    /// ([`Group::bcast_into`]; in an allgather, the length given for that member's part): the
    /// buffer is left as it was.
    #[error("the message from root {root} has {got} bytes but this member's buffer has {want}: every member must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: Rank,
        /// Length of the message.
        got: usize,
        /// Length of the caller's buffer.
        want: usize,
    },
}

/// A member of a group on a real link: a [`Member`] run with the wall clock.
pub struct Group {
    driver: Driver<Box<dyn Link + Send>>,
    reported: usize,
    opts: GroupOptions,
    join_stats: JoinStats,
    /// The buffer [`Group::bcast_into`] sends from and receives into, kept from call to call
    /// (as large as the largest message so far).
    spare: Vec<u8>,
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

/// How long one turn of the join may wait before it checks its stop flag and settle time.
const SLICE: Duration = Duration::from_millis(50);

/// The turns of a call that only frames and the member's timers can complete (a broadcast,
/// a barrier, a flush) wait for the next frame, the member's next timer or the call's
/// deadline, whichever comes first, and for nothing else: a member that waits for a message
/// sleeps until one of those, not in slices.
const NO_SLICE: Duration = Duration::MAX;

impl Group {
    /// A group over an already opened link, with the member MACs in rank order. This
    /// member's rank is the position of the link's MAC. The members join first (a fresh
    /// session, see [`ethbcast_proto::join`]), so every member must call this (or
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
            Membership::Discover { expected } => Expect::Discover { size: expected },
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
        let mut cfg = Config::new(joined.session.group, rank, size);
        cfg.key = joined.session.key;
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
        let member = Member::new(WallClock.now(), mc)?;
        Ok(Group {
            driver: Driver::new(member, link),
            reported: 0,
            opts,
            join_stats,
            spare: Vec::new(),
        })
    }

    /// What this member's join held and sent until it finished: hellos sent, challenges held,
    /// the most rosters collected at once (bounded by [`ethbcast_proto::join::MAX_CHALLENGES`]
    /// and [`ethbcast_proto::join::HELLO_GAP`] whatever a stranger sends during the join).
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
    /// The member (engine, counters, evictions).
    pub fn member(&self) -> &Member {
        self.driver.member()
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
        let n = self.size();
        if root.get() >= n {
            return Err(GroupError::BadRank {
                rank: root,
                size: n,
            });
        }
        self.driver
            .member_mut()
            .bcast_from(WallClock.now(), root, buf, algo)?;
        let sends = if root == self.rank() {
            Sends::Now
        } else {
            Sends::Deferred
        };
        if let Done::Bcast(data) = self.finish_with("a message from the root", sends)? {
            *buf = data;
        }
        Ok(self.outcome())
    }

    /// MPI_Bcast into the caller's buffer, of a length every member agrees on: the root sends
    /// `buf`, every other member receives the root's message into it. A message whose length
    /// differs from `buf`'s fails with [`GroupError::Length`]; `buf` is then left as it was,
    /// as on any other error. The bytes pass through one buffer the group keeps from call to
    /// call, so nothing is allocated once it has grown to the largest message.
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
        let mut spare = std::mem::take(&mut self.spare);
        let sending = root == self.rank();
        if sending {
            spare.clear();
            spare.extend_from_slice(buf);
        }
        let r = self.bcast_with(root, &mut spare, algo).and_then(|outcome| {
            if !sending {
                if spare.len() != buf.len() {
                    return Err(GroupError::Length {
                        root,
                        got: spare.len(),
                        want: buf.len(),
                    });
                }
                buf.copy_from_slice(&spare);
            }
            Ok(outcome)
        });
        self.spare = spare;
        r
    }

    /// MPI_Allgatherv into the caller's buffer: every member's part, in rank order, back to
    /// back in `out`. `lens` gives every member's part length (every member passes the same
    /// `lens`, MPI's `recvcounts`), `out` is as long as they add up to, and this member's
    /// `part` is `lens[rank]` long. Every member broadcasts its part once, all at the same
    /// time, on its own broadcast stream; each stream is repaired on its own. The parts go by
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
        self.gather_into(own, out, lens)
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
        self.gather_into(own, out, lens)
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
        // The parts arrive this member's first, then the others in rank order.
        let r = self.run_allgather(own, &mut |root, data| {
            lens[root.index()] = data.len();
            out.extend_from_slice(data);
            Ok(())
        });
        r?;
        let before: usize = lens[..me].iter().sum();
        out[..part.len() + before].rotate_left(part.len());
        Ok(lens)
    }

    fn gather_into(
        &mut self,
        own: Vec<u8>,
        out: &mut [u8],
        lens: &[usize],
    ) -> Result<Outcome, GroupError> {
        self.run_allgather(own, &mut |root, data| {
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

    /// Runs an allgather whose own part is `own`; `sink` takes the parts as they come.
    fn run_allgather(
        &mut self,
        mut own: Vec<u8>,
        sink: &mut impl FnMut(Rank, &[u8]) -> Result<(), GroupError>,
    ) -> Result<(), GroupError> {
        let now = WallClock.now();
        // Push-pull's pull paces one root's message by one receiver that has posted for it; in
        // an allgather every root sends at once while its receivers still wait on their own
        // parts, and two roots whose pullers are each other would wait for each other's pull.
        let algo = match self.opts.algorithm {
            Algorithm::Tree => Algorithm::Tree,
            _ => Algorithm::Simple,
        };
        let mut ag = match Allgather::start(now, self.driver.member_mut(), &mut own, algo) {
            Ok(ag) => ag,
            Err(e) => {
                self.spare = own;
                return Err(e.into());
            }
        };
        let after = self.opts.timeout;
        let mut spare = own;
        let r = self
            .driver
            .run_until(&WallClock, now + after, NO_SLICE, Sends::Deferred, |m| {
                ag.poll(WallClock.now(), m, &mut spare, sink)
            });
        self.spare = spare;
        match r? {
            Some(r) => r,
            None => {
                self.driver.member_mut().cancel_call();
                Err(GroupError::Timeout {
                    what: "the parts of an allgather",
                    after,
                })
            }
        }
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
    /// Lost arrivals and releases are retransmitted on timers (`ethbcast_proto::barrier`).
    pub fn barrier(&mut self) -> Result<(), GroupError> {
        self.barrier_with(BarrierAlgo::Broadcast)
    }

    /// A barrier of the chosen kind (all members must choose the same).
    pub fn barrier_with(&mut self, kind: BarrierAlgo) -> Result<(), GroupError> {
        self.driver.member_mut().barrier(WallClock.now(), kind)?;
        self.finish("the barrier release")?;
        Ok(())
    }

    /// Drives the protocol for up to `wait` (repairs, acknowledgements) without a call.
    pub fn progress(&mut self, wait: Duration) -> Result<(), GroupError> {
        self.driver.turn(&WallClock, Some(wait))?;
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
    /// enough past that a member that missed its release would have asked again
    /// ([`Member::serves_stragglers_until`](ethbcast_proto::member::Member::serves_stragglers_until)).
    /// A peer's message that arrives later waits for this member's next call: only that call
    /// can complete it for this member.
    pub fn is_quiet(&self, now: Instant) -> bool {
        self.member().is_idle()
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

/// Rank and size from the launcher's environment (first match wins).
pub fn rank_size_from_env(get: impl Fn(&str) -> Option<String>) -> Option<(Rank, u16)> {
    const PAIRS: [(&str, &str); 5] = [
        ("ETHBCAST_RANK", "ETHBCAST_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ];
    PAIRS.iter().find_map(|(r, s)| {
        let rank: Rank = get(r)?.trim().parse().ok()?;
        let size: u16 = get(s)?.trim().parse().ok()?;
        (rank.get() < size).then_some((rank, size))
    })
}

/// One host of a hostfile: its MAC and, if the line gives one, its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// The host's name (the line's first word that is not its MAC), for reports.
    pub name: Option<String>,
    /// The host's MAC address.
    pub mac: MacAddr,
}

impl HostEntry {
    /// The name if there is one, else the MAC.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.mac.to_string())
    }
}

/// Parses a hostfile: one MAC per line, optionally with a host name (`node17
/// 02:00:00:00:00:11`); `#` starts a comment.
pub fn parse_hostfile(text: &str) -> Result<Vec<HostEntry>, GroupError> {
    let mut hosts: Vec<HostEntry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mac = line
            .split_whitespace()
            .find_map(link::parse_mac)
            .ok_or_else(|| {
                GroupError::Membership(format!(
                    "hostfile line {}: no MAC address in {line:?}",
                    i + 1
                ))
            })?;
        if hosts.iter().any(|h| h.mac == mac) {
            return Err(GroupError::Membership(format!(
                "hostfile line {}: {} listed twice",
                i + 1,
                mac
            )));
        }
        let name = line
            .split_whitespace()
            .find(|w| link::parse_mac(w).is_none())
            .map(str::to_owned);
        hosts.push(HostEntry { name, mac });
    }
    if hosts.is_empty() {
        return Err(GroupError::Membership("hostfile lists no members".into()));
    }
    Ok(hosts)
}

/// Runs the join `cfg` over `link` with the wall clock until the group is formed, `timeout`
/// passes ([`GroupError::JoinTimeout`], saying what was missing) or `stop` returns true
/// ([`GroupError::Interrupted`]; asked every 50 ms). Returns the join and the link. The
/// join's nonce comes from the operating system's random source.
pub fn join<L: Link>(
    link: L,
    cfg: JoinConfig,
    timeout: Duration,
    stop: impl FnMut() -> bool,
) -> Result<(Joined, L), GroupError> {
    join_settling(link, cfg, timeout, None, stop, |_| {})
}

/// When a first-come coordinator starts without every receiver it asked for: once `after`
/// has passed since the join began and at least `min` receivers have joined
/// ([`Join::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// Receivers that must have joined.
    pub min: usize,
    /// How long to wait for the others.
    pub after: Duration,
}

/// What a join that has not completed knows so far, handed to the watcher of
/// [`Stream::join_watching`] while the join runs and used in its timeout message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinSeen {
    /// Members heard from whom a coordinator accepted so far (this one not included).
    pub heard: Vec<MacAddr>,
    /// A coordinator's roster once decided: how many of its members confirmed it (this one
    /// included), of how many.
    pub confirmed: Option<(usize, usize)>,
    /// Hosts whose join frames failed authentication under this member's key (a host with
    /// another key, as a rule), with how many frames each.
    pub unauthenticated: Vec<(MacAddr, u64)>,
    /// Coordinators heard challenging on this group: on a coordinator, other coordinators
    /// (a second sender); on a member, every sender that invited it.
    pub coordinators: Vec<MacAddr>,
    /// Hosts that sent frames as rank 0 of another session (a transfer already running here).
    pub others: Vec<MacAddr>,
    /// Hosts that answered and are not expected (a hostfile that misses them).
    pub strangers: Vec<MacAddr>,
}

impl JoinSeen {
    fn of(j: &ethbcast_proto::join::Join) -> JoinSeen {
        let o = j.overheard();
        let heard = j.heard();
        // A member that answered sends frames of its own session too once it joined one.
        let others = o.others().into_iter().filter(|m| !heard.contains(m));
        JoinSeen {
            others: others.collect(),
            heard,
            confirmed: j.confirmed(),
            unauthenticated: o.unauthenticated(),
            coordinators: o.coordinators(),
            strangers: j.strangers(),
        }
    }

    /// What a join timeout says of it beside the counts: who failed authentication, other
    /// coordinators, other sessions, strangers.
    pub fn explain(&self, coordinating: bool) -> String {
        let list = |v: &[MacAddr]| {
            v.iter()
                .map(MacAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.unauthenticated.is_empty() {
            let who: Vec<String> = self
                .unauthenticated
                .iter()
                .map(|(m, n)| format!("{n} from {m}"))
                .collect();
            parts.push(format!(
                "join frames failed authentication with this host's key ({}): the likely cause is a different key on that host",
                who.join(", ")
            ));
        }
        let rivals: Vec<MacAddr> = match coordinating {
            true => self.coordinators.clone(),
            false => Vec::new(),
        };
        if !rivals.is_empty() {
            parts.push(format!(
                "another coordinator is forming a group with this id on this segment: {}",
                list(&rivals)
            ));
        }
        let others: Vec<MacAddr> = self
            .others
            .iter()
            .filter(|m| !rivals.contains(m))
            .copied()
            .collect();
        if !others.is_empty() {
            parts.push(format!(
                "frames of another session came from {}",
                list(&others)
            ));
        }
        if !self.strangers.is_empty() {
            parts.push(format!("not in the membership: {}", list(&self.strangers)));
        }
        parts.join("; ")
    }
}

/// [`join`], where a first-come coordinator starts as `settle` says (`None`: only with every
/// receiver; the join times out after `timeout` whatever `settle` says), and `watch` is shown
/// what the join knows every slice.
pub(crate) fn join_settling<L: Link>(
    link: L,
    cfg: JoinConfig,
    timeout: Duration,
    settle: Option<Settle>,
    mut stop: impl FnMut() -> bool,
    mut watch: impl FnMut(&JoinSeen),
) -> Result<(Joined, L), GroupError> {
    use rand::RngCore;
    let start = WallClock.now();
    // A timeout past any real wait ("no limit") must not overflow the instant.
    let deadline = start
        .checked_add(timeout)
        .unwrap_or(start + Duration::from_secs(100 * 365 * 86_400));
    let nonce = rand::rngs::OsRng.next_u64();
    // The wall clock orders this host's joins: a member prefers a coordinator's newest
    // challenge, so recordings of earlier ones cannot displace it.
    let clock = WallClock.unix_micros();
    let mut driver = Driver::new(Join::new(cfg, start, nonce)?.with_clock(clock), link);
    loop {
        if stop() {
            return Err(GroupError::Interrupted);
        }
        if let Some(st) = settle {
            let now = WallClock.now();
            if now.saturating_duration_since(start) >= st.after {
                driver.member_mut().settle(now, st.min);
            }
        }
        let until = (WallClock.now() + SLICE).min(deadline);
        if let Some(r) =
            driver.run_until(&WallClock, until, SLICE, Sends::Now, Join::take_result)?
        {
            let joined = r?;
            return Ok((joined, driver.into_parts().1));
        }
        let j = driver.member();
        let seen = JoinSeen::of(j);
        watch(&seen);
        if WallClock.now() >= deadline {
            let (joined, expected) = j.progress();
            let coordinating = j.is_coordinator();
            let mut waiting = if coordinating {
                let heard: Vec<String> = seen.heard.iter().map(|m| m.to_string()).collect();
                match (heard.is_empty(), seen.confirmed) {
                    (true, _) => "heard from no other member".to_string(),
                    (false, Some((c, of))) => format!(
                        "heard from {}; {c} of {of} confirmed the roster",
                        heard.join(", ")
                    ),
                    (false, None) => format!("heard from {}", heard.join(", ")),
                }
            } else {
                "no roster from the group's coordinator".to_string()
            };
            let why = seen.explain(coordinating);
            if !why.is_empty() {
                waiting.push_str("; ");
                waiting.push_str(&why);
            }
            return Err(GroupError::JoinTimeout {
                joined,
                expected,
                timeout,
                waiting,
                seen: Box::new(seen),
            });
        }
    }
}

#[cfg(test)]
mod tests;
