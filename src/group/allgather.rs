//! Allgather on the broadcast streams every member already has: each member broadcasts its
//! part once, and every member receives every other member's part on that root's stream.
//!
//! Why it is cheap on a broadcast medium: over point-to-point links an allgather takes
//! `log2(p)` rounds (recursive doubling) or `p - 1` (a ring), each a round trip; here all `p`
//! roots send at once, every frame reaches every member in one hop, and each root's stream is
//! repaired on its own (its receivers' NACKs go to that root or to a fellow that holds the
//! frame). A member's receive of a root it has not reached yet does not hold that root back:
//! the frames wait in the stream's pushed buffer ([`crate::engine::Config::pushed_buffer`]),
//! and the post copies them out.
//!
//! [`Allgather`] is sans-IO: a sequence of [`Member`] broadcast calls, this member's own part
//! first (so that no member waits for another to send), then every other root in rank order.
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
use crate::engine::PostError;
use crate::member::{Algorithm, Done, Member, MemberError};
use crate::Rank;

/// One allgather in progress at one member. See the module documentation.
#[derive(Debug)]
pub(crate) struct Allgather {
    me: Rank,
    size: u16,
    algo: Algorithm,
    /// Steps taken: 0 while this member's own part is being sent, `k` while the `k`-th other
    /// root's part is being received, `size` once done.
    step: u16,
    /// The first failure, reported once every part was taken.
    failed: Option<GroupError>,
    /// Evictions this member had made before the call.
    evicted_before: usize,
}

impl Allgather {
    /// Starts the allgather at `m`: this member's part (`part`, lent to the broadcast and
    /// given back through the sink's last buffer) goes out at once.
    pub(crate) fn start(
        now: Instant,
        m: &mut Member,
        part: &mut Vec<u8>,
        algo: Algorithm,
    ) -> Result<Allgather, MemberError> {
        let me = m.rank();
        m.bcast_from(now, me, part, algo)?;
        Ok(Allgather {
            me,
            size: m.size(),
            algo,
            step: 0,
            failed: None,
            evicted_before: m.evicted().len(),
        })
    }

    /// The root of step `k`: this member, then the others in rank order.
    fn root(&self, k: u16) -> Rank {
        match k {
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
                    *spare = data;
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
                match m.bcast_from(now, root, spare, self.algo) {
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
        let ag = |me: u16, size: u16| Allgather {
            me: Rank::new(me),
            size,
            algo: Algorithm::Simple,
            step: 0,
            failed: None,
            evicted_before: 0,
        };
        let order = |a: &Allgather| (0..a.size).map(|k| a.root(k).get()).collect::<Vec<_>>();
        assert_eq!(order(&ag(0, 4)), [0, 1, 2, 3]);
        assert_eq!(order(&ag(2, 4)), [2, 0, 1, 3]);
        assert_eq!(order(&ag(3, 4)), [3, 0, 1, 2]);
        assert_eq!(order(&ag(0, 1)), [0]);
    }
}
