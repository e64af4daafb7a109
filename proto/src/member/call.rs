//! The collective call in progress: a broadcast (push-pull, simple, or down a binomial tree of
//! point-to-point channels) or a barrier, its posting, topping up and completion. One call at a
//! time, as MPI collectives are called.

use super::*;

/// The collective call in progress.
#[derive(Debug)]
pub(super) enum Call {
    /// A broadcast: the root waits for every live member's acknowledgement (with failure
    /// detection) or nothing; the others for the message by hardware broadcast (or, when the
    /// root fell back to the tree, from their tree parent) or from their tree parent.
    Bcast {
        root: Rank,
        algo: Algorithm,
        tag: Tag,
        /// At the root of a tree broadcast: its message, until the call completes. At a relay
        /// of the tree: the message it forwards, until its copies are whole in their windows.
        own: Option<Vec<u8>>,
        /// At the root of a hardware broadcast: the id of its message, lent to the engine
        /// until its frames are all in the window ([`Engine::take_sent`]).
        lent: Option<u64>,
    },
    /// A barrier of machine `which`, epoch `epoch`.
    Barrier { which: usize, epoch: u32 },
}

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
        let n = self.size();
        if root.get() >= n {
            return Err(MemberError::BadRank {
                rank: root,
                size: n,
            });
        }
        if self.call.is_some() || self.result.is_some() {
            return Err(MemberError::Busy);
        }
        if let Some(e) = self.session_ended() {
            return Err(e.into());
        }
        let me = self.rank();
        // Tree messages of this call carry (root, the root's collective count), so that a
        // member still in an earlier call never takes a later call's message.
        let tag = (root, self.collectives[root.index()]);
        self.collectives[root.index()] += 1;
        let (mut own, mut lent) = (None, None);
        if me == root {
            let failed = self.engine.sender().failed_over().len();
            let live = self.engine.sender().eqa().hms().live();
            if algo == Algorithm::Tree || (failed > 0 && failed * 2 >= live) {
                // The tree, or the fail-over of the group (LA-MPI 4.4): broadcast reaches too
                // few members, so this message goes down the binomial tree instead.
                if algo != Algorithm::Tree {
                    self.stats.tree_fallbacks += 1;
                }
                self.forward_tree(now, tag, buf)?;
                own = Some(std::mem::take(buf));
            } else {
                let a = if algo == Algorithm::Simple {
                    Algorithm::Simple
                } else {
                    Algorithm::PushPull
                };
                lent = Some(self.engine.bcast_from(now, buf, a)?);
            }
        } else if algo != Algorithm::Tree
            && self.inbox[root.index()].is_empty()
            && self.posted[root.index()] == 0
        {
            // The receive of this call (the MPI way: posted when the call is made), into the
            // caller's buffer. A receive left by a call the root served down the tree serves
            // this one. A message already held in the pushed buffer is delivered by the post.
            self.post_into(now, root, std::mem::take(buf))?;
            self.collect(now);
        }
        self.call = Some(Call::Bcast {
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
        if self.call.is_some() || self.result.is_some() {
            return Err(MemberError::Busy);
        }
        if let Some(e) = self.session_ended() {
            return Err(e.into());
        }
        let which = match kind {
            BarrierAlgo::Broadcast => 0,
            BarrierAlgo::Dissemination => 1,
        };
        let b = &mut self.barriers[which];
        let epoch = b.next_epoch();
        b.enter(now, epoch)
            .map_err(|e| MemberError::Barrier(e.to_string()))?;
        self.call = Some(Call::Barrier { which, epoch });
        self.advance(now);
        Ok(())
    }

    /// The result of the collective call, once it completed (or failed).
    pub fn take_result(&mut self) -> Option<Result<Done, MemberError>> {
        self.result.take()
    }

    /// True while a collective call waits for its result.
    pub fn in_call(&self) -> bool {
        self.call.is_some()
    }

    /// Abandons the call in progress (its caller gave up, e.g. on a timeout). A broadcast
    /// already handed to the engine still completes in the background.
    pub fn cancel_call(&mut self) {
        self.call = None;
        self.result = None;
    }

    /// Broadcasts one message of this member's stream outside any collective call (streaming
    /// use); returns its id. Receivers with `prepost > 0` get it as [`Event::Delivered`].
    pub fn send_stream(
        &mut self,
        now: Instant,
        data: Vec<u8>,
        algo: Algorithm,
    ) -> Result<u64, MemberError> {
        Ok(self.engine.bcast(now, data, algo)?)
    }

    pub(super) fn post(&mut self, now: Instant, root: Rank) -> Result<(), MemberError> {
        self.post_into(now, root, Vec::new())
    }

    /// Posts a receive for `root` that receives into `buf`'s capacity.
    fn post_into(&mut self, now: Instant, root: Rank, buf: Vec<u8>) -> Result<(), MemberError> {
        let max = self.engine.config().max_message;
        self.engine.post_recv_into(now, root, max, buf)?;
        self.posted[root.index()] += 1;
        Ok(())
    }

    /// Keeps `prepost` receives posted for `root` while deliveries of it fit.
    pub(super) fn top_up(&mut self, now: Instant, root: Rank) {
        let r = root.index();
        if root == self.rank() || !self.is_live(root) {
            return;
        }
        while (self.posted[r] + self.queued[r]) < self.prepost as u32 {
            if self.post(now, root).is_err() {
                break;
            }
        }
    }

    /// Completes the call in progress if it can.
    pub(super) fn advance(&mut self, now: Instant) {
        let Some(mut call) = self.call.take() else {
            return;
        };
        if let Some(e) = self.session_ended() {
            // No frame of the call can be answered any more.
            self.result = Some(Err(MemberError::SessionEnded(e)));
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
                    .then(|| self.inbox[root.index()].pop_front())
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
            Some(r) => self.result = Some(r),
            None => self.call = Some(call),
        }
    }
}
