//! Allgather on the broadcast streams every member already has: each member broadcasts its
//! part once, and every member receives every other member's part on that root's stream.
//!
//! Why it is cheap on a broadcast medium: over point-to-point links an allgather takes
//! `log2(p)` rounds (recursive doubling) or `p - 1` (a ring), each a round trip; here all `p`
//! roots send at once, every frame reaches every member in one hop, and each root's stream is
//! repaired on its own (its receivers' NACKs go to that root or to a fellow that holds the
//! frame). A member's receive of a root it has not reached yet does not hold that root back:
//! the frames wait in the stream's pushed buffer ([`EngineConfig::pushed_buffer`](ethbcast_proto::EngineConfig::pushed_buffer)),
//! and the post copies them out.
//!
//! [`Allgather`] is sans-IO: a sequence of [`Member`] broadcast calls, this member's own part
//! first (so that no member waits for another to send), then every other root in rank order.
//! Parts of many frames take turns instead ([`in_turn`]): every member takes the roots in rank
//! order and sends its own part once it has every part before it, so that one root at a time
//! sends. All at once, each member's port would receive `p - 1` streams together, each with
//! its window of frames in flight, more than a switch port queues: at 100 Mbit/s, 8 members'
//! parts of 64 KiB took 2.4 times Open MPI's allgather, the frames lost at the ports repaired
//! after timeouts. In turn, a port receives one stream at a time at the rate of the link.
//! Each root's calls are counted per root ([`Member::bcast_from`] tags them so), so the
//! members need not take the roots in the same order. The parts go by simple broadcast (or
//! down the tree): push-pull's pull comes from a receiver that has posted for that root, and
//! in an allgather two roots whose pullers are each other would each wait in its own part's
//! send for the other's pull. The driver of a [`super::Group`] runs it
//! with the wall clock, the simulator's harness ([`crate::simgroup`]) in virtual time.
//!
//! Every part is taken, whatever fails: a part whose length is not the one the caller
//! expects, or whose root died, is recorded and the sequence goes on, so that the next call
//! starts with every root's stream at the same message on every member. The first failure is
//! the call's error. A member evicted during the call fails it too (on every member that
//! noticed the death before it had every part and every acknowledgement it waits for): a
//! result is either every part, whole, or an error.

use std::time::Instant;

use super::GroupError;
use crate::Rank;
use ethbcast_proto::{Algorithm, Done, Member, MemberError, PostError};

/// Frames in flight that the members' parts may make together into one port (the streams of
/// `p - 1` roots at once): above it, the roots take turns. A commodity switch's port buffers
/// a few hundred KiB (the test-bed's 256 KiB, about 170 full frames, at 100 Mbit/s).
pub(crate) const INCAST_FRAMES: usize = 96;

/// Whether an allgather of `size` members whose largest part is `largest` bytes, in frames of
/// `payload` bytes each with a window of `window` frames per root, takes turns (see the module
/// documentation): when the other roots' frames in flight together could exceed
/// [`INCAST_FRAMES`]. Every member that knows the parts' lengths decides alike; members that
/// decide differently still finish (a member in turn sends once it has the parts before its
/// own, and the first root sends at once either way).
pub(crate) fn in_turn(size: u16, largest: usize, payload: usize, window: usize) -> bool {
    let frames = largest.div_ceil(payload.max(1)).min(window);
    usize::from(size.saturating_sub(1)) * frames > INCAST_FRAMES
}

/// One allgather in progress at one member. See the module documentation.
#[derive(Debug)]
pub(crate) struct Allgather {
    me: Rank,
    size: u16,
    algo: Algorithm,
    /// The roots take turns in rank order (see [`in_turn`]).
    in_turn: bool,
    /// In turn, this member's part until its turn comes.
    own: Option<Vec<u8>>,
    /// Steps taken: `k` while the part of root [`Allgather::root`]`(k)` is being sent or
    /// received, `size` once done.
    step: u16,
    /// The first failure, reported once every part was taken.
    failed: Option<GroupError>,
    /// Evictions this member had made before the call.
    evicted_before: usize,
}

impl Allgather {
    /// Starts the allgather at `m` whose largest part is `largest` bytes (this member's own
    /// where it knows no other): this member's part (`part`, lent to the broadcast and given
    /// back through the sink's last buffer) goes out at once, or, when the roots take turns
    /// ([`in_turn`]), once the parts of the members before it are in (`part` is then kept, and
    /// the first receive takes a buffer of its own).
    pub(crate) fn start(
        now: Instant,
        m: &mut Member,
        part: &mut Vec<u8>,
        algo: Algorithm,
        largest: usize,
    ) -> Result<Allgather, MemberError> {
        let cfg = m.engine().config();
        let in_turn = in_turn(m.size(), largest, cfg.max_payload(), cfg.window);
        let mut ag = Allgather {
            me: m.rank(),
            size: m.size(),
            algo,
            in_turn,
            own: None,
            step: 0,
            failed: None,
            evicted_before: m.evicted().len(),
        };
        let first = ag.root(0);
        if first == ag.me {
            m.bcast_from(now, first, part, algo)?;
            return Ok(ag);
        }
        ag.own = Some(std::mem::take(part));
        if let Err(e) = m.bcast_from(now, first, part, algo) {
            *part = ag.own.take().unwrap_or_default();
            return Err(e);
        }
        Ok(ag)
    }

    /// Whether this member's own part has been sent (its step is past).
    pub(crate) fn own_sent(&self) -> bool {
        let own = if self.in_turn { self.me.get() } else { 0 };
        self.step > own
    }

    /// The root of step `k`: in turn, the members in rank order; otherwise this member, then
    /// the others in rank order.
    fn root(&self, k: u16) -> Rank {
        match k {
            k if self.in_turn => Rank::new(k),
            0 => self.me,
            k if k <= self.me.get() => Rank::new(k - 1),
            k => Rank::new(k),
        }
    }

    /// Takes the results `m` has and starts the next steps; returns the call's end once every
    /// part was taken. `sink(root, part)` gets every part as it arrives, this member's own
    /// included (first), and says whether it is the one expected. `spare` is the buffer the
    /// next receive goes into (its capacity is reused; it holds the last part after the call).
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        m: &mut Member,
        spare: &mut Vec<u8>,
        sink: &mut impl FnMut(Rank, &[u8]) -> Result<(), GroupError>,
    ) -> Option<Result<(), GroupError>> {
        loop {
            if self.step >= self.size {
                return Some(self.end(m));
            }
            let root = self.root(self.step);
            match m.take_result()? {
                Ok(Done::Bcast(data)) => {
                    if let Err(e) = sink(root, &data) {
                        self.failed.get_or_insert(e);
                    }
                    if root == self.me && self.in_turn {
                        // The receive buffer stays the next receive's.
                        self.own = Some(data);
                    } else {
                        *spare = data;
                    }
                }
                Ok(Done::Barrier) => {
                    // Never: only broadcasts are started here.
                    self.failed
                        .get_or_insert(GroupError::Member(MemberError::Busy));
                }
                Err(e) => {
                    self.failed.get_or_insert(GroupError::Member(dead(e)));
                }
            }
            self.step += 1;
            while self.step < self.size {
                let root = self.root(self.step);
                let buf = match &mut self.own {
                    Some(own) if root == self.me => own,
                    _ => &mut *spare,
                };
                match m.bcast_from(now, root, buf, self.algo) {
                    Ok(()) => break,
                    Err(e) => {
                        self.failed.get_or_insert(GroupError::Member(dead(e)));
                        self.step += 1;
                    }
                }
            }
        }
    }

    fn end(&mut self, m: &Member) -> Result<(), GroupError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        match m.evicted().get(self.evicted_before) {
            Some(&(rank, _)) => Err(GroupError::Member(MemberError::PeerDead(rank))),
            None => Ok(()),
        }
    }
}

/// A receive refused because its root was evicted is that root's death.
fn dead(e: MemberError) -> MemberError {
    match e {
        MemberError::Post(PostError::Evicted(r)) => MemberError::PeerDead(r),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_member_goes_first_then_the_others_in_rank_order() {
        let ag = |me: u16, size: u16, in_turn: bool| Allgather {
            me: Rank::new(me),
            size,
            algo: Algorithm::Simple,
            in_turn,
            own: None,
            step: 0,
            failed: None,
            evicted_before: 0,
        };
        let order = |a: &Allgather| (0..a.size).map(|k| a.root(k).get()).collect::<Vec<_>>();
        assert_eq!(order(&ag(0, 4, false)), [0, 1, 2, 3]);
        assert_eq!(order(&ag(2, 4, false)), [2, 0, 1, 3]);
        assert_eq!(order(&ag(3, 4, false)), [3, 0, 1, 2]);
        assert_eq!(order(&ag(0, 1, false)), [0]);
        // In turn, every member takes the roots in rank order.
        assert_eq!(order(&ag(2, 4, true)), [0, 1, 2, 3]);
        assert_eq!(order(&ag(3, 4, true)), [0, 1, 2, 3]);
    }

    #[test]
    fn parts_of_many_frames_from_many_roots_take_turns() {
        // 8 members, 1444-byte payloads, a window of 16: one-frame and 4 KiB parts (3 frames,
        // 21 in flight into a port) go at once; 16 KiB (12 frames each, 84) still does; 64 KiB
        // (45 frames, 16 in flight each, 112) takes turns.
        let turn = |size, largest| in_turn(size, largest, 1444, 16);
        assert!(!turn(8, 8));
        assert!(!turn(8, 4096));
        assert!(!turn(8, 16384));
        assert!(turn(8, 65536));
        // Two members never need to: one stream reaches each port.
        assert!(!turn(2, 1 << 20));
        // Many members with small parts do.
        assert!(turn(64, 4096));
        assert!(!turn(64, 1000));
    }
}
