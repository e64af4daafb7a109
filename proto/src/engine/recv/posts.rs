//! The receive queue of a stream: the receives the application posted (MPI's posted receive
//! queue), taken in message order, and the buffer the last one lent.
//!
//! **Invariants.** At most `cap` receives wait. A receive is taken by the message it is for,
//! in order: the `k`th posted receive is for the `k`th message from the one in progress, and
//! none is taken while a message delivered unposted waits for one (see [`Posts::post_for`]).
//! With `auto`, every message counts as posted with no limit, and the queue stays empty.

use std::collections::VecDeque;

use crate::engine::{EngineConfig, PostError};

/// A posted receive (an entry of the receive queue).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    /// The longest message it takes.
    pub(super) max_len: usize,
}

/// The receive queue of one stream. See the module documentation.
#[derive(Debug)]
pub(super) struct Posts {
    posts: VecDeque<Post>,
    cap: u32,
    /// A buffer lent by a posted receive (`Engine::post_recv_into`): the next message is
    /// received into it before anything is allocated. Boxed, the box kept once made: a stream
    /// that is never lent one costs a pointer (the receiver's size is the paper's `s_RDP`).
    #[allow(
        clippy::box_collection,
        reason = "a pointer in the receiver, not a Vec's three words"
    )]
    spare: Option<Box<Vec<u8>>>,
    /// Every message counts as posted (`EngineConfig::auto_post`).
    auto: bool,
}

impl Posts {
    /// An empty queue of `cfg.recv_queue` receives (it grows to what is posted at once).
    pub(super) fn new(cfg: &EngineConfig) -> Posts {
        Posts {
            posts: VecDeque::new(),
            cap: u32::try_from(cfg.recv_queue).unwrap_or(u32::MAX),
            spare: None,
            auto: cfg.auto_post,
        }
    }

    /// Receives posted and not yet taken.
    pub(super) fn len(&self) -> usize {
        self.posts.len()
    }

    /// The most receives that wait at once.
    pub(super) fn cap(&self) -> usize {
        self.cap as usize
    }

    /// Whether a message may be taken now: a receive waits, or every message counts as
    /// posted.
    pub(super) fn ready(&self) -> bool {
        self.auto || !self.posts.is_empty()
    }

    /// Posts a receive of up to `max_len` bytes; `buf`'s capacity, if any, receives a
    /// message (see [`Posts::take_spare`]).
    pub(super) fn post(&mut self, max_len: usize, buf: Vec<u8>) -> Result<(), PostError> {
        if self.posts.len() >= self.cap as usize {
            return Err(PostError::QueueFull(self.cap as usize));
        }
        self.posts.push_back(Post { max_len });
        if buf.capacity() > 0 {
            match self.spare.as_deref_mut() {
                Some(spare) if spare.capacity() == 0 => *spare = buf,
                Some(_) => {}
                None => self.spare = Some(Box::new(buf)),
            }
        }
        Ok(())
    }

    /// An empty buffer for a message, with room for `reserve` bytes: the one a posted receive
    /// lent if there is one (allocating only if it is smaller), else a new one.
    pub(super) fn take_spare(&mut self, reserve: usize) -> Vec<u8> {
        let mut v = self
            .spare
            .as_deref_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        v.clear();
        v.reserve_exact(reserve);
        v
    }

    /// The largest length the receive posted for the `k`th message from the one in progress
    /// (0: that one, or the next to begin) accepts, if one is posted. `waiting`: a message
    /// delivered unposted waits for a receive, which the next receive is for.
    pub(super) fn post_for(&self, k: usize, waiting: bool) -> Option<usize> {
        if self.auto {
            return Some(usize::MAX);
        }
        if waiting {
            return None;
        }
        self.posts.get(k).map(|p| p.max_len)
    }

    /// The largest length the next receive accepts (no limit with `auto`, or none posted).
    pub(super) fn front_max(&self) -> usize {
        self.posts.front().map_or(usize::MAX, |p| p.max_len)
    }

    /// Takes the receive of the message being delivered: its largest length (no limit with
    /// `auto`).
    pub(super) fn take(&mut self) -> usize {
        if self.auto {
            return usize::MAX;
        }
        self.posts.pop_front().map_or(usize::MAX, |p| p.max_len)
    }

    /// Makes room for every receive that may be posted at once (the queue grows to it).
    #[cfg(feature = "test-hooks")]
    pub(super) fn make_room(&mut self) {
        self.posts.reserve_exact(self.cap as usize);
    }

    /// Heap bytes of the queue when full, and of the lent buffer.
    pub(super) fn heap_bytes(&self) -> usize {
        self.cap as usize * std::mem::size_of::<Post>()
            + self.spare.as_ref().map_or(0, |v| v.capacity())
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::{EngineConfig, PostError};
    use crate::Rank;

    use super::{Post, Posts};

    fn posts(cap: usize, auto: bool) -> Posts {
        let mut c = EngineConfig::new(1, Rank::new(1), 2);
        c.recv_queue = cap;
        c.auto_post = auto;
        Posts::new(&c)
    }

    #[test]
    fn receives_are_taken_in_order_and_the_queue_is_bounded() {
        let mut p = posts(2, false);
        assert_eq!(p.post_for(0, false), None);
        p.post(10, Vec::new()).unwrap();
        p.post(20, Vec::new()).unwrap();
        assert_eq!(p.post(30, Vec::new()), Err(PostError::QueueFull(2)));
        assert_eq!(
            (p.post_for(0, false), p.post_for(1, false)),
            (Some(10), Some(20))
        );
        assert_eq!(
            p.post_for(0, true),
            None,
            "a waiting message takes the next"
        );
        assert_eq!(p.take(), 10);
        assert_eq!(p.front_max(), 20);
        assert_eq!(p.take(), 20);
        assert!(!p.ready());
    }

    #[test]
    fn auto_posting_takes_everything_unlimited() {
        let mut p = posts(1, true);
        assert!(p.ready());
        assert_eq!(p.post_for(5, true), Some(usize::MAX));
        assert_eq!(p.take(), usize::MAX);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_lent_buffer_is_used_once_and_its_capacity_kept() {
        let mut p = posts(4, false);
        assert_eq!(p.take_spare(0).capacity(), 0, "nothing lent");
        p.post(8, Vec::with_capacity(64)).unwrap();
        let v = p.take_spare(16);
        assert!(v.capacity() >= 64 && v.is_empty());
        assert_eq!(p.take_spare(0).capacity(), 0, "taken once");
        // The box stays, and takes the next lent buffer.
        p.post(8, Vec::with_capacity(32)).unwrap();
        assert!(p.take_spare(0).capacity() >= 32);
        assert!(p.heap_bytes() >= 2 * std::mem::size_of::<Post>());
    }
}
