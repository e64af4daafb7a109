//! A streaming group: one root pushes a stream of messages, the receivers take them as
//! events as they arrive (what `ethbcast send`/`recv` use to distribute a file).

use crate::Key;
use std::time::{Duration, Instant};

use super::{GroupError, JoinSeen};
use crate::driver::{Clock, Driver, Sends, WallClock};
use crate::link::{self, Backend, GroupAddress, Link, LinkError, MacAddr, WaitMode};
use crate::Rank;
use ethbcast_proto::{
    Algorithm, ConfigError, Dest, DestProgress, EngineConfig, EngineStats, Event, Expect,
    JoinConfig, Member, MemberConfig, MemberError,
};

/// Options of a stream (both sides must agree on the group id, the key and the address).
/// Its `Debug` never shows the key.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Group id of the join (the stream's frames carry one derived from the session).
    pub group_id: u32,
    /// Link backend.
    pub backend: Backend,
    /// Wait mode.
    pub wait: WaitMode,
    /// Frames in flight: the root's shared retransmission buffer slots, and the receive
    /// window and receive queue of each receiver.
    pub window: usize,
    /// A receiver acknowledges every this many frames.
    pub ack_every: usize,
    /// A receiver gathers the gaps it finds for this many frames before it asks for them, in
    /// one NACK ([`EngineConfig::nack_gather`]; 0: at once).
    pub nack_gather: usize,
    /// A receiver asks a fellow receiver for a lost frame before the root (peer repair).
    pub peer_repair: bool,
    /// Shared key: the join and every frame of the stream are authenticated under a key of
    /// this session. Without one, [`Stream::join`] refuses unless `insecure` is set.
    pub key: Option<Key>,
    /// With a key: encrypt every frame this member sends ([`GroupOptions::encrypt`](crate::GroupOptions::encrypt)).
    /// On by default.
    pub encrypt: bool,
    /// Join without a key: any host of the segment can then join, inject frames, and become
    /// the root a receiver takes its stream from, and every byte goes in the clear. Off by
    /// default.
    pub insecure: bool,
    /// On a receiver: take only the roster of the root with this MAC (the root's own MAC,
    /// which a host without the key can forge, so a pin against mistakes, not attacks).
    pub root: Option<MacAddr>,
    /// Where the stream's broadcasts go: its own multicast address by default.
    pub group_address: GroupAddress,
    /// Deliveries a receiver accepts ahead of its application.
    pub prepost: usize,
    /// The application checks the whole stream end to end with a digest of its own: data
    /// frames then carry a CRC over their header only ([`EngineConfig::end_to_end`]). Both sides
    /// must agree.
    pub end_to_end: bool,
    /// The longest message a receiver takes ([`EngineConfig::max_message`]): a frame of a longer
    /// one is dropped and counted (`drops.too_long` of [`Stream::stats`]) before anything is
    /// reserved for it. The root sends no longer message.
    pub max_message: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        let cfg = EngineConfig::new(0, Rank::new(0), 2);
        StreamOptions {
            group_id: 0xEBD1_5700,
            backend: Backend::Ring,
            wait: WaitMode::Adaptive,
            window: cfg.window,
            ack_every: cfg.ack_every,
            nack_gather: cfg.nack_gather,
            peer_repair: cfg.peer_repair,
            key: None,
            encrypt: true,
            insecure: false,
            root: None,
            group_address: GroupAddress::Derived,
            prepost: 64,
            end_to_end: false,
            max_message: cfg.max_message,
        }
    }
}

impl StreamOptions {
    /// Opens `iface` with receive queues as deep as the window (a whole window can arrive
    /// while this host is busy elsewhere), joined to the stream's group address, so that it
    /// receives the stream's broadcasts and, on a segment shared with other streams, only
    /// this one's. Separate from the join so that a program can drop its privileges in
    /// between.
    pub fn open_link(&self, iface: &str) -> Result<Box<dyn Link + Send>, LinkError> {
        self.open_link_sized(iface, self.window)
    }

    /// As [`StreamOptions::open_link`], with at least `rx_frames` frames of receive queue
    /// (the window's worth, plus what the link is to [retain](crate::link::Link::retain)).
    pub fn open_link_sized(
        &self,
        iface: &str,
        rx_frames: usize,
    ) -> Result<Box<dyn Link + Send>, LinkError> {
        let mut link = link::open_sized(self.backend, iface, self.wait, rx_frames)?;
        match link.join_group(self.group_mac()) {
            // The member still sends to the broadcast address, which every link receives: a
            // backend without multicast groups keeps working with the default address.
            Err(LinkError::GroupsUnsupported { backend })
                if self.group_address == GroupAddress::Derived =>
            {
                tracing::warn!(
                    backend,
                    "multicast group not joined; the group's frames go to broadcast"
                );
            }
            r => r?,
        }
        Ok(link)
    }

    /// The destination of the stream's broadcasts.
    pub fn group_mac(&self) -> MacAddr {
        self.group_address.mac(self.group_id)
    }

    /// Whether an engine can run with these options ([`EngineConfig::check`]): checked before a
    /// join, a bad option fails at once instead of once a peer has come.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.config(Rank::new(0), 2).check()
    }

    /// The engine configuration of member `rank` of a stream of `size` members (before the
    /// session's group id and key, and the link's frame size, apply).
    pub fn config(&self, rank: Rank, size: u16) -> EngineConfig {
        let mut cfg = EngineConfig::new(self.group_id, rank, size);
        cfg.window = self.window;
        cfg.ack_every = self.ack_every;
        cfg.nack_gather = self.nack_gather;
        cfg.peer_repair = self.peer_repair;
        // A stream's receivers take messages as they come, not in a call a root waits on: a
        // message held back for fellows' requests while loss lasts (a window's worth of
        // frames) comes later than it could, which they do not notice, and spares a copy of
        // its last frames; it is memory held longer (`EngineConfig::peer_hold`).
        cfg.peer_hold = true;
        cfg.end_to_end = self.end_to_end;
        cfg.encrypt = self.encrypt;
        cfg.max_message = self.max_message;
        cfg.ack_delay = cfg.ack_delay.max(self.wait.quiet_floor());
        cfg.prefetch = Some(ethbcast_sys::prefetch::prefetch);
        cfg
    }
}

/// Which side of the stream this member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The root (rank 0): it coordinates the join and takes the first `receivers` distinct
    /// hosts that answer, only those of `only` if given (in that rank order).
    Root {
        /// Receivers to wait for.
        receivers: usize,
        /// The receivers' MACs, if only those may join.
        only: Option<Vec<MacAddr>>,
        /// Start without some of them: once this many have joined and this long has passed
        /// (`None`: only with all of them).
        settle: Option<super::Settle>,
    },
    /// A receiver: it joins the first root whose roster names it.
    Receiver,
}

/// A member of a stream.
///
/// Why a type of its own: a [`Group`](super::Group) is MPI style, every member enters the
/// same collective call and the call returns when it is done, so a receiver cannot get
/// ahead of its application and a root cannot have more than one broadcast on the wire. A
/// stream instead keeps the root's shared retransmission buffer full: the root queues
/// messages as long as the window allows ([`Stream::send`]), learns which of them every live
/// receiver has acknowledged ([`Stream::stable_through`]), and watches each receiver's
/// progress ([`Stream::receiver_progress`]) to evict the dead ([`Stream::evict`]); receivers
/// keep [`StreamOptions::prepost`] deliveries posted and take them as
/// [`Event::Delivered`] ([`Stream::poll_event`]). Both sides can exchange small notices and
/// reliable point-to-point messages (completion reports, say).
///
/// The join, the key and the timeouts are the group's: the root coordinates the library's
/// join ([`ethbcast_proto::Join`]) and takes the receivers [`Role::Root`] names, a receiver
/// answers the first root whose roster names it; the session then protects every frame
/// (with [`StreamOptions::key`], under a key of this session). The member is the same as a
/// group's, run by the same loop with the wall clock; nothing blocks
/// longer than the wait a caller passes to [`Stream::turn`].
///
/// Without a key any host of the segment can answer a receiver's hello with a roster of its
/// own and become the root it receives from: a stream refuses to join without a key unless
/// [`StreamOptions::insecure`] says so, and a keyless receiver can be told whose roster
/// alone to take ([`StreamOptions::root`]; a MAC can be forged, so this keeps out strangers
/// by mistake, not by attack).
pub struct Stream {
    driver: Driver<Box<dyn Link + Send>>,
    peers: Vec<MacAddr>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

impl Stream {
    /// Joins the stream on `link` (see [`StreamOptions::open_link`]) as `role`. Gives up
    /// after `wait` ([`GroupError::JoinTimeout`]) or once `stop` returns true
    /// ([`GroupError::Interrupted`]; asked every 50 ms).
    pub fn join(
        link: Box<dyn Link + Send>,
        role: Role,
        opts: &StreamOptions,
        wait: Duration,
        stop: impl FnMut() -> bool,
    ) -> Result<Stream, GroupError> {
        Stream::join_watching(link, role, opts, wait, stop, |_| {})
    }

    /// [`Stream::join`], showing `watch` what the join knows so far every 50 ms (hosts heard,
    /// join frames that failed authentication, other coordinators: see [`JoinSeen`]), so that a
    /// caller can say what it hears while it waits.
    pub fn join_watching(
        link: Box<dyn Link + Send>,
        role: Role,
        opts: &StreamOptions,
        wait: Duration,
        stop: impl FnMut() -> bool,
        watch: impl FnMut(&JoinSeen),
    ) -> Result<Stream, GroupError> {
        if opts.key.is_none() && !opts.insecure {
            return Err(GroupError::Membership(
                "no group key: without one any host of the segment can join, inject data or \
                 become the root; give the stream a key (StreamOptions::key), or set \
                 StreamOptions::insecure to join without one"
                    .into(),
            ));
        }
        let (expect, settle) = match (role, opts.root) {
            (
                Role::Root {
                    receivers,
                    only,
                    settle,
                },
                _,
            ) => (Expect::FirstCome { receivers, only }, settle),
            (Role::Receiver, None) => (Expect::Invited, None),
            (Role::Receiver, Some(root)) => (Expect::InvitedBy(root), None),
        };
        let cfg = JoinConfig {
            group: opts.group_id,
            mac: link.local_mac(),
            key: opts.key.clone(),
            max_pdu: link.max_pdu(),
            expect,
        };
        let (joined, link) = super::join_settling(link, cfg, wait, settle, stop, watch)?;
        let size = u16::try_from(joined.peers.len())
            .map_err(|_| GroupError::Membership("more than 65534 members".into()))?;
        let mut cfg = opts.config(joined.rank, size);
        cfg.group = joined.session.group;
        cfg.key = joined.session.key;
        cfg.max_pdu = joined.max_pdu.min(link.max_pdu());
        let peers = joined.peers.clone();
        let mut mc = MemberConfig::new(cfg, joined.peers);
        mc.prepost = opts.prepost;
        mc.late = Some(joined.late);
        if joined.rank != Rank::new(0) {
            // A receiver takes the root's stream and channel alone: nothing is made or
            // reserved for frames that speak as a fellow receiver (without a key, anybody's).
            mc.senders = Some(vec![Rank::new(0)]);
        }
        Ok(Stream {
            driver: Driver::new(super::host_member(mc)?, link),
            peers,
        })
    }

    /// This member's rank (the root is 0).
    pub fn rank(&self) -> Rank {
        self.member().rank()
    }
    /// Number of members, root included.
    pub fn size(&self) -> u16 {
        self.member().size()
    }
    /// The members' MACs in rank order.
    pub fn peers(&self) -> &[MacAddr] {
        &self.peers
    }
    /// The member this stream drives.
    fn member(&self) -> &Member {
        self.driver.member()
    }
    /// This member's engine counters (data, repair frames; drops).
    pub fn stats(&self) -> &EngineStats {
        self.member().engine_stats()
    }

    /// One turn of the driver: hands what the member has to the link, waits up to `wait` for
    /// frames (less when a timer is due), takes them in, fires timers.
    pub fn turn(&mut self, wait: Duration) -> Result<(), LinkError> {
        self.driver.turn(&WallClock, Some(wait))?;
        Ok(())
    }

    /// The next event for the application: a message of the stream
    /// ([`Event::Delivered`]), a notice, an eviction.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.driver.member_mut().poll_event()
    }

    /// Queues the next message of this member's stream; returns its id (ids grow by one).
    /// Fails with [`crate::SendError::NoReceivers`] once every receiver is gone.
    pub fn send(&mut self, data: Vec<u8>) -> Result<u64, MemberError> {
        self.driver
            .member_mut()
            .send_stream(WallClock.now(), data, Algorithm::Simple)
    }

    /// [`Stream::send`] of the message in `buf`, lent: the stream takes it (leaving `buf`
    /// empty) and gives the buffer back through [`Stream::take_sent`] once the message is cut
    /// into frames, so that the next message is read into memory already allocated and in use
    /// instead of pages the kernel must fault in and clear. On an error `buf` keeps the
    /// message.
    pub fn send_from(&mut self, buf: &mut Vec<u8>) -> Result<u64, MemberError> {
        self.driver
            .member_mut()
            .send_stream_from(WallClock.now(), buf, Algorithm::Simple)
    }

    /// The buffer of message `id` sent with [`Stream::send_from`], once all its frames are in
    /// the retransmission buffer (the newest two such buffers are kept; `None` before, or
    /// once taken).
    pub fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        self.driver.member_mut().take_sent(id)
    }

    /// Messages of this member queued in the engine and not yet acknowledged by all.
    pub fn queued(&self) -> usize {
        self.member().engine().sender().queued()
    }

    /// The last message (by id) every live receiver has acknowledged, with all before it.
    pub fn stable_through(&self) -> Option<u64> {
        self.member().stable_through()
    }

    /// How far receiver `rank` is with this member's stream.
    pub fn receiver_progress(&self, rank: Rank) -> Option<DestProgress> {
        self.member().dest_progress(rank)
    }

    /// When a frame of this stream from `rank` was last heard.
    pub fn last_heard(&self, rank: Rank) -> Option<Instant> {
        self.member().engine().last_heard(rank)
    }

    /// Hands `observer` the bytes of `root`'s messages, in order, as they are consumed.
    pub fn observe(&mut self, root: Rank, observer: ethbcast_proto::Observer) {
        self.driver
            .member_mut()
            .observe(WallClock.now(), root, observer)
    }

    /// Keeps at most `keep` bytes of `root`'s messages: longer ones are handed to the
    /// observer alone and come as [`Event::Observed`]: the copy into a message buffer nobody
    /// would read is not made.
    pub fn keep_at_most(&mut self, root: Rank, keep: usize) {
        self.driver
            .member_mut()
            .keep_at_most(WallClock.now(), root, keep)
    }

    /// Whether the link holds received frames until the observer's
    /// [`frames_done`](ethbcast_proto::Observe::frames_done) (see
    /// [`crate::link::Link::holds_frames`]).
    pub fn link_holds_frames(&self) -> bool {
        self.driver.link().holds_frames()
    }

    /// Tells the observers that no frame of the link is held now (see
    /// [`ethbcast_proto::Observe::frames_done`]): what they keep to write they write
    /// now. For bytes the engine handed over outside a turn (out of its own copies).
    pub fn flush_observer(&mut self) {
        self.driver.frames_done(WallClock.now())
    }

    /// Leaves in the link the frames of `root`'s stream that would be copied into the
    /// receive window (behind a gap, or kept for fellows' requests), if the link can retain
    /// up to `frames` of them after each batch (see [`crate::link::Link::retain`]): they are
    /// read there when their turn comes, and copied only if they still wait when the link
    /// gives them back. Returns how many it retains (0:
    /// nothing changes). For a stream whose observer writes from the link's frames.
    pub fn leave_in_link(&mut self, root: Rank, frames: usize) -> usize {
        let kept = self.driver.retain(frames);
        if kept > 0 {
            self.driver
                .member_mut()
                .leave_in_link(WallClock.now(), root);
        }
        kept
    }

    /// Evicts `rank`: the stream goes on for the others without waiting for it.
    pub fn evict(&mut self, rank: Rank) {
        self.driver.member_mut().evict(WallClock.now(), rank)
    }

    /// Stops the stream at once: nothing queued is sent or repaired any more.
    pub fn abandon(&mut self) {
        self.driver.member_mut().abandon()
    }

    /// Sends a small unreliable notice to `dst` (best effort: repeat what matters).
    pub fn notice(&mut self, dst: Dest, body: Vec<u8>) -> Result<(), MemberError> {
        self.driver.member_mut().send_notice(dst, body)
    }

    /// Sends `data` to `peer` alone over the reliable point-to-point channel.
    pub fn send_to(&mut self, peer: Rank, data: Vec<u8>) -> Result<(), MemberError> {
        self.driver
            .member_mut()
            .send_to(WallClock.now(), peer, data)
    }

    /// The next point-to-point message from `peer`, if one arrived.
    pub fn take_p2p(&mut self, peer: Rank) -> Option<Vec<u8>> {
        self.driver.member_mut().take_p2p(WallClock.now(), peer)
    }

    /// Drives the stream until everything this member sent has been acknowledged (true) or
    /// `patience` passed (false).
    pub fn settle(&mut self, patience: Duration) -> Result<bool, LinkError> {
        let r = self.driver.run_until(
            &WallClock,
            WallClock.now() + patience,
            Duration::from_millis(20),
            Sends::Now,
            |m| m.is_idle().then_some(()),
        )?;
        Ok(r.is_some())
    }

    /// Hands everything queued to the link, for up to `timeout`.
    pub fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.driver.drain(&WallClock, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_an_engine_cannot_run_with_are_refused_before_any_join() {
        let ok = StreamOptions {
            window: 64,
            nack_gather: 32,
            ..StreamOptions::default()
        };
        assert_eq!(ok.check(), Ok(()));
        let gather = StreamOptions {
            nack_gather: 33,
            ..ok.clone()
        };
        assert_eq!(gather.check(), Err(ConfigError::Gather(33, 64)));
        let zero = StreamOptions {
            ack_every: 0,
            ..ok.clone()
        };
        assert_eq!(zero.check(), Err(ConfigError::Zero));
        let huge = StreamOptions {
            max_message: 1 << 33,
            ..ok
        };
        assert_eq!(huge.check(), Err(ConfigError::MaxMessage(1 << 33)));
    }

    #[test]
    fn a_dozing_member_waits_for_the_stream_to_be_quiet_no_shorter_than_it_dozes() {
        let busy = StreamOptions::default();
        let dozing = StreamOptions {
            wait: WaitMode::Doze,
            ..StreamOptions::default()
        };
        let engine = EngineConfig::new(0, Rank::new(1), 3).ack_delay;
        assert!(
            engine < link::DOZE_INTERVAL,
            "the engine's own timer is finer"
        );
        assert_eq!(busy.config(Rank::new(1), 3).ack_delay, engine);
        assert_eq!(
            dozing.config(Rank::new(1), 3).ack_delay,
            link::DOZE_INTERVAL
        );
    }
}
