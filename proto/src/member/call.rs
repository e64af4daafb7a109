//! The collective call in progress (a broadcast or a barrier), its result, and how many
//! collective calls each root made. One call at a time, as MPI collectives are called.
//!
//! **Invariants.** At most one of `call` and `result` is set while the application has not
//! taken the result: a call starts only when neither is. `collectives[r]` counts the calls
//! rooted at `r` started here; MPI order makes the counts agree at every member, so
//! `(root, count)` tags a call's tree messages uniquely.

use super::Algorithm;
use std::collections::BTreeMap;

use crate::Rank;

use super::tree::Tag;
use super::{Done, MemberError};

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
        /// until its frames are all in the window (`Engine::take_sent`).
        lent: Option<u64>,
    },
    /// A barrier of machine `which`, epoch `epoch`.
    Barrier { which: usize, epoch: u32 },
}

/// The calls of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct Calls {
    call: Option<Call>,
    result: Option<Result<Done, MemberError>>,
    /// Collective calls started so far per root.
    /// (Only the roots that started one are kept: a counter per rank was 8 bytes per fellow
    /// at every member.)
    collectives: BTreeMap<Rank, u64>,
    /// Members in the group.
    size: usize,
}

impl Calls {
    /// No call yet, in a group of `n`.
    pub(super) fn new(n: usize) -> Calls {
        Calls {
            call: None,
            result: None,
            collectives: BTreeMap::new(),
            size: n,
        }
    }

    /// Whether a call waits for its result, or its result waits to be taken.
    pub(super) fn busy(&self) -> bool {
        self.call.is_some() || self.result.is_some()
    }

    /// Whether a call waits for its result.
    pub(super) fn in_call(&self) -> bool {
        self.call.is_some()
    }

    /// The tag of the next call rooted at `root` (counted now).
    pub(super) fn next_tag(&mut self, root: Rank) -> Tag {
        let count = self.collectives.entry(root).or_default();
        let tag = (root, *count);
        *count += 1;
        tag
    }

    /// Whether a tree message tagged `tag` is for no call this member will make or is making:
    /// a call it finished (a late or repeated copy), or a root that does not exist.
    pub(super) fn is_stale(&self, tag: Tag) -> bool {
        let current = matches!(self.call, Some(Call::Bcast { tag: t, .. }) if t == tag);
        let done =
            tag.0.index() >= self.size || self.collectives.get(&tag.0).is_some_and(|&c| tag.1 < c);
        done && !current
    }

    /// Whether the call in progress is a broadcast rooted at `root`.
    pub(super) fn bcast_from(&self, root: Rank) -> bool {
        matches!(self.call, Some(Call::Bcast { root: cr, .. }) if cr == root)
    }

    /// Starts `call`.
    pub(super) fn start(&mut self, call: Call) {
        self.call = Some(call);
    }

    /// Takes the call in progress out, to see whether it completed (see [`Calls::resume`]).
    pub(super) fn take_call(&mut self) -> Option<Call> {
        self.call.take()
    }

    /// Puts back a call that has not completed.
    pub(super) fn resume(&mut self, call: Call) {
        self.call = Some(call);
    }

    /// The call in progress ended with `result` (it is no longer in progress).
    pub(super) fn finish(&mut self, result: Result<Done, MemberError>) {
        self.call = None;
        self.result = Some(result);
    }

    /// The result of the last call, once.
    pub(super) fn take_result(&mut self) -> Option<Result<Done, MemberError>> {
        self.result.take()
    }

    /// Abandons the call in progress and any result.
    pub(super) fn cancel(&mut self) {
        self.call = None;
        self.result = None;
    }
}

#[cfg(test)]
mod tests {

    use super::Algorithm;
    use crate::member::Done;
    use crate::Rank;

    use super::{Call, Calls};

    #[test]
    fn a_call_is_busy_until_its_result_is_taken() {
        let mut c = Calls::new(2);
        assert!(!c.busy());
        c.start(Call::Barrier { which: 0, epoch: 1 });
        assert!(c.busy() && c.in_call());
        let call = c.take_call().unwrap();
        c.resume(call);
        c.finish(Ok(Done::Barrier));
        assert!(c.busy() && !c.in_call());
        assert_eq!(c.take_result(), Some(Ok(Done::Barrier)));
        assert!(!c.busy());
        c.start(Call::Barrier { which: 1, epoch: 2 });
        c.cancel();
        assert!(!c.busy());
    }

    #[test]
    fn tree_messages_of_finished_calls_are_stale() {
        let mut c = Calls::new(2);
        let root = Rank::new(1);
        let first = c.next_tag(root);
        assert_eq!(first, (root, 0));
        assert!(c.is_stale(first), "counted: a call this member made");
        c.start(Call::Bcast {
            root,
            algo: Algorithm::Tree,
            tag: first,
            own: None,
            lent: None,
        });
        assert!(!c.is_stale(first), "the call in progress");
        assert!(c.bcast_from(root) && !c.bcast_from(Rank::new(0)));
        assert!(!c.is_stale((root, 1)), "a later call");
        assert!(c.is_stale((Rank::new(5), 0)), "no such root");
    }
}
