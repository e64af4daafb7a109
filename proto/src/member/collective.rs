//! The member's collective calls and point-to-point sends: a broadcast (push-pull, simple, or
//! down a binomial tree of point-to-point channels) or a barrier, its posting, topping up and
//! completion; and application messages to a single peer.
//!
//! These are the member's entry points that span its concerns: the state of each stays with
//! its type ([`Calls`], [`Deliveries`], [`Pairs`], [`TreeBcast`]); what is here decides what a
//! call asks of which.
//!
//! [`Calls`]: super::call::Calls
//! [`Deliveries`]: super::deliveries::Deliveries
//! [`Pairs`]: super::p2p::Pairs
//! [`TreeBcast`]: super::tree::TreeBcast

use std::time::Instant;

use crate::engine::{Engine, Handed, HardwareAlgorithm, PostError, SendError};
use crate::wire::BarrierAlgo;
use crate::Rank;

use super::call::Call;
use super::p2p::P2P_APP;
use super::tree::{encode_tree, live_tree, Tag};
use super::{Algorithm, Done, Member, MemberError};

impl Member {
    /// Starts `MPI_Bcast` from `root` with `algo`: at the root `data` is sent, elsewhere it
    /// is ignored and the root's message is the result. Every member must call it in the
    /// same order. The result arrives through [`Member::take_result`].
    pub fn bcast(
        &mut self,
        now: Instant,
        root: Rank,
        data: Vec<u8>,
        algo: Algorithm,
    ) -> Result<(), MemberError> {
        self.bcast_from(now, root, &mut { data }, algo)
    }

    /// [`Member::bcast`] that borrows no bytes and allocates none in steady state: the call
    /// takes `buf` (leaving it empty) and its result, [`Done::Bcast`], gives the buffer back.
    /// At the root `buf` holds the message: the engine sends from it without a copy of its
    /// own and the result is the same buffer, message unchanged. Elsewhere its capacity
    /// receives the root's message (its contents are dropped), and the result is the
    /// message in it. So a caller that passes the buffer of its last result each time
    /// allocates nothing once the buffer is as large as the largest message. When this call
    /// fails, the root's `buf` keeps its message.
    pub fn bcast_from(
        &mut self,
        now: Instant,
        root: Rank,
        buf: &mut Vec<u8>,
        algo: Algorithm,
    ) -> Result<(), MemberError> {
        let r = self.start_bcast(
            now,
            root,
            Handed::Taken {
                data: buf,
                lent: true,
            },
            algo,
        );
        self.sync_timers();
        r
    }

    /// [`Member::bcast_from`] whose root borrows its message, `data`, only until this returns:
    /// the engine publishes the frames that fit the retransmission buffer straight from it
    /// and copies only the rest, into `spare` (see
    /// [`Engine::bcast_slice`](crate::Engine::bcast_slice)). Elsewhere `data` is ignored and
    /// `spare`'s capacity receives the root's message, as `buf`'s does in
    /// [`Member::bcast_from`]. The result, [`Done::Bcast`], gives back a buffer: at the root
    /// the one the message's rest was copied into (its contents are no message), or `spare`
    /// itself when the call did not take it; elsewhere the message.
    pub fn bcast_slice(
        &mut self,
        now: Instant,
        root: Rank,
        data: &[u8],
        spare: &mut Vec<u8>,
        algo: Algorithm,
    ) -> Result<(), MemberError> {
        let r = self.start_bcast(now, root, Handed::Borrowed { data, spare }, algo);
        self.sync_timers();
        r
    }

    fn start_bcast(
        &mut self,
        now: Instant,
        root: Rank,
        msg: Handed<'_>,
        algo: Algorithm,
    ) -> Result<(), MemberError> {
        let n = self.size();
        if root.get() >= n {
            return Err(MemberError::BadRank {
                rank: root,
                size: n,
            });
        }
        if self.calls.busy() {
            return Err(MemberError::Busy);
        }
        if let Some(e) = self.session_ended() {
            return Err(e.into());
        }
        let me = self.rank();
        // Tree messages of this call carry (root, the root's collective count), so that a
        // member still in an earlier call never takes a later call's message.
        let tag = self.calls.next_tag(root);
        let (mut own, mut lent) = (None, None);
        if me == root {
            if algo == Algorithm::Tree || self.engine.broadcast_reaches_too_few() {
                // The tree, or the fail-over of the group (LA-MPI 4.4): broadcast reaches too
                // few members, so this message goes down the binomial tree instead.
                if algo != Algorithm::Tree {
                    self.stats.tree_fallbacks += 1;
                }
                self.forward_tree(now, tag, msg.bytes())?;
                own = Some(std::mem::take(msg.buffer()));
            } else {
                let a = algo.hardware().unwrap_or_default();
                lent = Some(self.engine.enqueue(now, msg, a)?);
            }
        } else if algo != Algorithm::Tree
            && !self.deliveries.has_message(root)
            && self.deliveries.posted(root) == 0
        {
            // The receive of this call (the MPI way: posted when the call is made), into the
            // caller's buffer. A receive left by a call the root served down the tree serves
            // this one. A message already held in the pushed buffer is delivered by the post.
            self.post_into(now, root, std::mem::take(msg.buffer()))?;
            self.collect(now);
        }
        self.calls.start(Call::Bcast {
            root,
            algo,
            tag,
            own,
            lent,
        });
        self.advance(now);
        Ok(())
    }

    /// Starts a barrier of `kind`; the result arrives through [`Member::take_result`].
    pub fn barrier(&mut self, now: Instant, kind: BarrierAlgo) -> Result<(), MemberError> {
        if self.calls.busy() {
            return Err(MemberError::Busy);
        }
        if let Some(e) = self.session_ended() {
            return Err(e.into());
        }
        let which = match kind {
            BarrierAlgo::Broadcast => 0,
            BarrierAlgo::Dissemination => 1,
        };
        let b = self.barrier_mut(which);
        let epoch = b.next_epoch();
        b.enter(now, epoch)?;
        self.calls.start(Call::Barrier { which, epoch });
        self.advance(now);
        self.sync_timers();
        Ok(())
    }

    /// The result of the collective call, once it completed (or failed).
    pub fn take_result(&mut self) -> Option<Result<Done, MemberError>> {
        self.calls.take_result()
    }

    /// True while a collective call waits for its result.
    pub fn in_call(&self) -> bool {
        self.calls.in_call()
    }

    /// Abandons the call in progress (its caller gave up, e.g. on a timeout). A broadcast
    /// already handed to the engine still completes in the background.
    pub fn cancel_call(&mut self) {
        self.calls.cancel();
    }

    /// Broadcasts one message of this member's stream outside any collective call (streaming
    /// use); returns its id. Receivers with `prepost > 0` get it as
    /// [`Event::Delivered`](super::Event::Delivered).
    pub fn send_stream(
        &mut self,
        now: Instant,
        data: Vec<u8>,
        algo: Algorithm,
    ) -> Result<u64, MemberError> {
        self.stream_with(algo, |e, hw| e.bcast(now, data, hw))
    }

    /// [`Member::send_stream`] of the message in `buf`, lent (see
    /// [`Engine::bcast_from`](crate::Engine::bcast_from)): the engine takes it, leaving `buf`
    /// empty, and [`Member::take_sent`] gives it back once all its frames are in the
    /// retransmission buffer, so that its capacity serves the next message. On an error `buf`
    /// keeps the message.
    pub fn send_stream_from(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        algo: Algorithm,
    ) -> Result<u64, MemberError> {
        self.stream_with(algo, |e, hw| e.bcast_from(now, buf, hw))
    }

    /// A message of this member's stream, handed to the engine by `send` with the hardware
    /// algorithm of `algo` (a stream goes out in hardware: a tree's message as `Simple`).
    fn stream_with(
        &mut self,
        algo: Algorithm,
        send: impl FnOnce(&mut Engine, HardwareAlgorithm) -> Result<u64, SendError>,
    ) -> Result<u64, MemberError> {
        let hw = algo.hardware().unwrap_or(HardwareAlgorithm::Simple);
        let r = send(&mut self.engine, hw);
        self.sync_timers();
        Ok(r?)
    }

    /// The buffer of message `id` sent with [`Member::send_stream_from`], once all its frames
    /// are in the retransmission buffer (see [`Engine::take_sent`](crate::Engine::take_sent):
    /// the newest two are kept); `None` before, or once taken.
    pub fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        self.engine.take_sent(id)
    }

    /// Posts a receive for `root` that receives into `buf`'s capacity.
    fn post_into(&mut self, now: Instant, root: Rank, buf: Vec<u8>) -> Result<(), MemberError> {
        let max = self.engine.config().max_message;
        self.engine.post_recv_into(now, root, max, buf)?;
        self.deliveries.note_posted(root);
        Ok(())
    }

    /// Keeps `prepost` receives posted for `root` while deliveries of it fit.
    pub(super) fn top_up(&mut self, now: Instant, root: Rank) {
        if root == self.rank() || !self.is_live(root) {
            return;
        }
        while self.deliveries.wants_post(root) {
            if self.post_into(now, root, Vec::new()).is_err() {
                break;
            }
        }
    }

    /// Completes the call in progress if it can.
    pub(super) fn advance(&mut self, now: Instant) {
        let Some(mut call) = self.calls.take_call() else {
            return;
        };
        if let Some(e) = self.session_ended() {
            // No frame of the call can be answered any more.
            self.calls.finish(Err(MemberError::SessionEnded(e)));
            return;
        }
        let me = self.rank();
        let outcome = match &mut call {
            Call::Barrier { which, epoch } => self.barriers[*which]
                .is_released(*epoch)
                .then_some(Ok(Done::Barrier)),
            Call::Bcast {
                root, own, lent, ..
            } if *root == me => {
                // The root's call returns once its whole message is in the retransmission
                // buffer, from where the driver's flush as the call returns sends it without
                // waiting for anyone. A part still in the send queue (the window held earlier
                // messages' unacknowledged frames, or a push-pull message waits for its pull)
                // would leave only when the root is next driven, at its next call, while
                // every receiver waits for it. With failure detection the call returns when
                // every live member has the message, so that a member that died during it is
                // evicted and reported by this call.
                let done = match self.detector {
                    None => self.send_queues_empty(),
                    Some(_) => self.is_idle(),
                };
                // Once the queues are empty a lent message is among the engine's sent ones
                // (the newest lent, as calls come one at a time).
                done.then(|| {
                    let data = match lent {
                        Some(id) => self.engine.take_sent(*id),
                        None => own.take(),
                    };
                    Ok(Done::Bcast(data.unwrap_or_default()))
                })
            }
            // A relay of the tree returns, as the root does, once its copies for its children
            // are whole in their windows.
            Call::Bcast {
                own: Some(data), ..
            } => self
                .send_queues_empty()
                .then(|| Ok(Done::Bcast(std::mem::take(data)))),
            Call::Bcast {
                root,
                algo,
                tag,
                own,
                ..
            } => {
                let (root, algo, tag) = (*root, *algo, *tag);
                let hw = (algo != Algorithm::Tree)
                    .then(|| self.deliveries.take_message(root))
                    .flatten();
                match hw {
                    Some(data) => Some(Ok(Done::Bcast(data))),
                    None => match self.take_tree(now, tag) {
                        Some(data) => match self.forward_tree(now, tag, &data) {
                            Err(e) => Some(Err(e)),
                            Ok(()) if self.send_queues_empty() => Some(Ok(Done::Bcast(data))),
                            Ok(()) => {
                                *own = Some(data);
                                None
                            }
                        },
                        None if !self.is_live(root) => Some(Err(MemberError::PeerDead(root))),
                        None => None,
                    },
                }
            }
        };
        match outcome {
            Some(r) => self.calls.finish(r),
            None => self.calls.resume(call),
        }
    }

    // ---- point to point ----

    /// Sends `data` to `peer` alone over the reliable point-to-point channel.
    pub fn send_to(&mut self, now: Instant, peer: Rank, data: Vec<u8>) -> Result<(), MemberError> {
        if peer.index() >= self.addrs.len() || peer == self.rank() {
            return Err(MemberError::Post(PostError::NotMember(peer)));
        }
        let mut v = Vec::with_capacity(1 + data.len());
        v.push(P2P_APP);
        v.extend_from_slice(&data);
        self.send_raw(now, peer, v)
    }

    /// Sends a point-to-point message (its first byte says what it is) to `peer`.
    fn send_raw(&mut self, now: Instant, peer: Rank, msg: Vec<u8>) -> Result<(), MemberError> {
        if !self.is_live(peer) {
            return Err(MemberError::PeerDead(peer));
        }
        let r = self
            .pair(now, peer)
            .bcast(now, msg, HardwareAlgorithm::Simple);
        self.sync_pair(peer);
        r?;
        Ok(())
    }

    /// Takes the oldest point-to-point message from `peer`.
    pub fn take_p2p(&mut self, now: Instant, peer: Rank) -> Option<Vec<u8>> {
        let m = self.pairs.take(peer)?;
        let me = self.rank();
        self.pairs.top_up(now, me, peer, self.tree.held(peer));
        self.sync_pair(peer);
        Some(m)
    }

    /// The channel with `peer`, made now if it is not open.
    pub(super) fn pair(&mut self, now: Instant, peer: Rank) -> &mut Engine {
        let held = self.tree.held(peer);
        self.pairs.open(now, self.engine.config(), peer, held)
    }

    // ---- the tree broadcast ----

    /// The ranks still in the group, sorted.
    fn live_ranks(&self) -> Vec<Rank> {
        Rank::all(self.size())
            .filter(|&r| self.is_live(r))
            .collect()
    }

    /// Sends a tree broadcast to this member's children in the tree over the live members,
    /// and remembers it (see [`super::TREE_CACHE`]).
    fn forward_tree(&mut self, now: Instant, tag: Tag, data: &[u8]) -> Result<(), MemberError> {
        let (_, children) = live_tree(&self.live_ranks(), self.rank(), tag.0);
        let msg = encode_tree(tag, data);
        for &c in &children {
            self.send_raw(now, c, msg.clone())?;
        }
        self.tree.remember(tag, data, children);
        Ok(())
    }

    /// After an eviction: members that became this member's children in a remembered tree
    /// broadcast get it now (their old parent may have died before forwarding it).
    pub(super) fn reforward_trees(&mut self, now: Instant) {
        let live = self.live_ranks();
        let me = self.rank();
        for (c, msg) in self.tree.reforward(&live, me) {
            let _ = self.send_raw(now, c, msg);
        }
    }

    /// Takes the tree broadcast tagged `tag`, if it arrived.
    fn take_tree(&mut self, now: Instant, tag: Tag) -> Option<Vec<u8>> {
        let (from, data) = self.tree.take(tag)?;
        let me = self.rank();
        self.pairs.top_up(now, me, from, self.tree.held(from));
        self.sync_pair(from);
        Some(data)
    }
}
